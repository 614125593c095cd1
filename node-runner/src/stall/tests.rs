//! The watchdog on the wheel and the joined evidence, on a manual clock.

use std::cell::Cell;
use std::future::pending;
use std::rc::Rc;

use proto::v1::{FailureCode, FailureSide, LivenessClassification, ProviderHealth};

use super::testkit::{FakeHealth, Harness, block_on, settle};
use super::*;

#[test]
fn a_silent_stream_fires_at_its_timeout_and_not_a_millisecond_before() {
    let h = Harness::new();
    let activity = Activity::start(&h.timers, 100);
    block_on(async {
        h.advance(99).await;
        assert!(!activity.has_fired());
        h.advance(1).await;
        assert!(activity.has_fired());
    });
    assert_eq!(activity.silent_ms(h.now()), 100);
}

#[test]
fn progress_moves_the_deadline_to_last_activity_plus_timeout() {
    let h = Harness::new();
    let activity = Activity::start(&h.timers, 100);
    block_on(async {
        h.advance(60).await;
        activity.touch();
        // The entry comes due at 100: re-armed at 160, not fired.
        h.advance(99).await;
        assert!(!activity.has_fired(), "fired at {}", h.now());
        assert_eq!(h.timers.len(), 1, "one entry per stream");
        h.advance(1).await;
        assert!(activity.has_fired());
    });
}

#[test]
fn a_token_costs_no_wheel_operation() {
    let h = Harness::new();
    let activity = Activity::start(&h.timers, 300_000);
    block_on(async {
        // 10 minutes of one token a millisecond: two timeout periods.
        for _ in 0..600 {
            h.jump(1000).await;
            for _ in 0..1000 {
                activity.touch();
            }
        }
    });
    assert!(!activity.has_fired());
    assert_eq!(h.timers.len(), 1);
}

#[test]
fn a_held_stream_never_stalls_and_its_release_restarts_the_timeout() {
    let h = Harness::new();
    let activity = Activity::start(&h.timers, 50);
    block_on(async {
        activity.hold(true);
        h.advance(500).await;
        assert!(!activity.has_fired(), "held by its client");
        activity.hold(false);
        h.advance(49).await;
        assert!(!activity.has_fired());
        h.advance(1).await;
        assert!(activity.has_fired());
    });
}

#[test]
fn an_ended_stream_leaves_nothing_on_the_wheel() {
    let h = Harness::new();
    let activity = Activity::start(&h.timers, 100);
    assert_eq!(h.timers.len(), 1);
    drop(activity);
    assert!(h.timers.is_empty());
}

#[test]
fn the_stalled_future_wakes_its_waiter() {
    let h = Harness::new();
    let activity = Rc::new(Activity::start(&h.timers, 10));
    let woke = Rc::new(Cell::new(false));
    block_on(async {
        let (a, w) = (Rc::clone(&activity), Rc::clone(&woke));
        monoio::spawn(async move {
            a.stalled().await;
            w.set(true);
        });
        h.advance(9).await;
        assert!(!woke.get());
        h.advance(1).await;
        assert!(woke.get());
    });
}

/// Runs `evidence` for a stall claimed at t=100 with a close confirmed at
/// `close_at_ms` after the claim (`None`: never); returns the failure and
/// the time it was finalized.
fn evidence_with(
    h: &Harness,
    watchdog: Watchdog<FakeHealth>,
    close_at_ms: Option<u64>,
) -> (ExecutionFailure, u64) {
    let activity = Rc::new(Activity::start(&h.timers, 100));
    let out = Rc::new(std::cell::RefCell::new(None));
    block_on(async {
        h.advance(100).await;
        assert!(activity.has_fired());
        let (a, o, timers) = (Rc::clone(&activity), Rc::clone(&out), Rc::clone(&h.timers));
        monoio::spawn(async move {
            let close = async {
                match close_at_ms {
                    Some(ms) => {
                        let at = timers.now() + ms;
                        timers.sleep_until(at).await;
                    }
                    None => pending().await,
                }
            };
            let failure = evidence(&watchdog, &a, close).await;
            *o.borrow_mut() = Some((failure, timers.now()));
        });
        settle().await;
        for _ in 0..3000 {
            if out.borrow().is_some() {
                break;
            }
            h.advance(1).await;
        }
    });
    out.take()
        .expect("the evidence is finalized within the bounds")
}

#[test]
fn a_return_confirmed_inside_the_close_grace_is_retryable() {
    let h = Harness::new();
    let w = h.watchdog(100, FakeHealth::new(&h, ProviderHealth::Available));
    let (f, _) = evidence_with(&h, w, Some(999));
    assert!(f.retryable);
    assert_eq!(f.code(), FailureCode::ResponseStalled);
    assert_eq!(f.side(), FailureSide::Provider);
    assert_eq!(f.stall_timeout_ms, 100);
    assert_eq!(f.health_observation_seq, Some(1));
}

#[test]
fn a_return_after_the_close_grace_is_not_retryable() {
    let h = Harness::new();
    let w = h.watchdog(100, FakeHealth::new(&h, ProviderHealth::Available));
    let (f, at) = evidence_with(&h, w, Some(1001));
    assert!(!f.retryable);
    assert_eq!(at, 100 + 1000, "finalized when the grace ran out");
    let h = Harness::new();
    let w = h.watchdog(100, FakeHealth::new(&h, ProviderHealth::Available));
    let (f, _) = evidence_with(&h, w, None);
    assert!(!f.retryable, "a return never seen is never confirmed");
    assert_eq!(f.provider_health(), ProviderHealth::Available);
}

#[test]
fn the_fence_and_the_probe_run_joined_not_one_after_the_other() {
    let h = Harness::new();
    let mut health = FakeHealth::new(&h, ProviderHealth::Unavailable);
    health.after_ms = Some(800);
    let w = h.watchdog(100, health);
    let (f, at) = evidence_with(&h, w, Some(900));
    assert_eq!(at, 100 + 900, "done when the later of the two is");
    assert!(f.retryable);
    assert_eq!(
        (f.provider_health(), f.liveness_classification()),
        (
            ProviderHealth::Unavailable,
            LivenessClassification::ProviderUnhealthy
        )
    );
}

#[test]
fn a_probe_past_its_bound_is_unknown_and_the_fence_still_decides_retry() {
    let h = Harness::new();
    let mut health = FakeHealth::new(&h, ProviderHealth::Available);
    health.after_ms = None;
    let mut w = h.watchdog(100, health);
    w.probe_timeout = std::time::Duration::from_millis(300);
    let (f, at) = evidence_with(&h, w, Some(10));
    assert_eq!(at, 100 + 300, "the probe bound ends the join");
    assert_eq!(
        (f.provider_health(), f.liveness_classification()),
        (
            ProviderHealth::Unknown,
            LivenessClassification::HealthUnknown
        )
    );
    assert!(f.retryable);
}

#[test]
fn evidence_pairs_are_fail_closed() {
    use LivenessClassification as L;
    use ProviderHealth as H;
    assert_eq!(classify(H::Available), (H::Available, L::RequestStalled));
    assert_eq!(
        classify(H::Unavailable),
        (H::Unavailable, L::ProviderUnhealthy)
    );
    assert_eq!(classify(H::Unknown), (H::Unknown, L::HealthUnknown));
    assert_eq!(classify(H::Unspecified), (H::Unknown, L::HealthUnknown));
}

#[test]
fn an_unbound_observation_omits_the_sequence() {
    let o = StallObservation::new(
        StallKind::Tunnel,
        300,
        300,
        ProviderHealth::Unavailable,
        false,
        None,
    );
    let f = o.failure();
    assert_eq!(f.health_observation_seq, None);
    assert!(!f.retryable);
    assert_eq!(
        f.liveness_classification(),
        LivenessClassification::ProviderUnhealthy
    );
    assert_eq!(o.kind.as_str(), "tunnel");
}
