//! HTTP/1.1 codecs: heads (parsed with `httparse`), body framing, and the
//! chunked transfer coding.
//!
//! Used by the Edge's client-facing ingress (parse requests, write response
//! heads, stream SSE bodies as chunks) and by the Node's HTTP/1.1 client to
//! model servers (write request heads, parse response heads, de-chunk bodies).
//!
//! # Contract
//! - **Sans-IO.** Every parser takes `&mut BytesMut` and returns
//!   `Ok(None)` for "need more bytes", `Ok(Some(_))` for one result, or a typed
//!   [`HttpError`]. On `Ok(None)` and on `Err` the buffer is left untouched;
//!   on success exactly the consumed bytes are split off its front, so
//!   pipelined bytes that follow stay in the buffer.
//! - **Zero copy.** A parsed head owns its bytes as one frozen [`Bytes`]; the
//!   method, target, reason and every header name/value are ranges into it
//!   (one `Vec` of ranges per head, no `String` per header). Body data from
//!   [`BodyDecoder`] / [`ChunkedDecoder`] is split off the receive buffer.
//!   [`ChunkedEncoder`] puts the size line and CRLF *beside* the body, so the
//!   body is its own iovec and is never copied.
//! - **Errors are final.** After any `Err` the connection's framing is lost:
//!   the driver answers (see [`HttpError::suggested_status`]) and closes.
//!
//! # Limits
//! Every bound on network input is a named constant or a [`HeadLimits`]
//! field, each tested at the bound and one past it:
//!
//! | bound                                  | where                                     |
//! |----------------------------------------|-------------------------------------------|
//! | head bytes                             | [`HeadLimits::max_head_bytes`] ([`DEFAULT_MAX_HEAD_BYTES`], ceiling [`MAX_HEAD_BYTES_CEILING`]) |
//! | header count                           | [`HeadLimits::max_headers`] ([`DEFAULT_MAX_HEADERS`], ceiling [`MAX_HEADERS_CEILING`]) |
//! | chunk-size line                        | [`MAX_CHUNK_SIZE_LINE`]                   |
//! | chunk extensions, summed over a body   | [`CHUNKED_EXTENSIONS_LIMIT`]              |
//! | trailer section                        | [`MAX_TRAILER_BYTES`]                     |
//! | chunk size / Content-Length            | `u64`, overflow-checked                   |
//!
//! Body *size* policy (how large a request body may be) is the caller's: this
//! module reports lengths, it does not judge them.
//!
//! # Message framing (RFC 9112 §6)
//! Only the `chunked` transfer coding is implemented; any other coding is an
//! error ([`HttpError::UnsupportedTransferEncoding`], 501) in requests *and*
//! responses, because a body we cannot decode must not be forwarded as if it
//! were plain. `Transfer-Encoding` together with `Content-Length` is always
//! rejected (request-smuggling defence), as is `Transfer-Encoding` in an
//! HTTP/1.0 message. Line endings: heads accept a bare LF (as `httparse`
//! does, RFC 9112 §2.2 allows it); chunked framing requires CRLF everywhere
//! and rejects bare LF and bare CR, since disagreement about those between
//! two parsers is a known smuggling vector.

mod body;
mod chunked;
mod fields;
mod head;
mod name_set;
mod write;

pub use body::{BodyDecoder, BodyFraming, BodyItem, ChunkedItem, ContentLengthDecoder};
pub use chunked::{
    CHUNKED_EXTENSIONS_LIMIT, ChunkFrame, ChunkedDecoder, ChunkedEncoder, LAST_CHUNK,
    MAX_CHUNK_SIZE_LINE, MAX_TRAILER_BYTES,
};
pub use fields::{Headers, content_length};
pub use head::{
    DEFAULT_MAX_HEAD_BYTES, DEFAULT_MAX_HEADERS, HeadLimits, MAX_HEAD_BYTES_CEILING,
    MAX_HEADERS_CEILING, Method, RequestHead, ResponseHead, Version, parse_request_head,
    parse_response_head,
};
pub use name_set::NameSet;
pub use write::{is_token, reason_phrase, write_request_head, write_response_head};

#[cfg(doc)]
use bytes::{Bytes, BytesMut};

/// Errors of the HTTP/1.1 codecs.
///
/// Every variant means the message (and so the connection) cannot be framed
/// any further; [`HttpError::suggested_status`] says what a server answers.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// More than `limit` bytes are buffered and the head is still incomplete.
    #[error("HTTP head larger than {limit} bytes")]
    HeadTooLarge {
        /// The effective head size limit, in bytes.
        limit: usize,
    },
    /// The head has more than `limit` header fields.
    #[error("more than {limit} header fields")]
    TooManyHeaders {
        /// The effective header count limit.
        limit: usize,
    },
    /// A header name is not a token (this includes obs-fold continuation
    /// lines and whitespace before the colon), or, when writing, empty.
    #[error("invalid header name")]
    InvalidHeaderName,
    /// A header value contains a forbidden byte (CR, LF, NUL or another
    /// control character).
    #[error("invalid header value")]
    InvalidHeaderValue,
    /// The request line or status line is malformed, or a line ending is bad.
    #[error("malformed HTTP head")]
    MalformedHead,
    /// The version is not `HTTP/1.0` or `HTTP/1.1`.
    #[error("unsupported HTTP version")]
    UnsupportedVersion,
    /// A response status code is below 100.
    #[error("invalid response status code")]
    InvalidStatus,
    /// A `Content-Length` value is not a non-negative decimal that fits `u64`.
    #[error("invalid Content-Length")]
    InvalidContentLength,
    /// Several `Content-Length` values disagree.
    #[error("conflicting Content-Length values")]
    ConflictingContentLength,
    /// Both `Transfer-Encoding` and `Content-Length` are present.
    #[error("both Transfer-Encoding and Content-Length present")]
    ContentLengthWithTransferEncoding,
    /// `Transfer-Encoding` is present in an HTTP/1.0 message.
    #[error("Transfer-Encoding in an HTTP/1.0 message")]
    TransferEncodingInHttp10,
    /// `Transfer-Encoding` does not end in exactly one `chunked`
    /// (`chunked, gzip`, `gzip`, `chunked, chunked`, an empty list).
    #[error("invalid Transfer-Encoding: chunked must be the final coding, once")]
    InvalidTransferEncoding,
    /// `Transfer-Encoding` applies a coding other than `chunked`
    /// (e.g. `gzip, chunked`); only `chunked` is implemented.
    #[error("unsupported transfer coding")]
    UnsupportedTransferEncoding,
    /// When writing: the method is not a token.
    #[error("invalid method")]
    InvalidMethod,
    /// When writing: the request target is empty or has a byte outside
    /// visible ASCII (`!`..=`~`).
    #[error("invalid request target")]
    InvalidRequestTarget,
    /// When writing: the status code is outside `100..=999`.
    #[error("status code {status} outside 100..=999")]
    InvalidStatusCode {
        /// The rejected status code.
        status: u16,
    },
    /// A chunk-size line has no hex digits, or a byte other than `;` or
    /// whitespace-then-`;` follows them.
    #[error("invalid chunk size")]
    InvalidChunkSize,
    /// A chunk size does not fit in `u64`.
    #[error("chunk size overflows u64")]
    ChunkSizeOverflow,
    /// A chunk-size line (with extensions and CRLF) is longer than `limit`.
    #[error("chunk-size line longer than {limit} bytes")]
    ChunkSizeLineTooLong {
        /// The limit, [`MAX_CHUNK_SIZE_LINE`].
        limit: usize,
    },
    /// A chunk extension contains a control character.
    #[error("invalid chunk extension")]
    InvalidChunkExtension,
    /// Chunk extensions of one body add up to more than `limit` bytes.
    #[error("chunk extensions exceed {limit} bytes")]
    ChunkExtensionsTooLarge {
        /// The limit, [`CHUNKED_EXTENSIONS_LIMIT`].
        limit: usize,
    },
    /// A chunked-framing line ends in a bare LF, or has a bare CR.
    #[error("chunked line not terminated by CRLF")]
    InvalidChunkLineEnding,
    /// Chunk data is not followed by CRLF.
    #[error("chunk data not followed by CRLF")]
    MissingChunkTerminator,
    /// A trailer line contains a control character or starts with whitespace.
    #[error("invalid trailer field")]
    InvalidTrailer,
    /// The trailer section is longer than `limit` bytes.
    #[error("trailer section longer than {limit} bytes")]
    TrailersTooLarge {
        /// The limit, [`MAX_TRAILER_BYTES`].
        limit: usize,
    },
    /// The peer closed the connection before the body was complete.
    #[error("connection closed before the body was complete")]
    IncompleteBody,
}

impl HttpError {
    /// The status a server should answer a *parse* error with before
    /// closing: 431 for head limits, 501 for unsupported codings, 505 for
    /// versions, 400 for everything else. Writer-only errors (method,
    /// target, status code) map to 500; a writer's header name/value errors
    /// share the parser's variants and so say 400, but are the caller's own
    /// fault.
    pub fn suggested_status(&self) -> u16 {
        match self {
            Self::HeadTooLarge { .. } | Self::TooManyHeaders { .. } => 431,
            Self::UnsupportedTransferEncoding => 501,
            Self::UnsupportedVersion => 505,
            Self::InvalidMethod | Self::InvalidRequestTarget | Self::InvalidStatusCode { .. } => {
                500
            }
            _ => 400,
        }
    }
}
