//! Server-Sent Events codec (being built).

/// Errors of the Server-Sent Events codec.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// Placeholder until the codec lands.
    #[error("Server-Sent Events codec not built yet")]
    NotBuilt,
}
