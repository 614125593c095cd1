//! The stall watchdog on the run relay (F21–F23) with fake sources, a fake
//! probe and short timers. Nothing asserts a duration: timers only order
//! events (a stall of a few ms against sources that hang forever, progress
//! far inside a long timeout).

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::{self, Future};
use std::rc::Rc;
use std::time::Duration;

use proto::v1::{
    ExecutionFailure, FailureCode, FailureSide, LivenessClassification, ProviderHealth, RunEvent,
    RunEventKind, Usage,
};

use super::*;
use crate::adapter::RuntimeEvent;
use crate::stall::{HealthCheck, Watchdog};

/// Yields each event after its delay, then hangs (or ends with `None`);
/// its close confirms or never does.
struct Timed {
    events: VecDeque<(u64, RuntimeEvent)>,
    hang: bool,
    confirm_close: bool,
}

impl EventSource for Timed {
    async fn next(&mut self) -> Option<RuntimeEvent> {
        match self.events.pop_front() {
            Some((ms, event)) => {
                if ms > 0 {
                    monoio::time::sleep(Duration::from_millis(ms)).await;
                }
                Some(event)
            }
            None if self.hang => future::pending().await,
            None => None,
        }
    }

    async fn close(self) {
        if !self.confirm_close {
            future::pending::<()>().await;
        }
    }
}

fn timed(events: Vec<(u64, RuntimeEvent)>) -> Timed {
    Timed {
        events: events.into(),
        hang: true,
        confirm_close: true,
    }
}

/// A probe answering `health` after `delay_ms` (`None`: never), and the
/// connection's sequence.
#[derive(Clone)]
struct FakeHealth {
    health: ProviderHealth,
    delay_ms: Option<u64>,
    seq: Rc<Cell<u64>>,
}

impl HealthCheck for FakeHealth {
    async fn probe(&self) -> ProviderHealth {
        match self.delay_ms {
            Some(0) => {}
            Some(ms) => monoio::time::sleep(Duration::from_millis(ms)).await,
            None => future::pending().await,
        }
        self.health
    }

    fn next_seq(&self) -> Option<u64> {
        self.seq.set(self.seq.get() + 1);
        Some(self.seq.get())
    }
}

fn watchdog(timeout_ms: u64, health: ProviderHealth) -> Watchdog<FakeHealth> {
    Watchdog {
        timeout_ms,
        grace: Duration::from_millis(20),
        probe_timeout: Duration::from_millis(20),
        health: FakeHealth {
            health,
            delay_ms: Some(0),
            seq: Rc::new(Cell::new(0)),
        },
    }
}

fn block_on<F: Future>(future: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .expect("runtime")
        .block_on(future)
}

fn run_watched(
    source: Timed,
    stop: impl Future<Output = Stop>,
    watchdog: Watchdog<FakeHealth>,
) -> (Outcome, Vec<RunEvent>) {
    let mut out = Vec::new();
    let (outcome, _) = block_on(relay_watched(async { source }, stop, Some(watchdog), |e| {
        out.push(e)
    }));
    (outcome, out)
}

fn kinds(events: &[RunEvent]) -> Vec<RunEventKind> {
    events.iter().map(RunEvent::kind).collect()
}

fn terminal_failure(events: &[RunEvent]) -> &ExecutionFailure {
    assert_eq!(
        events.iter().filter(|e| is_terminal(e)).count(),
        1,
        "exactly one terminal: {events:?}"
    );
    let last = events.last().expect("a terminal");
    assert!(is_terminal(last), "the terminal is last");
    last.failure.as_ref().expect("an error terminal")
}

fn start_delta() -> Vec<(u64, RuntimeEvent)> {
    vec![
        (0, RuntimeEvent::Start),
        (0, RuntimeEvent::Delta("a".into())),
    ]
}

#[test]
fn a_silent_stream_gets_one_typed_stall_terminal() {
    let (outcome, events) = run_watched(
        timed(start_delta()),
        future::pending(),
        watchdog(10, ProviderHealth::Available),
    );
    assert!(matches!(outcome, Outcome::Failed(_)));
    assert_eq!(
        kinds(&events),
        [
            RunEventKind::Start,
            RunEventKind::Delta,
            RunEventKind::Error
        ]
    );
    let f = terminal_failure(&events);
    assert_eq!(f.code(), FailureCode::ResponseStalled);
    assert_eq!(f.side(), FailureSide::Provider);
    assert_eq!(f.stall_timeout_ms, 10);
    assert_eq!(f.provider_health(), ProviderHealth::Available);
    assert_eq!(
        f.liveness_classification(),
        LivenessClassification::RequestStalled
    );
    assert_eq!(f.health_observation_seq, Some(1));
    assert!(f.retryable, "close confirmed inside the grace");
    assert_eq!(events[2].seq, 3);
}

#[test]
fn progress_and_non_terminal_usage_reset_the_watchdog() {
    // Twenty events 2 ms apart (40 ms in all) under a 200 ms timeout: no
    // gap ever reaches it, whatever the total.
    let mut events = vec![(0, RuntimeEvent::Start)];
    for i in 0..20 {
        let event = if i % 2 == 0 {
            RuntimeEvent::Delta("t".into())
        } else {
            RuntimeEvent::Usage(Usage::default())
        };
        events.push((2, event));
    }
    events.push((
        2,
        RuntimeEvent::Complete {
            finish_reason: "stop".into(),
            usage: None,
        },
    ));
    let (outcome, out) = run_watched(
        timed(events),
        future::pending(),
        watchdog(200, ProviderHealth::Available),
    );
    assert_eq!(outcome, Outcome::Completed);
    assert_eq!(out.len(), 22);
    assert_eq!(kinds(&out).last(), Some(&RunEventKind::Complete));
}

#[test]
fn a_terminal_event_wins_and_is_the_only_terminal() {
    let error = crate::adapter::failure(
        FailureCode::ProviderHttpStatus,
        FailureSide::Provider,
        "HTTP 503",
    );
    let (outcome, out) = run_watched(
        timed(vec![
            (0, RuntimeEvent::Start),
            (0, RuntimeEvent::Error(error)),
        ]),
        future::pending(),
        watchdog(200, ProviderHealth::Available),
    );
    assert_eq!(outcome, Outcome::Failed("HTTP 503".into()));
    assert_eq!(
        terminal_failure(&out).code(),
        FailureCode::ProviderHttpStatus
    );
}

#[test]
fn an_unconfirmed_close_is_not_retryable() {
    let mut source = timed(start_delta());
    source.confirm_close = false;
    let (_, events) = run_watched(
        source,
        future::pending(),
        watchdog(5, ProviderHealth::Available),
    );
    let f = terminal_failure(&events);
    assert_eq!(f.code(), FailureCode::ResponseStalled);
    assert!(!f.retryable);
    assert_eq!(f.provider_health(), ProviderHealth::Available);
}

#[test]
fn probe_results_map_to_fail_closed_evidence() {
    let cases = [
        (
            ProviderHealth::Unavailable,
            Some(0),
            ProviderHealth::Unavailable,
            LivenessClassification::ProviderUnhealthy,
        ),
        (
            ProviderHealth::Unknown,
            Some(0),
            ProviderHealth::Unknown,
            LivenessClassification::HealthUnknown,
        ),
        // The probe never answers: its bound ends it, unknown.
        (
            ProviderHealth::Available,
            None,
            ProviderHealth::Unknown,
            LivenessClassification::HealthUnknown,
        ),
    ];
    for (probed, delay_ms, health, liveness) in cases {
        let mut w = watchdog(5, probed);
        w.health.delay_ms = delay_ms;
        let (_, events) = run_watched(timed(start_delta()), future::pending(), w);
        let f = terminal_failure(&events);
        assert_eq!(f.code(), FailureCode::ResponseStalled);
        assert_eq!(
            (f.provider_health(), f.liveness_classification()),
            (health, liveness)
        );
        assert!(f.retryable, "the fence is independent of the probe");
    }
}

#[test]
fn output_after_the_claim_is_fenced() {
    // The source would yield a delta 30 ms in; the stall (5 ms) claims
    // first and the probe takes 60 ms: the delta is never sent.
    let mut source = timed(vec![
        (0, RuntimeEvent::Start),
        (30, RuntimeEvent::Delta("late".into())),
    ]);
    source.hang = false;
    let mut w = watchdog(5, ProviderHealth::Available);
    w.health.delay_ms = Some(60);
    w.probe_timeout = Duration::from_secs(5);
    let (_, events) = run_watched(source, future::pending(), w);
    assert_eq!(kinds(&events), [RunEventKind::Start, RunEventKind::Error]);
    assert_eq!(
        terminal_failure(&events).code(),
        FailureCode::ResponseStalled
    );
}

#[test]
fn hard_deadline_and_cancel_beat_a_simultaneous_stall() {
    // A zero timeout is expired at once: both are ready on the same poll.
    for (stop, kind) in [
        (Stop::HardTimeout(7), RunEventKind::Error),
        (Stop::Cancelled, RunEventKind::Cancelled),
    ] {
        let (_, events) = run_watched(
            timed(start_delta()),
            future::ready(stop),
            watchdog(0, ProviderHealth::Available),
        );
        assert_eq!(kinds(&events), [kind]);
        if let Some(f) = &events[0].failure {
            assert_eq!(f.code(), FailureCode::HardTimeout);
        }
    }
}

#[test]
fn a_cancel_after_the_claim_adds_no_terminal() {
    let stop = async {
        monoio::time::sleep(Duration::from_millis(15)).await;
        Stop::Cancelled
    };
    let mut w = watchdog(5, ProviderHealth::Available);
    w.health.delay_ms = Some(40);
    w.probe_timeout = Duration::from_secs(5);
    let (outcome, events) = run_watched(timed(start_delta()), stop, w);
    assert!(matches!(outcome, Outcome::Failed(_)));
    assert_eq!(
        terminal_failure(&events).code(),
        FailureCode::ResponseStalled
    );
}

#[test]
fn a_provider_that_never_answers_stalls_too() {
    let mut out = Vec::new();
    let (outcome, rest) = block_on(relay_watched(
        future::pending::<Timed>(),
        future::pending(),
        Some(watchdog(5, ProviderHealth::Available)),
        |e| out.push(e),
    ));
    assert!(rest.is_none());
    assert!(matches!(outcome, Outcome::Failed(_)));
    let f = terminal_failure(&out);
    assert_eq!(f.code(), FailureCode::ResponseStalled);
    assert_eq!(out[0].seq, 1);
}

#[test]
fn concurrent_stalls_share_one_connection_sequence() {
    let w = watchdog(5, ProviderHealth::Available);
    let seqs = block_on(async {
        let runs = (0..8).map(|_| {
            let w = w.clone();
            monoio::spawn(async move {
                let mut out = Vec::new();
                relay_watched(
                    async { timed(start_delta()) },
                    future::pending(),
                    Some(w),
                    |e| out.push(e),
                )
                .await;
                terminal_failure(&out)
                    .health_observation_seq
                    .expect("bound")
            })
        });
        let mut seqs = Vec::new();
        for run in runs.collect::<Vec<_>>() {
            seqs.push(run.await);
        }
        seqs
    });
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=8).collect::<Vec<u64>>());
}

#[test]
fn the_unwatched_relay_never_stalls() {
    let mut out = Vec::new();
    let (outcome, _) = block_on(relay(
        async { timed(start_delta()) },
        async {
            monoio::time::sleep(Duration::from_millis(30)).await;
            Stop::Cancelled
        },
        |e| out.push(e),
    ));
    assert_eq!(outcome, Outcome::Cancelled);
}
