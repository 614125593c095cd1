//! Choosing a clock for a driver: the production coarse clock, or one manual
//! clock shared by every thread of a test.
//!
//! Link drivers run on several threads (one runtime per core) while a test
//! wants to move time for all of them at once, with no sleeps. A
//! [`ClockSource`] is the `Send` recipe; each core turns it into its own
//! [`DriverClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::clock::{Clock, CoarseClock};

/// A manual clock that any number of threads can read and a test can move.
///
/// Like [`super::ManualClock`], but `Send + Sync` (an atomic), for drivers
/// whose cores are threads.
#[derive(Debug, Clone, Default)]
pub struct SharedManualClock {
    now: Arc<AtomicU64>,
}

impl SharedManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    /// Moves the clock `ms` forward, for every reader.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for SharedManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// The recipe for a driver's clock; cheap to clone and `Send`.
#[derive(Debug, Clone, Default)]
pub enum ClockSource {
    /// Each core builds its own [`CoarseClock`].
    #[default]
    Coarse,
    /// Every core reads this shared manual clock (tests).
    Manual(SharedManualClock),
}

/// One core's clock, built from a [`ClockSource`].
#[derive(Debug)]
pub enum DriverClock {
    /// The production clock.
    Coarse(CoarseClock),
    /// A test's shared manual clock.
    Manual(SharedManualClock),
}

impl DriverClock {
    /// Builds this core's clock.
    pub fn new(source: &ClockSource) -> Self {
        match source {
            ClockSource::Coarse => Self::Coarse(CoarseClock::new()),
            ClockSource::Manual(clock) => Self::Manual(clock.clone()),
        }
    }

    /// Whether this is a test's manual clock, which moves from outside the
    /// core (its ticker must keep ticking to see it: [`super::TickerPace`]).
    pub fn is_manual(&self) -> bool {
        matches!(self, Self::Manual(_))
    }

    /// Reads the underlying clock now (once per driver turn) and returns it;
    /// [`Clock::now_ms`] then returns the same reading until the next refresh.
    pub fn refresh(&self) -> u64 {
        match self {
            Self::Coarse(clock) => clock.refresh(),
            Self::Manual(clock) => clock.now_ms(),
        }
    }
}

impl Clock for DriverClock {
    fn now_ms(&self) -> u64 {
        match self {
            Self::Coarse(clock) => clock.now_ms(),
            Self::Manual(clock) => clock.now_ms(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_manual_clock_moves_for_every_thread() {
        let clock = SharedManualClock::new(5);
        let source = ClockSource::Manual(clock.clone());
        let seen = std::thread::spawn(move || {
            let core = DriverClock::new(&source);
            core.refresh()
        })
        .join()
        .unwrap();
        assert_eq!(seen, 5);
        clock.advance(45_000);
        assert_eq!(
            DriverClock::new(&ClockSource::Manual(clock)).refresh(),
            45_005
        );
    }

    #[test]
    fn coarse_driver_clock_is_monotonic() {
        let clock = DriverClock::new(&ClockSource::Coarse);
        let a = clock.refresh();
        let b = clock.refresh();
        assert!(b >= a);
        assert_eq!(clock.now_ms(), b);
    }
}
