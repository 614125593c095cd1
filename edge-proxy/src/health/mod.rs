//! The runtime health overlay (F24, F25): what typed stall evidence and
//! CAPABILITIES probes say about a provider *now*, kept apart from its
//! configuration.
//!
//! Each provider carries a [`ProviderOverlay`]. It is lowered only by
//! *fresh unavailable* stall evidence received on the node generation the
//! lease was taken on, and raised again only by a strictly newer
//! `available` CAPABILITIES probe answer of that same generation
//! ([`recovery`]). A provider whose overlay is lowered for its node's
//! current generation is not runtime-eligible: selection skips it
//! ([`crate::pool`]). The config is never touched.
//!
//! # Fencing
//! - **Generation.** Evidence carries the `(node, generation)` it arrived
//!   on. Evidence of an older generation than the overlay's is stale; a
//!   newer generation starts a fresh overlay (available, sequence 0). The
//!   overlay counts only while its generation is the node's current one.
//! - **Sequence.** `health_observation_seq` is connection-scoped (F23): on
//!   one generation, an observation whose sequence is older than or equal
//!   to the last one applied is stale and changes nothing. Evidence without
//!   a sequence (an unbound path) never changes the overlay.
//! - The handoff of a stall ([`StallHandoff`]) never grants replay; it
//!   only reports what was validated. `retryable` is the Node's capability
//!   hint, passed on unchanged.
//!
//! # Concurrency
//! The node's home core is the only writer ([`shard`]): evidence validated
//! on any core is sent, as `(node_id, generation, seq, health)`, through
//! the per-core inbox to the home core, whose [`shard::OverlayShard`]
//! (no lock, one owner) fences and applies it and publishes the result in
//! the provider's [`ProviderOverlay`]. Selection reads that summary — one
//! atomic per provider, the generation the provider is unavailable at,
//! 0 = none — without a lock.

pub mod metrics;
pub mod recovery;
pub mod shard;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use proto::v1::{ExecutionFailure, FailureCode, LivenessClassification, ProviderHealth};

/// A validated, current, bound stall (F24): annotated provider id, validated
/// health, `recovery_handoff = confirmed`. It never grants replay by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallHandoff {
    /// The provider the lease was on (config id).
    pub provider_id: String,
    /// The validated health: the evidence's own when its pair is
    /// consistent (F22), `UNKNOWN` otherwise (fail-closed).
    pub health: ProviderHealth,
    /// The Node's capability hint (F21): the provider return was confirmed
    /// inside the close grace. Not a replay grant.
    pub retryable: bool,
    /// The observation's connection sequence (F23), if it had one.
    pub health_observation_seq: Option<u64>,
}

/// Where the Edge reads a node's current generation from (the registry).
pub trait GenerationView: Send + Sync {
    /// The node's current, ready generation; `None` when it has none.
    fn current_generation(&self, node_id: &str) -> Option<u64>;
}

impl<D: crate::registry::NodeDirectory> GenerationView for crate::registry::NodeRegistry<D> {
    fn current_generation(&self, node_id: &str) -> Option<u64> {
        match self.node_state(node_id) {
            crate::registry::NodeState::Ready { generation, .. } => Some(generation),
            _ => None,
        }
    }
}

/// The health evidence carried by a stall failure, fail-closed (F22): the
/// `provider_health` when it is paired with its classification, `UNKNOWN`
/// for any other combination.
pub fn validated_health(failure: &ExecutionFailure) -> ProviderHealth {
    match (failure.provider_health(), failure.liveness_classification()) {
        (ProviderHealth::Available, LivenessClassification::RequestStalled) => {
            ProviderHealth::Available
        }
        (ProviderHealth::Unavailable, LivenessClassification::ProviderUnhealthy) => {
            ProviderHealth::Unavailable
        }
        _ => ProviderHealth::Unknown,
    }
}

/// Whether `failure` is a typed stall terminal (F21).
pub fn is_typed_stall(failure: &ExecutionFailure) -> bool {
    failure.code() == FailureCode::ResponseStalled
}

/// What one piece of evidence did (a closed set: the `outcome` label of
/// `iop_edge_provider_health_evidence_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvidenceOutcome {
    /// Fresh `unavailable` evidence lowered the overlay.
    Lowered,
    /// A strictly newer `available` probe answer restored the provider.
    Restored,
    /// Fresh and valid, but it changes nothing (`available`/`unknown`
    /// stall evidence, an already-lowered provider, an `unknown` or
    /// `unavailable` probe answer).
    Recorded,
    /// Evidence of a generation that is not the current one.
    StaleGeneration,
    /// A sequence older than or equal to the last one applied.
    StaleSequence,
    /// Evidence without a sequence (unbound path): never applied.
    Unsequenced,
    /// The reception does not match the lease (node, generation, provider,
    /// adapter or target).
    LeaseMismatch,
    /// A probe answer that is not a well-formed CAPABILITIES probe result.
    Malformed,
    /// A probe answer that matches several unavailable providers.
    Ambiguous,
    /// A probe answer that matches no unavailable provider.
    Unmatched,
}

impl EvidenceOutcome {
    /// Every outcome, in label order.
    pub const ALL: [Self; 10] = [
        Self::Lowered,
        Self::Restored,
        Self::Recorded,
        Self::StaleGeneration,
        Self::StaleSequence,
        Self::Unsequenced,
        Self::LeaseMismatch,
        Self::Malformed,
        Self::Ambiguous,
        Self::Unmatched,
    ];

    /// Its label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Lowered => "lowered",
            Self::Restored => "restored",
            Self::Recorded => "recorded",
            Self::StaleGeneration => "stale_generation",
            Self::StaleSequence => "stale_sequence",
            Self::Unsequenced => "unsequenced",
            Self::LeaseMismatch => "lease_mismatch",
            Self::Malformed => "malformed",
            Self::Ambiguous => "ambiguous",
            Self::Unmatched => "unmatched",
        }
    }
}

/// Where evidence came from (the `source` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvidenceSource {
    /// A typed stall terminal of a run or tunnel (F24).
    Stall,
    /// A CAPABILITIES probe answer (F25).
    Capabilities,
}

impl EvidenceSource {
    /// Every source, in label order.
    pub const ALL: [Self; 2] = [Self::Stall, Self::Capabilities];

    /// Its label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Stall => "stall",
            Self::Capabilities => "capabilities",
        }
    }
}

/// The `health` label of a [`ProviderHealth`]: `UNSPECIFIED` counts as
/// `unknown` (fail-closed).
pub fn health_label(health: ProviderHealth) -> &'static str {
    match health {
        ProviderHealth::Available => "available",
        ProviderHealth::Unavailable => "unavailable",
        ProviderHealth::Unknown | ProviderHealth::Unspecified => "unknown",
    }
}

/// The health label values, in order.
pub const HEALTH_LABELS: [&str; 3] = ["available", "unavailable", "unknown"];

/// One provider's published health summary (see the module docs): what any
/// core reads. Only the provider's owning shard ([`shard::OverlayShard`],
/// on its node's home core) writes it.
#[derive(Debug, Default)]
pub struct ProviderOverlay {
    /// The generation the provider is unavailable at; 0 = none. Read by
    /// selection without a lock.
    unavailable_generation: AtomicU64,
    /// The target the lowering evidence was for (what recovery probes).
    /// Read once per scan by the recovery scheduler; written only by the
    /// owning shard, before the generation is published.
    probe_target: RwLock<Option<Arc<str>>>,
}

impl ProviderOverlay {
    /// Whether the overlay holds the provider unavailable at `generation`.
    pub fn unavailable_at(&self, generation: u64) -> bool {
        generation != 0 && self.unavailable_generation.load(Ordering::Acquire) == generation
    }

    /// The `(generation, target)` to probe, when the provider is lowered.
    pub fn lowered(&self) -> Option<(u64, String)> {
        let generation = self.unavailable_generation.load(Ordering::Acquire);
        if generation == 0 {
            return None;
        }
        let target = self
            .probe_target
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        // Still the same lowering after reading the target.
        (self.unavailable_generation.load(Ordering::Acquire) == generation)
            .then(|| (generation, target.to_string()))
    }

    /// Publishes "unavailable at `generation`, probe `target`".
    fn publish_lowered(&self, generation: u64, target: &str) {
        *self.probe_target.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::from(target));
        self.unavailable_generation
            .store(generation, Ordering::Release);
    }

    /// Publishes "not lowered".
    fn publish_available(&self) {
        self.unavailable_generation.store(0, Ordering::Release);
        *self.probe_target.write().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Logs one observation as `edge_provider_health_observation`: closed
/// values and config ids only — no payloads, messages, run ids or client
/// data.
pub(crate) fn log_observation(
    provider_id: &str,
    source: EvidenceSource,
    health: ProviderHealth,
    outcome: EvidenceOutcome,
    generation: u64,
    seq: Option<u64>,
) {
    tracing::info!(
        event = "edge_provider_health_observation",
        provider = provider_id,
        source = source.label(),
        health = health_label(health),
        outcome = outcome.label(),
        generation,
        health_observation_seq = seq,
        "edge_provider_health_observation"
    );
}

#[cfg(test)]
mod tests;
