//! The stall watchdog on the run relay (F20–F23), on a manual clock: the
//! sources, the probe, the close and the outside stops all wait on the
//! core's wheel, and the test moves time. No test sleeps.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{self, Future};
use std::rc::Rc;
use std::sync::Arc;

use proto::v1::{
    ExecutionFailure, FailureCode, FailureSide, LivenessClassification, NodeConfigPayload,
    ProviderHealth, RunEvent, RunEventKind, Usage,
};

use super::*;
use crate::adapter::RuntimeEvent;
use crate::stall::testkit::{FakeHealth, Harness, block_on, settle};
use crate::stall::{HealthCheck, Watchdog};

/// Yields each event at its time on the wheel (ms), then hangs (or ends
/// with `None`); its close returns `close_after_ms` after it is asked
/// (`None`: never).
pub(super) struct Scripted {
    timers: Rc<CoreTimers>,
    events: VecDeque<(u64, RuntimeEvent)>,
    hang: bool,
    close_after_ms: Option<u64>,
}

impl EventSource for Scripted {
    async fn next(&mut self) -> Option<RuntimeEvent> {
        match self.events.pop_front() {
            Some((at, event)) => {
                self.timers.sleep_until(at).await;
                Some(event)
            }
            None if self.hang => future::pending().await,
            None => None,
        }
    }

    async fn close(self) {
        match self.close_after_ms {
            Some(ms) => {
                let at = self.timers.now() + ms;
                self.timers.sleep_until(at).await;
            }
            None => future::pending().await,
        }
    }
}

pub(super) fn scripted(h: &Harness, events: Vec<(u64, RuntimeEvent)>) -> Scripted {
    Scripted {
        timers: Rc::clone(&h.timers),
        events: events.into(),
        hang: true,
        close_after_ms: Some(0),
    }
}

pub(super) fn start_delta() -> Vec<(u64, RuntimeEvent)> {
    vec![
        (0, RuntimeEvent::Start),
        (0, RuntimeEvent::Delta("a".into())),
    ]
}

/// A run in flight: its events as emitted, and its outcome once ended.
struct Watched {
    events: Rc<RefCell<Vec<(u64, RunEvent)>>>,
    outcome: Rc<RefCell<Option<Outcome>>>,
}

impl Watched {
    fn ended(&self) -> bool {
        self.outcome.borrow().is_some()
    }

    fn kinds(&self) -> Vec<RunEventKind> {
        self.events.borrow().iter().map(|(_, e)| e.kind()).collect()
    }

    /// The single terminal's failure and the time it was emitted.
    fn stall(&self) -> (ExecutionFailure, u64) {
        let events = self.events.borrow();
        let terminals: Vec<_> = events.iter().filter(|(_, e)| is_terminal(e)).collect();
        assert_eq!(terminals.len(), 1, "exactly one terminal: {events:?}");
        let (at, last) = events.last().expect("a terminal");
        assert!(is_terminal(last), "the terminal is last");
        let failure = last.failure.clone().expect("an error terminal");
        assert_eq!(failure.code(), FailureCode::ResponseStalled);
        (failure, *at)
    }
}

/// Spawns the watched relay of `source` with `stop` and `watchdog`, and
/// lets it run up to its first wait.
async fn spawn_run<H: HealthCheck + 'static>(
    h: &Harness,
    source: Scripted,
    stop: impl Future<Output = Stop> + 'static,
    watchdog: Option<Watchdog<H>>,
) -> Watched {
    let watched = Watched {
        events: Rc::default(),
        outcome: Rc::default(),
    };
    let (events, outcome, timers) = (
        Rc::clone(&watched.events),
        Rc::clone(&watched.outcome),
        Rc::clone(&h.timers),
    );
    monoio::spawn(async move {
        let (ended, _) = relay_watched(
            Box::pin(async { source }),
            || stop,
            watchdog,
            |e| {
                events.borrow_mut().push((timers.now(), e));
            },
        )
        .await;
        *outcome.borrow_mut() = Some(ended);
    });
    settle().await;
    watched
}

/// Runs `source` under a `timeout_ms` watchdog with `health` until it ends
/// (at most 5 s of manual time).
fn stalled_run(
    timeout_ms: u64,
    source: impl FnOnce(&Harness) -> Scripted,
    health: impl FnOnce(&Harness) -> FakeHealth,
) -> Watched {
    let h = Harness::new();
    let w = h.watchdog(timeout_ms, health(&h));
    block_on(async {
        let run = spawn_run(&h, source(&h), future::pending(), Some(w)).await;
        for _ in 0..5000 {
            if run.ended() {
                break;
            }
            h.advance(1).await;
        }
        run
    })
}

fn available(h: &Harness) -> FakeHealth {
    FakeHealth::new(h, ProviderHealth::Available)
}

#[test]
fn a_silent_run_gets_one_typed_stall_terminal_at_its_threshold() {
    let h = Harness::new();
    let w = h.watchdog(100, available(&h));
    block_on(async {
        let run = spawn_run(&h, scripted(&h, start_delta()), future::pending(), Some(w)).await;
        h.advance(99).await;
        assert_eq!(run.kinds(), [RunEventKind::Start, RunEventKind::Delta]);
        h.advance(1).await;
        assert!(run.ended(), "stalled at exactly the threshold");
        let (f, at) = run.stall();
        assert_eq!(at, 100);
        assert_eq!(f.side(), FailureSide::Provider);
        assert_eq!(f.stall_timeout_ms, 100);
        assert_eq!(f.provider_health(), ProviderHealth::Available);
        assert_eq!(
            f.liveness_classification(),
            LivenessClassification::RequestStalled
        );
        assert_eq!(f.health_observation_seq, Some(1));
        assert!(f.retryable, "close confirmed inside the grace");
        assert_eq!(run.events.borrow()[2].1.seq, 3);
        assert!(matches!(*run.outcome.borrow(), Some(Outcome::Failed(_))));
    });
}

/// Twenty events 60 ms apart under a 100 ms timeout, then `complete`.
fn steady(h: &Harness, event: impl Fn(usize) -> RuntimeEvent) -> Scripted {
    let mut events = vec![(0, RuntimeEvent::Start)];
    for i in 0..20 {
        events.push((60 * (i as u64 + 1), event(i)));
    }
    events.push((
        60 * 21,
        RuntimeEvent::Complete {
            finish_reason: "stop".into(),
            usage: None,
        },
    ));
    scripted(h, events)
}

#[test]
fn progress_resets_the_watchdog() {
    let run = stalled_run(
        100,
        |h| steady(h, |_| RuntimeEvent::Delta("t".into())),
        available,
    );
    assert_eq!(*run.outcome.borrow(), Some(Outcome::Completed));
    assert_eq!(run.kinds().len(), 22, "1260 ms in all, no gap of 100");
}

#[test]
fn non_terminal_usage_is_progress() {
    let run = stalled_run(
        100,
        |h| steady(h, |_| RuntimeEvent::Usage(Usage::default())),
        available,
    );
    assert_eq!(*run.outcome.borrow(), Some(Outcome::Completed));
    assert_eq!(run.kinds().last(), Some(&RunEventKind::Complete));
}

#[test]
fn a_terminal_type_wins_over_its_payload_and_is_the_only_terminal() {
    let usage = Usage {
        output_tokens: 3,
        ..Usage::default()
    };
    let run = stalled_run(
        100,
        |h| {
            let mut s = scripted(
                h,
                vec![
                    (0, RuntimeEvent::Start),
                    (
                        50,
                        RuntimeEvent::Complete {
                            finish_reason: "stop".into(),
                            usage: Some(usage),
                        },
                    ),
                ],
            );
            s.hang = false;
            s
        },
        available,
    );
    assert_eq!(*run.outcome.borrow(), Some(Outcome::Completed));
    assert_eq!(run.kinds(), [RunEventKind::Start, RunEventKind::Complete]);
    let error = crate::adapter::failure(
        FailureCode::ProviderHttpStatus,
        FailureSide::Provider,
        "HTTP 503",
    );
    let run = stalled_run(
        100,
        |h| {
            scripted(
                h,
                vec![(0, RuntimeEvent::Start), (10, RuntimeEvent::Error(error))],
            )
        },
        available,
    );
    assert_eq!(
        *run.outcome.borrow(),
        Some(Outcome::Failed("HTTP 503".into()))
    );
    assert_eq!(run.kinds(), [RunEventKind::Start, RunEventKind::Error]);
}

#[test]
fn a_close_confirmed_inside_the_grace_is_retryable_and_one_past_it_is_not() {
    for (close_after_ms, retryable) in [(Some(0), true), (Some(999), true), (Some(1001), false)] {
        let run = stalled_run(
            100,
            |h| {
                let mut s = scripted(h, start_delta());
                s.close_after_ms = close_after_ms;
                s
            },
            available,
        );
        let (f, _) = run.stall();
        assert_eq!(f.retryable, retryable, "close after {close_after_ms:?}");
        assert_eq!(f.provider_health(), ProviderHealth::Available);
    }
}

#[test]
fn a_close_that_never_returns_is_not_retryable_and_ends_at_the_grace() {
    let run = stalled_run(
        100,
        |h| {
            let mut s = scripted(h, start_delta());
            s.close_after_ms = None;
            s
        },
        available,
    );
    let (f, at) = run.stall();
    assert!(!f.retryable);
    assert_eq!(at, 100 + 1000, "the grace bounds the wait");
}

#[test]
fn the_probe_is_joined_with_the_fence_and_maps_to_fail_closed_evidence() {
    use LivenessClassification as L;
    use ProviderHealth as P;
    // Claimed at 100; the close returns 200 ms later.
    // (probed, answers after, evidence, finalized at)
    let cases = [
        (P::Available, Some(0), P::Available, L::RequestStalled, 300),
        (
            P::Unavailable,
            Some(0),
            P::Unavailable,
            L::ProviderUnhealthy,
            300,
        ),
        (P::Unknown, Some(0), P::Unknown, L::HealthUnknown, 300),
        // Both pending at once: done at the later (400), not their sum
        // (100 + 200 + 300 = 600).
        (
            P::Unavailable,
            Some(300),
            P::Unavailable,
            L::ProviderUnhealthy,
            400,
        ),
        // Never answers: its bound (1000 ms) ends it, unknown.
        (P::Available, None, P::Unknown, L::HealthUnknown, 1100),
    ];
    for (probed, after_ms, health, liveness, finalized_at) in cases {
        let run = stalled_run(
            100,
            |h| {
                let mut s = scripted(h, start_delta());
                s.close_after_ms = Some(200);
                s
            },
            |h| {
                let mut fake = FakeHealth::new(h, probed);
                fake.after_ms = after_ms;
                fake
            },
        );
        let (f, at) = run.stall();
        assert_eq!(
            (f.provider_health(), f.liveness_classification()),
            (health, liveness),
            "{probed:?} after {after_ms:?}"
        );
        assert_eq!(at, finalized_at, "{probed:?} after {after_ms:?}");
        assert!(f.retryable, "the fence is independent of the probe");
    }
}

#[test]
fn output_after_the_claim_stays_fenced() {
    // The stall claims at 100; the source would yield at 150 and the probe
    // answers at 400: the late delta is never sent, nor is anything else.
    let run = stalled_run(
        100,
        |h| {
            let mut s = scripted(
                h,
                vec![
                    (0, RuntimeEvent::Start),
                    (150, RuntimeEvent::Delta("late".into())),
                ],
            );
            s.hang = false;
            s
        },
        |h| {
            let mut fake = available(h);
            fake.after_ms = Some(300);
            fake
        },
    );
    assert_eq!(run.kinds(), [RunEventKind::Start, RunEventKind::Error]);
    let (_, at) = run.stall();
    assert_eq!(at, 400);
}

#[test]
fn hard_deadline_and_disconnect_beat_a_simultaneous_stall() {
    for (stop, kind) in [
        (Stop::HardTimeout(100), RunEventKind::Error),
        (Stop::Cancelled, RunEventKind::Cancelled),
    ] {
        let h = Harness::new();
        let health = available(&h);
        let probes = Rc::clone(&health.probes);
        let w = h.watchdog(100, health);
        let timers = Rc::clone(&h.timers);
        // The stop and the watchdog both come due at 100, on one poll.
        let stop_at_100 = async move {
            timers.sleep_until(100).await;
            stop
        };
        block_on(async {
            let run = spawn_run(&h, scripted(&h, start_delta()), stop_at_100, Some(w)).await;
            h.advance(100).await;
            assert!(run.ended());
            assert_eq!(
                run.kinds(),
                [RunEventKind::Start, RunEventKind::Delta, kind]
            );
            if let Some(f) = &run.events.borrow()[2].1.failure {
                assert_eq!(f.code(), FailureCode::HardTimeout);
            }
            assert_eq!(probes.get(), 0, "no stall claimed, no probe");
        });
    }
}

#[test]
fn a_disconnect_after_the_claim_adds_no_terminal() {
    let h = Harness::new();
    let mut health = available(&h);
    health.after_ms = Some(400);
    let w = h.watchdog(100, health);
    let timers = Rc::clone(&h.timers);
    let stop = async move {
        timers.sleep_until(150).await;
        Stop::Cancelled
    };
    block_on(async {
        let run = spawn_run(&h, scripted(&h, start_delta()), stop, Some(w)).await;
        h.advance(600).await;
        let (f, at) = run.stall();
        assert_eq!(at, 500);
        assert_eq!(f.code(), FailureCode::ResponseStalled);
    });
}

#[test]
fn a_provider_that_never_answers_stalls_too() {
    let h = Harness::new();
    let w = h.watchdog(100, available(&h));
    let out = Rc::new(RefCell::new(Vec::new()));
    let ended = Rc::new(Cell::new(false));
    block_on(async {
        let (o, e) = (Rc::clone(&out), Rc::clone(&ended));
        monoio::spawn(async move {
            let (outcome, rest) = relay_watched(
                Box::pin(future::pending::<Scripted>()),
                future::pending,
                Some(w),
                |event| o.borrow_mut().push(event),
            )
            .await;
            assert!(rest.is_none());
            assert!(matches!(outcome, Outcome::Failed(_)));
            e.set(true);
        });
        settle().await;
        h.advance(100).await;
    });
    assert!(ended.get());
    let out = out.borrow();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].seq, 1);
    let f = out[0].failure.as_ref().expect("error");
    assert_eq!(f.code(), FailureCode::ResponseStalled);
    assert!(f.retryable, "the pending call was dropped: returned");
}

#[test]
fn the_unwatched_relay_never_stalls() {
    let h = Harness::new();
    let timers = Rc::clone(&h.timers);
    let stop = async move {
        timers.sleep_until(400_000).await;
        Stop::Cancelled
    };
    block_on(async {
        let run = spawn_run(
            &h,
            scripted(&h, start_delta()),
            stop,
            None::<Watchdog<FakeHealth>>,
        )
        .await;
        h.jump(399_999).await;
        assert!(!run.ended());
        h.jump(1).await;
        assert_eq!(*run.outcome.borrow(), Some(Outcome::Cancelled));
    });
}

/// The connection's real sequence (F23) with an immediate probe.
#[derive(Clone)]
struct ConnectionHealth(Arc<GenShared>);

impl HealthCheck for ConnectionHealth {
    async fn probe(&self) -> ProviderHealth {
        ProviderHealth::Available
    }

    fn next_seq(&self) -> Option<u64> {
        Some(self.0.next_health_seq())
    }
}

fn connection() -> Arc<GenShared> {
    let identity = LinkIdentity {
        node_id: "n".into(),
        generation: 1,
        connected_since_unix_ms: 0,
    };
    GenShared::new(identity, &NodeConfigPayload::default())
}

#[test]
fn stalls_on_one_connection_are_numbered_in_finalization_order_from_one() {
    let shared = connection();
    let h = Harness::new();
    block_on(async {
        // Eight runs stalling at 100, 110, … 170 ms.
        let mut runs = Vec::new();
        for i in 0..8u64 {
            let w = h.watchdog(100 + 10 * i, ConnectionHealth(Arc::clone(&shared)));
            runs.push(spawn_run(&h, scripted(&h, start_delta()), future::pending(), Some(w)).await);
        }
        h.advance(200).await;
        let seqs: Vec<u64> = runs
            .iter()
            .map(|run| run.stall().0.health_observation_seq.expect("bound"))
            .collect();
        assert_eq!(seqs, (1..=8).collect::<Vec<u64>>());
    });
}

#[test]
fn stalls_on_every_core_share_one_unique_connection_sequence() {
    // Four cores (threads), each with 250 streams (half of them labelled
    // tunnels) stalling on the same instant of its own wheel, all
    // finalizing against one connection.
    let shared = connection();
    let cores: Vec<_> = (0..4)
        .map(|_| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let h = Harness::new();
                block_on(async {
                    let mut runs = Vec::new();
                    for i in 0..250 {
                        let mut w = h.watchdog(100, ConnectionHealth(Arc::clone(&shared)));
                        if i % 2 == 1 {
                            w.kind = crate::stall::StallKind::Tunnel;
                        }
                        let source = scripted(&h, start_delta());
                        runs.push(spawn_run(&h, source, future::pending(), Some(w)).await);
                    }
                    h.advance(100).await;
                    runs.iter()
                        .map(|run| run.stall().0.health_observation_seq.expect("bound"))
                        .collect::<Vec<u64>>()
                })
            })
        })
        .collect();
    let mut seqs: Vec<u64> = cores
        .into_iter()
        .flat_map(|core| core.join().expect("core"))
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=1000).collect::<Vec<u64>>());
}
