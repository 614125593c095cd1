//! The per-core timer wheel, its clocks, and the table of IOP timers.
//!
//! Every IOP timer — heartbeat interval and wait per connection, the
//! response-stall watchdog per run or tunnel, close grace, probe deadline,
//! queue timeout, hard deadline, lease expiry (see [`Timer`]) — lives on one
//! [`TimerWheel`] per core. A core with 10k connections and 100k+ tokens per
//! second resets a stall watchdog on every token, so a reset must be O(1),
//! allocation-free, and ideally a single store.
//!
//! # Contract
//! - Time is an input: milliseconds (`u64`) since a [`Clock`]'s origin. The
//!   wheel never reads a clock; the driver passes `now` to
//!   [`TimerWheel::pop_expired`] and sleeps until
//!   [`TimerWheel::next_expiry`]. Tests use a [`ManualClock`]; production
//!   drivers a [`CoarseClock`] refreshed once per event-loop turn.
//! - A timer fires at the first poll with `now >= deadline`, never before.
//!   One poll hands out everything due, in deadline order, ties in insertion
//!   order (a reset keeps a timer's place among equals). A deadline already
//!   past fires at the next poll.
//! - [`TimerKey`]s are generation-fenced: after a timer fired or was
//!   cancelled, its key is stale and [`reset`](TimerWheel::reset) /
//!   [`cancel`](TimerWheel::cancel) / [`deadline`](TimerWheel::deadline)
//!   with it do nothing, even once the slab entry holds another timer.
//!
//! # Lazy extension: one store per token
//! A watchdog is pushed later on every token and almost never fires. So a
//! reset to a *later* deadline only stores the new deadline in the timer's
//! entry; the entry stays in the slot it was filed under. When that slot
//! comes due, an entry whose deadline moved on is re-slotted at its new
//! deadline (counted in [`TimerStats::deferred`]); only one whose deadline
//! has really passed fires. A reset to an *earlier* deadline re-links the
//! entry at once (O(1): the slot lists are doubly linked). Cancelling
//! unlinks at once, so no dead entry lingers in a slot.
//!
//! A timer reset on every token thus costs one store per token plus about
//! one re-slot per timeout period: when its slot comes due the entry moves
//! to its new deadline, filed at the coarsest level that deadline needs. A
//! 300 s stall watchdog sits in level 3 (slots of 2^18 ms ≈ 262 s) and
//! moves one slot on each time its slot comes due: 11 moves over ten
//! streaming periods in `tests.rs`, never a fire. A timer that goes silent
//! cascades down to level 0 and fires at its exact deadline.
//!
//! # Layout
//! Six levels of 64 slots at 1 ms resolution. A slot of level `l` spans
//! `64^l` ms; one level spans 64 of its slots, i.e. one slot of the level
//! above. A timer is filed at the level of the highest base-64 digit in
//! which its time differs from the wheel's time (`elapsed`):
//!
//! ```text
//! level 5  [      ][ 2^30 ms ≈ 12.4 d ][      ] … 64 slots: one rotation = 2^36 ms ≈ 795 d
//!                      │ comes due: its entries cascade into level 4
//! level 4  [      ][ 2^24 ms ≈ 4.7 h  ][      ] …
//! level 3  [      ][ 2^18 ms ≈ 4.4 min][      ] …  ← a 300 s stall watchdog starts here
//! level 2  [      ][ 2^12 ms ≈ 4.1 s  ][      ] …
//! level 1  [      ][ 64 ms            ][      ] …
//! level 0  [1 ms][1 ms][1 ms]  …  64 slots          ← due entries fire from here
//!
//!   each slot: an intrusive doubly linked list of slab indices
//!   each level: a u64 bit mask of non-empty slots (next slot = trailing_zeros)
//!   pending:   entries inserted with a past deadline   ready: entries being handed out
//! ```
//!
//! Entries live in one slab (`Vec`) with a free list; lists link indices,
//! not pointers. Deadlines more than [`WHEEL_SPAN_MS`] ahead are parked at
//! the last slot time the wheel represents, in the top level, and re-slotted
//! from there like a lazily extended timer.
//!
//! # Complexity
//! | operation                       | cost                                              |
//! |---------------------------------|---------------------------------------------------|
//! | `insert`                        | O(1); allocates only past the slab's high-water mark |
//! | `reset` later                   | O(1): one store                                   |
//! | `reset` earlier, `cancel`       | O(1): unlink + link                               |
//! | `next_expiry`                   | O(levels)                                         |
//! | `pop_expired`                   | O(levels) per non-empty slot passed + O(1) per entry moved, O(k log k) to order a batch of k equal deadlines |
//!
//! Polling after a long gap visits only non-empty slots, never every
//! millisecond.
//!
//! # What it does not do
//! No threads, no clock reads, no waking: the driver polls the wheel. It is
//! `!Sync` by intent of use (one per core), not shared between cores.
//!
//! # Invariants (checked by `TimerWheel::assert_invariants` in tests)
//! - Every filed entry has `elapsed < slotted <= deadline` and sits in the
//!   slot a fresh insert at `slotted` would pick; so all slots before
//!   `elapsed` are empty and entries with equal deadlines share one slot.
//! - A level's bit is set iff its slot list is non-empty.
//! - Live entries = linked entries = [`TimerWheel::len`].
//!
//! # Example
//! ```
//! use framing::timer::{Clock, ManualClock, Timer, TimerWheel};
//!
//! let clock = ManualClock::new(0);
//! let mut wheel = TimerWheel::new();
//! let stall = Timer::Stall.default_ms();
//! let watchdog = wheel.insert(clock.now_ms() + stall, "run 7");
//!
//! for _token in 0..1000 {
//!     clock.advance(5);
//!     wheel.reset(watchdog, clock.now_ms() + stall); // one store
//!     assert!(wheel.pop_expired(clock.now_ms()).is_none());
//! }
//! clock.advance(stall);
//! let fired = wheel.pop_expired(clock.now_ms()).unwrap();
//! assert_eq!((fired.key, fired.value), (watchdog, "run 7"));
//! assert!(!wheel.reset(watchdog, 0), "the key is stale once fired");
//! ```

mod clock;
mod core_timers;
mod deadline;
mod pace;
mod source;
mod wheel;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use clock::{Clock, CoarseClock, ManualClock};
pub use core_timers::{CoreTimers, OnTimer};
pub use deadline::Deadline;
pub use pace::{DENSE_STAMPS, TickerPace};
pub use source::{ClockSource, DriverClock, SharedManualClock};
pub use wheel::{
    Expired, LEVELS, MAX_TIME_MS, MAX_TIMERS, SLOTS_PER_LEVEL, TimerKey, TimerStats, TimerWheel,
    WHEEL_SPAN_MS,
};

/// Heartbeat interval: a ping goes out on a link idle this long (F5).
pub const HEARTBEAT_INTERVAL_MS: u64 = 30_000;
/// Heartbeat wait: a link with no pong this long after its ping is closed
/// with reason `heartbeat_timeout` (F5). Longer than the interval, so one
/// late pong is tolerated.
pub const HEARTBEAT_WAIT_MS: u64 = 45_000;
/// Response-stall watchdog default: a run or tunnel with no progress this
/// long ends `response_stalled` (F20). Reset on every token; the wire's
/// per-provider value overrides it.
pub const STALL_TIMEOUT_MS: u64 = proto::DEFAULT_RESPONSE_STALL_TIMEOUT_MS;
/// Close grace: after a side sends its terminal or goodbye, how long it
/// waits for the peer's before closing hard.
pub const CLOSE_GRACE_MS: u64 = 5_000;
/// Health probe deadline: a probe without an answer by then counts as a
/// failed probe.
pub const PROBE_TIMEOUT_MS: u64 = 10_000;
/// Queue timeout: a request waiting for provider capacity this long is
/// refused (the client gets a retryable error instead of waiting forever).
pub const QUEUE_TIMEOUT_MS: u64 = 30_000;
/// Hard deadline: a request's absolute limit, however steadily it streams
/// (30 min covers long reasoning runs; the stall watchdog catches silence
/// much sooner).
pub const HARD_DEADLINE_MS: u64 = 30 * 60_000;
/// Lease expiry: a lease not released by then is reclaimed. It outlives the
/// hard deadline by a minute, so only a lost terminal ever lets it expire.
pub const LEASE_EXPIRY_MS: u64 = HARD_DEADLINE_MS + 60_000;

/// Every IOP timer, by name: the one table of what can fire and when.
///
/// Values are [`TimerWheel`] payloads (with the id of what they guard) and
/// closed-set metric labels ([`Timer::name`]).
///
/// | timer            | per            | default | on expiry                                   |
/// |------------------|----------------|---------|---------------------------------------------|
/// | `Heartbeat`      | connection     | 30 s    | send a heartbeat ping                       |
/// | `HeartbeatWait`  | connection     | 45 s    | close the link, `heartbeat_timeout`         |
/// | `Stall`          | run / tunnel   | 300 s   | end it `response_stalled` (reset per token) |
/// | `CloseGrace`     | connection     | 5 s     | close hard                                  |
/// | `Probe`          | health probe   | 10 s    | count the probe as failed                   |
/// | `Queue`          | queued request | 30 s    | refuse it, retryable                        |
/// | `HardDeadline`   | request        | 30 min  | end it, whatever its progress               |
/// | `LeaseExpiry`    | lease          | 31 min  | reclaim the lease                           |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// Send a heartbeat ping on an idle link ([`HEARTBEAT_INTERVAL_MS`]).
    Heartbeat,
    /// Wait for the heartbeat pong ([`HEARTBEAT_WAIT_MS`]).
    HeartbeatWait,
    /// Response-stall watchdog of a run or tunnel ([`STALL_TIMEOUT_MS`]).
    Stall,
    /// Grace before a hard close ([`CLOSE_GRACE_MS`]).
    CloseGrace,
    /// Health-probe deadline ([`PROBE_TIMEOUT_MS`]).
    Probe,
    /// Queue admission timeout ([`QUEUE_TIMEOUT_MS`]).
    Queue,
    /// A request's absolute deadline ([`HARD_DEADLINE_MS`]).
    HardDeadline,
    /// Lease expiry ([`LEASE_EXPIRY_MS`]).
    LeaseExpiry,
}

impl Timer {
    /// How many timers there are.
    pub const COUNT: usize = 8;

    /// Every timer, in table order ([`Timer::index`] order).
    pub const ALL: [Timer; Timer::COUNT] = [
        Timer::Heartbeat,
        Timer::HeartbeatWait,
        Timer::Stall,
        Timer::CloseGrace,
        Timer::Probe,
        Timer::Queue,
        Timer::HardDeadline,
        Timer::LeaseExpiry,
    ];

    /// Its default duration in milliseconds.
    pub const fn default_ms(self) -> u64 {
        match self {
            Timer::Heartbeat => HEARTBEAT_INTERVAL_MS,
            Timer::HeartbeatWait => HEARTBEAT_WAIT_MS,
            Timer::Stall => STALL_TIMEOUT_MS,
            Timer::CloseGrace => CLOSE_GRACE_MS,
            Timer::Probe => PROBE_TIMEOUT_MS,
            Timer::Queue => QUEUE_TIMEOUT_MS,
            Timer::HardDeadline => HARD_DEADLINE_MS,
            Timer::LeaseExpiry => LEASE_EXPIRY_MS,
        }
    }

    /// Its default duration.
    pub const fn default_duration(self) -> Duration {
        Duration::from_millis(self.default_ms())
    }

    /// Its position in [`Timer::ALL`], for per-timer arrays (quinn's
    /// `TimerTable` shape).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Its metric label / log name, `snake_case`.
    pub const fn name(self) -> &'static str {
        match self {
            Timer::Heartbeat => "heartbeat",
            Timer::HeartbeatWait => "heartbeat_wait",
            Timer::Stall => "stall",
            Timer::CloseGrace => "close_grace",
            Timer::Probe => "probe",
            Timer::Queue => "queue",
            Timer::HardDeadline => "hard_deadline",
            Timer::LeaseExpiry => "lease_expiry",
        }
    }
}
