//! How long a core's ticker sleeps: [`TickerPace`].
//!
//! A ticker polls its core's wheel and refreshes its [`CoarseClock`]. Most
//! of the time it has nothing to do, and on a VM every wake-up of an idle
//! core costs tens of microseconds. So it sleeps until the wheel's next
//! expiry, with two exceptions:
//!
//! - **Dense stamps.** While tokens are stamped with the coarse clock
//!   ([`TickerPace::stamp`]) at [`DENSE_STAMPS`] or more a tick, the ticker
//!   wakes once a tick, and each wake refreshes the clock: a stamp is one
//!   load, at most a tick stale. After a tick with fewer stamps it goes
//!   idle. Idle, each stamp tells its caller to read the clock itself (tens
//!   of nanoseconds, against tens of microseconds for a wake-up here), and
//!   the [`DENSE_STAMPS`]th stamp since the last plan wakes the ticker to
//!   tick again. So a core that stamps a few tokens a request at a low rate
//!   pays no wake-up a tick after each request.
//! - **Earlier deadlines.** A deadline armed before the ticker's planned
//!   wake-up ([`TickerPace::arm`]) wakes it at once to plan again.
//!
//! A manual clock (tests) always ticks: its jumps happen outside the core,
//! and nothing else would wake the ticker to see them.
//!
//! Runtime-free: the driver passes its runtime's sleep to
//! [`TickerPace::wait`].
//!
//! [`CoarseClock`]: super::CoarseClock

use std::cell::Cell;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::{Poll, Waker};
use std::time::Duration;

use super::{TimerKey, TimerWheel};

/// Stamps in one tick from which the ticker ticks (see the module docs):
/// below it, reading the clock at each stamp costs less than waking once a
/// tick.
pub const DENSE_STAMPS: u32 = 32;

/// A core ticker's sleep plan and the bell that cuts it short.
///
/// Not `Sync`: one per core, like the wheel and the clock.
pub struct TickerPace {
    tick_ms: u64,
    always_tick: bool,
    /// Waking once a tick (the coarse clock is at most a tick stale), or
    /// idle until the next expiry (stamps read the clock).
    ticking: Cell<bool>,
    /// Stamps since the last plan (saturating).
    stamps: Cell<u32>,
    /// The clock reading the ticker will next wake at (`u64::MAX`: only
    /// when rung).
    planned: Cell<u64>,
    rung: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl fmt::Debug for TickerPace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TickerPace")
            .field("tick_ms", &self.tick_ms)
            .field("always_tick", &self.always_tick)
            .field("ticking", &self.ticking.get())
            .field("stamps", &self.stamps.get())
            .field("planned", &self.planned.get())
            .field("rung", &self.rung.get())
            .finish_non_exhaustive()
    }
}

impl TickerPace {
    /// A pace whose ticks are `tick_ms` apart (at least 1 ms). With
    /// `always_tick` (a manual clock) the ticker never sleeps longer than a
    /// tick.
    pub fn new(tick_ms: u64, always_tick: bool) -> Self {
        Self {
            tick_ms: tick_ms.max(1),
            always_tick,
            ticking: Cell::new(true),
            stamps: Cell::new(0),
            planned: Cell::new(0),
            rung: Cell::new(false),
            waker: Cell::new(None),
        }
    }

    /// A coarse reading is about to be stored as an activity time. Returns
    /// `true` when the ticker is idle: the caller reads the clock (refreshes
    /// it) instead. A count and a compare while the ticker ticks.
    #[inline]
    pub fn stamp(&self) -> bool {
        let stamps = self.stamps.get().saturating_add(1);
        self.stamps.set(stamps);
        if self.ticking.get() {
            return false;
        }
        if stamps == DENSE_STAMPS {
            self.ring();
        }
        true
    }

    /// Arms, moves or disarms one entry on this ticker's `wheel`
    /// ([`TimerWheel::arm`]), and rings the ticker if the new deadline comes
    /// before its planned wake-up.
    pub fn arm<T>(
        &self,
        wheel: &mut TimerWheel<T>,
        key: Option<TimerKey>,
        deadline_ms: Option<u64>,
        value: impl FnOnce() -> T,
    ) -> Option<TimerKey> {
        let key = wheel.arm(key, deadline_ms, value);
        if let Some(at) = deadline_ms {
            self.armed(at);
        }
        key
    }

    /// A deadline was armed at `at` (ms): wakes the ticker if it planned to
    /// sleep past it.
    #[inline]
    fn armed(&self, at: u64) {
        if at < self.planned.get() {
            self.ring();
        }
    }

    /// Wakes the ticker now, to poll and plan again.
    pub fn ring(&self) {
        self.planned.set(u64::MAX);
        self.rung.set(true);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// After a poll at `now` with the wheel's next expiry `next`: how long
    /// the ticker sleeps, in ms (at least 1), or `None` for until rung.
    pub fn plan(&self, now: u64, next: Option<u64>) -> Option<u64> {
        // Dense stamps since the last plan (or a manual clock) keep it
        // ticking, or start it; fewer send it idle.
        let ticking = self.always_tick || self.stamps.replace(0) >= DENSE_STAMPS;
        self.ticking.set(ticking);
        let until_next = next.map(|at| at.saturating_sub(now));
        let sleep = if ticking {
            Some(until_next.map_or(self.tick_ms, |ms| ms.min(self.tick_ms)))
        } else {
            until_next
        }
        .map(|ms| ms.max(1));
        self.planned
            .set(sleep.map_or(u64::MAX, |ms| now.saturating_add(ms)));
        self.rung.set(false);
        sleep
    }

    /// Sleeps as [`plan`](Self::plan) said, with the runtime's `sleep`, or
    /// until rung, whichever comes first.
    pub async fn wait<S: Future<Output = ()>>(
        &self,
        plan: Option<u64>,
        sleep: impl FnOnce(Duration) -> S,
    ) {
        let mut timer = pin!(plan.map(|ms| sleep(Duration::from_millis(ms))));
        poll_fn(|cx| {
            if self.rung.replace(false) {
                return Poll::Ready(());
            }
            if let Some(timer) = timer.as_mut().as_pin_mut()
                && timer.poll(cx).is_ready()
            {
                return Poll::Ready(());
            }
            self.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        })
        .await;
        self.waker.set(None);
    }
}

#[cfg(test)]
mod tests {
    use std::task::Context;

    use super::*;

    #[test]
    fn an_unstamped_ticker_sleeps_until_the_next_expiry() {
        let pace = TickerPace::new(10, false);
        assert_eq!(pace.plan(0, Some(5_000)), Some(5_000));
        assert_eq!(pace.plan(10, Some(5_000)), Some(4_990));
        assert_eq!(pace.plan(5_000, None), None, "nothing armed: until rung");
        assert_eq!(pace.plan(5_000, Some(5_000)), Some(1), "due now: 1 ms");
    }

    /// `n` stamps; how many of them told the caller to read the clock.
    fn stamp_n(pace: &TickerPace, n: u32) -> u32 {
        (0..n).map(|_| u32::from(pace.stamp())).sum()
    }

    #[test]
    fn sparse_stamps_read_the_clock_and_never_wake_the_ticker() {
        let pace = TickerPace::new(10, false);
        assert_eq!(pace.plan(0, None), None, "idle");
        assert_eq!(stamp_n(&pace, DENSE_STAMPS - 1), DENSE_STAMPS - 1);
        assert!(!pace.rung.get(), "a few stamps a tick: no wake-up");
        // A wake-up for a deadline: still too few stamps to tick.
        assert_eq!(pace.plan(500, Some(60_000)), Some(59_500));
        assert_eq!(stamp_n(&pace, 3), 3, "idle: each stamp reads the clock");
        assert!(!pace.rung.get());
    }

    #[test]
    fn dense_stamps_wake_the_ticker_and_keep_it_ticking_until_they_thin() {
        let pace = TickerPace::new(10, false);
        assert_eq!(pace.plan(0, None), None);
        assert_eq!(stamp_n(&pace, DENSE_STAMPS), DENSE_STAMPS);
        assert!(pace.rung.get(), "the dense-th stamp rings the ticker");
        assert_eq!(pace.plan(3, Some(60_000)), Some(10), "ticking");
        assert_eq!(stamp_n(&pace, 100), 0, "ticking: stamps are one load");
        assert_eq!(pace.plan(13, Some(60_000)), Some(10));
        assert_eq!(stamp_n(&pace, DENSE_STAMPS), 0);
        assert_eq!(pace.plan(23, Some(60_000)), Some(10), "still dense");
        // A tick with fewer stamps: idle until the next expiry.
        assert_eq!(stamp_n(&pace, DENSE_STAMPS - 1), 0);
        assert_eq!(pace.plan(33, Some(60_000)), Some(59_967));
        assert!(pace.stamp(), "idle again: the caller reads the clock");
    }

    #[test]
    fn an_earlier_deadline_rings_a_sleeping_ticker() {
        let pace = TickerPace::new(10, false);
        let mut wheel = TimerWheel::new();
        let first = pace.arm(&mut wheel, None, Some(1_000), || "first");
        // The wheel's next expiry may be a slot before the deadline.
        let next = wheel.next_expiry();
        assert!(next.is_some_and(|at| at <= 1_000));
        assert_eq!(pace.plan(10, next), next.map(|at| at - 10));
        pace.arm(&mut wheel, None, Some(2_000), || "later");
        assert!(!pace.rung.get(), "later than planned: no wake-up");
        pace.arm(&mut wheel, first, None, || "first");
        assert!(!pace.rung.get(), "disarming never rings");
        pace.arm(&mut wheel, None, Some(500), || "earlier");
        assert!(pace.rung.get(), "earlier: rung");
        assert_eq!(pace.plan(11, Some(500)), Some(489));
        assert!(!pace.rung.get(), "a plan clears the bell");
    }

    #[test]
    fn a_manual_clock_always_ticks() {
        let pace = TickerPace::new(5, true);
        for now in [0, 5, 10, 15] {
            assert_eq!(pace.plan(now, None), Some(5));
            assert_eq!(pace.plan(now, Some(now + 2)), Some(2));
        }
        assert!(!pace.stamp(), "a manual clock is never stale");
    }

    #[test]
    fn wait_ends_on_the_bell_or_the_sleep() {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let pace = TickerPace::new(10, false);
        let never = |_| std::future::pending::<()>();
        let mut wait = Box::pin(pace.wait(None, never));
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        pace.ring();
        assert!(wait.as_mut().poll(&mut cx).is_ready());
        drop(wait);
        let mut wait = Box::pin(pace.wait(Some(3), |d| {
            assert_eq!(d, Duration::from_millis(3));
            std::future::ready(())
        }));
        assert!(wait.as_mut().poll(&mut cx).is_ready());
    }
}
