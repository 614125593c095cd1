//! A core's timer wheel and the ticker that drives it.
//!
//! The link core's timers (the handshake deadline, then the heartbeat interval
//! and wait) live on one [`TimerWheel`] per core, as on the Edge
//! (`edge-proxy/src/link/core.rs`). A connection keeps a single entry,
//! armed at the session's `poll_timeout()` and moved with
//! [`CoreTimers::arm`] (a later deadline is one store; see
//! [`framing::timer`]).
//!
//! The ticker sleeps as its [`TickerPace`] plans: until the next expiry, or
//! at most one tick while tokens are stamped densely with the coarse clock
//! ([`CoreTimers::coarse_now`]), so such a stamp is at most a tick stale.
//! While the ticker is idle each stamp reads the clock itself. A deadline
//! armed earlier than the planned wake-up rings it at once. An idle core, or
//! one stamping a few tokens now and then, thus wakes only for its timers
//! and its I/O, not every tick.
//!
//! The wheel reads time from the core's [`DriverClock`] (coarse in
//! production, a [`framing::timer::SharedManualClock`] in tests, whose
//! ticker always ticks): no test sleeps for a heartbeat to fire.
//!
//! Every run core has one too (built in [`crate::runs::serve_core`]): the
//! stall watchdogs of its runs and tunnels ([`crate::stall`]) and their
//! close-grace and probe bounds live there. [`CoreTimers::sleep_until`] and
//! [`CoreTimers::timeout`] are the wheel's futures for such bounds: woken by
//! the ticker (or a test's [`CoreTimers::poll`]), never by a monoio sleep.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use framing::timer::{Clock, ClockSource, DriverClock, TickerPace, TimerKey, TimerWheel};

/// Something with a timer on the wheel: called by the ticker when its entry
/// comes due (the entry is gone by then: re-arm to fire again).
pub trait OnTimer {
    /// The entry fired at `now` (ms on the core's clock).
    fn on_timer(self: Rc<Self>, now: u64);
}

/// One core's timer wheel, its clock and its ticker's settings.
pub struct CoreTimers {
    clock: DriverClock,
    wheel: RefCell<TimerWheel<Rc<dyn OnTimer>>>,
    pace: TickerPace,
    stopped: Cell<bool>,
}

impl fmt::Debug for CoreTimers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreTimers")
            .field("timers", &self.wheel.borrow().len())
            .field("pace", &self.pace)
            .finish_non_exhaustive()
    }
}

impl CoreTimers {
    /// A wheel on a clock built from `clock`, whose ticker sleeps at most
    /// `tick_ms` between clock reads while tokens are stamped.
    pub fn new(clock: &ClockSource, tick_ms: u64) -> Rc<Self> {
        Self::on_clock(DriverClock::new(clock), tick_ms)
    }

    fn on_clock(clock: DriverClock, tick_ms: u64) -> Rc<Self> {
        Rc::new(Self {
            pace: TickerPace::new(tick_ms, clock.is_manual()),
            clock,
            wheel: RefCell::new(TimerWheel::new()),
            stopped: Cell::new(false),
        })
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
    /// (if armed), `deadline` where it should be (`None` = disarmed). Returns
    /// the key to keep. `target` is asked for only when a new entry is made.
    pub fn arm(
        &self,
        key: Option<TimerKey>,
        deadline: Option<u64>,
        target: impl FnOnce() -> Rc<dyn OnTimer>,
    ) -> Option<TimerKey> {
        self.pace
            .arm(&mut self.wheel.borrow_mut(), key, deadline, target)
    }

    /// Fires what is due now; returns the time it read.
    pub fn poll(&self) -> u64 {
        let now = self.clock.refresh();
        let due = self.wheel.borrow_mut().take_expired(now);
        for target in due {
            target.on_timer(now);
        }
        now
    }

    /// A future that completes at the first poll at or after `deadline`
    /// (ms on this clock); at once if the clock is already there. Dropping
    /// it disarms its entry.
    pub fn sleep_until(self: &Rc<Self>, deadline: u64) -> Sleep {
        let state = Rc::new(SleepState::default());
        if deadline <= self.now() {
            state.fired.set(true);
            return Sleep {
                timers: Rc::clone(self),
                state,
                key: None,
            };
        }
        let target = Rc::clone(&state);
        let key = self.arm(None, Some(deadline), || target as Rc<dyn OnTimer>);
        Sleep {
            timers: Rc::clone(self),
            state,
            key,
        }
    }

    /// Runs `future` for at most `ms` from now on this wheel: `Some(output)`
    /// if it completed first (it is polled first, so a tie goes to it),
    /// `None` once the deadline fired.
    pub async fn timeout<F: Future>(self: &Rc<Self>, ms: u64, future: F) -> Option<F::Output> {
        let deadline = self.now().saturating_add(ms);
        let mut sleep = pin!(self.sleep_until(deadline));
        let mut future = pin!(future);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = future.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            sleep.as_mut().poll(cx).map(|()| None)
        })
        .await
    }

    /// Ends [`run`](Self::run) now (its ticker is rung).
    pub fn stop(&self) {
        self.stopped.set(true);
        self.pace.ring();
    }

    /// The ticker: fires due timers until [`stop`](Self::stop), sleeping as
    /// its [`TickerPace`] plans (see the module docs).
    pub async fn run(self: Rc<Self>) {
        while !self.stopped.get() {
            let now = self.poll();
            let next = self.wheel.borrow().next_expiry();
            let plan = self.pace.plan(now, next);
            self.pace.wait(plan, monoio::time::sleep).await;
        }
    }
}

impl fmt::Debug for SleepState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SleepState")
            .field("fired", &self.fired.get())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct SleepState {
    fired: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl OnTimer for SleepState {
    fn on_timer(self: Rc<Self>, _now: u64) {
        self.fired.set(true);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// A deadline on a [`CoreTimers`] wheel ([`CoreTimers::sleep_until`]).
pub struct Sleep {
    timers: Rc<CoreTimers>,
    state: Rc<SleepState>,
    key: Option<TimerKey>,
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("fired", &self.state.fired.get())
            .finish_non_exhaustive()
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.state.fired.get() {
            return Poll::Ready(());
        }
        self.state.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if !self.state.fired.get() {
            self.timers.arm(self.key.take(), None, || unreachable!());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use std::time::Duration;

    use framing::timer::{CoarseClock, SharedManualClock};

    use super::*;
    use crate::stall::testkit::block_on;

    struct Probe(RefCell<Vec<u64>>);

    impl OnTimer for Probe {
        fn on_timer(self: Rc<Self>, now: u64) {
            self.0.borrow_mut().push(now);
        }
    }

    #[test]
    fn one_entry_is_armed_moved_fired_and_disarmed() {
        let clock = SharedManualClock::new(0);
        let timers = CoreTimers::new(&ClockSource::Manual(clock.clone()), 5);
        let probe = Rc::new(Probe(RefCell::new(Vec::new())));
        let target = || Rc::clone(&probe) as Rc<dyn OnTimer>;
        let key = timers.arm(None, Some(100), target);
        assert_eq!(timers.len(), 1);
        // Moved later: same entry.
        let moved = timers.arm(key, Some(200), target);
        assert_eq!(moved, key);
        clock.advance(150);
        timers.poll();
        assert!(probe.0.borrow().is_empty(), "not due before its deadline");
        clock.advance(50);
        timers.poll();
        assert_eq!(*probe.0.borrow(), [200]);
        assert!(timers.is_empty(), "a fired entry is gone");
        // A stale key re-arms as a new entry; None disarms.
        let key = timers.arm(moved, Some(300), target);
        assert_eq!(timers.len(), 1);
        assert_eq!(timers.arm(key, None, target), None);
        assert!(timers.is_empty());
    }

    #[test]
    fn a_wheel_sleep_fires_only_when_the_clock_reaches_it() {
        let clock = SharedManualClock::new(0);
        let timers = CoreTimers::new(&ClockSource::Manual(clock.clone()), 5);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut sleep = Box::pin(timers.sleep_until(10));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        clock.advance(9);
        timers.poll();
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        clock.advance(1);
        timers.poll();
        assert!(sleep.as_mut().poll(&mut cx).is_ready());
        assert!(timers.is_empty());
        // A sleep dropped before its deadline leaves nothing on the wheel.
        drop(timers.sleep_until(100));
        assert!(timers.is_empty());
    }

    #[test]
    fn a_wheel_timeout_prefers_the_future_on_a_tie() {
        let clock = SharedManualClock::new(0);
        let timers = CoreTimers::new(&ClockSource::Manual(clock.clone()), 5);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut pending = Box::pin(timers.timeout(5, std::future::pending::<()>()));
        assert!(pending.as_mut().poll(&mut cx).is_pending());
        clock.advance(5);
        timers.poll();
        assert_eq!(pending.as_mut().poll(&mut cx), Poll::Ready(None));
        let mut past = Box::pin(timers.sleep_until(5));
        assert!(past.as_mut().poll(&mut cx).is_ready(), "already due");
        let mut ready = Box::pin(timers.timeout(0, std::future::ready(7)));
        assert_eq!(ready.as_mut().poll(&mut cx), Poll::Ready(Some(7)));
        assert!(timers.is_empty());
    }

    #[test]
    fn an_idle_ticker_sleeps_until_an_earlier_deadline_or_stop_rings_it() {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let timers = CoreTimers::new(&ClockSource::Coarse, 10);
        let mut ticker = Box::pin(Rc::clone(&timers).run());
        // Nothing armed and nothing stamped: no sleep at all, only the bell.
        assert!(ticker.as_mut().poll(&mut cx).is_pending());
        let probe = Rc::new(Probe(RefCell::new(Vec::new())));
        let due = timers.now();
        timers.arm(None, Some(due), || Rc::clone(&probe) as Rc<dyn OnTimer>);
        assert!(ticker.as_mut().poll(&mut cx).is_pending());
        assert_eq!(probe.0.borrow().len(), 1, "the deadline rang the ticker");
        assert!(probe.0.borrow()[0] >= due);
        timers.stop();
        assert!(
            ticker.as_mut().poll(&mut cx).is_ready(),
            "stop rings it too"
        );
    }

    #[test]
    fn idle_stamps_read_the_clock_and_dense_ones_start_the_ticker() {
        block_on(async {
            let waker = std::task::Waker::noop();
            let mut cx = Context::from_waker(waker);
            let (source, tsc) = quanta::Clock::mock();
            let timers =
                CoreTimers::on_clock(DriverClock::Coarse(CoarseClock::with_source(source)), 10);
            let mut ticker = Box::pin(Rc::clone(&timers).run());
            assert!(ticker.as_mut().poll(&mut cx).is_pending(), "idle");
            tsc.increment(Duration::from_secs(60));
            assert_eq!(
                timers.coarse_now(),
                60_000,
                "not the reading of a minute ago"
            );
            tsc.increment(Duration::from_millis(5));
            assert_eq!(timers.coarse_now(), 60_005, "idle: every stamp reads");
            // Dense stamps ring the ticker, which then ticks: stamps are one
            // load of the reading its last wake-up took.
            for _ in 2..framing::timer::DENSE_STAMPS {
                timers.coarse_now();
            }
            tsc.increment(Duration::from_millis(1));
            assert!(ticker.as_mut().poll(&mut cx).is_pending());
            assert_eq!(timers.coarse_now(), 60_006, "the wake-up refreshed it");
            tsc.increment(Duration::from_millis(3));
            assert_eq!(timers.coarse_now(), 60_006, "then one load, until the tick");
            timers.stop();
            assert!(ticker.as_mut().poll(&mut cx).is_ready());
        });
    }
}
