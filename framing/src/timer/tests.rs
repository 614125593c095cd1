use std::time::Duration;

use super::*;

/// Everything due at `now`, as (deadline, value).
fn drain<T>(wheel: &mut TimerWheel<T>, now: u64) -> Vec<(u64, T)> {
    let mut out = Vec::new();
    wheel.poll_expired(now, |e| out.push((e.deadline, e.value)));
    wheel.assert_invariants();
    out
}

/// Runs the driver loop (poll at `next_expiry`) until `key` fires; returns
/// the time it fired at and how many polls fired nothing.
fn drive_until_fired<T>(wheel: &mut TimerWheel<T>, key: TimerKey) -> (u64, usize) {
    let mut empty_polls = 0;
    loop {
        let at = wheel.next_expiry().expect("a live timer has an expiry");
        let deadline = wheel.deadline(key).expect("still live");
        assert!(
            at <= deadline,
            "next_expiry {at} is after the deadline {deadline}"
        );
        let mut fired_key = false;
        wheel.poll_expired(at, |e| fired_key |= e.key == key);
        wheel.assert_invariants();
        if fired_key {
            return (at, empty_polls);
        }
        empty_polls += 1;
        assert!(empty_polls < 64, "the driver loop does not converge");
    }
}

/// Offsets around every level boundary, and past the span.
fn boundary_offsets() -> Vec<u64> {
    let mut offsets = vec![1, 2];
    for level in 1..=LEVELS as u32 {
        let edge = 1u64 << (6 * level);
        offsets.extend([edge - 1, edge, edge + 1]);
    }
    offsets.extend([300_000, WHEEL_SPAN_MS * 3 + 17, 1 << 40]);
    offsets
}

#[test]
fn fires_exactly_at_its_deadline_never_before() {
    for start in [0, 12_345_678, WHEEL_SPAN_MS - 5, (1 << 40) + 63] {
        for offset in boundary_offsets() {
            let mut wheel = TimerWheel::new();
            assert!(drain(&mut wheel, start).is_empty());
            let deadline = start + offset;
            let key = wheel.insert(deadline, 7);
            assert!(
                drain(&mut wheel, deadline - 1).is_empty(),
                "fired early: +{offset} from {start}"
            );
            let (at, empty_polls) = drive_until_fired(&mut wheel, key);
            assert_eq!(at, deadline, "+{offset} from {start}");
            assert!(
                empty_polls <= 2 * LEVELS,
                "{empty_polls} empty polls for +{offset}"
            );
            assert!(wheel.is_empty());
        }
    }
}

#[test]
fn a_past_deadline_fires_at_the_next_poll() {
    let mut wheel = TimerWheel::new();
    drain(&mut wheel, 1_000);
    let late = wheel.insert(10, "late");
    let now = wheel.insert(1_000, "now");
    assert_eq!(wheel.next_expiry(), Some(10));
    assert_eq!(drain(&mut wheel, 1_000), [(10, "late"), (1_000, "now")]);
    assert!(!wheel.contains(late) && !wheel.contains(now));
}

#[test]
fn reset_later_defers_with_one_store() {
    let mut wheel = TimerWheel::new();
    let key = wheel.insert(100, ());
    assert!(wheel.reset(key, 5_000));
    assert_eq!(
        wheel.stats().relinked,
        0,
        "a later deadline must not re-link"
    );
    assert!(drain(&mut wheel, 4_999).is_empty());
    // The old slot came due and moved it towards 5000, cascading down.
    let s = wheel.stats();
    assert!(
        (1..=LEVELS as u64).contains(&(s.deferred + s.cascaded)),
        "{s:?}"
    );
    assert_eq!(drain(&mut wheel, 5_000), [(5_000, ())]);
}

#[test]
fn reset_earlier_advances() {
    let mut wheel = TimerWheel::new();
    let key = wheel.insert(300_000, ());
    assert!(wheel.reset(key, 70));
    assert_eq!(wheel.stats().relinked, 1);
    assert_eq!(
        wheel.next_expiry(),
        Some(64),
        "the level-1 slot holding 70 is due at 64"
    );
    assert!(drain(&mut wheel, 69).is_empty());
    assert_eq!(drain(&mut wheel, 70), [(70, ())]);

    // Earlier than the wheel's time: due at the next poll.
    let key = wheel.insert(300_000, ());
    assert!(wheel.reset(key, 3));
    assert_eq!(drain(&mut wheel, 70), [(3, ())]);
}

#[test]
fn reset_back_and_forth_fires_at_the_last_deadline() {
    let mut wheel = TimerWheel::new();
    let key = wheel.insert(1_000, ());
    for deadline in [9_000, 50, 400_000, 2_000, 2_001, 1_999] {
        assert!(wheel.reset(key, deadline));
        wheel.assert_invariants();
    }
    assert!(drain(&mut wheel, 1_998).is_empty());
    assert_eq!(drain(&mut wheel, 1_999), [(1_999, ())]);
}

#[test]
fn cancel_prevents_firing() {
    let mut wheel = TimerWheel::new();
    let keep = wheel.insert(500, 1);
    let gone = wheel.insert(500, 2);
    assert_eq!(wheel.cancel(gone), Some(2));
    assert_eq!(wheel.cancel(gone), None);
    assert_eq!(wheel.len(), 1);
    assert_eq!(drain(&mut wheel, 10_000), [(500, 1)]);
    assert!(!wheel.contains(keep));
    assert_eq!(wheel.next_expiry(), None);
}

#[test]
fn arm_keeps_one_entry_per_owner() {
    let mut wheel = TimerWheel::new();
    let made = std::cell::Cell::new(0);
    let value = || {
        made.set(made.get() + 1);
        "conn"
    };
    let key = wheel.arm(None, Some(100), value);
    assert_eq!(wheel.arm(key, Some(200), value), key, "moved, same entry");
    assert_eq!((wheel.len(), made.get()), (1, 1));
    assert_eq!(drain(&mut wheel, 200), [(200, "conn")]);
    // Its key is stale once fired: arming again makes a new entry.
    let key = wheel.arm(key, Some(300), value);
    assert_eq!((wheel.len(), made.get()), (1, 2));
    assert_eq!(wheel.arm(key, None, value), None, "disarmed");
    assert!(wheel.is_empty());
    assert_eq!(wheel.arm(None, None, value), None);
    assert_eq!(made.get(), 2);
}

#[test]
fn a_stale_key_is_rejected_even_after_its_entry_is_reused() {
    let mut wheel = TimerWheel::new();
    let fired = wheel.insert(10, "first");
    drain(&mut wheel, 10);
    let reused = wheel.insert(20, "second");
    assert_eq!(reused.index, fired.index, "the slab reuses the freed entry");
    assert!(!wheel.reset(fired, 1));
    assert_eq!(wheel.cancel(fired), None);
    assert_eq!(wheel.deadline(fired), None);
    assert_eq!(wheel.get(fired), None);
    assert_eq!(wheel.get(reused), Some(&"second"));

    let cancelled = reused;
    wheel.cancel(cancelled);
    let third = wheel.insert(30, "third");
    assert!(!wheel.reset(cancelled, 5));
    assert_eq!(wheel.cancel(cancelled), None);
    assert_eq!(drain(&mut wheel, 100), [(30, "third")]);
    assert!(!wheel.contains(third));
}

#[test]
fn an_entry_with_an_exhausted_generation_is_retired() {
    let mut wheel = TimerWheel::new();
    let key = wheel.insert(10, 0u32);
    let key = wheel.set_generation_for_test(key, u32::MAX - 1);
    assert_eq!(wheel.cancel(key), Some(0));
    let next = wheel.insert(10, 1);
    assert_ne!(
        next.index, key.index,
        "an exhausted entry must never be handed out again"
    );
    assert!(!wheel.reset(key, 1));
    wheel.assert_invariants();
}

#[test]
fn equal_deadlines_fire_in_insertion_order_whatever_route_they_took() {
    const AT: u64 = 70_000;
    let mut wheel = TimerWheel::new();
    let mut order = Vec::new();
    // Inserted early (filed high, cascades), lazily extended onto AT from an
    // earlier slot, moved earlier onto AT, and inserted late (filed low).
    order.push(wheel.insert(AT, 0));
    let lazy = wheel.insert(AT - 30_000, 1);
    order.push(lazy);
    let early = wheel.insert(AT + 900_000, 2);
    order.push(early);
    for i in 3..50 {
        order.push(wheel.insert(AT, i));
    }
    assert!(wheel.reset(lazy, AT));
    assert!(wheel.reset(early, AT));
    drain(&mut wheel, AT - 10);
    for i in 50..60 {
        order.push(wheel.insert(AT, i));
    }
    let fired: Vec<u32> = drain(&mut wheel, AT).into_iter().map(|(_, v)| v).collect();
    assert_eq!(fired, (0..60).collect::<Vec<_>>());
}

#[test]
fn one_poll_after_a_big_jump_fires_everything_in_order() {
    let mut wheel = TimerWheel::new();
    let mut expected = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..10_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let deadline = x % (1 << 38); // across the span
        wheel.insert(deadline, i);
        expected.push((deadline, i));
    }
    expected.sort();
    assert_eq!(drain(&mut wheel, 1 << 38), expected);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiry(), None);
}

#[test]
fn next_expiry_is_exact_for_near_timers_and_a_lower_bound_for_far_ones() {
    let mut wheel = TimerWheel::new();
    assert_eq!(wheel.next_expiry(), None);
    wheel.insert(40, ());
    assert_eq!(wheel.next_expiry(), Some(40));
    let far = wheel.insert(300_000, ());
    drain(&mut wheel, 40);
    let at = wheel.next_expiry().unwrap();
    assert!(at > 40 && at <= 300_000);
    assert_eq!(drive_until_fired(&mut wheel, far).0, 300_000);
    // A due entry means "poll now".
    wheel.insert(5, ());
    assert!(wheel.next_expiry().unwrap() <= wheel.elapsed());
}

#[test]
fn changes_while_draining_are_honoured() {
    let mut wheel = TimerWheel::new();
    let keys: Vec<_> = (0..4).map(|i| wheel.insert(100, i)).collect();
    let first = wheel.pop_expired(100).unwrap();
    assert_eq!(first.value, 0);
    // The rest are due and waiting to be handed out; the owner still holds
    // their keys and may cancel or push them back.
    assert_eq!(wheel.next_expiry(), Some(100));
    assert_eq!(wheel.cancel(keys[1]), Some(1));
    assert!(wheel.reset(keys[2], 200));
    let late = wheel.insert(50, 9);
    wheel.assert_invariants();
    let rest: Vec<u32> = drain(&mut wheel, 100).into_iter().map(|(_, v)| v).collect();
    assert_eq!(rest, [3, 9]);
    assert!(!wheel.contains(late));
    assert_eq!(drain(&mut wheel, 200), [(200, 2)]);
}

#[test]
fn time_never_goes_back() {
    let mut wheel = TimerWheel::new();
    drain(&mut wheel, 1_000);
    wheel.insert(1_500, ());
    assert!(
        drain(&mut wheel, 10).is_empty(),
        "an older now counts as the wheel's time"
    );
    assert_eq!(wheel.elapsed(), 1_000);
    assert_eq!(drain(&mut wheel, 1_500).len(), 1);
}

#[test]
fn times_past_the_limit_are_clamped() {
    let mut wheel = TimerWheel::new();
    let never = wheel.insert(u64::MAX, ());
    assert_eq!(wheel.deadline(never), Some(MAX_TIME_MS));
    let soon = wheel.insert(10, ());
    assert!(wheel.reset(soon, u64::MAX - 1));
    assert!(drain(&mut wheel, MAX_TIME_MS - 1).is_empty());
    assert_eq!(drain(&mut wheel, u64::MAX).len(), 2);
    assert_eq!(wheel.elapsed(), MAX_TIME_MS);
}

#[test]
fn a_rotation_boundary_of_the_top_level_is_crossed_in_order() {
    let mut wheel = TimerWheel::new();
    drain(&mut wheel, WHEEL_SPAN_MS - 3);
    let deadlines = [
        WHEEL_SPAN_MS - 2,
        WHEEL_SPAN_MS,
        WHEEL_SPAN_MS + 70,
        2 * WHEEL_SPAN_MS - 4,
    ];
    for (i, d) in deadlines.iter().enumerate().rev() {
        wheel.insert(*d, i);
    }
    let mut fired = Vec::new();
    while let Some(at) = wheel.next_expiry() {
        for (d, _) in drain(&mut wheel, at) {
            assert_eq!(d, at, "fired late");
            fired.push(d);
        }
    }
    assert_eq!(fired, deadlines);
}

/// postmortem-style guard for the lazy scheme: 1M resets of one watchdog
/// must cost 1M stores, not 1M re-links, and must not fire it early.
#[test]
fn a_million_resets_then_one_poll_fire_nothing_and_move_it_at_most_a_few_times() {
    let mut wheel = TimerWheel::new();
    let stall = Timer::Stall.default_ms();
    let key = wheel.insert(stall, ());
    let mut now = 0;
    for token in 0..1_000_000u64 {
        now = token / 4; // 4 tokens per ms: 250 s of streaming
        assert!(wheel.reset(key, now + stall));
    }
    let before = wheel.stats();
    assert!(drain(&mut wheel, now).is_empty());
    let after = wheel.stats();
    assert_eq!(after.relinked, 0, "a later deadline re-linked the timer");
    let moves = (after.deferred + after.cascaded) - (before.deferred + before.cascaded);
    assert!(moves <= LEVELS as u64, "{moves} re-slots for one poll");
    assert_eq!(wheel.deadline(key), Some(now + stall));
    assert!(drain(&mut wheel, now + stall - 1).is_empty());
    assert_eq!(drain(&mut wheel, now + stall).len(), 1);
}

#[test]
fn a_streaming_watchdog_moves_a_few_times_per_timeout_period() {
    // One token per ms for 3000 s, the driver polling every ms: the watchdog
    // never fires and is re-slotted a bounded number of times per period.
    let mut wheel = TimerWheel::new();
    let stall = Timer::Stall.default_ms();
    let key = wheel.insert(stall, ());
    let periods = 10;
    for now in 1..=periods * stall {
        assert!(wheel.reset(key, now + stall));
        assert!(wheel.pop_expired(now).is_none());
    }
    let s = wheel.stats();
    let moves = s.deferred + s.cascaded;
    assert_eq!(s.relinked, 0);
    // Each time its level-3 slot (2^18 ms wide) comes due it moves one slot
    // on: about one move per 262 s (11 here); a carry into level 4 adds one.
    assert!(
        moves <= 2 * periods,
        "{moves} re-slots over {periods} periods ({s:?})"
    );
    wheel.assert_invariants();
}

#[test]
fn ten_thousand_streams_with_interleaved_tokens_fire_only_the_silent_ones() {
    let mut wheel = TimerWheel::with_capacity(10_000);
    let stall = 1_000;
    let keys: Vec<_> = (0..10_000u32).map(|i| wheel.insert(stall, i)).collect();
    // Every stream but the multiples of 7 gets a token every 100 ms.
    let mut fired = Vec::new();
    for now in (100..=3_000).step_by(100) {
        for (i, &key) in keys.iter().enumerate() {
            if i % 7 != 0 {
                wheel.reset(key, now + stall);
            }
        }
        wheel.poll_expired(now, |e| fired.push((e.deadline, e.value)));
    }
    let silent: Vec<_> = (0..10_000u32)
        .filter(|i| i % 7 == 0)
        .map(|i| (stall, i))
        .collect();
    assert_eq!(fired, silent);
    assert_eq!(wheel.len(), 10_000 - silent.len());
    wheel.assert_invariants();
}

#[test]
fn the_timer_table_is_consistent() {
    for (i, timer) in Timer::ALL.iter().enumerate() {
        assert_eq!(timer.index(), i);
        assert!(timer.default_ms() > 0);
        assert_eq!(
            timer.default_duration(),
            Duration::from_millis(timer.default_ms())
        );
    }
    let mut names: Vec<_> = Timer::ALL.iter().map(|t| t.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Timer::COUNT, "metric labels must be distinct");
    assert_eq!(Timer::Heartbeat.default_ms(), 30_000);
    assert_eq!(Timer::HeartbeatWait.default_ms(), 45_000);
    assert_eq!(
        Timer::Stall.default_ms(),
        proto::DEFAULT_RESPONSE_STALL_TIMEOUT_MS
    );
    assert!(Timer::LeaseExpiry.default_ms() > Timer::HardDeadline.default_ms());
    assert!(Timer::HardDeadline.default_ms() > Timer::Stall.default_ms());
}

#[test]
fn manual_clock_moves_only_forward() {
    let clock = ManualClock::new(5);
    clock.advance(10);
    clock.advance_by(Duration::from_micros(2_500));
    assert_eq!(clock.now_ms(), 17);
    clock.set(17);
    clock.set(40);
    fn read(clock: impl Clock) -> u64 {
        clock.now_ms()
    }
    let shared = std::rc::Rc::new(clock);
    assert_eq!(read(&*shared), 40);
    assert_eq!(read(shared.clone()), 40);
    shared.advance(1);
    assert_eq!(read(shared), 41);
    let backwards = std::panic::catch_unwind(|| ManualClock::new(9).set(8));
    assert!(backwards.is_err());
}

#[test]
fn coarse_clock_reads_its_source_only_on_refresh() {
    let (source, mock) = quanta::Clock::mock();
    mock.increment(Duration::from_secs(7)); // the origin is wherever the source is
    let clock = CoarseClock::with_source(source);
    assert_eq!(clock.now_ms(), 0);
    mock.increment(Duration::from_micros(1_500));
    assert_eq!(clock.now_ms(), 0, "now_ms is the cached reading");
    assert_eq!(clock.refresh(), 1);
    assert_eq!(clock.now_ms(), 1);
    mock.increment(Duration::from_secs(30));
    assert_eq!(clock.refresh(), 30_001);
    mock.decrement(Duration::from_secs(10));
    assert_eq!(
        clock.refresh(),
        30_001,
        "a source stepping back does not move it back"
    );
}

#[test]
fn coarse_clock_over_the_real_clock_is_monotonic() {
    let clock = CoarseClock::new();
    let mut last = 0;
    for _ in 0..1_000 {
        let now = clock.refresh();
        assert!(now >= last);
        last = now;
    }
}

#[test]
fn take_expired_hands_out_the_due_values_in_deadline_order() {
    let mut wheel = TimerWheel::new();
    wheel.insert(30, "c");
    wheel.insert(10, "a");
    wheel.insert(20, "b");
    wheel.insert(100, "later");
    assert_eq!(wheel.take_expired(30), ["a", "b", "c"]);
    assert_eq!(wheel.len(), 1);
    assert!(wheel.take_expired(99).is_empty());
    assert_eq!(wheel.take_expired(100), ["later"]);
    assert!(wheel.is_empty());
}
