//! One stream's activity watchdog on its core's timer wheel (F21).
//!
//! ```text
//!   token ──▶ Activity::touch: last = coarse_now            (one store)
//!
//!   wheel entry due at d ──▶ on_timer(now)
//!        held (client holds the stream)  ─▶ last = now, re-armed at now + timeout
//!        last + timeout >  now (progress) ─▶ re-armed at last + timeout
//!        last + timeout <= now (silent)   ─▶ fired: the stall future completes
//! ```
//!
//! A token never touches the wheel; the entry moves at most once per
//! timeout period. Dropping the [`Activity`] cancels its entry, so an
//! ended stream leaves nothing behind (the wheel's keys are
//! generation-fenced: a stale key is a no-op).

use std::cell::Cell;
use std::fmt;
use std::future::{Future, poll_fn};
use std::rc::Rc;
use std::task::{Poll, Waker};

use framing::timer::TimerKey;

use framing::timer::{CoreTimers, OnTimer};

/// What the wheel entry points at.
struct WatchState {
    timers: Rc<CoreTimers>,
    timeout_ms: u64,
    /// Time of the last progress, ms on the core's clock.
    last: Cell<u64>,
    held: Cell<bool>,
    fired: Cell<bool>,
    key: Cell<Option<TimerKey>>,
    waker: Cell<Option<Waker>>,
}

impl WatchState {
    /// Re-arms at `last + timeout` if that is after `now` (progress since
    /// the entry was filed, or the stream is held); false if it is silent.
    fn rearm_if_active(self: &Rc<Self>, now: u64) -> bool {
        if self.held.get() {
            self.last.set(now);
        }
        let due = self.last.get().saturating_add(self.timeout_ms);
        if due <= now {
            return false;
        }
        let target = Rc::clone(self);
        let key = self
            .timers
            .arm(None, Some(due), || target as Rc<dyn OnTimer>);
        self.key.set(key);
        true
    }
}

impl OnTimer for WatchState {
    fn on_timer(self: Rc<Self>, now: u64) {
        self.key.set(None);
        if self.rearm_if_active(now) {
            return;
        }
        self.fired.set(true);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// The last progress of one run or tunnel, watched on its core's wheel.
pub struct Activity {
    state: Rc<WatchState>,
}

impl fmt::Debug for Activity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Activity")
            .field("timeout_ms", &self.state.timeout_ms)
            .field("last", &self.state.last.get())
            .field("held", &self.state.held.get())
            .field("fired", &self.state.fired.get())
            .finish()
    }
}

impl Activity {
    /// A watchdog of `timeout_ms` on `timers`, with activity now (a fresh
    /// clock read) and its entry armed at now + timeout.
    pub fn start(timers: &Rc<CoreTimers>, timeout_ms: u64) -> Self {
        let now = timers.now();
        let state = Rc::new(WatchState {
            timers: Rc::clone(timers),
            timeout_ms,
            last: Cell::new(now),
            held: Cell::new(false),
            fired: Cell::new(false),
            key: Cell::new(None),
            waker: Cell::new(None),
        });
        let target = Rc::clone(&state);
        let key = timers.arm(None, Some(now.saturating_add(timeout_ms)), || {
            target as Rc<dyn OnTimer>
        });
        state.key.set(key);
        Self { state }
    }

    /// Progress: one store of the core's coarse time. No timer is touched.
    #[inline]
    pub fn touch(&self) {
        self.state.last.set(self.state.timers.coarse_now());
    }

    /// Holds the watchdog while the stream waits on its client (a tunnel
    /// without credit): a held stream never stalls. Both edges count as
    /// progress.
    pub fn hold(&self, held: bool) {
        self.state.held.set(held);
        self.touch();
    }

    /// Completes once the watchdog fired: no progress for its timeout,
    /// never while held. Progress recorded after the entry fired but before
    /// this is polled (an event ready at the same instant) still counts:
    /// the watchdog is re-armed instead.
    pub fn stalled(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(|cx| {
            if self.state.fired.get() {
                let now = self.state.timers.coarse_now();
                if !self.state.rearm_if_active(now) {
                    return Poll::Ready(());
                }
                self.state.fired.set(false);
            }
            self.state.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        })
    }

    /// Whether the watchdog has fired.
    pub fn has_fired(&self) -> bool {
        self.state.fired.get()
    }

    /// How long the stream has been silent at `now` (ms on the core's
    /// clock).
    pub fn silent_ms(&self, now: u64) -> u64 {
        now.saturating_sub(self.state.last.get())
    }

    /// The wheel this watchdog lives on.
    pub fn timers(&self) -> &Rc<CoreTimers> {
        &self.state.timers
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        let key = self.state.key.take();
        self.state.timers.arm(key, None, || unreachable!());
    }
}
