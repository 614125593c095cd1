//! [`Deadline`]: one owner's bound on its waits, as one entry on its core's
//! [`CoreTimers`] wheel.
//!
//! An owner (a client connection reading its requests, a run bounding its
//! close grace) keeps one entry for its life. Each bounded wait
//! ([`Deadline::within`], [`Deadline::until`]) moves it to that wait's
//! deadline, which for a later deadline is one store (the wheel re-slots a
//! lazily extended entry when its old slot comes due). A keep-alive
//! connection's requests thus touch the wheel about once per timeout, not
//! twice a request. [`CoreTimers::timeout`] and [`CoreTimers::sleep_until`]
//! are one-wait deadlines.
//!
//! An entry that comes due while its owner is not waiting is let go; the
//! next wait arms it again.
//!
//! # Invariants
//! - A wait ends with its future's output if that is ready when polled,
//!   even at its deadline (the future is polled first), else with `None`
//!   at the first poll at or after the deadline (at the first poll at all
//!   for a deadline already reached when the wait starts).
//! - An owner holds at most one entry and waits one bounded wait at a time;
//!   dropping its [`Deadline`] takes the entry off the wheel.

use std::cell::Cell;
use std::fmt;
use std::future::{Future, pending, poll_fn};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, Waker};

use super::{CoreTimers, OnTimer, TimerKey};

/// One owner's entry and the task its wait parked.
///
/// During a wait the entry is armed at the wait's deadline (the wheel
/// fires it no earlier), so an entry gone is a deadline passed; between
/// waits no task is parked, and an entry that fires wakes nobody.
#[derive(Default)]
struct Waiting {
    key: Cell<Option<TimerKey>>,
    waker: Cell<Option<Waker>>,
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

/// One owner's bound on its waits (see the module docs).
pub struct Deadline {
    timers: Rc<CoreTimers>,
    waiting: Rc<Waiting>,
}

impl fmt::Debug for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadline")
            .field("armed", &self.waiting.key.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Deadline {
    /// An owner's deadline on `timers` (its core's), not armed yet.
    pub fn new(timers: &Rc<CoreTimers>) -> Self {
        Self {
            timers: Rc::clone(timers),
            waiting: Rc::default(),
        }
    }

    /// Runs `future` for at most `ms` from now: `Some(output)` if it
    /// completes first (it is polled first, so a tie goes to it), `None`
    /// once the deadline passed (the future is dropped).
    ///
    /// The clock is read when this is called, not at the first poll.
    pub fn within<F: Future>(&self, ms: u64, future: F) -> impl Future<Output = Option<F::Output>> {
        let now = self.timers.now();
        self.wait(now.saturating_add(ms), now, future)
    }

    /// As [`within`](Self::within), until `at` (ms on the core's clock).
    pub fn until<F: Future>(&self, at: u64, future: F) -> impl Future<Output = Option<F::Output>> {
        let now = self.timers.now();
        self.wait(at, now, future)
    }

    async fn wait<F: Future>(&self, at: u64, now: u64, future: F) -> Option<F::Output> {
        let waiting = &self.waiting;
        // A deadline already reached disarms the entry: the wait is over
        // at its first poll, unless the future is ready.
        let armed = (at > now).then_some(at);
        let key = self.timers.arm(waiting.key.get(), armed, || {
            Rc::clone(waiting) as Rc<dyn OnTimer>
        });
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

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(key) = self.waiting.key.take() {
            self.timers
                .arm(Some(key), None, || unreachable!("disarming"));
        }
    }
}

impl CoreTimers<dyn OnTimer> {
    /// Completes at the first poll at or after `deadline` (ms on this
    /// clock); at its first poll if the clock is already there. Dropping
    /// it disarms its entry.
    pub async fn sleep_until(self: &Rc<Self>, deadline: u64) {
        Deadline::new(self).until(deadline, pending::<()>()).await;
    }

    /// Runs `future` for at most `ms` from now on this wheel: `Some(output)`
    /// if it completed first (it is polled first, so a tie goes to it),
    /// `None` once the deadline fired.
    pub async fn timeout<F: Future>(self: &Rc<Self>, ms: u64, future: F) -> Option<F::Output> {
        Deadline::new(self).within(ms, future).await
    }
}

#[cfg(test)]
#[path = "deadline_tests.rs"]
mod tests;
