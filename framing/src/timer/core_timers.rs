//! [`CoreTimers`]: one core's timer wheel, its clock, and the ticker that
//! drives them.
//!
//! Every timer of a core lives on one [`TimerWheel`] (`DESIGN.md`,
//! "Timers"): the Edge's link connections (handshake, heartbeat) and its
//! client connections' read deadlines; the Node's link connection, and the
//! stall watchdogs, close graces and probe bounds of its runs and tunnels.
//! Each of those is one [`CoreTimers`], over its own entry type `T`: what
//! sits on the wheel is an `Rc<T>`, told by [`OnTimer::on_timer`] when its
//! entry comes due.
//!
//! An owner keeps one entry and moves it with [`CoreTimers::arm`]: a later
//! deadline is one store (the wheel's lazy extension, [`super`]), an earlier
//! one re-links the entry and rings the ticker if it planned to sleep past
//! it.
//!
//! The ticker ([`CoreTimers::run`]) sleeps as its [`TickerPace`] plans:
//! until the next expiry, or at most one tick while tokens are stamped
//! densely with the coarse clock ([`CoreTimers::coarse_now`]), so such a
//! stamp is at most a tick stale. While the ticker is idle each stamp reads
//! the clock itself. An idle core thus wakes only for its timers and its
//! I/O, not every tick. The ticker sleeps with the runtime's sleep, passed
//! in: this module, like the rest of `framing`, runs on no runtime.
//!
//! The wheel reads time from the core's [`DriverClock`]: coarse in
//! production, a [`super::SharedManualClock`] in tests, whose ticker always
//! ticks. Tests drive it all with [`CoreTimers::poll`]: no test sleeps for
//! a timer to fire.
//!
//! Waits bounded by the wheel — woken by the ticker or a test's poll, never
//! by a runtime's timer — are [`super::Deadline`]s (and
//! [`CoreTimers::sleep_until`] and [`CoreTimers::timeout`], one-wait
//! deadlines), on a wheel of `dyn OnTimer`.
//!
//! # Invariants
//! - An entry fires at the first poll at or after its deadline, never
//!   before, and is gone from the wheel when its `on_timer` runs (arm it
//!   again to fire again).
//! - After [`CoreTimers::stop`] the ticker returns at its next poll.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use super::{Clock, ClockSource, DriverClock, TickerPace, TimerKey, TimerWheel};

/// Something with an entry on a core's wheel.
pub trait OnTimer {
    /// The entry came due at `now` (ms on the core's clock). It is off the
    /// wheel by then: re-arm to fire again.
    fn on_timer(self: Rc<Self>, now: u64);
}

/// One core's timer wheel of `Rc<T>` entries, its clock and its ticker's
/// pace (see the module docs). Not `Sync`: one per core.
pub struct CoreTimers<T: ?Sized = dyn OnTimer> {
    clock: DriverClock,
    wheel: RefCell<TimerWheel<Rc<T>>>,
    pace: TickerPace,
    stopped: Cell<bool>,
}

impl<T: ?Sized> fmt::Debug for CoreTimers<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreTimers")
            .field("timers", &self.wheel.borrow().len())
            .field("pace", &self.pace)
            .finish_non_exhaustive()
    }
}

impl<T: ?Sized + OnTimer> CoreTimers<T> {
    /// A wheel on a clock built from `source`, whose ticker sleeps at most
    /// `tick_ms` between clock reads while tokens are stamped (always, on a
    /// manual clock).
    pub fn new(source: &ClockSource, tick_ms: u64) -> Rc<Self> {
        Self::on_clock(DriverClock::new(source), tick_ms)
    }

    /// As [`new`](Self::new), on a clock already built.
    pub fn on_clock(clock: DriverClock, tick_ms: u64) -> Rc<Self> {
        Rc::new(Self {
            pace: TickerPace::new(tick_ms, clock.is_manual()),
            clock,
            wheel: RefCell::new(TimerWheel::new()),
            stopped: Cell::new(false),
        })
    }

    /// The core's clock.
    pub fn clock(&self) -> &DriverClock {
        &self.clock
    }

    /// Reads the core's clock now, in ms.
    pub fn now(&self) -> u64 {
        self.clock.refresh()
    }

    /// The clock's reading as of its last refresh: at most a tick old, one
    /// load and no clock read while tokens flow densely; a fresh read while
    /// the ticker is idle. What a token stores as its activity time.
    #[inline]
    pub fn coarse_now(&self) -> u64 {
        if self.pace.stamp() {
            self.clock.refresh()
        } else {
            self.clock.now_ms()
        }
    }

    /// Timers armed now.
    pub fn len(&self) -> usize {
        self.wheel.borrow().len()
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Arms, moves or disarms one entry: `key` is the entry's current key
    /// (if armed; a stale one counts as none), `deadline` where it should
    /// be (`None` = disarmed). Returns the key to keep. `target` is asked
    /// for only when a new entry is made.
    pub fn arm(
        &self,
        key: Option<TimerKey>,
        deadline: Option<u64>,
        target: impl FnOnce() -> Rc<T>,
    ) -> Option<TimerKey> {
        self.pace
            .arm(&mut self.wheel.borrow_mut(), key, deadline, target)
    }

    /// Fires what is due now, in deadline order; returns the time it read.
    pub fn poll(&self) -> u64 {
        let now = self.clock.refresh();
        let due = self.wheel.borrow_mut().take_expired(now);
        for target in due {
            target.on_timer(now);
        }
        now
    }

    /// Ends [`run`](Self::run) now (its ticker is rung).
    pub fn stop(&self) {
        self.stopped.set(true);
        self.pace.ring();
    }

    /// The ticker: fires due timers until [`stop`](Self::stop), sleeping as
    /// its [`TickerPace`] plans with the runtime's `sleep` (see the module
    /// docs).
    pub async fn run<S: Future<Output = ()>>(self: Rc<Self>, mut sleep: impl FnMut(Duration) -> S) {
        while !self.stopped.get() {
            let now = self.poll();
            let next = self.wheel.borrow().next_expiry();
            let plan = self.pace.plan(now, next);
            self.pace.wait(plan, &mut sleep).await;
        }
    }
}

#[cfg(test)]
#[path = "core_timers_tests.rs"]
mod tests;
