//! The raw provider tunnel for OpenAI clients (F16): the provider's own
//! status, headers and body bytes reach the client untouched.
//!
//! - The request goes to the provider as the client sent it. When a
//!   streaming client did not ask for usage, the Edge asks for it
//!   (`stream_options.include_usage`, added to the client's bytes, not
//!   re-encoded: [`ParsedRequest::body_asking_usage`]) and has the Node strip that extra
//!   event from the relayed bytes and report it in a `usage` frame instead
//!   (F18), so usage is always accounted and the client's stream is exactly
//!   what it asked for.
//! - Body frames are `Bytes` slices of the node connection's receive buffer;
//!   each goes to the client the moment it arrives — nothing is copied, and
//!   nothing waits: frames that arrived together leave in one `writev`, as
//!   one chunk (one size line, the slices, one CRLF), and a small answer's
//!   head, body and end are one write. Credit for the stream is returned to the Node
//!   after each write, so a client that stops reading pauses only its own
//!   provider read.
//! - Hop-by-hop and framing headers of the provider are dropped. A body the
//!   provider gave a `Content-Length` (the Node relays the field only when
//!   its body frames add up to it) goes to the client under that length,
//!   unless it is an event stream; any other body the Edge frames itself
//!   (chunked, or close-delimited for HTTP/1.0). A non-streaming answer
//!   then reaches the client framed as the provider framed it.
//! - The provider's status and headers are held (they are small `Bytes`
//!   values; the body never is) until its first body byte: only then is
//!   anything committed to the client, so a stall before the first body
//!   byte can still be recovered on another provider by the StreamGate
//!   ([`super::gate`]). A failure before commit is an OpenAI error answer.
//! - A stall after commit on an event stream ends with one OpenAI-style
//!   SSE error event and a clean end ([`super::gate::error_event`]). Any
//!   other failure after commit, and a stall in a non-SSE body (which no
//!   event can be appended to), cuts the client's body (no last chunk,
//!   connection closed), so the client sees the truncation instead of a
//!   clean end.

use std::borrow::Cow;

use bytes::Bytes;
use framing::frame::TunnelOpen;
use framing::http::NameSet;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{ExecutionFailure, FailureCode, Header};

use super::error::{ApiError, from_failure};
use super::gate::commit::{EndStep, FailureEnding, HeldHead, TunnelCommit};
use super::gate::{Decision, Path, error_event};
use super::http::Responder;
use super::openai::ParsedRequest;
use super::{Api, Attempt, AttemptCtx};
use crate::dispatch::TunnelStream;
use crate::pool::Lease;

/// Provider response headers never relayed: hop-by-hop fields (RFC 9110
/// §7.6.1) and the framing the Edge redoes itself.
const DROPPED_HEADERS: NameSet = NameSet::new(&[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "server",
    "date",
]);

/// Whether a provider response header reaches the client.
pub(crate) fn relayed(name: &[u8]) -> bool {
    !DROPPED_HEADERS.contains(name)
}

/// Serves one attempt of a request through a raw tunnel.
///
/// A plain fn over an async block, as every quiet stream holds this future
/// for its whole life: an async fn would lay each argument out twice.
#[allow(clippy::manual_async_fn)]
pub(crate) fn serve<'a>(
    ctx: &'a mut AttemptCtx<'_, '_>,
    request: &'a mut ParsedRequest,
    lease: Lease,
    responder: &'a mut Responder,
) -> impl Future<Output = Attempt> + 'a {
    async move {
        // The open is built in one expression: a request bound to a name
        // would keep its slot in the layout beside the stream. (The open
        // does not wait: the stream's id is taken here.)
        let opened = tunnel_request(ctx.api, request, &lease).and_then(|tunnel| {
            (ctx.shared.dispatcher)
                .open_tunnel_as(&lease, tunnel, &ctx.principal)
                .map_err(ApiError::from)
        });
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(error) => return Attempt::refused(responder, &error).await,
        };
        let mut commit = TunnelCommit::default();
        let ended = relay(ctx, &lease, &mut stream, responder, &mut commit, request).await;
        match ended {
            Ended::Answered(499) => {
                super::release_after_end(stream, lease);
                Attempt::Answered(499)
            }
            Ended::Answered(status) => Attempt::Answered(status),
            // Boxed: rare, and its locals would otherwise be laid out in the
            // task of every stream, next to the relay.
            Ended::Stalled(failure) => {
                Box::pin(after_stall(ctx, lease, stream, &commit, failure, responder)).await
            }
        }
    }
}

/// The provider request a tunnel sends: the client's body, with
/// `stream_options.include_usage` set when the client did not ask for
/// usage (the Node then strips the usage event it did not ask for).
fn tunnel_request(
    api: Api,
    request: &ParsedRequest,
    lease: &Lease,
) -> Result<TunnelOpen, ApiError> {
    let strip_usage = api == Api::Chat && request.stream && !request.include_usage;
    let body = if strip_usage {
        request.body_asking_usage()?
    } else {
        request.body.clone()
    };
    // The dispatcher fills in the tunnel id, adapter and target.
    Ok(TunnelOpen {
        method: Cow::Borrowed("POST"),
        path: Cow::Borrowed(api.path()),
        headers: Cow::Borrowed(if request.stream {
            &STREAMED_HEADERS
        } else {
            &WHOLE_HEADERS
        }),
        body,
        response_stall_timeout_ms: lease.provider().response_stall_timeout_ms,
        extract_usage: true,
        strip_usage_event: strip_usage,
        ..TunnelOpen::default()
    })
}

/// The provider request's headers for a streamed answer.
static STREAMED_HEADERS: [Header; 2] = request_headers(b"text/event-stream");

/// The provider request's headers for a whole answer.
static WHOLE_HEADERS: [Header; 2] = request_headers(b"application/json");

/// A JSON body's headers, accepting `accept`.
const fn request_headers(accept: &'static [u8]) -> [Header; 2] {
    [
        Header {
            name: Bytes::from_static(b"content-type"),
            value: Bytes::from_static(b"application/json"),
        },
        Header {
            name: Bytes::from_static(b"accept"),
            value: Bytes::from_static(accept),
        },
    ]
}

/// The stall was the tunnel's terminal: the gate decides, then the client
/// gets the ending the commit point allows.
async fn after_stall(
    ctx: &mut AttemptCtx<'_, '_>,
    lease: Lease,
    stream: crate::dispatch::TunnelStream,
    commit: &TunnelCommit,
    failure: ExecutionFailure,
    responder: &mut Responder,
) -> Attempt {
    let decision = ctx.stalled(
        Path::Tunnel,
        &lease,
        stream.node(),
        &failure,
        commit.committed(),
    );
    let error = from_failure(&failure);
    // The Node already fenced and closed the provider request. Drop the
    // stream and release the lease (once) before anything else is admitted.
    drop(stream);
    drop(lease);
    if let Decision::Reattempt(avoid) = decision {
        return Attempt::Reattempt { avoid, error };
    }
    match commit.stall_ending() {
        FailureEnding::HttpError => responder.error(&error).await,
        FailureEnding::ErrorEvent => {
            responder
                .chunk(Bytes::from(error_event(ctx.api, &error)))
                .await;
            responder.finish().await;
        }
        FailureEnding::Cut => responder.close_after(),
    }
    Attempt::Answered(error.status)
}

/// How a relay ended.
#[derive(Debug)]
enum Ended {
    /// Answered with this status (499: the client left).
    Answered(u16),
    /// The tunnel's terminal was a stall; nothing about it was written.
    Stalled(ExecutionFailure),
}

/// Writes a held head: the client's response starts, under the provider's
/// `Content-Length` when it is kept (see [`TunnelCommit::headers`]),
/// chunked otherwise. The head is made here, so the future holds only its
/// bytes while they are sent, not the held fields (every quiet stream's
/// task is as large as the largest future it awaits).
fn write_head(head: HeldHead, responder: &mut Responder) -> impl Future<Output = ()> + '_ {
    let fields = head.fields.iter().map(|h| (&h.name[..], &h.value[..]));
    let bytes = match head.length() {
        Some(length) => responder.sized_head(head.status, fields, length),
        None => responder.stream_head(head.status, fields),
    };
    responder.send_head(bytes)
}

/// Most frames written to the client in one go (see [`relay`]).
const MAX_BATCH_FRAMES: usize = 64;

/// Most body bytes held for one write (see [`relay`]).
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// What one frame did to the relay.
enum Step {
    /// Go on with the next frame.
    Next,
    /// The relay is over.
    Over(Ended),
}

/// Relays the tunnel's frames to the client (see the module docs).
///
/// Every frame that has already arrived when the relay wakes is written in
/// one `writev` (up to [`MAX_BATCH_FRAMES`] / [`MAX_BATCH_BYTES`]): a small
/// answer's head, body and end leave in one write, and a fast stream's
/// events that queued while the last write ran leave together. Nothing
/// waits to be batched: the relay writes as soon as no frame is ready, and
/// credit goes back to the Node after that write.
async fn relay(
    ctx: &AttemptCtx<'_, '_>,
    lease: &Lease,
    stream: &mut TunnelStream,
    responder: &mut Responder,
    commit: &mut TunnelCommit,
    request: &mut ParsedRequest,
) -> Ended {
    let mut state = RelayState {
        commit,
        request,
        last_usage: None,
    };
    loop {
        let frame = monoio::select! {
            frame = stream.next() => frame,
            _ = responder.gone() => return Ended::Answered(499),
        };
        let Some(frame) = frame else {
            responder.close_after();
            return Ended::Answered(499);
        };
        responder.cork();
        let mut credit = 0u32;
        let mut next = Some(frame);
        let mut frames = 0;
        let mut over = None;
        while let Some(frame) = next.take() {
            let step = relay_frame(ctx, lease, frame, responder, &mut state, &mut credit).await;
            if let Step::Over(ended) = step {
                over = Some(ended);
                break;
            }
            frames += 1;
            if frames < MAX_BATCH_FRAMES && responder.corked_len() < MAX_BATCH_BYTES {
                next = stream.try_next();
            }
        }
        responder.uncork().await;
        if let Some(ended) = over {
            return ended;
        }
        if responder.is_gone() {
            return Ended::Answered(499);
        }
        stream.grant(credit);
    }
}

/// What the relay of one attempt keeps across frames.
struct RelayState<'r> {
    commit: &'r mut TunnelCommit,
    /// Its body is let go of at commit (see `ParsedRequest::release_body`).
    request: &'r mut ParsedRequest,
    /// Usage frames are candidates; the `end` frame carries the final one.
    last_usage: Option<proto::v1::Usage>,
}

/// Handles one frame of the relay; writes go to the corked responder.
async fn relay_frame(
    ctx: &AttemptCtx<'_, '_>,
    lease: &Lease,
    frame: Frame,
    responder: &mut Responder,
    state: &mut RelayState<'_>,
    credit: &mut u32,
) -> Step {
    let commit = &mut *state.commit;
    match frame {
        Frame::Status(s) => commit.status(s.code),
        Frame::Headers(headers) => {
            // A malformed or conflicting length is not relayed: the body is
            // framed by the Edge (chunked), as before the Node sent lengths.
            let length = framing::http::content_length(
                headers.headers.iter().map(|h| (&h.name[..], &h.value[..])),
            )
            .ok()
            .flatten();
            let mut fields = headers.headers;
            fields.retain(|h| relayed(&h.name));
            commit.headers(fields, length);
        }
        Frame::Body(body) => {
            if let Some(head) = commit.body() {
                // Committed: no attempt follows (see `release_body`).
                state.request.release_body();
                write_head(head, responder).await;
            }
            let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
            responder.chunk(body).await;
            *credit = credit.saturating_add(len);
        }
        Frame::Usage(usage) => state.last_usage = Some(usage),
        // Never here: `TunnelStream` hands a batch out as the frames it holds.
        Frame::Batch(_) => {}
        Frame::End(end) => {
            if let Some(usage) = end.usage.as_ref().or(state.last_usage.as_ref()) {
                super::record_usage(ctx.shared, lease, usage);
            }
            match commit.end() {
                EndStep::Headless => {
                    let error = ApiError::new(
                        502,
                        "server_error",
                        "upstream_error",
                        "the provider answered without a response head",
                    );
                    // Boxed, as below: rare, and inline it would size the
                    // relay every quiet stream holds.
                    Box::pin(responder.error(&error)).await;
                    return Step::Over(Ended::Answered(error.status));
                }
                EndStep::CommitThenFinish(head) => write_head(head, responder).await,
                EndStep::Finish => {}
            }
            responder.finish().await;
            return Step::Over(Ended::Answered(commit.answered_status()));
        }
        Frame::Error(failure) if failure.code() == FailureCode::ResponseStalled => {
            return Step::Over(Ended::Stalled(failure));
        }
        Frame::Error(failure) => match commit.failure_ending() {
            FailureEnding::HttpError => {
                let error = from_failure(&failure);
                Box::pin(responder.error(&error)).await;
                return Step::Over(Ended::Answered(error.status));
            }
            _ => {
                // Mid-body: cut the client's stream so it sees the break.
                responder.close_after();
                return Step::Over(Ended::Answered(commit.answered_status()));
            }
        },
    }
    Step::Next
}
