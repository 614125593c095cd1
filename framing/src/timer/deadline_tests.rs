use std::future::pending;
use std::task::Context;

use super::super::{ClockSource, SharedManualClock};
use super::*;

/// A manual clock, a core's wheel on it and one owner's deadline.
fn manual() -> (SharedManualClock, Rc<CoreTimers>, Deadline) {
    let clock = SharedManualClock::new(0);
    let timers = CoreTimers::new(&ClockSource::Manual(clock.clone()), 10);
    let deadline = Deadline::new(&timers);
    (clock, timers, deadline)
}

/// Moves the clock on by `ms`, then runs the ticker's poll.
fn pass(clock: &SharedManualClock, timers: &CoreTimers, ms: u64) {
    clock.advance(ms);
    timers.poll();
}

fn noop() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// A wait whose read is done at once (the request was there).
fn done_at_once(deadline: &Deadline, ms: u64) {
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

#[test]
fn a_wheel_sleep_fires_only_when_the_clock_reaches_it() {
    let (clock, timers, _) = manual();
    let cx = &mut noop();
    let mut sleep = Box::pin(timers.sleep_until(10));
    assert!(sleep.as_mut().poll(cx).is_pending());
    pass(&clock, &timers, 9);
    assert!(sleep.as_mut().poll(cx).is_pending());
    pass(&clock, &timers, 1);
    assert!(sleep.as_mut().poll(cx).is_ready());
    assert!(timers.is_empty());
    // A sleep dropped before its deadline leaves nothing on the wheel.
    let mut early = Box::pin(timers.sleep_until(100));
    assert!(early.as_mut().poll(cx).is_pending());
    drop(early);
    assert!(timers.is_empty());
}

#[test]
fn a_wheel_timeout_prefers_the_future_on_a_tie() {
    let (clock, timers, _) = manual();
    let cx = &mut noop();
    let mut waiting = Box::pin(timers.timeout(5, pending::<()>()));
    assert!(waiting.as_mut().poll(cx).is_pending());
    pass(&clock, &timers, 5);
    assert_eq!(waiting.as_mut().poll(cx), Poll::Ready(None));
    let mut past = Box::pin(timers.sleep_until(5));
    assert!(past.as_mut().poll(cx).is_ready(), "already due");
    let mut ready = Box::pin(timers.timeout(0, std::future::ready(7)));
    assert_eq!(ready.as_mut().poll(cx), Poll::Ready(Some(7)));
    assert!(timers.is_empty());
}
