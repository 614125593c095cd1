//! The owner of the runtime health overlay: one per core, holding the
//! overlay state of the providers whose node is homed on that core
//! (DESIGN.md "Per-core shards and generation fencing").
//!
//! Evidence may arrive on any core (the ingress core that ran the stream,
//! the core that drives recovery). There it is only validated
//! ([`crate::pool::Pools::handoff_stall`],
//! [`crate::pool::Pools::apply_capabilities`]) and packed into a
//! [`HealthUpdate`] carrying `(node_id, generation, seq, health)`, which an
//! [`OverlayRoute`] hands to the node's home core — in the Edge, through
//! that core's inbox (`CoreMsg::Health`). The home core applies it with
//! [`OverlayShard::receive`]: it drops evidence of a generation it no
//! longer holds, fences the rest by generation and sequence, and publishes
//! the result in the provider's [`ProviderOverlay`] summary, which any core
//! reads without a lock. The state itself has one writer and no lock: an
//! `OverlayShard` is a plain value the core keeps in a `RefCell`.

use std::sync::{Arc, Weak};

use foldhash::HashMap;
use proto::v1::ProviderHealth;
use tokio::sync::Notify;

use super::metrics::HealthMetrics;
use super::{EvidenceOutcome, EvidenceSource, ProviderOverlay, log_observation};
use crate::pool::Provider;

/// One piece of validated evidence on its way to the provider's owner.
#[derive(Debug)]
pub struct HealthUpdate {
    /// The provider it is about (its `node_id` names the owning node).
    pub provider: Arc<Provider>,
    /// The node generation it was received on.
    pub generation: u64,
    /// Its `health_observation_seq` (F23); `None` on an unbound path.
    pub seq: Option<u64>,
    /// The validated health.
    pub health: ProviderHealth,
    /// The target it is for: the lease's (stall) or the probe's.
    pub target: String,
    /// A stall terminal or a CAPABILITIES answer.
    pub source: EvidenceSource,
    /// Where the outcome is counted, and who to wake on a restore.
    pub(crate) sink: HealthSink,
}

/// What the owner reports an outcome to.
#[derive(Debug, Clone)]
pub(crate) struct HealthSink {
    /// The F31 counters.
    pub(crate) metrics: Arc<HealthMetrics>,
    /// Queued admissions, woken when a provider is restored.
    pub(crate) wake: Arc<Notify>,
}

impl HealthUpdate {
    /// The node whose home core owns this provider.
    pub fn node_id(&self) -> &str {
        &self.provider.node_id
    }

    /// Counts and logs what this evidence did.
    pub fn record(&self, outcome: EvidenceOutcome) {
        self.sink
            .metrics
            .evidence(&self.provider.id, self.source, self.health, outcome);
        log_observation(
            &self.provider.id,
            self.source,
            self.health,
            outcome,
            self.generation,
            self.seq,
        );
    }
}

/// Hands a [`HealthUpdate`] to the owner of its provider.
pub trait OverlayRoute: Send + Sync {
    /// Delivers `update`. `Some(outcome)` when it was settled now (applied
    /// in place by a synchronous owner, or dropped because its generation
    /// is no longer the node's current one — already recorded); `None`
    /// when it was sent on to the home core, which records the outcome.
    fn route(&self, update: HealthUpdate) -> Option<EvidenceOutcome>;
}

/// One core's overlay state: per provider id, the fencing state of the
/// providers homed here (see the module docs).
#[derive(Debug, Default)]
pub struct OverlayShard {
    states: HashMap<String, OwnedState>,
}

#[derive(Debug)]
struct OwnedState {
    /// The provider object this state is for; a reload that rebuilt the
    /// provider (new settings) starts a fresh state.
    provider: Weak<Provider>,
    /// The node generation this state belongs to (0 = none seen yet).
    generation: u64,
    /// The last sequence applied on `generation`.
    last_seq: u64,
    /// The target the lowering evidence was for.
    target: Option<String>,
}

impl OwnedState {
    fn fresh(provider: &Arc<Provider>, generation: u64) -> Self {
        Self {
            provider: Arc::downgrade(provider),
            generation,
            last_seq: 0,
            target: None,
        }
    }
}

impl OverlayShard {
    /// An empty shard.
    pub fn new() -> Self {
        Self::default()
    }

    /// Receives `update` on the home core. `holds_generation` says whether
    /// the update's `(node, generation)` is this core's current connection:
    /// when not, it is dropped here (`stale_generation`). Otherwise it is
    /// applied. The outcome is recorded either way — before the summary
    /// is published, so whoever sees the new summary sees its count — and
    /// returned.
    pub fn receive(&mut self, holds_generation: bool, update: &HealthUpdate) -> EvidenceOutcome {
        let (outcome, publish) = if holds_generation {
            self.apply(update)
        } else {
            (EvidenceOutcome::StaleGeneration, None)
        };
        update.record(outcome);
        let overlay = update.provider.overlay();
        match publish {
            Some(Publish::Available) => overlay.publish_available(),
            Some(Publish::Lowered) => overlay.publish_lowered(update.generation, &update.target),
            None => {}
        }
        if outcome == EvidenceOutcome::Restored {
            update.sink.wake.notify_waiters();
        }
        outcome
    }

    /// Applies `update` by the overlay rules (module docs of
    /// [`crate::health`]) to the owned state; says what to publish.
    fn apply(&mut self, update: &HealthUpdate) -> (EvidenceOutcome, Option<Publish>) {
        let provider = &update.provider;
        let state = self
            .states
            .entry(provider.id.clone())
            .or_insert_with(|| OwnedState::fresh(provider, 0));
        if !Weak::ptr_eq(&state.provider, &Arc::downgrade(provider)) {
            *state = OwnedState::fresh(provider, 0);
        }
        let overlay = provider.overlay();
        match update.source {
            EvidenceSource::Stall => apply_stall(state, overlay, update),
            EvidenceSource::Capabilities => apply_probe(state, overlay, update),
        }
    }
}

/// A change of the published summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publish {
    /// Not lowered.
    Available,
    /// Unavailable at the update's generation, for its target.
    Lowered,
}

/// Stall evidence: only fresh `unavailable` lowers.
fn apply_stall(
    state: &mut OwnedState,
    overlay: &ProviderOverlay,
    update: &HealthUpdate,
) -> (EvidenceOutcome, Option<Publish>) {
    let generation = update.generation;
    if generation < state.generation {
        return (EvidenceOutcome::StaleGeneration, None);
    }
    let mut lowered = overlay.unavailable_at(generation);
    let mut publish = None;
    if generation > state.generation {
        // A new connection: a fresh overlay.
        *state = OwnedState::fresh(&update.provider, generation);
        publish = Some(Publish::Available);
        lowered = false;
    }
    let Some(seq) = update.seq else {
        return (EvidenceOutcome::Unsequenced, publish);
    };
    if seq <= state.last_seq {
        return (EvidenceOutcome::StaleSequence, publish);
    }
    state.last_seq = seq;
    if update.health != ProviderHealth::Unavailable || lowered {
        return (EvidenceOutcome::Recorded, publish);
    }
    state.target = Some(update.target.clone());
    (EvidenceOutcome::Lowered, Some(Publish::Lowered))
}

/// A CAPABILITIES answer: restores only a lowered provider, of that
/// generation, for that target, from a strictly newer `available`.
/// Anything else changes nothing (not even the last sequence).
fn apply_probe(
    state: &mut OwnedState,
    overlay: &ProviderOverlay,
    update: &HealthUpdate,
) -> (EvidenceOutcome, Option<Publish>) {
    let generation = update.generation;
    if !overlay.unavailable_at(generation) || state.generation != generation {
        return if generation < state.generation {
            (EvidenceOutcome::StaleGeneration, None)
        } else {
            (EvidenceOutcome::Unmatched, None)
        };
    }
    if state.target.as_deref() != Some(update.target.as_str()) {
        return (EvidenceOutcome::Unmatched, None);
    }
    let Some(seq) = update.seq.filter(|&seq| seq > state.last_seq) else {
        return (EvidenceOutcome::StaleSequence, None);
    };
    if update.health != ProviderHealth::Available {
        return (EvidenceOutcome::Recorded, None);
    }
    state.last_seq = seq;
    state.target = None;
    (EvidenceOutcome::Restored, Some(Publish::Available))
}

/// A synchronous owner for unit tests: applies every update at once, on
/// the caller's thread, as if the caller were the home core of every node
/// (the lock only lets plain test threads share it).
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct SyncOwner(std::sync::Mutex<OverlayShard>);

#[cfg(test)]
impl OverlayRoute for SyncOwner {
    fn route(&self, update: HealthUpdate) -> Option<EvidenceOutcome> {
        let mut shard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Some(shard.receive(true, &update))
    }
}
