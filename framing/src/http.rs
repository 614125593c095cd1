//! HTTP/1.1 codec (being built).

/// Errors of the HTTP/1.1 codec.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// Placeholder until the codec lands.
    #[error("HTTP/1.1 codec not built yet")]
    NotBuilt,
}
