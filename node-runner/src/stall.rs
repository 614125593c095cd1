//! The Node stall watchdog (F21), its typed evidence (F22) and the
//! connection-scoped health observation sequence (F23), shared by
//! normalized runs ([`crate::runs::relay_watched`]) and raw tunnels
//! ([`crate::tunnel::run_tunnel_watched`]).
//!
//! # Timer design (first step)
//! Every run and tunnel owns one [`Activity`]: progress is **one store** of
//! "now" into a `Cell` (no timer touched per token). The watchdog future
//! ([`Activity::expired`]) sleeps until `last + timeout` on the core's
//! monoio timer; when it wakes and activity moved on, it re-arms for the
//! new deadline, otherwise the stall fires. This is the DESIGN.md "a token
//! must cost one store" rule with one monoio sleep per watched stream; it
//! is not yet wired into the shared per-core `TimerWheel` of
//! `link::timers`.
//!
//! # What counts as progress
//! Runs: every adapter event before the terminal (`start`, `delta`,
//! `reasoning_delta`, non-terminal `usage`). Tunnels: every sink call
//! (`status`, `headers`, `body`, `usage`). Nothing else — a health probe
//! result is never progress and does not move the fence (F22).
//!
//! # After the claim
//! The stall claims the stream's single terminal. Then, concurrently and
//! joined ([`evidence`]):
//! - the **close-grace fence**: the provider response is dropped (closing
//!   its connection) and its return awaited for at most [`CLOSE_GRACE`];
//!   only a return confirmed inside the grace sets `retryable`;
//! - an **exact-target health probe** (`probe_health(target, bound)`),
//!   bounded again here; its result maps fail-closed to the F22 pair.
//!
//! The finalized observation takes the next `health_observation_seq` of the
//! connection ([`crate::runs::GenShared::next_health_seq`]); unbound paths
//! ([`HealthCheck::next_seq`] → `None`) omit it. Provider output after the
//! claim is never sent: the source is gone.

use std::cell::Cell;
use std::time::Duration;

use monoio::time::Instant;
use proto::v1::{
    ExecutionFailure, FailureCode, FailureSide, LivenessClassification, ProviderHealth,
};

use crate::adapter::failure;

/// How long the fence waits for the provider's return after a stall.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The last progress of one run or tunnel (see the module docs).
#[derive(Debug)]
pub struct Activity {
    last: Cell<Instant>,
    held: Cell<bool>,
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    /// Activity that happened now.
    pub fn new() -> Self {
        Self {
            last: Cell::new(Instant::now()),
            held: Cell::new(false),
        }
    }

    /// Progress: one store.
    pub fn touch(&self) {
        self.last.set(Instant::now());
    }

    /// Holds the watchdog while the stream waits on its client (a tunnel
    /// without credit); releasing it counts as progress.
    pub fn hold(&self, held: bool) {
        self.held.set(held);
        self.touch();
    }

    /// Completes once no progress was recorded for `timeout` (never while
    /// held). Woken at the deadline, it re-arms for the new one if progress
    /// moved it.
    pub async fn expired(&self, timeout: Duration) {
        loop {
            if self.held.get() {
                self.touch();
            }
            let deadline = self.last.get() + timeout;
            if Instant::now() >= deadline {
                return;
            }
            monoio::time::sleep_until(deadline).await;
        }
    }
}

/// The independent side of a stall: the exact-target probe and the
/// connection's observation sequence.
#[allow(async_fn_in_trait)]
pub trait HealthCheck {
    /// One bounded probe of the stalled stream's exact adapter and target.
    async fn probe(&self) -> ProviderHealth;
    /// The next connection-scoped observation sequence (F23); `None` on an
    /// unbound path (the key is then omitted).
    fn next_seq(&self) -> Option<u64>;
}

/// No probe, no sequence: an unwatched or unbound stream.
#[derive(Debug, Clone, Copy)]
pub struct NoHealth;

impl HealthCheck for NoHealth {
    async fn probe(&self) -> ProviderHealth {
        ProviderHealth::Unknown
    }

    fn next_seq(&self) -> Option<u64> {
        None
    }
}

/// One stream's watchdog: its effective timeout and evidence sources.
#[derive(Debug, Clone)]
pub struct Watchdog<H> {
    /// The effective `response_stall_timeout_ms` (wire 0 already mapped to
    /// the default).
    pub timeout_ms: u64,
    /// Close-grace bound ([`CLOSE_GRACE`] in production).
    pub grace: Duration,
    /// Bound on the health probe (the adapter's configured probe bound).
    pub probe_timeout: Duration,
    /// Probe and sequence.
    pub health: H,
}

impl<H> Watchdog<H> {
    /// The watchdog's timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// F22: the fail-closed evidence pair of a probe result.
pub fn classify(health: ProviderHealth) -> (ProviderHealth, LivenessClassification) {
    match health {
        ProviderHealth::Available => (
            ProviderHealth::Available,
            LivenessClassification::RequestStalled,
        ),
        ProviderHealth::Unavailable => (
            ProviderHealth::Unavailable,
            LivenessClassification::ProviderUnhealthy,
        ),
        _ => (
            ProviderHealth::Unknown,
            LivenessClassification::HealthUnknown,
        ),
    }
}

/// The `RESPONSE_STALLED` failure of a claimed stall, once the fence and
/// the probe are both settled.
pub fn stall_failure(
    timeout_ms: u64,
    health: ProviderHealth,
    returned: bool,
    seq: Option<u64>,
) -> ExecutionFailure {
    let (health, liveness) = classify(health);
    let mut failure = failure(
        FailureCode::ResponseStalled,
        FailureSide::Provider,
        format!("no progress from the provider for {timeout_ms} ms"),
    );
    failure.set_provider_health(health);
    failure.set_liveness_classification(liveness);
    failure.retryable = returned;
    failure.health_observation_seq = seq;
    failure.stall_timeout_ms = timeout_ms;
    failure
}

/// After a stall claim: runs the close-grace fence (`close`: completes when
/// the provider's return is confirmed) and the probe concurrently, joins
/// them, and finalizes the observation (F21–F23).
pub async fn evidence<H: HealthCheck>(
    watchdog: &Watchdog<H>,
    close: impl Future<Output = ()>,
) -> ExecutionFailure {
    let fence = async { monoio::time::timeout(watchdog.grace, close).await.is_ok() };
    let probe = async {
        monoio::time::timeout(watchdog.probe_timeout, watchdog.health.probe())
            .await
            .unwrap_or(ProviderHealth::Unknown)
    };
    let (returned, health) = monoio::join!(fence, probe);
    let seq = watchdog.health.next_seq();
    stall_failure(watchdog.timeout_ms, health, returned, seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_pairs_are_fail_closed() {
        use LivenessClassification as L;
        use ProviderHealth as H;
        assert_eq!(classify(H::Available), (H::Available, L::RequestStalled));
        assert_eq!(
            classify(H::Unavailable),
            (H::Unavailable, L::ProviderUnhealthy)
        );
        assert_eq!(classify(H::Unknown), (H::Unknown, L::HealthUnknown));
        assert_eq!(classify(H::Unspecified), (H::Unknown, L::HealthUnknown));
    }

    #[test]
    fn the_stall_failure_is_typed() {
        let f = stall_failure(300, ProviderHealth::Available, true, Some(4));
        assert_eq!(f.code(), FailureCode::ResponseStalled);
        assert_eq!(f.side(), FailureSide::Provider);
        assert_eq!(f.stall_timeout_ms, 300);
        assert_eq!(f.health_observation_seq, Some(4));
        assert!(f.retryable);
        let f = stall_failure(300, ProviderHealth::Unavailable, false, None);
        assert_eq!(f.health_observation_seq, None);
        assert!(!f.retryable);
        assert_eq!(
            f.liveness_classification(),
            LivenessClassification::ProviderUnhealthy
        );
    }
}
