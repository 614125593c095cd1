//! Model test of the timer wheel: random sequences of insert, reset, cancel
//! and time steps, run against the wheel and against a `BTreeMap` keyed by
//! `(deadline, insertion seq)`. After every step both must agree on what
//! fired (and in which order), on `len`, and on every key's deadline; the
//! wheel's structural invariants must hold; `next_expiry` must never be later
//! than the model's earliest deadline.

use std::collections::{BTreeMap, HashMap};

use framing::timer::{MAX_TIME_MS, TimerKey, TimerWheel, WHEEL_SPAN_MS};
use proptest::prelude::*;

#[derive(Debug, Default)]
struct Model {
    now: u64,
    next_seq: u64,
    by_time: BTreeMap<(u64, u64), (TimerKey, u32)>,
    by_key: HashMap<TimerKey, (u64, u64)>,
}

impl Model {
    fn insert(&mut self, key: TimerKey, deadline: u64, value: u32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_time.insert((deadline, seq), (key, value));
        assert!(
            self.by_key.insert(key, (deadline, seq)).is_none(),
            "the wheel reused a live key"
        );
    }

    fn reset(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some(entry) = self.by_key.get_mut(&key) else {
            return false;
        };
        let value = self.by_time.remove(entry).expect("indexed both ways").1;
        entry.0 = deadline;
        self.by_time.insert(*entry, (key, value));
        true
    }

    fn cancel(&mut self, key: TimerKey) -> Option<u32> {
        let at = self.by_key.remove(&key)?;
        Some(self.by_time.remove(&at).expect("indexed both ways").1)
    }

    fn poll(&mut self, now: u64) -> Vec<(TimerKey, u64, u32)> {
        self.now = self.now.max(now);
        let mut fired = Vec::new();
        while let Some(entry) = self.by_time.first_entry() {
            let (deadline, _) = *entry.key();
            if deadline > self.now {
                break;
            }
            let (key, value) = entry.remove();
            self.by_key.remove(&key);
            fired.push((key, deadline, value));
        }
        fired
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Insert at `now + ahead - behind` (behind: a deadline in the past).
    Insert {
        ahead: u64,
        behind: u64,
    },
    /// Reset the `pick`-th key ever issued (maybe stale).
    Reset {
        pick: usize,
        ahead: u64,
        behind: u64,
    },
    Cancel {
        pick: usize,
    },
    /// Move time on and poll.
    Advance(u64),
    /// Poll at whatever `next_expiry` says, as a driver does.
    PollAtNextExpiry,
}

fn ahead() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..64u64,
        4 => 0..5_000u64,
        3 => 0..400_000u64,
        1 => 0..(1u64 << 30),
        1 => (WHEEL_SPAN_MS - 70)..(WHEEL_SPAN_MS + 70),
        1 => 0..(1u64 << 40),
    ]
}

fn behind() -> impl Strategy<Value = u64> {
    prop_oneof![8 => Just(0u64), 1 => 0..100u64, 1 => 0..1_000_000u64]
}

fn step() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0..3u64,
        3 => 0..100u64,
        2 => 0..5_000u64,
        2 => 0..1_000_000u64,
        1 => 0..(1u64 << 37),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (ahead(), behind()).prop_map(|(ahead, behind)| Op::Insert { ahead, behind }),
        5 => (any::<usize>(), ahead(), behind())
            .prop_map(|(pick, ahead, behind)| Op::Reset { pick, ahead, behind }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        4 => step().prop_map(Op::Advance),
        2 => Just(Op::PollAtNextExpiry),
    ]
}

fn deadline(now: u64, ahead: u64, behind: u64) -> u64 {
    (now + ahead).saturating_sub(behind)
}

/// Runs `ops` on both; the O(n) checks (invariants, every key's deadline)
/// run after every `full_check_every`-th step.
fn run(ops: &[Op], full_check_every: usize) -> Result<(), TestCaseError> {
    let mut wheel = TimerWheel::new();
    let mut model = Model::default();
    let mut keys: Vec<TimerKey> = Vec::new();
    let mut now = 0u64;
    for (n, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert { ahead, behind } => {
                let at = deadline(now, ahead, behind);
                let value = n as u32;
                let key = wheel.insert(at, value);
                model.insert(key, at, value);
                keys.push(key);
            }
            Op::Reset {
                pick,
                ahead,
                behind,
            } if !keys.is_empty() => {
                let key = keys[pick % keys.len()];
                let at = deadline(now, ahead, behind);
                prop_assert_eq!(
                    wheel.reset(key, at),
                    model.reset(key, at),
                    "reset {:?}",
                    key
                );
            }
            Op::Cancel { pick } if !keys.is_empty() => {
                let key = keys[pick % keys.len()];
                prop_assert_eq!(wheel.cancel(key), model.cancel(key), "cancel {:?}", key);
            }
            Op::Reset { .. } | Op::Cancel { .. } => {}
            Op::Advance(by) => {
                now += by;
                poll_both(&mut wheel, &mut model, now)?;
            }
            Op::PollAtNextExpiry => {
                if let Some(at) = wheel.next_expiry() {
                    now = now.max(at);
                    poll_both(&mut wheel, &mut model, now)?;
                }
            }
        }
        prop_assert_eq!(wheel.len(), model.by_key.len());
        prop_assert_eq!(wheel.next_expiry().is_some(), !model.by_key.is_empty());
        if let (Some(at), Some((&(earliest, _), _))) =
            (wheel.next_expiry(), model.by_time.first_key_value())
        {
            prop_assert!(
                at <= earliest,
                "next_expiry {} after the earliest deadline {}",
                at,
                earliest
            );
        }
        if n % full_check_every == 0 {
            wheel.assert_invariants();
            for key in &keys {
                prop_assert_eq!(wheel.deadline(*key), model.by_key.get(key).map(|&(d, _)| d));
            }
        }
    }
    // Drain to the end: everything left fires, in order.
    poll_both(&mut wheel, &mut model, MAX_TIME_MS)?;
    prop_assert!(wheel.is_empty());
    Ok(())
}

fn poll_both(
    wheel: &mut TimerWheel<u32>,
    model: &mut Model,
    now: u64,
) -> Result<(), TestCaseError> {
    let mut fired = Vec::new();
    wheel.poll_expired(now, |e| fired.push((e.key, e.deadline, e.value)));
    let expected = model.poll(now);
    prop_assert_eq!(fired, expected, "fired at {}", now);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_wheel_matches_a_sorted_map(ops in proptest::collection::vec(op(), 1..300)) {
        run(&ops, 1)?;
    }
}

/// The same model on a long fixed-seed run: thousands of timers alive at
/// once, so slots hold many entries and the slab recycles heavily.
#[test]
fn a_long_busy_run_matches_the_model() {
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut ops = Vec::new();
    for _ in 0..20_000 {
        let r = next();
        let ahead = match r % 5 {
            0 => r >> 8 & 63,
            1 => r >> 8 & 4_095,
            2 => r >> 8 & 0x7_ffff,
            3 => 300_000 + (r >> 8 & 1_023),
            _ => r >> 8 & ((1 << 38) - 1),
        };
        let pick = (next() >> 1) as usize;
        ops.push(match next() % 10 {
            0..=3 => Op::Insert { ahead, behind: 0 },
            4..=6 => Op::Reset {
                pick,
                ahead,
                behind: 0,
            },
            7 => Op::Cancel { pick },
            _ => Op::Advance(next() % 2_000),
        });
    }
    run(&ops, 97).unwrap();
}
