use std::cell::RefCell;
use std::future::pending;

use std::task::{Context, Waker};

use super::super::{CoarseClock, DENSE_STAMPS, SharedManualClock};
use super::*;

/// Records when it fired.
struct Probe(RefCell<Vec<u64>>);

impl OnTimer for Probe {
    fn on_timer(self: Rc<Self>, now: u64) {
        self.0.borrow_mut().push(now);
    }
}

fn probe() -> Rc<Probe> {
    Rc::new(Probe(RefCell::new(Vec::new())))
}

/// A wheel of `T` on a manual clock ticking every 5 ms.
fn manual<T: ?Sized + OnTimer>() -> (SharedManualClock, Rc<CoreTimers<T>>) {
    let clock = SharedManualClock::new(0);
    let timers = CoreTimers::new(&ClockSource::Manual(clock.clone()), 5);
    (clock, timers)
}

fn noop() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// A runtime's sleep that never ends: the tests ring the ticker instead.
fn never(_: Duration) -> std::future::Pending<()> {
    pending()
}

#[test]
fn one_entry_is_armed_moved_fired_and_disarmed() {
    // A wheel of one concrete type, as the Edge's cores keep.
    let (clock, timers) = manual::<Probe>();
    let probe = probe();
    let target = || Rc::clone(&probe);
    let key = timers.arm(None, Some(100), target);
    assert_eq!(timers.len(), 1);
    let moved = timers.arm(key, Some(200), target);
    assert_eq!(moved, key, "moved later: the same entry");
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
fn an_idle_ticker_sleeps_until_an_earlier_deadline_or_stop_rings_it() {
    let cx = &mut noop();
    let timers = CoreTimers::<Probe>::new(&ClockSource::Coarse, 10);
    let mut ticker = Box::pin(Rc::clone(&timers).run(never));
    // Nothing armed and nothing stamped: no sleep at all, only the bell.
    assert!(ticker.as_mut().poll(cx).is_pending());
    let probe = probe();
    let due = timers.now();
    timers.arm(None, Some(due), || Rc::clone(&probe));
    assert!(ticker.as_mut().poll(cx).is_pending());
    assert_eq!(probe.0.borrow().len(), 1, "the deadline rang the ticker");
    assert!(probe.0.borrow()[0] >= due);
    timers.stop();
    assert!(ticker.as_mut().poll(cx).is_ready(), "stop rings it too");
}

#[test]
fn the_ticker_sleeps_with_the_runtimes_sleep_until_the_next_entry() {
    let cx = &mut noop();
    let (_clock, timers) = manual::<Probe>();
    let probe = probe();
    timers.arm(None, Some(3), || Rc::clone(&probe));
    let slept = Rc::new(RefCell::new(Vec::new()));
    let asked = Rc::clone(&slept);
    let mut ticker = Box::pin(Rc::clone(&timers).run(move |d| {
        asked.borrow_mut().push(d);
        pending::<()>()
    }));
    assert!(ticker.as_mut().poll(cx).is_pending());
    assert_eq!(*slept.borrow(), [Duration::from_millis(3)], "not a tick");
    timers.stop();
    assert!(ticker.as_mut().poll(cx).is_ready());
    assert!(probe.0.borrow().is_empty(), "stopped before it was due");
}

#[test]
fn idle_stamps_read_the_clock_and_dense_ones_start_the_ticker() {
    let cx = &mut noop();
    let (source, tsc) = quanta::Clock::mock();
    let timers =
        CoreTimers::<Probe>::on_clock(DriverClock::Coarse(CoarseClock::with_source(source)), 10);
    let mut ticker = Box::pin(Rc::clone(&timers).run(never));
    assert!(ticker.as_mut().poll(cx).is_pending(), "idle");
    tsc.increment(Duration::from_secs(60));
    assert_eq!(
        timers.coarse_now(),
        60_000,
        "not the reading of a minute ago"
    );
    tsc.increment(Duration::from_millis(5));
    assert_eq!(timers.coarse_now(), 60_005, "idle: every stamp reads");
    // Dense stamps ring the ticker, which then ticks: stamps are one load
    // of the reading its last wake-up took.
    for _ in 2..DENSE_STAMPS {
        timers.coarse_now();
    }
    tsc.increment(Duration::from_millis(1));
    assert!(ticker.as_mut().poll(cx).is_pending());
    assert_eq!(timers.coarse_now(), 60_006, "the wake-up refreshed it");
    tsc.increment(Duration::from_millis(3));
    assert_eq!(timers.coarse_now(), 60_006, "then one load, until the tick");
    timers.stop();
    assert!(ticker.as_mut().poll(cx).is_ready());
}
