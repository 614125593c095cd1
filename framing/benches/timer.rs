//! Timer wheel costs: ns per reset, per insert+cancel, per fired timer, and
//! per idle poll (criterion `Throughput::Elements`, so the report reads as
//! elements/s; ns per element = 1e9 / that).
//!
//! `cargo bench -p framing --bench timer -- --warm-up-time 1 --measurement-time 3`
//!
//! - `reset/floor_vec_store`: baseline, a bare store into a `Vec` per token.
//! - `reset/lazy`: 1M resets spread round-robin over 10k timers, each to
//!   `now + 300 s` with `now` moving 1 ms per 100 resets (100k tokens/s):
//!   the one-store path.
//! - `reset/lazy_with_driver`: the same with the driver polling once per
//!   ms, so the lazy re-slots are paid inside the measurement.
//! - `reset/earlier`: every reset moves the deadline earlier: the re-link path.
//! - `insert_cancel`: one insert and one cancel, 10k timers live.
//! - `fire/{one_jump,every_ms}/{10k,100k}`: N timers due over one minute,
//!   drained by one poll at the end, or by a driver polling every ms.
//! - `idle_poll/{10k,100k}`: `pop_expired` when nothing is due.
//! - `stamp/{ticking,idle}`: one token's activity time, as a run core takes
//!   it: `TickerPace::stamp` then the coarse clock's cached reading (the
//!   ticker ticks) or a fresh clock read (the ticker is idle). What
//!   `DENSE_STAMPS` weighs against a wake-up a tick.

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use framing::timer::{Clock, CoarseClock, DENSE_STAMPS, TickerPace, Timer, TimerKey, TimerWheel};

const STREAMS: usize = 10_000;
const RESETS: u64 = 1_000_000;
/// Tokens per simulated millisecond (100k tokens/s on one core).
const TOKENS_PER_MS: u64 = 100;

fn streams() -> (TimerWheel<u32>, Vec<TimerKey>) {
    let mut wheel = TimerWheel::with_capacity(STREAMS);
    let stall = Timer::Stall.default_ms();
    let keys = (0..STREAMS as u32)
        .map(|i| wheel.insert(stall, i))
        .collect();
    (wheel, keys)
}

fn reset(c: &mut Criterion) {
    let stall = Timer::Stall.default_ms();
    let mut group = c.benchmark_group("timer_reset");
    group.throughput(Throughput::Elements(RESETS));

    // Baseline in the same run: the floor "one store per token" can reach,
    // a bare store of the new deadline into a Vec indexed like the keys.
    group.bench_function("floor_vec_store", |b| {
        let mut deadlines = vec![0u64; STREAMS];
        let mut now = 0u64;
        let mut k = 0;
        b.iter(|| {
            for _ in 0..RESETS / TOKENS_PER_MS {
                now += 1;
                for _ in 0..TOKENS_PER_MS {
                    deadlines[k] = black_box(now + stall);
                    k = if k + 1 == STREAMS { 0 } else { k + 1 };
                }
            }
            black_box(&deadlines);
        });
    });

    group.bench_function("lazy", |b| {
        let (mut wheel, keys) = streams();
        let mut now = 0u64;
        let mut k = 0;
        b.iter(|| {
            for _ in 0..RESETS / TOKENS_PER_MS {
                now += 1;
                for _ in 0..TOKENS_PER_MS {
                    black_box(wheel.reset(keys[k], now + stall));
                    k = if k + 1 == STREAMS { 0 } else { k + 1 };
                }
            }
        });
    });

    group.bench_function("lazy_with_driver", |b| {
        let (mut wheel, keys) = streams();
        let mut now = 0u64;
        let mut k = 0;
        b.iter(|| {
            for _ in 0..RESETS / TOKENS_PER_MS {
                now += 1;
                for _ in 0..TOKENS_PER_MS {
                    black_box(wheel.reset(keys[k], now + stall));
                    k = if k + 1 == STREAMS { 0 } else { k + 1 };
                }
                assert!(wheel.pop_expired(now).is_none());
            }
        });
    });

    group.bench_function("earlier", |b| {
        let (mut wheel, keys) = streams();
        // Within the span, so each timer is filed at its exact deadline.
        let mut far = 1u64 << 35;
        let mut k = 0;
        b.iter(|| {
            for _ in 0..RESETS {
                // Strictly decreasing deadlines: every reset re-links.
                far -= 1;
                black_box(wheel.reset(keys[k], far));
                k = if k + 1 == STREAMS { 0 } else { k + 1 };
            }
        });
    });
    group.finish();
}

fn insert_cancel(c: &mut Criterion) {
    const PAIRS: u64 = 10_000;
    let mut group = c.benchmark_group("timer_insert_cancel");
    group.throughput(Throughput::Elements(PAIRS));
    group.bench_function("10k_live", |b| {
        let (mut wheel, _keys) = streams();
        let mut i = 0u64;
        b.iter(|| {
            for _ in 0..PAIRS {
                i += 1;
                let key = wheel.insert(1 + (i * 7919) % 400_000, 0);
                black_box(wheel.cancel(key));
            }
        });
    });
    group.finish();
}

/// A wheel of `n` timers due over one minute, in scattered order.
fn due_over_a_minute(n: usize) -> TimerWheel<u32> {
    let mut wheel = TimerWheel::with_capacity(n);
    for i in 0..n as u64 {
        wheel.insert(1 + (i * 7919) % 60_000, i as u32);
    }
    wheel
}

fn fire(c: &mut Criterion) {
    let mut group = c.benchmark_group("timer_fire");
    for n in [10_000, 100_000] {
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("one_jump", n), &n, |b, &n| {
            b.iter_batched(
                || due_over_a_minute(n),
                |mut wheel| {
                    assert_eq!(
                        wheel.poll_expired(60_000, |e| {
                            black_box(e);
                        }),
                        n
                    );
                    wheel
                },
                BatchSize::LargeInput,
            );
        });
        group.bench_with_input(BenchmarkId::new("every_ms", n), &n, |b, &n| {
            b.iter_batched(
                || due_over_a_minute(n),
                |mut wheel| {
                    let mut fired = 0;
                    for now in 1..=60_000 {
                        fired += wheel.poll_expired(now, |e| {
                            black_box(e);
                        });
                    }
                    assert_eq!(fired, n);
                    wheel
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

fn idle_poll(c: &mut Criterion) {
    const POLLS: u64 = 10_000;
    let mut group = c.benchmark_group("timer_idle_poll");
    group.throughput(Throughput::Elements(POLLS));
    for n in [10_000u64, 100_000] {
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            let mut wheel = TimerWheel::with_capacity(n as usize);
            for i in 0..n {
                wheel.insert(1 << 40 | i, ());
            }
            let mut now = 0;
            b.iter(|| {
                for _ in 0..POLLS {
                    now += 1;
                    black_box(wheel.pop_expired(now));
                }
            });
        });
    }
    group.finish();
}

/// Puts `pace` in the state the `stamp` rows measure: two plans with no
/// stamp between them send it idle; `DENSE_STAMPS` then a plan start it
/// ticking.
fn settle(pace: &TickerPace, ticking: bool) {
    pace.plan(0, None);
    pace.plan(0, None);
    if ticking {
        for _ in 0..DENSE_STAMPS {
            pace.stamp();
        }
        pace.plan(0, None);
    }
}

fn stamp(c: &mut Criterion) {
    const STAMPS: u64 = 10_000;
    let mut group = c.benchmark_group("timer_stamp");
    group.throughput(Throughput::Elements(STAMPS));
    for (name, ticking) in [("ticking", true), ("idle", false)] {
        group.bench_function(name, |b| {
            let clock = CoarseClock::new();
            let pace = TickerPace::new(10, false);
            b.iter(|| {
                settle(&pace, ticking);
                for _ in 0..STAMPS {
                    let at = if pace.stamp() {
                        clock.refresh()
                    } else {
                        clock.now_ms()
                    };
                    black_box(at);
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, reset, insert_cancel, fire, idle_poll, stamp);
criterion_main!(benches);
