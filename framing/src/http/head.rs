//! Parsing request and response heads with `httparse`, under limits.
//!
//! # Contract
//! [`parse_request_head`] / [`parse_response_head`] look at the front of a
//! receive buffer and return:
//! - `Ok(None)`: the head is incomplete and at most the head limit is
//!   buffered; call again after the next read. The buffer is untouched.
//! - `Ok(Some(head))`: the head's bytes were split off the buffer (frozen,
//!   zero copy); body bytes and pipelined messages stay in it.
//! - `Err(_)`: malformed, over a limit, or ambiguous framing. The buffer is
//!   untouched; the connection must be closed.
//!
//! # Limits
//! - More than [`HeadLimits::max_head_bytes`] buffered without a complete
//!   head is [`HttpError::HeadTooLarge`]: a head of exactly the limit parses,
//!   one byte more fails. `httparse` is only ever shown the first
//!   `max_head_bytes`, so the work per call is bounded too.
//! - More than [`HeadLimits::max_headers`] fields is
//!   [`HttpError::TooManyHeaders`]. The `httparse` slots live in a stack
//!   array of [`MAX_HEADERS_CEILING`], so parsing does not allocate beyond the
//!   one `Vec` of ranges a successful head keeps. The array is left
//!   uninitialized (`httparse` writes only the slots it fills): setting
//!   all 128 was ~700 instructions a head, a fifth of parsing a small
//!   request's (`bench-results/profiles.md`, round 37).
//!
//! Parsing is stateless: each call re-parses the buffered prefix, which costs
//! at most `max_head_bytes` per read and keeps split-point independence
//! trivially true.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};

use super::HttpError;
use super::body::BodyFraming;
use super::fields::{FieldSummary, Headers, Span, TransferCoding};

/// Default for [`HeadLimits::max_head_bytes`]: 16 KiB, start line included.
pub const DEFAULT_MAX_HEAD_BYTES: usize = 16 * 1024;
/// Largest accepted [`HeadLimits::max_head_bytes`] (1 MiB); larger settings
/// are clamped to it.
pub const MAX_HEAD_BYTES_CEILING: usize = 1024 * 1024;
/// Default for [`HeadLimits::max_headers`].
pub const DEFAULT_MAX_HEADERS: usize = 64;
/// Largest accepted [`HeadLimits::max_headers`]: the size of the stack array
/// of `httparse` header slots. Larger settings are clamped to it.
pub const MAX_HEADERS_CEILING: usize = 128;

/// Bounds on one head read from the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLimits {
    /// Most bytes a head may take, from the first byte to the blank line
    /// inclusive. Clamped to [`MAX_HEAD_BYTES_CEILING`].
    pub max_head_bytes: usize,
    /// Most header fields a head may have. Clamped to
    /// [`MAX_HEADERS_CEILING`].
    pub max_headers: usize,
}

impl HeadLimits {
    /// [`DEFAULT_MAX_HEAD_BYTES`] and [`DEFAULT_MAX_HEADERS`].
    pub const DEFAULT: Self = Self {
        max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
        max_headers: DEFAULT_MAX_HEADERS,
    };

    /// The head size limit in force (after clamping).
    pub fn effective_head_bytes(&self) -> usize {
        self.max_head_bytes.min(MAX_HEAD_BYTES_CEILING)
    }

    /// The header count limit in force (after clamping).
    pub fn effective_headers(&self) -> usize {
        self.max_headers.min(MAX_HEADERS_CEILING)
    }
}

impl Default for HeadLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The protocol version of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// `HTTP/1.0`: connections close after each message unless
    /// `Connection: keep-alive`.
    Http10,
    /// `HTTP/1.1`: connections persist unless `Connection: close`.
    Http11,
}

/// A request method. Methods are case-sensitive (RFC 9110 §9.1), so `get`
/// is [`Method::Other`]; the raw bytes are always in
/// [`RequestHead::method_bytes`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`: the response has no body.
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
    /// `OPTIONS`
    Options,
    /// `PATCH`
    Patch,
    /// `CONNECT`
    Connect,
    /// `TRACE`
    Trace,
    /// Any other token.
    Other,
}

impl Method {
    fn from_token(token: &[u8]) -> Self {
        match token {
            b"GET" => Self::Get,
            b"HEAD" => Self::Head,
            b"POST" => Self::Post,
            b"PUT" => Self::Put,
            b"DELETE" => Self::Delete,
            b"OPTIONS" => Self::Options,
            b"PATCH" => Self::Patch,
            b"CONNECT" => Self::Connect,
            b"TRACE" => Self::Trace,
            _ => Self::Other,
        }
    }
}

/// A parsed request head. Owns its bytes; every accessor is a view into them.
#[derive(Clone, Debug)]
pub struct RequestHead {
    method: Method,
    method_span: Span,
    path_span: Span,
    version: Version,
    headers: Headers,
    keep_alive: bool,
    expects_continue: bool,
    body: BodyFraming,
}

impl RequestHead {
    /// The method, classified.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The method token as sent.
    pub fn method_bytes(&self) -> &[u8] {
        self.method_span.get(self.headers.block())
    }

    /// The request target as sent (origin form `/v1/chat?x=y` for normal
    /// requests). `httparse` guarantees visible ASCII or UTF-8.
    pub fn path(&self) -> &[u8] {
        self.path_span.get(self.headers.block())
    }

    /// The request target as a refcounted slice of the head (no copy).
    pub fn path_bytes(&self) -> Bytes {
        self.path_span.slice(self.headers.block())
    }

    /// The protocol version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The header fields.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// Whether the connection may carry another request after this one:
    /// HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with
    /// `Connection: keep-alive` (and no `close`).
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// HTTP/1.1 request with `Expect: 100-continue`: send `100 Continue`
    /// before reading the body (or a final status instead). Ignored for
    /// HTTP/1.0 (RFC 9110 §10.1.1). Other expectations are left to the
    /// caller via [`Headers::get`].
    pub fn expects_continue(&self) -> bool {
        self.expects_continue
    }

    /// How the request body is framed: never
    /// [`BodyFraming::CloseDelimited`] for a request.
    pub fn body(&self) -> BodyFraming {
        self.body
    }

    /// The raw head bytes, request line to blank line inclusive.
    pub fn as_bytes(&self) -> &Bytes {
        self.headers.block()
    }
}

/// A parsed response head. Owns its bytes; every accessor is a view into them.
#[derive(Clone, Debug)]
pub struct ResponseHead {
    status: u16,
    reason_span: Span,
    version: Version,
    headers: Headers,
    keep_alive: bool,
    body: BodyFraming,
}

impl ResponseHead {
    /// The status code, `100..=999`. A 1xx is interim: its body is
    /// [`BodyFraming::Empty`] and a final head follows it.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The reason phrase as sent (empty when absent or not UTF-8).
    pub fn reason(&self) -> &[u8] {
        self.reason_span.get(self.headers.block())
    }

    /// The protocol version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The header fields.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// Whether the connection may be reused after this response's body:
    /// false for `Connection: close`, for HTTP/1.0 without `keep-alive`, and
    /// for close-delimited bodies.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// How the response body is framed.
    pub fn body(&self) -> BodyFraming {
        self.body
    }

    /// The raw head bytes, status line to blank line inclusive.
    pub fn as_bytes(&self) -> &Bytes {
        self.headers.block()
    }
}

/// Parse a request head from the front of `buf`. See the module docs for
/// the `Ok(None)` / `Ok(Some)` / `Err` contract.
///
/// Request body framing follows RFC 9112 §6.1–6.3: `Transfer-Encoding` must
/// be exactly `chunked`; with `Content-Length` too, or in HTTP/1.0, it is an
/// error; `Content-Length` values must agree; neither means no body.
pub fn parse_request_head(
    buf: &mut BytesMut,
    limits: &HeadLimits,
) -> Result<Option<RequestHead>, HttpError> {
    let max_bytes = limits.effective_head_bytes();
    let window = &buf[..buf.len().min(max_bytes)];
    let mut slots = header_slots();
    let mut req = httparse::Request::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        window,
        &mut slots[..limits.effective_headers()],
    );
    let head_len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return partial(buf.len(), max_bytes),
        Err(e) => return Err(map_httparse(e, limits)),
    };
    let version = version_of(req.version)?;
    let method_token = req.method.unwrap_or_default().as_bytes();
    let method_span = Span::of(window, method_token)?;
    let path_span = Span::of(window, req.path.unwrap_or_default().as_bytes())?;
    let entries = header_spans(window, req.headers)?;
    let fields = FieldSummary::scan(req.headers.iter().map(|h| (h.name.as_bytes(), h.value)))?;
    let method = Method::from_token(method_token);

    let body = match (fields.transfer, fields.content_length) {
        (TransferCoding::Absent, None) => BodyFraming::Empty,
        (TransferCoding::Absent, Some(n)) => BodyFraming::Length(n),
        (_, _) if version == Version::Http10 => return Err(HttpError::TransferEncodingInHttp10),
        (_, Some(_)) => return Err(HttpError::ContentLengthWithTransferEncoding),
        (transfer, None) => chunked_or_error(transfer)?,
    };
    let keep_alive = match version {
        Version::Http11 => !fields.close,
        Version::Http10 => fields.keep_alive && !fields.close,
    };
    let expects_continue = version == Version::Http11 && fields.expect_continue;

    let block = buf.split_to(head_len).freeze();
    Ok(Some(RequestHead {
        method,
        method_span,
        path_span,
        version,
        headers: Headers::new(block, entries),
        keep_alive,
        expects_continue,
        body,
    }))
}

/// Parse a response head from the front of `buf`; `head_request` says the
/// request was `HEAD`. See the module docs for the return contract.
///
/// Response body framing follows RFC 9112 §6.3: responses to `HEAD`, 1xx,
/// 204 and 304 have no body whatever the fields say; otherwise
/// `Transfer-Encoding: chunked`, then `Content-Length`, then read-until-close.
/// Unlike the RFC, a response whose final coding is not `chunked` is an
/// error rather than close-delimited: a body we cannot decode must not be
/// passed on as plain data. `Transfer-Encoding` with `Content-Length`, or in
/// HTTP/1.0, is an error too.
pub fn parse_response_head(
    buf: &mut BytesMut,
    limits: &HeadLimits,
    head_request: bool,
) -> Result<Option<ResponseHead>, HttpError> {
    let max_bytes = limits.effective_head_bytes();
    let window = &buf[..buf.len().min(max_bytes)];
    let mut slots = header_slots();
    let mut res = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut res,
        window,
        &mut slots[..limits.effective_headers()],
    );
    let head_len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return partial(buf.len(), max_bytes),
        Err(e) => return Err(map_httparse(e, limits)),
    };
    let version = version_of(res.version)?;
    let status = res.code.unwrap_or_default();
    if status < 100 {
        return Err(HttpError::InvalidStatus);
    }
    let reason_span = Span::of(window, res.reason.unwrap_or_default().as_bytes())?;
    let entries = header_spans(window, res.headers)?;
    let fields = FieldSummary::scan(res.headers.iter().map(|h| (h.name.as_bytes(), h.value)))?;

    let no_body = head_request || status < 200 || status == 204 || status == 304;
    let body = match (fields.transfer, fields.content_length) {
        _ if no_body => BodyFraming::Empty,
        (TransferCoding::Absent, None) => BodyFraming::CloseDelimited,
        (TransferCoding::Absent, Some(n)) => BodyFraming::Length(n),
        (_, _) if version == Version::Http10 => return Err(HttpError::TransferEncodingInHttp10),
        (_, Some(_)) => return Err(HttpError::ContentLengthWithTransferEncoding),
        (transfer, None) => chunked_or_error(transfer)?,
    };
    let persistent = match version {
        Version::Http11 => !fields.close,
        Version::Http10 => fields.keep_alive && !fields.close,
    };
    let keep_alive = persistent && body != BodyFraming::CloseDelimited;

    let block = buf.split_to(head_len).freeze();
    Ok(Some(ResponseHead {
        status,
        reason_span,
        version,
        headers: Headers::new(block, entries),
        keep_alive,
        body,
    }))
}

/// The `httparse` slots for one parse, uninitialized (see the module docs).
fn header_slots<'b>() -> [MaybeUninit<httparse::Header<'b>>; MAX_HEADERS_CEILING] {
    [const { MaybeUninit::uninit() }; MAX_HEADERS_CEILING]
}

/// `Ok(None)` while the buffered bytes fit the limit, else `HeadTooLarge`.
fn partial<T>(buffered: usize, max_bytes: usize) -> Result<Option<T>, HttpError> {
    if buffered > max_bytes {
        Err(HttpError::HeadTooLarge { limit: max_bytes })
    } else {
        Ok(None)
    }
}

fn chunked_or_error(transfer: TransferCoding) -> Result<BodyFraming, HttpError> {
    match transfer {
        TransferCoding::Chunked => Ok(BodyFraming::Chunked),
        TransferCoding::Unsupported => Err(HttpError::UnsupportedTransferEncoding),
        TransferCoding::Absent | TransferCoding::Invalid => Err(HttpError::InvalidTransferEncoding),
    }
}

fn version_of(minor: Option<u8>) -> Result<Version, HttpError> {
    match minor {
        Some(0) => Ok(Version::Http10),
        Some(1) => Ok(Version::Http11),
        _ => Err(HttpError::UnsupportedVersion),
    }
}

fn header_spans(
    window: &[u8],
    headers: &[httparse::Header<'_>],
) -> Result<Vec<(Span, Span)>, HttpError> {
    // Sized up front: collecting through `Result` would grow it step by step.
    let mut spans = Vec::with_capacity(headers.len());
    for h in headers {
        let name = Span::of(window, h.name.as_bytes())?;
        spans.push((name, Span::of(window, h.value)?));
    }
    Ok(spans)
}

fn map_httparse(e: httparse::Error, limits: &HeadLimits) -> HttpError {
    match e {
        httparse::Error::TooManyHeaders => HttpError::TooManyHeaders {
            limit: limits.effective_headers(),
        },
        httparse::Error::HeaderName => HttpError::InvalidHeaderName,
        httparse::Error::HeaderValue => HttpError::InvalidHeaderValue,
        httparse::Error::Version => HttpError::UnsupportedVersion,
        httparse::Error::NewLine | httparse::Error::Status | httparse::Error::Token => {
            HttpError::MalformedHead
        }
    }
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
