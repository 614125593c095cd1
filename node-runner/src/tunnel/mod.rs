//! The raw provider tunnel (F16, F18): one `ProviderTunnelRequest` executed
//! against an OpenAI-compatible provider and relayed, byte for byte, as
//! ordered `ProviderTunnelFrame`s.
//!
//! [`run_tunnel`] is self-contained: the run manager gives it the core's
//! [`ProviderClient`], the named adapter ([`TunnelTarget`]), the stream's
//! [`Credit`], a cancel future and a [`TunnelSink`]; it returns a
//! [`TunnelOutcome`] for the run store.
//!
//! # Frames, in order
//! 1. `status` — the provider's final status code;
//! 2. `headers` — the provider's header fields minus hop-by-hop ones
//!    (`Connection`, `Keep-Alive`, `Transfer-Encoding`, `TE`, `Trailer`,
//!    `Upgrade`, `Proxy-Connection`, `Host`), and minus `Content-Length`
//!    when bytes may be cut (a stripped SSE body); otherwise a
//!    `Content-Length` present is exactly the sum of the body frames;
//! 3. `body` × 0..n — via [`TunnelSink::body`]: the provider's de-chunked
//!    bytes, as zero-copy slices of the HTTP client's receive buffer, at most
//!    [`TunnelLimits::max_body_chunk`] a frame and never beyond the
//!    [`Credit`]. The HTTP chunks one provider read delivered go out
//!    together, as one frame of several slices (at most
//!    [`MAX_BODY_PARTS`](framing::frame::MAX_BODY_PARTS)): a provider that
//!    fell behind and sends many small events at once costs the link and
//!    the Edge a frame a read, not a frame an event; nothing waits to be
//!    gathered (a frame goes out before the tunnel waits for anything);
//! 4. `usage` × 0..n — a provider usage-only SSE event seen (F18);
//! 5. exactly one terminal: `end` (with the last usage seen) or `error`
//!    (a typed `ExecutionFailure`). Nothing follows it.
//!
//! To an Edge that takes batches ([`TunnelLimits::batches`]) frames that are
//! ready together go as one `batch` frame: the `status` and `headers`
//! ([`TunnelSink::head`]) with the first body frame or the `end`, whichever
//! comes before the relay's first wait ([`TunnelSink::flush`]), and the
//! last body frame with `end` when the read that brought those bytes also
//! ended the body ([`TunnelSink::last`]). A small answer whose head and
//! body came in one read is then one frame, not four; nothing waits for a
//! later byte. The Edge hands a batch on as the frames it holds, in the
//! order above.
//!
//! Validation failures produce a lone `error` terminal, before any provider
//! call: unknown adapter (`UNKNOWN_ADAPTER`), an adapter that is not
//! OpenAI-compatible or has `supports_tunnel` off (`UNSUPPORTED`), a target
//! it does not serve (`UNKNOWN_TARGET`), a raw stall timeout over 24 h, a
//! method that is not a token, a path not starting with `/` or with
//! CR/LF/space/control bytes, a bad header (`INVALID_REQUEST`). A failed
//! connect or head is an `error` after no other frame (`PROVIDER_UNREACHABLE`
//! / `PROVIDER_MALFORMED`, as for runs).
//!
//! # Provider HTTP errors are relayed
//! A 4xx/5xx answer is still a faithful tunnel: `status`, `headers`, the
//! error body, then `end`. The client sees exactly what the provider said;
//! the Edge reads the status for provider health (5xx counts against the
//! provider, 4xx does not). Usage is only looked for in 2xx bodies.
//!
//! # Request
//! Method, path and body are the request's; headers are the adapter's
//! configured ones first, then the request's, except hop-by-hop fields and
//! any name the adapter configures (a request never overrides a configured
//! credential). With `extract_usage` or `strip_usage_event`, the request's
//! `Accept-Encoding` is replaced by `identity` (usage is read from the
//! bytes), and a response with any other `Content-Encoding` is relayed
//! without usage observation.
//!
//! # Usage (F18)
//! With `extract_usage`, an SSE body (`text/event-stream`) is observed on the
//! side ([`framing::sse::SseObserver`]); every event whose data has a
//! top-level OpenAI `usage` object updates the usage for `end`, and a
//! usage-only event (empty `choices`) also yields a `usage` frame. With
//! `strip_usage_event`, that usage-only event is cut out of the relayed body
//! (the only place bytes are cut; see [`MAX_HELD_EVENT`] for the hold-back
//! bound). A non-SSE 2xx body is kept aside as refcounted slices up to
//! [`MAX_JSON_USAGE_BODY`] and its `usage` read at the end (over the cap:
//! no usage). The relayed bytes are never changed otherwise.
//!
//! # Flow control
//! See [`Credit`]: the tunnel reads from the provider only while the
//! stream has credit, and splits a chunk to the credit left (strict window,
//! never overdrawn).
//!
//! # Stops
//! The cancel future (CANCEL_RUN on the stream, or the link closing) ends
//! the tunnel with an `error` terminal coded `CANCELLED` (side `EDGE`); the
//! hard timeout (`hard_timeout_ms`, else the provider's
//! `request_timeout_ms`; 0 for both = none) with `HARD_TIMEOUT` (side
//! `PROVIDER`). Either way the provider response is dropped at once, which
//! closes its connection: the provider sees the client leave.
//!
//! # Stall (F21)
//! The run manager's watched run (`run_tunnel_watched`) adds the stall
//! watchdog (on the core's timer wheel): every sink call (status, headers,
//! body, usage) is progress, and a tunnel waiting for credit is held; the
//! raw stall timeout is validated here and [`effective_stall_timeout_ms`]
//! gives the value the run manager arms. At the claim the sink is fenced
//! (nothing more reaches the Edge) and the relay is told to close through
//! its [`CloseSignal`]: it drops the provider response (closing the
//! connection) at its next await and returns, and that return, seen inside
//! the close grace, is what makes the stall `retryable`. A stall is an
//! `error` terminal coded `RESPONSE_STALLED` with the evidence of
//! [`crate::stall`].
//!
//! # Not here
//! Admission by `max_concurrency`, routing `WindowUpdate`s and cancels to
//! the stream, the run store record and frame encoding are the run
//! manager's and the link's.

mod credit;
mod quoted_key;
mod relay;
mod request;
mod response_head;
mod sse_tap;
#[cfg(test)]
mod stall_tests;
#[cfg(test)]
mod tests;
mod usage;
mod usage_quick;

use std::future::{Future, pending};
use std::time::Duration;

use bytes::Bytes;
use proto::v1::{
    AdapterKind, ExecutionFailure, FailureCode, FailureSide, NodeConfigPayload,
    ProviderTunnelFrame, ProviderTunnelRequest, TunnelEnd, TunnelHeaders, TunnelStatus, Usage,
    provider_tunnel_frame::Frame,
};

pub use credit::{Credit, RESUME_AT_MOST};
pub use request::{DEFAULT_STALL_TIMEOUT_MS, MAX_STALL_TIMEOUT_MS};
pub use sse_tap::{MAX_HELD_EVENT, OBSERVER_LIMIT};
pub use usage::MAX_JSON_USAGE_BODY;

use crate::adapter::{AdapterConfig, AnyAdapter, failure};
use crate::provider_http::ProviderClient;
use crate::stall::{Activity, CloseSignal, HealthCheck, NoHealth, Watchdog, evidence};
use relay::Relay;
pub(crate) use request::{Prepared, prepare};

/// Initial per-stream window when the config says 0, in bytes.
pub const DEFAULT_INITIAL_WINDOW: u32 = 256 * 1024;

/// Largest body frame payload when the config says 0, in bytes.
pub const DEFAULT_MAX_BODY_CHUNK: usize = 64 * 1024;

/// Room for a body frame's head (length prefix, stream id, tags, lengths).
const BODY_FRAME_OVERHEAD: usize = 64;

/// Where a tunnel's frames go, in order (see the module docs). The link
/// wiring encodes `frame`s with `FrameEncoder::encode` and `body`s with
/// `FrameEncoder::encode_tunnel_body` (body uncopied).
pub trait TunnelSink {
    /// A non-body frame: status, headers, usage, end or error.
    fn frame(&mut self, frame: ProviderTunnelFrame);
    /// The `headers` frame, from the provider head's borrowed fields: a
    /// sink that encodes it can do so without building `Header`s
    /// ([`FrameEncoder::encode_tunnel_headers`](framing::frame::FrameEncoder::encode_tunnel_headers)).
    /// By default, the frame [`frame`](Self::frame) takes.
    fn headers(&mut self, headers: &[(&[u8], &[u8])]) {
        self.frame(frame(Frame::Headers(TunnelHeaders::copied(headers))));
    }
    /// A body frame: `body`, then each of `more` (at most
    /// [`MAX_BODY_PARTS`](framing::frame::MAX_BODY_PARTS) − 1 slices),
    /// provider bytes, uncopied. The frame's body is their concatenation;
    /// `body` is never empty.
    fn body(&mut self, body: Bytes, more: Vec<Bytes>);
    /// The `status` and `headers` frames, which the relay always has
    /// together. By default [`frame`](Self::frame) then
    /// [`headers`](Self::headers); a sink for an Edge that takes batches
    /// may hold them, to send with what follows, until the next
    /// [`flush`](Self::flush).
    fn head(&mut self, code: u32, headers: &[(&[u8], &[u8])]) {
        head_apart(self, code, headers);
    }
    /// The terminal `end`, after the last body frame when the relay had
    /// one gathered (the bytes of the read that ended the body). By
    /// default [`body`](Self::body) then [`frame`](Self::frame); a sink for
    /// an Edge that takes batches sends them (and a head it holds) as one
    /// frame.
    fn last(&mut self, body: Option<(Bytes, Vec<Bytes>)>, end: TunnelEnd) {
        last_apart(self, body, end);
    }
    /// The relay is about to wait (for the provider or for credit): a sink
    /// that holds anything sends it now, so nothing waits on a later byte.
    fn flush(&mut self) {}
    /// The tunnel waits for credit (`true`) or got it again (`false`): the
    /// client, not the provider, holds the stream, so the stall watchdog
    /// is held too.
    fn hold(&mut self, _waiting: bool) {}
}

/// [`TunnelSink::head`] as its two frames, for a sink whose Edge takes no
/// batches.
pub(crate) fn head_apart<S: TunnelSink + ?Sized>(
    sink: &mut S,
    code: u32,
    headers: &[(&[u8], &[u8])],
) {
    sink.frame(frame(Frame::Status(TunnelStatus { code })));
    sink.headers(headers);
}

/// [`TunnelSink::last`] as its frames, for a sink whose Edge takes no
/// batches.
pub(crate) fn last_apart<S: TunnelSink + ?Sized>(
    sink: &mut S,
    body: Option<(Bytes, Vec<Bytes>)>,
    end: TunnelEnd,
) {
    if let Some((body, more)) = body {
        sink.body(body, more);
    }
    sink.frame(frame(Frame::End(end)));
}

/// Per-connection tunnel settings, from the `NodeConfigPayload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelLimits {
    /// Window of a stream whose request says 0.
    pub initial_window: u32,
    /// Largest body slice handed to the sink.
    pub max_body_chunk: usize,
    /// The Edge takes frames that were ready together as one `batch`
    /// frame (`NodeConfigPayload.tunnel_batches`; off for an older Edge).
    pub batches: bool,
}

impl Default for TunnelLimits {
    fn default() -> Self {
        Self {
            initial_window: DEFAULT_INITIAL_WINDOW,
            max_body_chunk: DEFAULT_MAX_BODY_CHUNK,
            batches: false,
        }
    }
}

impl TunnelLimits {
    /// The limits of `config` (0 = the defaults), with body slices kept
    /// small enough for a frame under `max_frame_len` (the Edge's).
    pub fn from_config(config: &NodeConfigPayload, max_frame_len: usize) -> Self {
        let window = match config.initial_stream_window {
            0 => DEFAULT_INITIAL_WINDOW,
            w => w,
        };
        let chunk = match config.max_body_chunk {
            0 => DEFAULT_MAX_BODY_CHUNK,
            c => c as usize,
        };
        Self {
            initial_window: window,
            max_body_chunk: chunk
                .min(max_frame_len.saturating_sub(BODY_FRAME_OVERHEAD))
                .max(1),
            batches: config.tunnel_batches,
        }
    }

    /// The initial window of a stream whose request asked for
    /// `requested` (a tunnel's or a run's `initial_window`): its own, or
    /// the default for 0.
    pub fn window_for(&self, requested: u32) -> u32 {
        match requested {
            0 => self.initial_window,
            w => w,
        }
    }
}

/// The adapter a tunnel request names, as the run manager holds it.
#[derive(Debug, Clone, Copy)]
pub struct TunnelTarget<'a> {
    /// Its settings (base URL, configured headers, `supports_tunnel`).
    pub config: &'a AdapterConfig,
    /// Its kind: only `OPENAI_COMPAT` and `VLLM` serve tunnels.
    pub kind: AdapterKind,
    /// The provider's `request_timeout_ms` (hard timeout when the request
    /// sets none; 0 = none).
    pub request_timeout_ms: u64,
}

impl<'a> TunnelTarget<'a> {
    /// The target of `adapter`.
    pub fn of(adapter: &'a AnyAdapter, request_timeout_ms: u64) -> Self {
        Self {
            config: adapter.config(),
            kind: adapter.kind(),
            request_timeout_ms,
        }
    }
}

/// How a tunnel ended, for the run store.
#[derive(Debug, Clone, PartialEq)]
pub enum TunnelOutcome {
    /// The provider's response was relayed to its end (`end` terminal),
    /// whatever its status.
    Completed {
        /// The provider's status code.
        status: u16,
        /// The last usage the provider reported, if any was observed.
        usage: Option<Usage>,
    },
    /// An `error` terminal other than a cancel.
    Failed(ExecutionFailure),
    /// Cancelled (an `error` terminal coded `CANCELLED`).
    Cancelled,
}

/// F20: the stall timeout `request` asks for (0 = the default); `None` when
/// it is invalid (over [`MAX_STALL_TIMEOUT_MS`]).
pub fn effective_stall_timeout_ms(request: &ProviderTunnelRequest) -> Option<u64> {
    match request.response_stall_timeout_ms {
        0 => Some(DEFAULT_STALL_TIMEOUT_MS),
        ms if ms > MAX_STALL_TIMEOUT_MS => None,
        ms => Some(ms),
    }
}

/// Runs one tunnel to its terminal without a stall watchdog (an unbound
/// path): the run manager's watched run with no watchdog.
pub async fn run_tunnel<S: TunnelSink>(
    client: &ProviderClient,
    target: Option<TunnelTarget<'_>>,
    mut request: ProviderTunnelRequest,
    limits: TunnelLimits,
    credit: &Credit,
    cancel: impl Future<Output = ()>,
    sink: &mut S,
) -> TunnelOutcome {
    run_tunnel_watched(
        client,
        Box::new(prepare(target, &mut request)),
        limits,
        credit,
        cancel,
        None::<Watchdog<NoHealth>>,
        sink,
    )
    .await
}

/// Runs one tunnel to its terminal; see the module docs for the frames and
/// the stops. `prepared` is the request checked against its adapter
/// ([`prepare`], whose refusal becomes the tunnel's `error` terminal), so
/// the caller can let the tunnel request go before the tunnel starts.
/// `credit` is the stream's window (build it with
/// [`TunnelLimits::window_for`] and feed it the stream's `WindowUpdate`s);
/// `cancel` completes on CANCEL_RUN or when the link closes. With a
/// `watchdog` (armed with [`effective_stall_timeout_ms`]), a tunnel with
/// no sink call for its timeout — connect and head included — ends with a
/// `RESPONSE_STALLED` error carrying the [`crate::stall`] evidence; at the
/// claim the relay is closed explicitly and its return awaited within the
/// close grace (see the module docs).
///
/// Exactly one terminal reaches `sink`, last. A cancel or hard deadline
/// ready together with a stall wins.
#[allow(clippy::too_many_arguments)]
// Not an `async fn` on purpose (see the comment in the body).
#[allow(clippy::manual_async_fn)]
pub(crate) fn run_tunnel_watched<'a, S: TunnelSink, H: HealthCheck + 'a>(
    client: &'a ProviderClient,
    prepared: Box<Result<Prepared, ExecutionFailure>>,
    limits: TunnelLimits,
    credit: &'a Credit,
    cancel: impl Future<Output = ()> + 'a,
    watchdog: Option<Watchdog<H>>,
    sink: &'a mut S,
) -> impl Future<Output = TunnelOutcome> + 'a {
    // An async block, not an async fn: an async fn moves each argument into
    // a local of its own, so the request and the watchdog would be laid out
    // twice in the future every (idle) tunnel holds for its whole life.
    async move {
        // The provider request holds what it sends (the body is shared, not
        // copied) and is dropped once the head arrives; the tunnel keeps
        // only the request's usage flags, so a long stream pins neither its
        // prompt nor its headers (nor the link read buffer they are slices
        // of).
        let prepared = match *prepared {
            Ok(prepared) => prepared,
            Err(failure) => return fail(sink, failure),
        };
        let hard_ms = prepared.hard_timeout_ms;
        // A watched tunnel keeps its hard deadline on the watchdog's wheel, so
        // a tie with the stall is decided on one clock (the deadline wins).
        let deadline = async {
            match (hard_ms, &watchdog) {
                (0, _) => pending().await,
                (ms, Some(w)) => {
                    w.timers.timeout(ms, pending::<()>()).await;
                }
                // Boxed: monoio's `Sleep` is 640 B aligned to 128, which would
                // size (and align) every watched tunnel's future too.
                (ms, None) => Box::pin(monoio::time::sleep(Duration::from_millis(ms))).await,
            }
        };
        let activity = watchdog.as_ref().map(Watchdog::start);
        let stalled = async {
            match &activity {
                Some(activity) => activity.stalled().await,
                None => pending().await,
            }
        };
        let close = CloseSignal::new();
        let fenced = std::cell::Cell::new(false);
        // The relay borrows the sink: it lives in this block, and the
        // terminals of outside stops go out after it (dropped or returned).
        let stopped = {
            let mut watched = Watched {
                sink: &mut *sink,
                activity: activity.as_ref(),
                fenced: &fenced,
            };
            let relay = Relay {
                sink: &mut watched,
                credit,
                max_chunk: limits.max_body_chunk.max(1),
                close: &close,
            };
            let mut relay = std::pin::pin!(relay.run(client, prepared));
            let stopped = monoio::select! {
                biased;
                outcome = &mut relay => return outcome,
                () = cancel => Stopped::Cancelled,
                () = deadline => Stopped::HardTimeout(hard_ms),
                () = stalled => Stopped::Stalled(None),
            };
            match (stopped, &watchdog, &activity) {
                (Stopped::Stalled(_), Some(watchdog), Some(activity)) => {
                    // The claim: fence the output, tell the relay to close,
                    // and confirm its return (joined with the probe).
                    fenced.set(true);
                    close.signal();
                    let returned = async {
                        let _ = relay.await;
                    };
                    // Boxed: the probe (a provider request) is rarely live and
                    // would otherwise size every idle tunnel's task.
                    let evidence = Box::pin(evidence(watchdog, activity, returned));
                    Stopped::Stalled(Some(evidence.await))
                }
                (stopped, ..) => stopped,
            }
        };
        match stopped {
            Stopped::Cancelled => {
                sink.frame(error_frame(failure(
                    FailureCode::Cancelled,
                    FailureSide::Edge,
                    "the tunnel was cancelled",
                )));
                TunnelOutcome::Cancelled
            }
            Stopped::HardTimeout(ms) => fail(
                sink,
                failure(
                    FailureCode::HardTimeout,
                    FailureSide::Provider,
                    format!("the tunnel exceeded its hard timeout of {ms} ms"),
                ),
            ),
            Stopped::Stalled(failure) => {
                let Some(failure) = failure else {
                    unreachable!("no watchdog, no stall");
                };
                fail(sink, failure)
            }
        }
    }
}

/// What ended a tunnel from outside its relay.
enum Stopped {
    Cancelled,
    HardTimeout(u64),
    /// With the evidence once gathered.
    Stalled(Option<ExecutionFailure>),
}

/// A sink whose every call is progress for the watchdog, and which drops
/// everything once the stall is claimed (`fenced`).
struct Watched<'a, S> {
    sink: &'a mut S,
    activity: Option<&'a Activity>,
    fenced: &'a std::cell::Cell<bool>,
}

impl<S> Watched<'_, S> {
    /// Whether what is sent now reaches the sink: not once fenced; when it
    /// does, it is progress for the watchdog.
    fn passes(&self) -> bool {
        if self.fenced.get() {
            return false;
        }
        if let Some(activity) = self.activity {
            activity.touch();
        }
        true
    }
}

impl<S: TunnelSink> TunnelSink for Watched<'_, S> {
    fn frame(&mut self, frame: ProviderTunnelFrame) {
        if self.passes() {
            self.sink.frame(frame);
        }
    }

    fn headers(&mut self, headers: &[(&[u8], &[u8])]) {
        if self.passes() {
            self.sink.headers(headers);
        }
    }

    fn body(&mut self, body: Bytes, more: Vec<Bytes>) {
        if self.passes() {
            self.sink.body(body, more);
        }
    }

    fn head(&mut self, code: u32, headers: &[(&[u8], &[u8])]) {
        if self.passes() {
            self.sink.head(code, headers);
        }
    }

    fn last(&mut self, body: Option<(Bytes, Vec<Bytes>)>, end: TunnelEnd) {
        if self.passes() {
            self.sink.last(body, end);
        }
    }

    fn flush(&mut self) {
        // Not progress: what it sends was already counted.
        if !self.fenced.get() {
            self.sink.flush();
        }
    }

    fn hold(&mut self, waiting: bool) {
        if let Some(activity) = self.activity {
            activity.hold(waiting);
        }
    }
}

/// The relay's return after a stall claim closed it (its provider
/// response dropped); the watcher sends the stall terminal.
fn closed() -> TunnelOutcome {
    TunnelOutcome::Failed(failure(
        FailureCode::ResponseStalled,
        FailureSide::Provider,
        "closed after a stall",
    ))
}

fn fail(sink: &mut impl TunnelSink, failure: ExecutionFailure) -> TunnelOutcome {
    sink.frame(error_frame(failure.clone()));
    TunnelOutcome::Failed(failure)
}

fn error_frame(failure: ExecutionFailure) -> ProviderTunnelFrame {
    ProviderTunnelFrame {
        frame: Some(Frame::Error(failure)),
    }
}

/// `frame` as the one field of its `ProviderTunnelFrame`.
pub(crate) fn frame(frame: Frame) -> ProviderTunnelFrame {
    ProviderTunnelFrame { frame: Some(frame) }
}
