//! node-socket frame codec (being built).

/// Errors of the node-socket frame codec.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Placeholder until the codec lands.
    #[error("node-socket frame codec not built yet")]
    NotBuilt,
}
