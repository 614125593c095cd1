//! Stall watchdog cost per token with 100k concurrent watched streams on
//! one core (F21, DESIGN.md "Timers"). Results: `bench-results/watchdog.md`.
//!
//! `cargo bench -p node-runner --bench watchdog`
//!
//! Every group resets 100k streams round-robin, 1M tokens per iteration,
//! with the core's clock moving 1 ms per 100 tokens (100k tokens/s) and the
//! wheel polled every simulated ms, so the lazy re-arms (one per stream per
//! timeout period) are paid inside the measurement. Throughput is tokens;
//! ns per token = 1e9 / (elements/s).
//!
//! - `floor_vec_store`: baseline in the same run, a bare store of "now"
//!   into a `Vec<Cell<u64>>` per token.
//! - `activity_touch`: the production path, `Activity::touch` (one load of
//!   the coarse time, one store), 300 s timeout.
//! - `activity_touch_2s_timeout`: the same with a 2 s timeout while each
//!   stream sees a token every simulated second, so every stream is
//!   re-armed every 1–2 s: the re-arm path at its busiest short of firing.
//! - `wheel_reset`: the alternative, moving the wheel entry on every token
//!   (`CoreTimers::arm`, a lazy later-deadline reset).

use std::cell::Cell;
use std::hint::black_box;
use std::rc::Rc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use framing::timer::{ClockSource, SharedManualClock, Timer, TimerKey};
use framing::timer::{CoreTimers, OnTimer};
use node_runner::stall::Activity;

const STREAMS: usize = 100_000;
const TOKENS: u64 = 1_000_000;
/// Tokens per simulated millisecond (100k tokens/s on one core).
const TOKENS_PER_MS: u64 = 100;

fn wheel() -> (SharedManualClock, Rc<CoreTimers>) {
    let clock = SharedManualClock::new(0);
    let timers = CoreTimers::new(&ClockSource::Manual(clock.clone()), 1);
    (clock, timers)
}

/// Drives `token(k)` for 1M tokens over `STREAMS` streams, the clock moving
/// and the wheel polled every `TOKENS_PER_MS`.
fn tokens(
    clock: &SharedManualClock,
    timers: &CoreTimers,
    k: &mut usize,
    mut token: impl FnMut(usize),
) {
    for _ in 0..TOKENS / TOKENS_PER_MS {
        clock.advance(1);
        timers.poll();
        for _ in 0..TOKENS_PER_MS {
            token(*k);
            *k = if *k + 1 == STREAMS { 0 } else { *k + 1 };
        }
    }
}

fn touch(c: &mut Criterion) {
    let stall = Timer::Stall.default_ms();
    let mut group = c.benchmark_group("watchdog_100k_streams");
    group.throughput(Throughput::Elements(TOKENS));

    group.bench_function("floor_vec_store", |b| {
        let (clock, timers) = wheel();
        let last: Vec<Cell<u64>> = (0..STREAMS).map(|_| Cell::new(0)).collect();
        let mut k = 0;
        b.iter(|| {
            tokens(&clock, &timers, &mut k, |k| {
                last[k].set(black_box(timers.coarse_now()));
            });
        });
    });

    for (name, timeout) in [
        ("activity_touch", stall),
        ("activity_touch_2s_timeout", 2_000),
    ] {
        group.bench_function(name, |b| {
            let (clock, timers) = wheel();
            let streams: Vec<Activity> = (0..STREAMS)
                .map(|_| Activity::start(&timers, timeout))
                .collect();
            let mut k = 0;
            b.iter(|| {
                tokens(&clock, &timers, &mut k, |k| black_box(&streams[k]).touch());
            });
            assert!(
                streams.iter().all(|s| !s.has_fired()),
                "a stream with a token every second never stalls"
            );
            assert_eq!(timers.len(), STREAMS);
        });
    }

    group.bench_function("wheel_reset", |b| {
        struct Never;
        impl OnTimer for Never {
            fn on_timer(self: Rc<Self>, _now: u64) {}
        }
        let (clock, timers) = wheel();
        let target: Rc<dyn OnTimer> = Rc::new(Never);
        let mut keys: Vec<Option<TimerKey>> = (0..STREAMS)
            .map(|_| timers.arm(None, Some(stall), || Rc::clone(&target)))
            .collect();
        let mut k = 0;
        b.iter(|| {
            tokens(&clock, &timers, &mut k, |k| {
                let at = timers.coarse_now() + stall;
                keys[k] = timers.arm(keys[k], Some(at), || Rc::clone(&target));
            });
        });
    });
    group.finish();
}

criterion_group!(benches, touch);
criterion_main!(benches);
