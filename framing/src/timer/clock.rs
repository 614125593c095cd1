//! Time as an input: the [`Clock`] trait, a [`ManualClock`] for tests and a
//! [`CoarseClock`] for production drivers.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// A monotonic source of time: milliseconds since the clock's origin.
///
/// Core logic (the wheel, watchdogs, sessions) never reads the OS clock; it
/// is handed a `Clock` (or a plain `now_ms`) by its driver, so tests drive it
/// with a [`ManualClock`] and never sleep.
///
/// # Contract
/// `now_ms` never decreases between calls on the same clock. Reading it is
/// cheap enough to do once per token.
pub trait Clock {
    /// Milliseconds since this clock's origin.
    fn now_ms(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

impl<C: Clock + ?Sized> Clock for Rc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

/// A clock that moves only when told to: the clock of every timer test.
///
/// Interior mutability (a [`Cell`]) lets a test hold it by `&` or [`Rc`]
/// while the code under test reads it.
///
/// ```
/// use framing::timer::{Clock, ManualClock};
///
/// let clock = ManualClock::new(0);
/// clock.advance(30_000);
/// assert_eq!(clock.now_ms(), 30_000);
/// ```
#[derive(Debug, Default, Clone)]
pub struct ManualClock {
    now: Cell<u64>,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub const fn new(start_ms: u64) -> Self {
        Self {
            now: Cell::new(start_ms),
        }
    }

    /// Moves the clock `ms` milliseconds forward (saturating at `u64::MAX`).
    pub fn advance(&self, ms: u64) {
        self.now.set(self.now.get().saturating_add(ms));
    }

    /// Moves the clock forward by `d`, rounded down to whole milliseconds.
    pub fn advance_by(&self, d: Duration) {
        self.advance(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    }

    /// Sets the clock to `now_ms`.
    ///
    /// # Panics
    /// If `now_ms` is earlier than the current reading: a monotonic clock
    /// never goes back, and a test that tries has a bug.
    pub fn set(&self, now_ms: u64) {
        let current = self.now.get();
        assert!(
            now_ms >= current,
            "ManualClock::set({now_ms}) would go back from {current}"
        );
        self.now.set(now_ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.get()
    }
}

/// The production clock: a per-core cached reading of [`quanta`]'s clock.
///
/// The core's ticker calls [`refresh`](Self::refresh) each time it wakes,
/// at least once a tick while tokens are stamped densely, and while the
/// ticker is idle each stamp refreshes it ([`super::TickerPace`]).
/// Everything else reads the cached value with [`Clock::now_ms`], one load
/// from a core-local cell. That is the "coarse" part: a dense stamp is at
/// most a tick stale, and costs no clock read at all.
///
/// `refresh` reads `quanta::Clock::now` (the TSC where the CPU has an
/// invariant one, `CLOCK_MONOTONIC` otherwise), tens of nanoseconds.
/// `quanta`'s own `recent()` is not used: it is one process-global atomic kept
/// fresh by an upkeep *thread*, and this crate starts no threads; a per-core
/// refresh gives the same single-load read without one.
///
/// Not `Sync` (the cache is a [`Cell`]): one per core, like the wheel.
#[derive(Debug)]
pub struct CoarseClock {
    source: quanta::Clock,
    origin: quanta::Instant,
    cached_ms: Cell<u64>,
}

impl CoarseClock {
    /// A clock whose origin (reading 0) is now.
    ///
    /// The first `quanta::Clock` of a process calibrates the TSC against the
    /// OS clock (a few milliseconds); create clocks at start-up, not per
    /// request.
    pub fn new() -> Self {
        Self::with_source(quanta::Clock::new())
    }

    /// A clock over `source`, origin now. Tests pass `quanta::Clock::mock()`.
    pub fn with_source(source: quanta::Clock) -> Self {
        let origin = source.now();
        Self {
            source,
            origin,
            cached_ms: Cell::new(0),
        }
    }

    /// Reads the underlying clock, caches the reading and returns it.
    ///
    /// The cached value never decreases, even if the source steps back (a
    /// TSC read on another socket, say).
    pub fn refresh(&self) -> u64 {
        let elapsed = self.source.now().duration_since(self.origin);
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let ms = ms.max(self.cached_ms.get());
        self.cached_ms.set(ms);
        ms
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CoarseClock {
    /// The reading of the last [`refresh`](CoarseClock::refresh): one load.
    fn now_ms(&self) -> u64 {
        self.cached_ms.get()
    }
}
