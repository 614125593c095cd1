//! One run's event relay: adapter events in, numbered `RunEvent`s out,
//! exactly one terminal, whatever ends the run first.

use std::future::{Future, pending};
use std::pin::{Pin, pin};

use proto::v1::{FailureCode, FailureSide, RunEvent, RunEventKind};

use crate::adapter::{EventStream, RuntimeEvent, failure};
use crate::stall::{Activity, HealthCheck, NoHealth, Watchdog, evidence};
use crate::tunnel::Credit;

/// A source of adapter events ([`EventStream`] in production, fakes in
/// tests).
#[allow(async_fn_in_trait)]
pub trait EventSource {
    /// The next event; `None` when the source has ended.
    async fn next(&mut self) -> Option<RuntimeEvent>;

    /// Closes the source after a stall claim (F21's close-grace fence):
    /// completes once the provider's return is confirmed. The relay awaits
    /// it for at most the close grace; a close that has not returned by
    /// then leaves the stall not `retryable`. The default drops the source
    /// (for an [`EventStream`], its provider response, which closes the
    /// connection) and returns.
    async fn close(self)
    where
        Self: Sized,
    {
        drop(self);
    }
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

/// Relays one run without a stall watchdog (an unbound path); see
/// [`relay_watched`].
pub async fn relay<S, O, T>(open: O, stop: T, emit: impl FnMut(RunEvent)) -> (Outcome, Option<S>)
where
    S: EventSource,
    O: Future<Output = S>,
    T: Future<Output = Stop>,
{
    relay_watched(Box::pin(open), || stop, None::<Watchdog<NoHealth>>, emit).await
}

/// Relays one run: waits for `open` (the adapter's `execute`), then passes
/// each event to `emit` numbered from 1, until the terminal. The future
/// `stop` makes ends the run early at any point, including while `open` is
/// pending. (It is made in place: a future passed in would be laid out
/// twice, as the captured value and again where it is pinned.)
///
/// Exactly one terminal reaches `emit`, and it is the last thing that does:
/// the adapter's, or `cancelled` / a `HARD_TIMEOUT` error on `stop`, or a
/// synthesized `MISSING_TERMINAL` error when the source ends without one
/// (F11), or — with a `watchdog` — a `RESPONSE_STALLED` error when no
/// adapter event came for its timeout (F21, armed from the start,
/// `open` included, on the watchdog's core wheel). Dropping the source on
/// stop drops its provider response, which closes the provider connection.
///
/// Ties: polled in the order stop, source, watchdog, so a stop (hard
/// deadline, cancel, link close) ready together with the stall wins, and
/// an event already there is progress. Once the stall is claimed, `stop`
/// is no longer looked at and the source is closed: nothing else is sent
/// (see [`crate::stall`] for the evidence gathered before the terminal).
///
/// `open` comes boxed: a stall while it is pending drops it inside the
/// fence, and it is freed as soon as it has returned (a run may stream for
/// minutes after).
///
/// Returns the outcome and, after a `complete`, the source, so the caller
/// can read the rest of the provider body (keep-alive) after it released
/// the run's capacity.
// Not an `async fn` on purpose: an async fn moves each argument into a
// local of its own, so the watchdog and the stop would be laid out twice in
// the relay every (quiet) run holds for its whole life.
#[allow(clippy::manual_async_fn)]
pub fn relay_watched<S, O, T, H>(
    open: Pin<Box<O>>,
    stop: impl FnOnce() -> T,
    watchdog: Option<Watchdog<H>>,
    emit: impl FnMut(RunEvent),
) -> impl Future<Output = (Outcome, Option<S>)>
where
    S: EventSource,
    O: Future<Output = S>,
    T: Future<Output = Stop>,
    H: HealthCheck,
{
    relay_credited(open, stop, watchdog, None, emit)
}

/// [`relay_watched`] under flow control: with `credit`, the source's next
/// event is read only while the run has credit left (`RunRequest
/// .initial_window`), so a client that does not take its events pauses
/// this run's provider read and nothing else. While it waits the watchdog
/// is held, as a tunnel's is (a backpressured run never stalls). Each
/// event emitted spends its cost (`proto::run_event_credit`); a terminal is
/// always emitted.
#[allow(clippy::manual_async_fn)]
pub fn relay_credited<S, O, T, H>(
    open: Pin<Box<O>>,
    stop: impl FnOnce() -> T,
    watchdog: Option<Watchdog<H>>,
    credit: Option<Credit>,
    mut emit: impl FnMut(RunEvent),
) -> impl Future<Output = (Outcome, Option<S>)>
where
    S: EventSource,
    O: Future<Output = S>,
    T: Future<Output = Stop>,
    H: HealthCheck,
{
    async move {
        let mut stop = pin!(stop());
        let mut seq = 0u64;
        let mut send = |event: RuntimeEvent| {
            seq += 1;
            let event = event.into_run_event(seq);
            if let Some(credit) = &credit {
                credit.overdraw(proto::run_event_credit(&event));
            }
            emit(event);
        };
        let activity = watchdog.as_ref().map(Watchdog::start);
        let stalled = async {
            match &activity {
                Some(activity) => activity.stalled().await,
                None => pending().await,
            }
        };
        let mut stalled = pin!(stalled);
        let watch = Watch {
            watchdog: &watchdog,
            activity: &activity,
            credit: credit.as_ref(),
        };
        // Two phases, two futures: the source is laid out once, in the
        // second, and the first's (the call's select) shares its space.
        let source = match opened(open, stop.as_mut(), stalled.as_mut(), watch, &mut send).await {
            Ok(source) => source,
            Err(outcome) => return (outcome, None),
        };
        streamed(source, stop, stalled, watch, &mut send).await
    }
}

/// What both phases of a relay look at: the watchdog and its activity,
/// and the run's credit.
struct Watch<'a, H> {
    watchdog: &'a Option<Watchdog<H>>,
    activity: &'a Option<Activity>,
    credit: Option<&'a Credit>,
}

impl<H> Clone for Watch<'_, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H> Copy for Watch<'_, H> {}

/// The relay's first phase: waits for the call to return its source; an
/// outside stop or a stall first ends the run (the terminal is sent). The
/// call's (finished, ~5 KB) future is freed on return, not kept with a run
/// that may stream for minutes. (Both phases are plain fns over async
/// blocks, so their arguments are not laid out twice.)
#[allow(clippy::manual_async_fn)]
fn opened<'a, S, O, H, T, U, F>(
    mut open: Pin<Box<O>>,
    stop: Pin<&'a mut T>,
    stalled: Pin<&'a mut U>,
    watch: Watch<'a, H>,
    send: &'a mut F,
) -> impl Future<Output = Result<S, Outcome>> + 'a
where
    O: Future<Output = S> + 'a,
    H: HealthCheck,
    T: Future<Output = Stop>,
    U: Future<Output = ()>,
    F: FnMut(RuntimeEvent),
{
    async move {
        monoio::select! {
            biased;
            why = stop => Err(stopped(why, open, send)),
            source = &mut open => Ok(source),
            () = stalled => {
                // Boxed: the evidence (a health probe of the provider) is rare
                // and large, and an idle run would carry its layout.
                let failure =
                    Box::pin(claim(watch.watchdog, watch.activity, async move { drop(open) })).await;
                Err(stall(failure, send))
            },
        }
    }
}

/// The relay's second phase: the source's events until its terminal, an
/// outside stop or a stall.
#[allow(clippy::manual_async_fn)]
fn streamed<'a, S, H, T, U, F>(
    mut source: S,
    mut stop: Pin<&'a mut T>,
    mut stalled: Pin<&'a mut U>,
    watch: Watch<'a, H>,
    send: &'a mut F,
) -> impl Future<Output = (Outcome, Option<S>)> + 'a
where
    S: EventSource + 'a,
    H: HealthCheck,
    T: Future<Output = Stop>,
    U: Future<Output = ()>,
    F: FnMut(RuntimeEvent),
{
    async move {
        loop {
            let next = monoio::select! {
                biased;
                why = &mut stop => return (stopped(why, source, send), None),
                next = next_with_credit(&mut source, watch) => Ok(next),
                () = &mut stalled => Err(()),
            };
            let Ok(next) = next else {
                let failure = Box::pin(claim(watch.watchdog, watch.activity, source.close())).await;
                return (stall(failure, send), None);
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
            // A terminal type wins over its payload: a `complete` carrying
            // usage ends the run; only a non-terminal event is progress.
            let outcome = match &event {
                RuntimeEvent::Complete { .. } => Outcome::Completed,
                RuntimeEvent::Error(failure) => Outcome::Failed(failure.message.clone()),
                _ => {
                    if let Some(activity) = watch.activity {
                        activity.touch();
                    }
                    send(event);
                    continue;
                }
            };
            send(event);
            let rest = (outcome == Outcome::Completed).then_some(source);
            return (outcome, rest);
        }
    }
}

/// The source's next event, read once the run has credit (at once while
/// its client keeps up); the watchdog is held while the run waits.
async fn next_with_credit<S: EventSource, H>(
    source: &mut S,
    watch: Watch<'_, H>,
) -> Option<RuntimeEvent> {
    if let Some(credit) = watch.credit
        && credit.available() == 0
    {
        if let Some(activity) = watch.activity {
            activity.hold(true);
        }
        credit.ready_at(credit.resume_point()).await;
        if let Some(activity) = watch.activity {
            activity.hold(false);
        }
    }
    source.next().await
}

/// The stall claim: the fence (`close`) and the probe, joined.
async fn claim<H: HealthCheck>(
    watchdog: &Option<Watchdog<H>>,
    activity: &Option<Activity>,
    close: impl Future<Output = ()>,
) -> proto::v1::ExecutionFailure {
    match (watchdog, activity) {
        (Some(w), Some(a)) => evidence(w, a, close).await,
        _ => unreachable!("no watchdog, no stall"),
    }
}

/// Emits the stall terminal.
fn stall(failure: proto::v1::ExecutionFailure, send: &mut impl FnMut(RuntimeEvent)) -> Outcome {
    let outcome = Outcome::Failed(failure.message.clone());
    send(RuntimeEvent::Error(failure));
    outcome
}

/// Emits the terminal for an outside stop, once `provider` (the call or
/// the source: what holds the provider's connection) is dropped: a cancel
/// is for the provider to stop generating, so its connection closes ahead
/// of the terminal's write to the Edge.
fn stopped(why: Stop, provider: impl Sized, send: &mut impl FnMut(RuntimeEvent)) -> Outcome {
    drop(provider);
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
