//! Normalized runs for OpenAI clients (F17): a leased Ollama-kind provider
//! runs the request as a `RunRequest`, and its typed events become Chat
//! Completions chunks / Responses events (or one JSON body).
//!
//! - Nothing is written until the run's first output (a delta or its
//!   terminal): `start` and `usage` commit nothing. So a run refused on
//!   the node (over capacity, unknown target, provider down before
//!   answering) is a proper HTTP error, not a 200 with an error inside,
//!   and a stall before the first output can still be recovered on
//!   another provider by the StreamGate ([`super::gate`]). A non-stream
//!   answer commits only at the run's end, so every stall it meets is
//!   pre-commit.
//! - Once streaming, a failure (a stall included) is an SSE `error` event
//!   and the stream ends without `[DONE]`, which the `openai` clients
//!   raise as an error ([`super::gate::error_event`]).
//! - A client that leaves drops the run stream, which cancels the run on
//!   the node (and its provider request); the lease is dropped with it.

use bytes::Bytes;
use proto::v1::{ExecutionFailure, FailureCode, RunEvent, RunEventKind, Usage};

use super::error::{ApiError, from_failure};
use super::gate::commit::run_event_commits;
use super::gate::{Decision, Path};
use super::http::Responder;
use super::json_out::JsonOut;
use super::openai::{self, ParsedRequest};
use super::{Api, Attempt, AttemptCtx, unix_s};
use crate::dispatch::{RunStream, SubmitRun, run_event_text};
use crate::pool::Lease;

mod responses_events;
mod sse;
use sse::{SseWriter, chat_body};

/// What the run produced, for the non-stream body.
#[derive(Debug, Default)]
struct Output {
    text: String,
    reasoning: String,
    finish_reason: String,
    usage: Option<Usage>,
    /// Whether deltas accumulate in `text` and `reasoning`: a whole answer
    /// and a streamed Responses answer's closing events carry all of the
    /// text, a streamed chat does not — so its memory does not grow with
    /// its answer.
    keep_text: bool,
}

/// Serves one attempt of a request as a normalized run.
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
        // The submit is built in one expression: a run bound to a name
        // would keep its slot in the layout beside the stream. (The submit
        // does not wait: the stream's id is taken here.)
        let submitted = api_input(ctx.api, request).and_then(|input| {
            let run = SubmitRun {
                input,
                response_stall_timeout_ms: lease.provider().response_stall_timeout_ms,
                merge_deltas: !request.stream,
                ..SubmitRun::default()
            };
            (ctx.shared.dispatcher)
                .submit_leased_as(&lease, run, &ctx.principal)
                .map_err(ApiError::from)
        });
        let mut stream = match submitted {
            Ok(stream) => stream,
            Err(error) => return Attempt::refused(responder, &error).await,
        };
        let api = ctx.api;
        let mut out = Output {
            keep_text: !(request.stream && api == Api::Chat),
            ..Output::default()
        };
        // Nothing is committed before the first output; non-stream answers
        // commit only at the end.
        let first = until_commit(&mut stream, &mut out, responder, request.stream).await;
        let first = match first {
            Some(Ok(event)) => event,
            Some(Err(event)) => {
                // Boxed: rare, and inline it would size every stream's task.
                let failing = Box::pin(pre_commit_failure(ctx, stream, lease, &event, responder));
                return failing.await;
            }
            None => {
                super::release_after_end(stream, lease);
                return Attempt::Answered(499);
            }
        };
        // Committed (the first output, or the whole answer): no attempt follows.
        request.release_body();
        let ids = Ids::new(api, stream.run_id(), &request.model);
        if !request.stream {
            if let Some(usage) = out.usage.as_ref() {
                super::record_usage(ctx.shared, &lease, usage);
            }
            let body = match api {
                Api::Chat => chat_body(&ids, &out),
                Api::Responses => responses_events::body(&ids, &out),
            };
            responder.full(200, "application/json", body).await;
            return Attempt::Answered(200);
        }
        responder
            .start_stream(
                200,
                [(b"content-type".as_slice(), b"text/event-stream".as_slice())],
            )
            .await;
        let mut writer = SseWriter {
            api,
            ids: &ids,
            include_usage: request.include_usage,
            started: false,
        };
        let (status, last) =
            stream_events(&mut writer, &mut stream, first, &mut out, responder).await;
        if status == 499 {
            super::release_after_end(stream, lease);
            return Attempt::Answered(status);
        }
        if let Some(usage) = out.usage.as_ref() {
            super::record_usage(ctx.shared, &lease, usage);
        }
        if let Some(failure) = last.as_ref().and_then(stalled) {
            // After commit a stall is terminal: count it and hand its evidence
            // over; the error event is already written.
            let _ = ctx.stalled(Path::Normalized, &lease, stream.node(), failure, true);
        }
        Attempt::Answered(status)
    }
}

/// The run's input for the request's API.
fn api_input(api: Api, request: &ParsedRequest) -> Result<proto::v1::RunInput, ApiError> {
    match api {
        Api::Chat => openai::chat_input(request),
        Api::Responses => openai::responses_input(request),
    }
}

/// The stall failure of a terminal event, if it is one.
fn stalled(event: &RunEvent) -> Option<&ExecutionFailure> {
    event
        .failure
        .as_ref()
        .filter(|f| event.kind() == RunEventKind::Error && f.code() == FailureCode::ResponseStalled)
}

/// A run that ended before anything was committed: a stall goes to the
/// gate; anything else is an HTTP error.
async fn pre_commit_failure(
    ctx: &mut AttemptCtx<'_, '_>,
    stream: RunStream,
    lease: Lease,
    event: &RunEvent,
    responder: &mut Responder,
) -> Attempt {
    let error = terminal_error(event);
    if let Some(failure) = stalled(event) {
        let decision = ctx.stalled(Path::Normalized, &lease, stream.node(), failure, false);
        // The stall was the run's terminal: the Node already fenced and
        // closed the provider request. Release the lease (once) before
        // anything else is admitted.
        drop(stream);
        drop(lease);
        if let Decision::Reattempt(avoid) = decision {
            return Attempt::Reattempt { avoid, error };
        }
    }
    Attempt::refused(responder, &error).await
}

/// The error answer of a failed terminal.
fn terminal_error(event: &RunEvent) -> ApiError {
    match event.kind() {
        RunEventKind::Cancelled => {
            ApiError::new(503, "server_error", "cancelled", "the run was cancelled")
        }
        _ => event.failure.as_ref().map_or_else(
            || ApiError::new(502, "server_error", "upstream_error", "the run failed"),
            from_failure,
        ),
    }
}

/// The ids and timestamps one response carries.
#[derive(Debug)]
struct Ids {
    id: String,
    item_id: String,
    model: String,
    created: u64,
}

impl Ids {
    fn new(api: Api, run_id: &str, model: &str) -> Self {
        let prefix = match api {
            Api::Chat => "chatcmpl",
            Api::Responses => "resp",
        };
        Self {
            // Not `format!`: its machinery cost ~1,000 instructions an id.
            id: [prefix, "-", run_id].concat(),
            item_id: ["msg-", run_id].concat(),
            model: model.to_owned(),
            created: unix_s(),
        }
    }

    /// The members every answer object carries, in their sorted place:
    /// the time (under `created`, or the Responses API's `created_at`),
    /// `id`, `model`, and `object` with its value.
    fn write_members(&self, json: &mut JsonOut<'_>, created: &str, object: &str) {
        self.write_time_and_id(json, created);
        self.write_model_and_object(json, object);
    }

    /// [`Self::write_members`]' first two, after which a member whose key
    /// sorts between `id` and `model` may follow.
    fn write_time_and_id(&self, json: &mut JsonOut<'_>, created: &str) {
        json.raw("\"")
            .raw(created)
            .raw("\":")
            .num(self.created)
            .raw(",\"id\":")
            .str(&self.id);
    }

    /// [`Self::write_members`]' last two, after a comma.
    fn write_model_and_object(&self, json: &mut JsonOut<'_>, object: &str) {
        json.raw(",\"model\":")
            .str(&self.model)
            .raw(",\"object\":\"")
            .raw(object)
            .raw("\"");
    }
}

/// Applies one event to the accumulated output; `Some` at a terminal, with
/// the failure to report (if any).
fn apply(event: &RunEvent, out: &mut Output) -> Option<Result<(), ApiError>> {
    match event.kind() {
        RunEventKind::Delta if out.keep_text => push_text(&mut out.text, run_event_text(event)),
        RunEventKind::ReasoningDelta if out.keep_text => {
            push_text(&mut out.reasoning, run_event_text(event));
        }
        RunEventKind::Delta | RunEventKind::ReasoningDelta => {}
        RunEventKind::Usage => out.usage = event.usage,
        RunEventKind::Complete => {
            out.finish_reason = event.finish_reason.clone();
            if event.usage.is_some() {
                out.usage = event.usage;
            }
            return Some(Ok(()));
        }
        RunEventKind::Error | RunEventKind::Cancelled => {
            return Some(Err(terminal_error(event)));
        }
        RunEventKind::Start | RunEventKind::Unspecified => {}
    }
    None
}

/// Appends a delta's text to what the answer holds, grown without a
/// `realloc` while it is small (`framing::room`).
fn push_text(held: &mut String, text: &str) {
    framing::room::reserve_str(held, text.len());
    held.push_str(text);
}

/// The next event, or `None` when the client left.
async fn next_or_gone(stream: &mut RunStream, responder: &mut Responder) -> Option<RunEvent> {
    monoio::select! {
        next = stream.next() => next,
        _ = responder.gone() => None,
    }
}

/// Reads until the answer commits, applying what comes before. Stream:
/// until the first output — a delta, or a complete terminal (not applied;
/// it is written) — past what commits nothing (`start`, `usage`).
/// Non-stream: to the terminal, all applied. The event comes boxed: the
/// caller holds it across awaits, and a quiet stream would carry its size
/// in its layout for its whole life. `Some(Err(event))` is a failed
/// terminal before any output; `None`: the client left.
async fn until_commit(
    stream: &mut RunStream,
    out: &mut Output,
    responder: &mut Responder,
    streaming: bool,
) -> Option<Result<Box<RunEvent>, Box<RunEvent>>> {
    loop {
        let event = next_or_gone(stream, responder).await?;
        if streaming && run_event_commits(event.kind()) {
            return Some(Ok(Box::new(event)));
        }
        match apply(&event, out) {
            Some(Ok(())) => return Some(Ok(Box::new(event))),
            Some(Err(_)) => return Some(Err(Box::new(event))),
            None => {}
        }
    }
}

/// Stream: writes the events from the first output on, those already
/// queued together in one write.
/// Returns the status answered (499: the client left) and the terminal.
///
/// No event is held while it waits for the next one: a quiet stream waits
/// here for its whole life, and an event held across the wait would add
/// its size (~0.2 KB) to every such stream's task.
async fn stream_events(
    writer: &mut SseWriter<'_>,
    stream: &mut RunStream,
    first: Box<RunEvent>,
    out: &mut Output,
    responder: &mut Responder,
) -> (u16, Option<RunEvent>) {
    let mut batch = Vec::new();
    let mut current = *first;
    loop {
        let terminal = apply(&current, out);
        // Reserved here, not at the top: the batch is empty (no buffer)
        // while the stream waits for its next event.
        if batch.capacity() == 0 {
            batch.reserve(FIRST_BATCH);
        }
        writer.event(&current, out, terminal.as_ref(), &mut batch);
        // Events already queued join this write; it goes out when the
        // run has nothing more ready (or at the terminal, or when full).
        if terminal.is_none()
            && batch.len() < MAX_BATCH
            && let Some(next) = stream.try_next()
        {
            current = next;
            continue;
        }
        let chunk = Bytes::from(std::mem::take(&mut batch));
        // Two writes on purpose: one shared write with the terminal held
        // across it lays the event out again (stream_events 704 -> 1,048 B,
        // the connection task +232 B).
        if let Some(result) = terminal {
            responder.chunk(chunk).await;
            if responder.is_gone() {
                return (499, None);
            }
            responder.finish().await;
            let status = match result {
                Ok(()) => 200,
                Err(error) => error.status,
            };
            return (status, Some(current));
        }
        drop(current);
        responder.chunk(chunk).await;
        if responder.is_gone() {
            return (499, None);
        }
        match next_or_gone(stream, responder).await {
            Some(next) => current = next,
            None => break,
        }
    }
    responder.close_after();
    (499, None)
}

/// A client write gathers ready events up to about this many bytes.
const MAX_BATCH: usize = 32 * 1024;

/// A write's buffer at its first event: a token's chunk is ~200 bytes, so
/// this holds several, or a Responses stream's opening events (~700) and
/// its first delta, without growing (grown from empty, each event paid
/// two or three reallocations: ~4 % of the Edge's instructions on a small
/// streamed chat, `hack/instructions.sh` with `STREAM=1`).
const FIRST_BATCH: usize = 1024;
