//! Applying health evidence to the pools' providers: the stall handoff
//! (F24) and CAPABILITIES probe answers (F25). The overlay rules are in
//! [`crate::health`]; this is where evidence is matched to a provider and
//! validated against the lease and the node's current generation, then
//! handed to the home core of the provider's node, the overlay's only
//! writer ([`crate::health::shard`]).

use std::sync::Arc;

use proto::v1::{
    ExecutionFailure, NodeCommandKind, NodeCommandResponse, ProviderHealth, TargetHealth,
};

use super::{Evidence, Lease, Pools, Provider};
use crate::health::{
    EvidenceOutcome, EvidenceSource, StallHandoff, is_typed_stall, log_observation,
    validated_health,
};

impl Pools {
    /// F24: validate a stall terminal and apply its evidence. `reception`
    /// is the (node id, generation) the terminal arrived on
    /// (`RunStream::node()` / `TunnelStream::node()`). `None` = not
    /// validated (not a typed stall, a lease these pools did not make, a
    /// reception that is not the lease's node and generation, a generation
    /// that is no longer current): the caller treats it as a plain error.
    ///
    /// Validation is synchronous, so the caller gets its handoff at once;
    /// the overlay transition is applied by the home core of the lease's
    /// node, which fences it again by generation and sequence and records
    /// its outcome (with a synchronous owner, before this returns).
    ///
    /// The lease is only read: releasing it stays the caller's drop.
    pub fn handoff_stall(
        &self,
        lease: &Lease,
        reception: (&str, u64),
        failure: &ExecutionFailure,
    ) -> Option<StallHandoff> {
        if !is_typed_stall(failure) {
            return None;
        }
        let provider = lease.provider();
        let health = validated_health(failure);
        let seq = failure.health_observation_seq;
        let (node, generation) = reception;
        let record = |outcome| {
            self.health
                .evidence(&provider.id, EvidenceSource::Stall, health, outcome);
            log_observation(
                &provider.id,
                EvidenceSource::Stall,
                health,
                outcome,
                generation,
                seq,
            );
        };
        if !self.made(lease) || node != &*provider.node_id || generation != lease.generation() {
            record(EvidenceOutcome::LeaseMismatch);
            return None;
        }
        if self.current_generation(node) != Some(generation) {
            record(EvidenceOutcome::StaleGeneration);
            return None;
        }
        let evidence = Evidence {
            generation,
            seq,
            health,
            target: lease.target().to_owned(),
            source: EvidenceSource::Stall,
        };
        let routed = self.route_evidence(Arc::clone(&lease.provider), evidence);
        if routed == Some(EvidenceOutcome::StaleGeneration) {
            return None;
        }
        Some(StallHandoff {
            provider_id: provider.id.clone(),
            health,
            retryable: failure.retryable,
            health_observation_seq: seq,
        })
    }

    /// Whether these pools made `lease`: its group exists with its target,
    /// and lists this very provider (same adapter and node by construction).
    fn made(&self, lease: &Lease) -> bool {
        self.table()
            .groups
            .get(lease.group())
            .is_some_and(|(_, group)| {
                *group.target == *lease.target()
                    && group
                        .providers
                        .iter()
                        .any(|p| Arc::ptr_eq(p, &lease.provider))
            })
    }

    /// F25: applies the answer to a CAPABILITIES probe — every response of
    /// the command stream, received on `reception` — to the one provider it
    /// matches. `probed` is the provider the probe was sent for (it labels
    /// answers that match no single provider). Only a strictly newer
    /// `available` result restores; every other answer (malformed: no probe
    /// result, a failed or non-CAPABILITIES answer, empty adapter/target,
    /// sequence 0, unspecified status; ambiguous: several probe results or
    /// several matching providers; stale; unknown; unavailable) changes
    /// nothing. A restore wakes queued requests.
    ///
    /// Returns the outcome when it was settled here (refused by validation,
    /// or applied by a synchronous owner); `None` when the answer was sent
    /// to the home core of the provider's node, which applies and records
    /// it.
    pub fn apply_capabilities(
        &self,
        probed: &str,
        reception: (&str, u64),
        responses: &[NodeCommandResponse],
    ) -> Option<EvidenceOutcome> {
        let (node, generation) = reception;
        let mut results = responses
            .iter()
            .filter_map(|r| Some((r, r.capabilities.as_ref()?.probe.as_ref()?)));
        let first = results.next();
        let several = results.next().is_some();
        let well_formed = |(r, p): &(&NodeCommandResponse, &TargetHealth)| {
            r.ok && r.kind() == NodeCommandKind::Capabilities
                && responses.iter().all(|r| r.ok)
                && !p.adapter.is_empty()
                && !p.target.is_empty()
                && p.health_observation_seq != 0
                && p.status() != ProviderHealth::Unspecified
        };
        let probe = first.filter(well_formed).map(|(_, p)| p);
        let health = match (several, probe) {
            (false, Some(p)) => p.status(),
            _ => ProviderHealth::Unknown,
        };
        let seq = probe.map(|p| p.health_observation_seq);
        let record = |provider: &str, outcome| {
            self.health
                .evidence(provider, EvidenceSource::Capabilities, health, outcome);
            log_observation(
                provider,
                EvidenceSource::Capabilities,
                health,
                outcome,
                generation,
                seq,
            );
            Some(outcome)
        };
        if several {
            return record(probed, EvidenceOutcome::Ambiguous);
        }
        let Some(probe) = probe else {
            return record(probed, EvidenceOutcome::Malformed);
        };
        if self.current_generation(node) != Some(generation) {
            return record(probed, EvidenceOutcome::StaleGeneration);
        }
        let table = self.table();
        let matching: Vec<&Arc<Provider>> = table
            .providers
            .iter()
            .filter(|p| {
                &*p.node_id == node
                    && *p.adapter == *probe.adapter
                    && p.overlay.lowered() == Some((generation, probe.target.clone()))
            })
            .collect();
        let provider = match matching.as_slice() {
            [] => return record(probed, EvidenceOutcome::Unmatched),
            [one] => one,
            _ => return record(probed, EvidenceOutcome::Ambiguous),
        };
        let evidence = Evidence {
            generation,
            seq,
            health,
            target: probe.target.clone(),
            source: EvidenceSource::Capabilities,
        };
        self.route_evidence(Arc::clone(provider), evidence)
    }
}
