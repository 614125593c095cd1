//! One client connection: HTTP/1.1 with keep-alive and pipelining, request
//! limits and timeouts, and the [`Responder`] handlers write through.
//!
//! ```text
//! idle ─first byte─▶ head (≤ head timeout, ≤ head limits) ─▶ body (≤ max body) ─▶ handler ─▶ idle / close
//! ```
//!
//! - **Limits.** Head bytes and header count ([`HeadLimits`]), body bytes
//!   ([`IngressLimits::max_body_bytes`], 413 before reading a too-long
//!   `Content-Length`), a head that does not complete within
//!   [`IngressLimits::head_timeout_ms`] (slowloris: 408), a body that stalls
//!   past [`IngressLimits::body_timeout_ms`] (408), and an idle keep-alive
//!   connection closed after [`IngressLimits::idle_timeout_ms`].
//! - **Framing errors** (smuggling attempts, bad chunking, unsupported
//!   transfer codings) answer the codec's suggested status with an OpenAI
//!   error body and close the connection: its framing is lost.
//! - **Pipelining.** Bytes after a request stay buffered and are served
//!   next, in order. **HTTP/1.0** is served without chunking and closed
//!   after the response. **`Expect: 100-continue`** gets `100 Continue`
//!   before the body is read (or the final error instead, if the body is
//!   refused).
//! - **Client gone.** While a response streams, a read watches the socket
//!   (`ClientRead::watching`): end of stream or an error means the client
//!   left, and the handler drops its upstream at once (which cancels the
//!   run or tunnel on the node). The same read, if the client sends
//!   nothing, waits for the next request: a read is never cancelled.
//! - **Memory of a long answer.** A handler holds its request for as long
//!   as it answers (minutes for a quiet stream), so the request owns
//!   right-sized copies of its head and of a small body instead of slices
//!   that would pin the connection's read buffer; and the watching read
//!   waits on an idle client with 64 bytes, not 4 KiB.

use std::os::fd::AsRawFd;
use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use framing::http::{
    BodyDecoder, BodyFraming, BodyItem, HeadLimits, HttpError, RequestHead, Version,
    parse_request_head,
};
use monoio::io::{AsyncWriteRent, Splitable};
use monoio::net::TcpStream;

use super::client_read::ClientRead;
use super::error::ApiError;
use super::read_timer::{ReadDeadline, ReadTimers};
pub use super::responder::Responder;
use super::responder::{Framing, Parts};

/// Bounds on client requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngressLimits {
    /// Head size and header count.
    pub head: HeadLimits,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// A head must complete within this, from its first byte, in ms.
    pub head_timeout_ms: u64,
    /// A body must keep arriving: no gap longer than this, in ms.
    pub body_timeout_ms: u64,
    /// An idle keep-alive connection is closed after this, in ms.
    pub idle_timeout_ms: u64,
}

impl Default for IngressLimits {
    fn default() -> Self {
        Self {
            head: HeadLimits {
                max_head_bytes: 16 * 1024,
                max_headers: 64,
            },
            max_body_bytes: 4 * 1024 * 1024,
            head_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
        }
    }
}

/// Room kept in a link frame beside a request's head and body: the
/// tunnel or run fields the Edge adds (ids, target, a sealed credential
/// lease, timeouts).
const FRAME_ROOM_BESIDE_REQUEST: usize = 16 * 1024;

impl IngressLimits {
    /// These limits with the body limit lowered, if need be, so that a
    /// request with the largest head and body still fits one link frame of
    /// `max_frame_len` bytes: a larger one is refused with 413 before it is
    /// read, instead of being accepted and then not sendable to a Node.
    pub fn fitting_frames(mut self, max_frame_len: usize) -> Self {
        let room = self.head.max_head_bytes + FRAME_ROOM_BESIDE_REQUEST;
        self.max_body_bytes = self.max_body_bytes.min(max_frame_len.saturating_sub(room));
        self
    }
}

/// One request, head and whole body.
#[derive(Debug)]
pub struct Request {
    /// The parsed head.
    pub head: RequestHead,
    /// The body, whole.
    pub body: Bytes,
}

/// A request body up to this size is copied out of the read buffer (see
/// the module docs); a larger one is most of its buffer anyway.
const OWNED_BODY_MAX: usize = 16 * 1024;

/// What a route handler does with one request.
#[allow(async_fn_in_trait)]
pub trait Handler {
    /// Answers `request` through `responder`. The request comes boxed: a
    /// handler's arguments stay in its layout for as long as it runs (a
    /// whole stream), and a box can be let go of early.
    async fn handle(&self, request: Box<Request>, responder: &mut Responder);
}

/// Serves `stream` until the client closes, a limit is hit, or a response
/// says close. Its request reads are bounded on `timers`, the wheel of the
/// core it runs on (whose ticker, [`ReadTimers::run`], runs there too).
///
/// Every open stream holds this future for its whole answer, so it is laid
/// out with care (issue 8; `CONNECTION_TASK_BUDGET` in `ingress`): a plain
/// fn returning an async block, as an async fn would lay each argument out
/// twice; the request is boxed as soon as it is read, so what stays beside
/// the handler is a pointer.
#[allow(clippy::manual_async_fn)]
pub fn serve<H: Handler>(
    stream: TcpStream,
    limits: IngressLimits,
    handler: Rc<H>,
    timers: &Rc<ReadTimers>,
) -> impl Future<Output = ()> + use<H> {
    // Out here, not in the block: a value the block captures keeps its
    // slot for the block's whole life, also once moved out.
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let (read, write) = stream.into_split();
    let mut reader = ClientRead::new(read, fd);
    let mut responder = Responder::new(write, fd);
    let gone = Rc::clone(&responder.gone);
    let deadline = ReadDeadline::new(timers);
    async move {
        // An error answered: the client may still be sending (see `linger`).
        let mut refused = false;
        loop {
            // Boxed, as are the other short steps of a request (admission,
            // the opening of a run or tunnel, whose futures hold monoio
            // timers: 640 B, 128-byte aligned): inline they would size
            // every connection's task for the whole of its longest answer
            // (issue 8: 4.7 KB a connection). Heap-allocated, they cost
            // their size only while they run. The reads' own deadlines are
            // on the core's wheel (`read_timer`).
            let reading = Box::pin(read_request(
                &mut reader,
                &limits,
                &deadline,
                &mut responder,
            ));
            let request = match reading.await {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(error) => {
                    responder.close = true;
                    responder.error(&error).await;
                    refused = true;
                    break;
                }
            };
            responder.http10 = request.head.version() == Version::Http10;
            responder.close = !request.head.keep_alive();
            responder.framing = Framing::Unstarted;
            {
                // Watch for the client leaving while the handler runs.
                let answer = pin!(handler.handle(request, &mut responder));
                reader.watching(&gone, answer).await;
            }
            // A handler that left its writes corked still gets them sent.
            responder.uncork().await;
            if responder.close || responder.is_gone() {
                break;
            }
        }
        if responder.is_gone() {
            close_gone(reader, responder);
        } else if refused {
            let _ = responder.write.shutdown().await;
            linger(&mut reader).await;
        } else {
            // The close sends the `FIN` after what was written; a
            // `shutdown` first would only add system calls (see
            // `close_gone`).
            drop(rejoined(reader, responder));
        }
    }
}

/// The connection's stream, its halves rejoined, unless a read is in
/// flight (which owns the read half; the halves then drop apart, and the
/// write half's drop shuts the socket down first). Dropping the stream is
/// a plain close.
fn rejoined(reader: ClientRead, responder: Responder) -> Option<TcpStream> {
    reader.into_half()?.reunite(responder.write).ok()
}

/// Closes the connection of a client that left (or whose socket failed),
/// after the run's or tunnel's cancel has gone out to the Node.
///
/// The cancel was handed to the link's core as the answer ended; on this
/// core its frame is written by tasks that run after this one. A close
/// here would go first, and a close is not cheap: it delivers our `FIN`
/// over loopback inline, ~36 µs of system time that the cancel waited
/// behind, and before it a `shutdown` of the write side (and monoio's
/// second one as the half dropped) another ~60 µs (`perf record` of
/// `cargo bench -p perf --bench stream -- cancel`, epoll). So the stream
/// is closed by a task of its own a timer tick later, when everything
/// ready now has run, and without a shutdown: the peer is gone, and the
/// close sends the `FIN`. The connection's task ends at once; the task
/// that holds the socket meanwhile is small. With a read still in flight
/// (a write failed first) the halves drop apart at once ([`rejoined`]).
fn close_gone(reader: ClientRead, responder: Responder) {
    let Some(stream) = rejoined(reader, responder) else {
        return;
    };
    monoio::spawn(async move {
        monoio::time::sleep(CLOSE_GONE_AFTER).await;
        drop(stream);
    });
}

/// How long a gone client's socket waits for its close: the next timer
/// tick, after the tasks that were ready (see [`close_gone`]).
const CLOSE_GONE_AFTER: Duration = Duration::from_millis(1);

/// How long a refused request's connection is drained before it closes.
const LINGER: Duration = Duration::from_secs(5);

/// The most bytes drained from a refused request's connection.
const LINGER_MAX_BYTES: usize = 64 * 1024 * 1024;

/// The buffer a refused request's bytes are read into and dropped from.
const LINGER_READ: usize = 16 * 1024;

/// After an error answer (413 for a body too long, a framing error, a
/// timeout), reads and discards what the client is still sending, for at
/// most [`LINGER`] and [`LINGER_MAX_BYTES`], before the connection closes.
/// Closing with unread bytes makes the kernel reset the connection, and a
/// client still writing its body (most do not wait for `100 Continue`)
/// would then see a broken pipe instead of the answer.
async fn linger(reader: &mut ClientRead) {
    let drain = async {
        let mut drained = 0;
        while drained < LINGER_MAX_BYTES {
            reader.buf().clear();
            reader.reserve_total(LINGER_READ);
            match reader.fill().await {
                Ok(n) if n > 0 => drained += n,
                _ => break,
            }
        }
    };
    let _ = monoio::time::timeout(LINGER, drain).await;
}

fn framing_error(error: &HttpError) -> ApiError {
    let status = error.suggested_status();
    let status = if status == 500 { 400 } else { status };
    ApiError::new(
        status,
        "invalid_request_error",
        "bad_http_request",
        format!("malformed HTTP request: {error}"),
    )
}

fn timeout(what: &str, ms: u64) -> ApiError {
    ApiError::new(
        408,
        "invalid_request_error",
        "request_timeout",
        format!("the request {what} did not arrive within {ms} ms"),
    )
}

/// The next request; `None` when the client closed (or idled out) between
/// requests.
async fn read_request(
    reader: &mut ClientRead,
    limits: &IngressLimits,
    deadline: &ReadDeadline,
    responder: &mut Responder,
) -> Result<Option<Box<Request>>, ApiError> {
    // Idle: wait for the first byte of the next request (the read watching
    // the last answer may already be in flight).
    if reader.buf().is_empty() {
        match deadline.within(limits.idle_timeout_ms, reader.fill()).await {
            Some(Ok(n)) if n > 0 => {}
            _ => return Ok(None),
        }
    }
    let head = deadline
        .within(limits.head_timeout_ms, async {
            loop {
                // The watching read's 64 bytes of a longer head: its rest is
                // likely waiting and is taken first, so the head is parsed
                // once, not once in part and then whole (~0.9k instructions a
                // request; `bench-results/profiles.md`, round 38). Bounded by
                // those 64 bytes: after one more read the head is parsed, its
                // limits and errors as ever.
                if reader.watch_read_filled() && !may_end_a_head(reader.buf()) {
                    match reader.fill().await {
                        Ok(n) if n > 0 => continue,
                        _ => return Ok(None),
                    }
                }
                match parse_head_owned(reader.buf(), &limits.head) {
                    Ok(Some(head)) => return Ok(Some(head)),
                    Ok(None) => {}
                    Err(e) => return Err(framing_error(&e)),
                }
                match reader.fill().await {
                    Ok(n) if n > 0 => {}
                    // Closed mid-head: nothing to answer.
                    _ => return Ok(None),
                }
            }
        })
        .await
        .ok_or_else(|| timeout("head", limits.head_timeout_ms))??;
    let Some(head) = head else { return Ok(None) };
    let framing = head.body();
    if let BodyFraming::Length(len) = framing
        && len > limits.max_body_bytes as u64
    {
        return Err(too_large(limits));
    }
    if head.expects_continue() && framing != BodyFraming::Empty {
        responder
            .send(Parts::One(Bytes::from_static(
                b"HTTP/1.1 100 Continue\r\n\r\n",
            )))
            .await;
    }
    let body = read_body(reader, framing, limits, deadline).await?;
    Ok(Some(Box::new(Request { head, body })))
}

/// Whether `buf` holds an empty line, as any complete head does (CRLF or
/// bare LF line ends, as httparse takes them: a line feed followed by a
/// line feed or by CR LF).
fn may_end_a_head(buf: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', buf)
        .any(|at| matches!(&buf[at + 1..], [b'\n', ..] | [b'\r', b'\n', ..]))
}

/// Parses a request head from a right-sized copy of `buf`'s bytes (up to
/// the head's blank line) and, when one is complete, consumes it from
/// `buf`: the head then pins no read buffer (see the module docs). Same
/// answers as parsing `buf` itself: the copy ends at the first CRLF CRLF
/// (a bare-LF head, or none yet, copies the whole head window).
fn parse_head_owned(
    buf: &mut BytesMut,
    limits: &HeadLimits,
) -> Result<Option<RequestHead>, HttpError> {
    // One byte past the limit keeps "head too large" exactly as on `buf`.
    let window = buf.len().min(limits.effective_head_bytes() + 1);
    let end = memchr::memmem::find(&buf[..window], b"\r\n\r\n").map_or(window, |at| at + 4);
    let mut copied = end;
    let mut copy = BytesMut::from(&buf[..end]);
    let mut parsed = parse_request_head(&mut copy, limits);
    if matches!(parsed, Ok(None)) && end < window {
        // Not complete up to that CRLF CRLF (cannot happen for a valid
        // head, which ends there): parse the whole window as `buf` would.
        copied = window;
        copy = BytesMut::from(&buf[..window]);
        parsed = parse_request_head(&mut copy, limits);
    }
    let parsed = parsed?;
    if parsed.is_some() {
        buf.advance(copied - copy.len());
    }
    Ok(parsed)
}

fn too_large(limits: &IngressLimits) -> ApiError {
    ApiError::new(
        413,
        "invalid_request_error",
        "request_too_large",
        format!(
            "the request body is larger than {} bytes",
            limits.max_body_bytes
        ),
    )
}

async fn read_body(
    reader: &mut ClientRead,
    framing: BodyFraming,
    limits: &IngressLimits,
    deadline: &ReadDeadline,
) -> Result<Bytes, ApiError> {
    let mut decoder = match framing {
        BodyFraming::Empty => return Ok(Bytes::new()),
        BodyFraming::CloseDelimited => {
            return Err(ApiError::new(
                411,
                "invalid_request_error",
                "length_required",
                "a request body needs Content-Length or chunked encoding",
            ));
        }
        BodyFraming::Length(len) => return read_sized_body(reader, len, limits, deadline).await,
        other => BodyDecoder::new(other),
    };
    let mut parts: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    loop {
        match decoder
            .decode(reader.buf())
            .map_err(|e| framing_error(&e))?
        {
            Some(BodyItem::Data(data)) => {
                total += data.len();
                if total > limits.max_body_bytes {
                    return Err(too_large(limits));
                }
                parts.push(data);
            }
            Some(BodyItem::End) => break,
            None => fill_body(reader, limits, deadline).await?,
        }
    }
    Ok(match parts.len() {
        0 => Bytes::new(),
        1 => owned_if_small(parts.pop().unwrap_or_default()),
        _ => parts.concat().into(),
    })
}

/// A `Content-Length` body: read into one buffer of its length, reserved
/// up front (the length is within `max_body_bytes`), so each read takes
/// all that has arrived and the body is the buffer itself, not a copy of
/// pieces (a 1 MB prompt had cost the Edge ~250 reads of 4 KiB and a
/// concatenation).
async fn read_sized_body(
    reader: &mut ClientRead,
    len: u64,
    limits: &IngressLimits,
    deadline: &ReadDeadline,
) -> Result<Bytes, ApiError> {
    let len = match usize::try_from(len) {
        Ok(len) if len <= limits.max_body_bytes => len,
        _ => return Err(too_large(limits)),
    };
    reader.reserve_total(len);
    while reader.buf().len() < len {
        fill_body(reader, limits, deadline).await?;
    }
    Ok(owned_if_small(reader.buf().split_to(len).freeze()))
}

/// Reads more of a body, within the body timeout; the connection closing
/// first is an incomplete body.
async fn fill_body(
    reader: &mut ClientRead,
    limits: &IngressLimits,
    deadline: &ReadDeadline,
) -> Result<(), ApiError> {
    match deadline.within(limits.body_timeout_ms, reader.fill()).await {
        Some(Ok(n)) if n > 0 => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "incomplete_body",
            "the connection closed before the request body ended",
        )),
        None => Err(timeout("body", limits.body_timeout_ms)),
    }
}

/// A body up to [`OWNED_BODY_MAX`] as its own right-sized copy (see the
/// module docs); a larger one as it is.
fn owned_if_small(body: Bytes) -> Bytes {
    if body.len() <= OWNED_BODY_MAX {
        Bytes::copy_from_slice(&body)
    } else {
        body
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "http_memory_tests.rs"]
mod memory_tests;
