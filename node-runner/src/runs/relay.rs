//! One run's event relay: adapter events in, numbered `RunEvent`s out,
//! exactly one terminal, whatever ends the run first.

use std::future::Future;
use std::pin::pin;

use proto::v1::{FailureCode, FailureSide, RunEvent, RunEventKind};

use crate::adapter::{EventStream, RuntimeEvent, failure};

/// A source of adapter events ([`EventStream`] in production, fakes in
/// tests).
#[allow(async_fn_in_trait)]
pub trait EventSource {
    /// The next event; `None` when the source has ended.
    async fn next(&mut self) -> Option<RuntimeEvent>;
}

impl EventSource for EventStream {
    async fn next(&mut self) -> Option<RuntimeEvent> {
        EventStream::next(self).await
    }
}

/// Why a run was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// `CANCEL_RUN`, or the link closed (F12).
    Cancelled,
    /// The hard deadline passed, after this many ms.
    HardTimeout(u64),
}

/// How a run ended, for the run store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A `complete` terminal.
    Completed,
    /// An `error` terminal, with its safe message.
    Failed(String),
    /// A `cancelled` terminal.
    Cancelled,
}

/// Relays one run: waits for `open` (the adapter's `execute`), then passes
/// each event to `emit` numbered from 1, until the terminal. `stop` ends
/// the run early at any point, including while `open` is pending.
///
/// Exactly one terminal reaches `emit`, and it is the last thing that does:
/// the adapter's, or `cancelled` / a `HARD_TIMEOUT` error on `stop`, or a
/// synthesized `MISSING_TERMINAL` error when the source ends without one
/// (F11). Dropping the source on stop drops its provider response, which
/// closes the provider connection.
///
/// Returns the outcome and, after a `complete`, the source, so the caller
/// can read the rest of the provider body (keep-alive) after it released
/// the run's capacity.
pub async fn relay<S, O, T>(
    open: O,
    stop: T,
    mut emit: impl FnMut(RunEvent),
) -> (Outcome, Option<S>)
where
    S: EventSource,
    O: Future<Output = S>,
    T: Future<Output = Stop>,
{
    let mut stop = pin!(stop);
    let mut seq = 0u64;
    let mut send = |event: RuntimeEvent| {
        seq += 1;
        emit(event.into_run_event(seq));
    };
    let mut source = monoio::select! {
        source = open => source,
        why = &mut stop => return (stopped(why, &mut send), None),
    };
    loop {
        let next = monoio::select! {
            next = source.next() => next,
            why = &mut stop => return (stopped(why, &mut send), None),
        };
        let Some(event) = next else {
            let missing = failure(
                FailureCode::MissingTerminal,
                FailureSide::Node,
                "the adapter ended the run without a terminal event",
            );
            let outcome = Outcome::Failed(missing.message.clone());
            send(RuntimeEvent::Error(missing));
            return (outcome, None);
        };
        let outcome = match &event {
            RuntimeEvent::Complete { .. } => Outcome::Completed,
            RuntimeEvent::Error(failure) => Outcome::Failed(failure.message.clone()),
            _ => {
                send(event);
                continue;
            }
        };
        send(event);
        let rest = (outcome == Outcome::Completed).then_some(source);
        return (outcome, rest);
    }
}

/// Emits the terminal for an outside stop.
fn stopped(why: Stop, send: &mut impl FnMut(RuntimeEvent)) -> Outcome {
    match why {
        Stop::Cancelled => {
            send(RuntimeEvent::Cancelled);
            Outcome::Cancelled
        }
        Stop::HardTimeout(ms) => {
            let error = failure(
                FailureCode::HardTimeout,
                FailureSide::Provider,
                format!("the run exceeded its hard timeout of {ms} ms"),
            );
            let outcome = Outcome::Failed(error.message.clone());
            send(RuntimeEvent::Error(error));
            outcome
        }
    }
}

/// Whether a wire event ends its run.
pub fn is_terminal(event: &RunEvent) -> bool {
    matches!(
        event.kind(),
        RunEventKind::Complete | RunEventKind::Error | RunEventKind::Cancelled
    )
}
