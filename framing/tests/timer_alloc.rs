//! Proves the timer wheel's hot paths do not allocate: reset (the per-token
//! operation) never, insert/cancel and polling not once the wheel has grown
//! to its high-water mark.
//!
//! The counting allocator is `support/counting_alloc.rs` (per-thread counts).

use framing::timer::{Timer, TimerKey, TimerWheel};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::allocations;

const STREAMS: usize = 10_000;

fn wheel_of_streams() -> (TimerWheel<usize>, Vec<TimerKey>) {
    let mut wheel = TimerWheel::new(); // no capacity hint: grows as it goes
    let stall = Timer::Stall.default_ms();
    let keys = (0..STREAMS)
        .map(|i| wheel.insert(stall + i as u64, i))
        .collect();
    (wheel, keys)
}

#[test]
fn reset_never_allocates() {
    let (mut wheel, keys) = wheel_of_streams();
    let stall = Timer::Stall.default_ms();
    let before = allocations();
    for token in 0..1_000_000u64 {
        let key = keys[token as usize % STREAMS];
        let now = token / 100;
        // Mostly later (the lazy store), every 16th earlier (an O(1) re-link).
        let deadline = if token % 16 == 0 {
            now + 1 + token % 50
        } else {
            now + stall
        };
        assert!(wheel.reset(key, deadline));
    }
    assert_eq!(allocations() - before, 0, "reset allocated");
}

#[test]
fn insert_cancel_and_poll_do_not_allocate_below_the_high_water_mark() {
    let (mut wheel, keys) = wheel_of_streams();
    // Reach the high-water mark once: every timer fires in one batch, which
    // sizes the batch scratch, and frees every slab entry.
    wheel.poll_expired(u64::from(u32::MAX), |_| {});
    drop(keys);
    assert!(wheel.is_empty());

    let before = allocations();
    let mut now = u64::from(u32::MAX);
    for round in 0..20u64 {
        for i in 0..STREAMS as u64 {
            let key = wheel.insert(now + 1 + (i * 7919 + round) % 400_000, i as usize);
            if i % 3 == 0 {
                assert!(wheel.cancel(key).is_some());
            }
        }
        now += 400_001;
        let fired = wheel.poll_expired(now, |_| {});
        assert_eq!(fired + STREAMS.div_ceil(3), STREAMS);
    }
    assert_eq!(
        allocations() - before,
        0,
        "insert, cancel or poll allocated"
    );
}

#[test]
fn with_capacity_never_allocates_up_to_it() {
    let mut wheel = TimerWheel::with_capacity(STREAMS);
    let before = allocations();
    for i in 0..STREAMS as u64 {
        wheel.insert(1_000, i);
    }
    assert_eq!(wheel.poll_expired(1_000, |_| {}), STREAMS);
    assert_eq!(
        allocations() - before,
        0,
        "allocated within the reserved capacity"
    );
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the tests above against a counter that never counts.
    let before = allocations();
    let mut wheel = TimerWheel::new();
    wheel.insert(1, ());
    assert!(allocations() > before);
}
