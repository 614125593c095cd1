//! The crate-wide error type: one variant per codec, each wrapping that
//! codec's own typed error.

use crate::{frame::FrameError, http::HttpError, ndjson::NdjsonError, sse::SseError};

/// Any error a `framing` codec can report.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A node-socket frame was oversize or malformed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// An SSE stream broke a limit.
    #[error(transparent)]
    Sse(#[from] SseError),
    /// An NDJSON stream broke a limit.
    #[error(transparent)]
    Ndjson(#[from] NdjsonError),
    /// An HTTP/1.1 head or chunked body was malformed or over a limit.
    #[error(transparent)]
    Http(#[from] HttpError),
}
