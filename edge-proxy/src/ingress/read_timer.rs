//! The deadlines of a client connection's request reads — the idle wait
//! for the next request, a head still arriving, a gap in a body — on its
//! core's timer wheel (`DESIGN.md`, "Timers"), not a monoio timer each.
//!
//! A connection owns one entry ([`ReadDeadline`]). Each bounded wait
//! ([`ReadDeadline::within`]) moves it to that wait's deadline, which for a
//! later deadline is one store (`framing::timer`: the wheel re-slots a
//! lazily extended entry when its old slot comes due). A keep-alive
//! connection's requests thus touch the wheel once per head timeout or so,
//! not twice a request; a monoio timer was a 640-byte, 128-byte-aligned
//! `Sleep` registered and deregistered each wait, and it made the boxed
//! step that reads a request a 128-byte-aligned allocation (issue 8:
//! ~880 instructions a small request, `bench-results/profiles.md`,
//! round 48).
//!
//! An entry that comes due while its connection is not waiting (it is
//! answering) is let go; the next wait arms it again.
//!
//! Time is read from the core's clock at each wait (a fresh read: the
//! ticker may have slept long) and by the ticker. In production it is the
//! coarse clock, so the deadlines are real time as before; tests of this
//! module drive a manual clock.
//!
//! # Invariants
//! - A wait ends with its future's output if that is ready when polled,
//!   even at its deadline (the future is polled first), else with `None`
//!   at the first poll at or after the deadline.
//! - Each connection holds at most one entry, and waits one bounded read
//!   at a time (a request's reads follow each other); dropping its
//!   [`ReadDeadline`] takes the entry off the wheel.

use std::cell::Cell;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, Waker};

use framing::timer::{CoreTimers, OnTimer, TimerKey};

/// The longest the ticker sleeps between clock reads with a manual clock.
pub const TICK_MS: u64 = 10;

/// One core's wheel of read deadlines, its clock and its ticker
/// (`CoreTimers::new(source, TICK_MS)`; run its ticker on the same core).
pub type ReadTimers = CoreTimers<Waiting>;

/// One connection's entry and the task its wait parked.
///
/// During a wait the entry is armed at the wait's deadline (the wheel
/// fires it no earlier), so an entry gone is a deadline passed; between
/// waits no task is parked, and an entry that fires wakes nobody.
#[derive(Default)]
pub struct Waiting {
    key: Cell<Option<TimerKey>>,
    waker: Cell<Option<Waker>>,
}

impl fmt::Debug for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Waiting(armed {})", self.key.get().is_some())
    }
}

impl OnTimer for Waiting {
    /// The deadline passed: let go of the key, end the parked wait.
    fn on_timer(self: Rc<Self>, _now: u64) {
        self.key.set(None);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// A connection's bound on its request reads (see the module docs).
#[derive(Debug)]
pub struct ReadDeadline {
    timers: Rc<ReadTimers>,
    waiting: Rc<Waiting>,
}

impl ReadDeadline {
    /// A connection's deadline on `timers` (its core's), not armed yet.
    pub fn new(timers: &Rc<ReadTimers>) -> Self {
        Self {
            timers: Rc::clone(timers),
            waiting: Rc::default(),
        }
    }

    /// Runs `future` for at most `ms` from now: `Some(output)` if it
    /// completes first (it is polled first, so a tie goes to it), `None`
    /// once the deadline passed (the future is dropped).
    pub async fn within<F: Future>(&self, ms: u64, future: F) -> Option<F::Output> {
        let until = self.timers.now().saturating_add(ms);
        let waiting = &self.waiting;
        let key = self
            .timers
            .arm(waiting.key.get(), Some(until), || Rc::clone(waiting));
        waiting.key.set(key);
        let mut future = pin!(future);
        let out = poll_fn(|cx| {
            if let Poll::Ready(out) = future.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            if waiting.key.get().is_none() {
                // Fired: the deadline passed.
                return Poll::Ready(None);
            }
            waiting.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        })
        .await;
        // Between waits: an entry that comes due now is let go.
        waiting.waker.set(None);
        out
    }
}

impl Drop for ReadDeadline {
    fn drop(&mut self) {
        if let Some(key) = self.waiting.key.take() {
            self.timers
                .arm(Some(key), None, || unreachable!("disarming"));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;
    use std::task::Context;

    use framing::timer::{ClockSource, SharedManualClock};

    use super::*;

    /// A manual clock, a core's wheel on it and one connection's deadline.
    fn manual() -> (SharedManualClock, Rc<ReadTimers>, ReadDeadline) {
        let clock = SharedManualClock::new(0);
        let timers = ReadTimers::new(&ClockSource::Manual(clock.clone()), TICK_MS);
        let deadline = ReadDeadline::new(&timers);
        (clock, timers, deadline)
    }

    /// Moves the clock on by `ms`, then runs the ticker's poll.
    fn pass(clock: &SharedManualClock, timers: &ReadTimers, ms: u64) {
        clock.advance(ms);
        timers.poll();
    }

    fn noop() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    /// A wait whose read is done at once (the request was there).
    fn done_at_once(deadline: &ReadDeadline, ms: u64) {
        let wait = pin!(deadline.within(ms, std::future::ready(())));
        assert_eq!(wait.poll(&mut noop()), Poll::Ready(Some(())));
    }

    #[test]
    fn a_wait_ends_at_its_deadline_and_not_before() {
        let (clock, timers, deadline) = manual();
        let cx = &mut noop();
        let mut wait = Box::pin(deadline.within(100, pending::<()>()));
        assert!(wait.as_mut().poll(cx).is_pending());
        assert_eq!(timers.len(), 1);
        pass(&clock, &timers, 99);
        assert!(wait.as_mut().poll(cx).is_pending());
        pass(&clock, &timers, 1);
        assert_eq!(wait.as_mut().poll(cx), Poll::Ready(None));
    }

    #[test]
    fn a_ready_future_wins_even_at_the_deadline() {
        let (clock, timers, deadline) = manual();
        let cx = &mut noop();
        let ready = Rc::new(Cell::new(false));
        let seen = Rc::clone(&ready);
        let mut wait = Box::pin(deadline.within(
            10,
            poll_fn(move |_| {
                if seen.get() {
                    Poll::Ready(7)
                } else {
                    Poll::Pending
                }
            }),
        ));
        assert!(wait.as_mut().poll(cx).is_pending());
        pass(&clock, &timers, 10);
        ready.set(true);
        assert_eq!(wait.as_mut().poll(cx), Poll::Ready(Some(7)));
    }

    #[test]
    fn later_waits_keep_one_entry_and_move_it_lazily() {
        let (clock, timers, deadline) = manual();
        let cx = &mut noop();
        for _ in 0..50 {
            // A request every 5 ms, each read done at once: one entry, its
            // deadline carried along, never firing.
            done_at_once(&deadline, 100);
            assert_eq!(timers.len(), 1);
            pass(&clock, &timers, 5);
        }
        // The last wait's bound still holds: 100 ms from its start.
        let mut wait = Box::pin(deadline.within(100, pending::<()>()));
        assert!(wait.as_mut().poll(cx).is_pending());
        pass(&clock, &timers, 99);
        assert!(wait.as_mut().poll(cx).is_pending(), "not early");
        pass(&clock, &timers, 1);
        assert_eq!(wait.as_mut().poll(cx), Poll::Ready(None));
    }

    #[test]
    fn a_shorter_wait_after_a_longer_one_ends_at_its_own_deadline() {
        let (clock, timers, deadline) = manual();
        let cx = &mut noop();
        done_at_once(&deadline, 60_000);
        let mut head = Box::pin(deadline.within(10, pending::<()>()));
        assert!(head.as_mut().poll(cx).is_pending());
        pass(&clock, &timers, 10);
        assert_eq!(head.as_mut().poll(cx), Poll::Ready(None));
    }

    #[test]
    fn an_entry_due_between_waits_is_let_go_and_armed_again() {
        let (clock, timers, deadline) = manual();
        let cx = &mut noop();
        done_at_once(&deadline, 10);
        // Answering, not waiting, past the old deadline.
        pass(&clock, &timers, 50);
        assert_eq!(timers.len(), 0, "let go");
        let mut wait = Box::pin(deadline.within(10, pending::<()>()));
        assert!(wait.as_mut().poll(cx).is_pending());
        assert_eq!(timers.len(), 1);
        pass(&clock, &timers, 10);
        assert_eq!(wait.as_mut().poll(cx), Poll::Ready(None));
    }

    #[test]
    fn a_dropped_deadline_leaves_nothing_on_the_wheel() {
        let (_clock, timers, deadline) = manual();
        let cx = &mut noop();
        let mut wait = Box::pin(deadline.within(10, pending::<()>()));
        assert!(wait.as_mut().poll(cx).is_pending());
        drop(wait);
        assert_eq!(timers.len(), 1);
        drop(deadline);
        assert_eq!(timers.len(), 0);
    }
}
