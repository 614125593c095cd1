//! A manual-clock harness for watchdog tests: one core's wheel on a
//! [`SharedManualClock`], stepped by the test. No test sleeps: time moves
//! only when [`Harness::advance`] says, and the wheel fires only when it
//! polls.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use framing::timer::{ClockSource, SharedManualClock};
use proto::v1::ProviderHealth;

use super::{CoreTimers, HealthCheck, StallKind, Watchdog};

/// One core's wheel on a manual clock.
pub(crate) struct Harness {
    pub(crate) clock: SharedManualClock,
    pub(crate) timers: Rc<CoreTimers>,
}

impl Harness {
    /// A wheel at time 0.
    pub(crate) fn new() -> Self {
        let clock = SharedManualClock::new(0);
        let timers = CoreTimers::new(&ClockSource::Manual(clock.clone()), 1);
        Self { clock, timers }
    }

    /// Now on the manual clock.
    pub(crate) fn now(&self) -> u64 {
        self.timers.now()
    }

    /// Moves time `ms` forward one millisecond at a time, firing what is
    /// due and letting every woken task run after each step.
    pub(crate) async fn advance(&self, ms: u64) {
        for _ in 0..ms {
            self.clock.advance(1);
            self.timers.poll();
            settle().await;
        }
    }

    /// Moves time `ms` forward in one jump, then fires what is due.
    pub(crate) async fn jump(&self, ms: u64) {
        self.clock.advance(ms);
        self.timers.poll();
        settle().await;
    }

    /// A watchdog of `timeout_ms` on this wheel with `health`, a 1000 ms
    /// grace and a 1000 ms probe bound.
    pub(crate) fn watchdog<H>(&self, timeout_ms: u64, health: H) -> Watchdog<H> {
        Watchdog {
            timers: Rc::clone(&self.timers),
            kind: StallKind::Run,
            timeout_ms,
            grace: Duration::from_millis(1000),
            probe_timeout: Duration::from_millis(1000),
            health,
        }
    }
}

/// Lets every task that is ready run (a bounded number of yields).
pub(crate) async fn settle() {
    for _ in 0..32 {
        yield_to_others().await;
    }
}

/// Goes to the back of the run queue. (A task that wakes itself while
/// polled is put at the *front* by monoio, so the wake comes from a task
/// spawned behind the others.)
async fn yield_to_others() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        let waker = cx.waker().clone();
        monoio::spawn(async move { waker.wake() });
        Poll::Pending
    })
    .await;
}

/// Runs `future` on a fresh monoio runtime.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// A probe answering `health` `after_ms` after it is asked (on the wheel;
/// `None`: never), and the connection's shared sequence.
#[derive(Clone)]
pub(crate) struct FakeHealth {
    pub(crate) timers: Rc<CoreTimers>,
    pub(crate) health: ProviderHealth,
    pub(crate) after_ms: Option<u64>,
    pub(crate) seq: Rc<Cell<u64>>,
    /// Probes started.
    pub(crate) probes: Rc<Cell<u32>>,
}

impl FakeHealth {
    /// Answers `health` at once.
    pub(crate) fn new(harness: &Harness, health: ProviderHealth) -> Self {
        Self {
            timers: Rc::clone(&harness.timers),
            health,
            after_ms: Some(0),
            seq: Rc::new(Cell::new(0)),
            probes: Rc::new(Cell::new(0)),
        }
    }
}

impl HealthCheck for FakeHealth {
    async fn probe(&self) -> ProviderHealth {
        self.probes.set(self.probes.get() + 1);
        match self.after_ms {
            Some(0) => {}
            Some(ms) => {
                let at = self.timers.now() + ms;
                self.timers.sleep_until(at).await;
            }
            None => std::future::pending().await,
        }
        self.health
    }

    fn next_seq(&self) -> Option<u64> {
        self.seq.set(self.seq.get() + 1);
        Some(self.seq.get())
    }
}
