//! Graceful drain (SIGTERM/SIGINT): stop taking work, let in-flight
//! requests finish within a grace period, then close node links.
//!
//! ```text
//! begin ─▶ listeners closed, new requests 503 + close, /readyz 503,
//!          node registrations refused (unavailable)
//!       ─▶ wait until in-flight = 0 or the grace is spent
//!       ─▶ node links closed with reason `shutdown` (a request still
//!          streaming gets its clean terminal error from the disconnect)
//!       ─▶ drained: the process exits 0
//! ```
//!
//! In-flight counts completion requests from admission until their last
//! byte is written ([`DrainSwitch::enter`]): queued, streaming, and the
//! terminal error a closed link gives them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;

/// The process-wide "we are draining" flag, which accept loops and
/// handlers consult and can wait on.
#[derive(Debug, Default)]
pub struct DrainSwitch {
    draining: AtomicBool,
    flipped: Notify,
    active: AtomicU64,
}

/// One completion request in flight; dropping it ends it.
#[derive(Debug)]
pub struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl DrainSwitch {
    /// A switch that is not draining.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts draining; true the first time, false when already draining.
    pub fn begin(&self) -> bool {
        let first = !self.draining.swap(true, Ordering::AcqRel);
        if first {
            self.flipped.notify_waiters();
        }
        first
    }

    /// Counts one completion request until the returned guard drops.
    pub fn enter(&self) -> InFlight<'_> {
        self.active.fetch_add(1, Ordering::AcqRel);
        InFlight(&self.active)
    }

    /// Completion requests in flight now.
    pub fn in_flight(&self) -> u64 {
        self.active.load(Ordering::Acquire)
    }

    /// Whether a drain has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Returns once a drain has begun (at once if it already has).
    pub async fn wait(&self) {
        let flipped = self.flipped.notified();
        tokio::pin!(flipped);
        // Register before looking, so a `begin` in between is not missed.
        flipped.as_mut().enable();
        if self.is_draining() {
            return;
        }
        flipped.await;
    }
}

/// Where a drain stands at one instant (the pure part of the drain, driven
/// by whatever clock the caller reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStep {
    /// Requests are still in flight and the grace is not spent: keep waiting.
    Wait,
    /// Stop waiting: nothing is in flight, or the grace ran out.
    Close {
        /// True when the grace ran out with requests still in flight.
        grace_exceeded: bool,
    },
}

/// The drain's deadline rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainPlan {
    /// When the drain began, ms on the caller's clock.
    pub started_ms: u64,
    /// How long in-flight requests may take, ms.
    pub grace_ms: u64,
}

impl DrainPlan {
    /// The step at `now_ms` with `in_flight` requests.
    pub fn step(&self, now_ms: u64, in_flight: u64) -> DrainStep {
        if in_flight == 0 {
            DrainStep::Close {
                grace_exceeded: false,
            }
        } else if now_ms.saturating_sub(self.started_ms) >= self.grace_ms {
            DrainStep::Close {
                grace_exceeded: true,
            }
        } else {
            DrainStep::Wait
        }
    }
}

/// What a finished drain reports (the `edge_drained` log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainReport {
    /// Requests in flight when the drain began.
    pub in_flight_at_start: u64,
    /// Requests still in flight when the node links were closed.
    pub in_flight_at_close: u64,
    /// Requests in flight at the end (0 unless a disconnect's terminal did
    /// not reach its handler within the close wait).
    pub in_flight_at_end: u64,
    /// Whether the grace ran out.
    pub grace_exceeded: bool,
    /// Node links closed with reason `shutdown`.
    pub links_closed: usize,
}

/// Default grace for in-flight requests, ms (`drain_grace_ms` in edge.yaml).
pub const DEFAULT_DRAIN_GRACE_MS: u64 = crate::config::DEFAULT_DRAIN_GRACE_MS;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closes_at_once_when_nothing_is_in_flight() {
        let plan = DrainPlan {
            started_ms: 1_000,
            grace_ms: 30_000,
        };
        assert_eq!(
            plan.step(1_000, 0),
            DrainStep::Close {
                grace_exceeded: false
            }
        );
    }

    #[test]
    fn waits_for_in_flight_until_the_grace_is_spent() {
        let plan = DrainPlan {
            started_ms: 1_000,
            grace_ms: 500,
        };
        assert_eq!(plan.step(1_000, 2), DrainStep::Wait);
        assert_eq!(plan.step(1_499, 1), DrainStep::Wait);
        assert_eq!(
            plan.step(1_300, 0),
            DrainStep::Close {
                grace_exceeded: false
            }
        );
        assert_eq!(
            plan.step(1_500, 1),
            DrainStep::Close {
                grace_exceeded: true
            }
        );
    }

    #[test]
    fn a_zero_grace_closes_at_once() {
        let plan = DrainPlan {
            started_ms: 7,
            grace_ms: 0,
        };
        assert_eq!(
            plan.step(7, 3),
            DrainStep::Close {
                grace_exceeded: true
            }
        );
    }

    #[test]
    fn the_switch_flips_once_and_wakes_waiters() {
        let switch = std::sync::Arc::new(DrainSwitch::new());
        assert!(!switch.is_draining());
        let waiter = std::sync::Arc::clone(&switch);
        let woke = std::thread::spawn(move || {
            monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
                .build()
                .unwrap()
                .block_on(waiter.wait());
        });
        assert!(switch.begin());
        assert!(!switch.begin());
        let (a, b) = (switch.enter(), switch.enter());
        assert_eq!(switch.in_flight(), 2);
        drop((a, b));
        assert_eq!(switch.in_flight(), 0);
        assert!(switch.is_draining());
        woke.join().unwrap();
        // Waiting after the flip returns at once.
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .unwrap()
            .block_on(switch.wait());
    }
}
