//! NDJSON codec (being built).

/// Errors of the NDJSON codec.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NdjsonError {
    /// Placeholder until the codec lands.
    #[error("NDJSON codec not built yet")]
    NotBuilt,
}
