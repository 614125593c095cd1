//! The Node stall watchdog (F21), its typed evidence (F22) and the
//! connection-scoped health observation sequence (F23), shared by
//! normalized runs ([`crate::runs::relay_watched`]) and raw tunnels
//! (`tunnel::run_tunnel_watched`).
//!
//! # Timers: the core's wheel, one store per token
//! Every run and tunnel owns one [`Activity`] on its core's timer wheel
//! ([`CoreTimers`], one per run core, built in
//! [`crate::runs::serve_core`]). Progress is **one store** of the core's
//! coarse time ([`CoreTimers::coarse_now`]); no timer is touched per token.
//! When the entry comes due, a stream whose activity moved on is re-armed
//! at `last + timeout`; only a silent one fires (see [`watch`]). The close
//! grace and the probe bound are deadlines on the same wheel
//! ([`CoreTimers::timeout`]), so tests drive all of it with a manual clock.
//! The coarse time is refreshed by the wheel's ticker, so a token's time
//! may be up to one tick ([`STALL_TICK_MS`]) old: a stall can be claimed at
//! most that much early, never late.
//!
//! # What counts as progress
//! Runs: every adapter event before the terminal (`start`, `delta`,
//! `reasoning_delta`, non-terminal `usage`); a terminal event ends the run
//! instead (terminal type wins over its payload or usage). Tunnels: every
//! sink call (`status`, `headers`, `body`, `usage`); a tunnel waiting for
//! its client's credit is held, not stalled. Nothing else — a health probe
//! result is never progress and does not move the fence (F22).
//!
//! # After the claim
//! The stall claims the stream's single terminal; the provider's output is
//! fenced from then on (runs stop reading their source; a tunnel's sink
//! drops everything). Then, concurrently and joined ([`evidence`]):
//! - the **close-grace fence**: the provider call is closed explicitly
//!   (a run's source [`close`](crate::runs::EventSource::close)d, a
//!   tunnel's relay told through its [`CloseSignal`]) and its *return* is
//!   awaited for at most the grace ([`CLOSE_GRACE`]); only a return
//!   confirmed inside the grace sets `retryable`;
//! - an **exact-target health probe** (`probe_health(target, bound)`),
//!   bounded again here on the wheel; its result maps fail-closed to the
//!   F22 pair ([`classify`]); a probe past its bound is `unknown`.
//!
//! The finalized observation takes the next `health_observation_seq` of the
//! connection ([`crate::runs::GenShared::next_health_seq`]) at the moment it
//! is finalized, so sequence order is finalization order; unbound paths
//! ([`HealthCheck::next_seq`] → `None`) omit it. [`StallObservation`] is
//! the one place the finalized observation is known (F30 records it there).
//!
//! # Ties
//! The relays poll the outside stops (hard deadline, cancel, link close)
//! before the watchdog, so a stop ready together with a stall wins; an
//! event already there is progress. After the claim nothing else ends the
//! stream.

#[cfg(test)]
pub(crate) mod testkit;
#[cfg(test)]
mod tests;
pub mod watch;

use std::rc::Rc;
use std::time::Duration;

use proto::v1::{
    ExecutionFailure, FailureCode, FailureSide, LivenessClassification, ProviderHealth,
};

pub use self::watch::Activity;
use crate::adapter::failure;
pub use framing::close::CloseSignal;
pub use framing::timer::CoreTimers;

/// How long the fence waits for the provider's return after a stall.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The stall wheel's ticker bound: the longest its ticker sleeps between
/// clock reads, so the most a token's coarse time can lag.
pub const STALL_TICK_MS: u64 = 10;

/// The independent side of a stall: the exact-target probe and the
/// connection's observation sequence.
#[allow(async_fn_in_trait)]
pub trait HealthCheck {
    /// One probe of the stalled stream's exact adapter and target (bounded
    /// by the caller too).
    async fn probe(&self) -> ProviderHealth;
    /// The next connection-scoped observation sequence (F23); `None` on an
    /// unbound path (the key is then omitted).
    fn next_seq(&self) -> Option<u64>;
}

/// No probe, no sequence: an unbound stream.
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

/// What a watchdog watches (a closed label value for F30).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallKind {
    /// A normalized run.
    Run,
    /// A raw provider tunnel.
    Tunnel,
}

impl StallKind {
    /// Its label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Tunnel => "tunnel",
        }
    }
}

/// One stream's watchdog: its wheel, effective timeout and evidence
/// sources.
#[derive(Debug, Clone)]
pub struct Watchdog<H> {
    /// The core's wheel the watchdog and its bounds live on.
    pub timers: Rc<CoreTimers>,
    /// Run or tunnel.
    pub kind: StallKind,
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
    /// Arms this watchdog's [`Activity`] on its wheel, activity now.
    pub fn start(&self) -> Activity {
        Activity::start(&self.timers, self.timeout_ms)
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

/// A finalized stall observation: everything F30's metrics and log event
/// need, and the typed failure it becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallObservation {
    /// Run or tunnel.
    pub kind: StallKind,
    /// The effective stall timeout, ms.
    pub timeout_ms: u64,
    /// How long the stream had been silent at the claim, ms.
    pub silent_ms: u64,
    /// The fail-closed provider health (F22).
    pub health: ProviderHealth,
    /// Its paired classification (F22).
    pub liveness: LivenessClassification,
    /// The provider's return was confirmed inside the close grace.
    pub retryable: bool,
    /// The connection's sequence (F23); `None` on an unbound path.
    pub seq: Option<u64>,
}

impl StallObservation {
    /// The observation of a claimed stall once the fence and the probe are
    /// both settled.
    pub fn new(
        kind: StallKind,
        timeout_ms: u64,
        silent_ms: u64,
        probed: ProviderHealth,
        returned: bool,
        seq: Option<u64>,
    ) -> Self {
        let (health, liveness) = classify(probed);
        Self {
            kind,
            timeout_ms,
            silent_ms,
            health,
            liveness,
            retryable: returned,
            seq,
        }
    }

    /// The `RESPONSE_STALLED` failure carried by the terminal.
    pub fn failure(&self) -> ExecutionFailure {
        let mut failure = failure(
            FailureCode::ResponseStalled,
            FailureSide::Provider,
            format!("no progress from the provider for {} ms", self.timeout_ms),
        );
        failure.set_provider_health(self.health);
        failure.set_liveness_classification(self.liveness);
        failure.retryable = self.retryable;
        failure.health_observation_seq = self.seq;
        failure.stall_timeout_ms = self.timeout_ms;
        failure
    }
}

/// After a stall claim on `activity`: runs the close-grace fence (`close`:
/// completes once the provider's return is confirmed) and the probe
/// concurrently on the wheel, joins them, and finalizes the observation
/// (F21–F23).
pub async fn evidence<H: HealthCheck>(
    watchdog: &Watchdog<H>,
    activity: &Activity,
    close: impl Future<Output = ()>,
) -> ExecutionFailure {
    let timers = &watchdog.timers;
    let silent_ms = activity.silent_ms(timers.now());
    let fence = async { timers.timeout(ms(watchdog.grace), close).await.is_some() };
    let probe = async {
        timers
            .timeout(ms(watchdog.probe_timeout), watchdog.health.probe())
            .await
            .unwrap_or(ProviderHealth::Unknown)
    };
    let (returned, probed) = monoio::join!(fence, probe);
    let seq = watchdog.health.next_seq();
    let observation = StallObservation::new(
        watchdog.kind,
        watchdog.timeout_ms,
        silent_ms,
        probed,
        returned,
        seq,
    );
    // F30: record here (the finalized stall observation: kind, health,
    // liveness classification, retryable, silent_ms / timeout_ms).
    tracing::debug!(
        kind = observation.kind.as_str(),
        health = observation.health.as_str_name(),
        retryable = observation.retryable,
        silent_ms = observation.silent_ms,
        "stall observation finalized"
    );
    crate::metrics::record_stall(&observation);
    observation.failure()
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
