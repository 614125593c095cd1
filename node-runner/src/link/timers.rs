//! The link core's timer wheel and the ticker that drives it.
//!
//! The link's timers (the handshake deadline, then the heartbeat interval
//! and wait) live on one [`TimerWheel`] per core, as on the Edge
//! (`edge-proxy/src/link/core.rs`). A connection keeps a single entry,
//! armed at the session's `poll_timeout()` and moved with
//! [`CoreTimers::arm`] (a later deadline is one store; see
//! [`framing::timer`]). The ticker sleeps until the next expiry, but at most
//! one tick, so a manual clock's jumps (tests) are seen within a tick and a
//! newly armed earlier deadline is never missed by more than one.
//!
//! The wheel reads time from the core's [`DriverClock`] (coarse in
//! production, a [`framing::timer::SharedManualClock`] in tests): no test
//! sleeps for a heartbeat to fire.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use framing::timer::{ClockSource, DriverClock, TimerKey, TimerWheel};

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
    tick: Duration,
    stopped: Cell<bool>,
}

impl fmt::Debug for CoreTimers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreTimers")
            .field("timers", &self.wheel.borrow().len())
            .field("tick", &self.tick)
            .finish_non_exhaustive()
    }
}

impl CoreTimers {
    /// A wheel on a clock built from `clock`, whose ticker sleeps at most
    /// `tick_ms` between clock reads.
    pub fn new(clock: &ClockSource, tick_ms: u64) -> Rc<Self> {
        Rc::new(Self {
            clock: DriverClock::new(clock),
            wheel: RefCell::new(TimerWheel::new()),
            tick: Duration::from_millis(tick_ms.max(1)),
            stopped: Cell::new(false),
        })
    }

    /// Reads the core's clock now, in ms.
    pub fn now(&self) -> u64 {
        self.clock.refresh()
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
        let mut wheel = self.wheel.borrow_mut();
        match (key, deadline) {
            (Some(key), Some(at)) if wheel.reset(key, at) => Some(key),
            (key, Some(at)) => {
                if let Some(key) = key {
                    wheel.cancel(key);
                }
                Some(wheel.insert(at, target()))
            }
            (Some(key), None) => {
                wheel.cancel(key);
                None
            }
            (None, None) => None,
        }
    }

    /// Fires what is due now; returns the time it read.
    pub fn poll(&self) -> u64 {
        let now = self.clock.refresh();
        let mut due = Vec::new();
        self.wheel
            .borrow_mut()
            .poll_expired(now, |expired| due.push(expired.value));
        for target in due {
            target.on_timer(now);
        }
        now
    }

    /// Ends [`run`](Self::run) at its next wake-up (within a tick).
    pub fn stop(&self) {
        self.stopped.set(true);
    }

    /// The ticker: fires due timers until [`stop`](Self::stop), sleeping
    /// until the next expiry but at most one tick.
    pub async fn run(self: Rc<Self>) {
        while !self.stopped.get() {
            let now = self.poll();
            let next = self.wheel.borrow().next_expiry();
            let sleep = match next {
                Some(at) => Duration::from_millis(at.saturating_sub(now)).min(self.tick),
                None => self.tick,
            };
            monoio::time::sleep(sleep.max(Duration::from_millis(1))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use framing::timer::SharedManualClock;

    use super::*;

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
}
