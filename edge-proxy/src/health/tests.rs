//! Overlay rules and F31 metrics, without pools or sockets.

use std::sync::Arc;

use proto::v1::{ExecutionFailure, LivenessClassification, ProviderHealth};

use super::metrics::HealthMetrics;
use super::shard::{HealthSink, HealthUpdate, OverlayShard};
use super::*;
use crate::pool::{Pools, Provider};

/// One provider (`a` on node `n1`) and the shard that owns it, applying
/// evidence as its home core would.
struct Owned {
    shard: OverlayShard,
    provider: Arc<Provider>,
    sink: HealthSink,
}

impl Owned {
    fn new() -> Self {
        let yaml = "
listen: { ingress: 127.0.0.1:0, nodes: 127.0.0.1:0 }
nodes:
  - id: n1
    token: token-of-node-one
    providers:
      - { id: a, kind: openai_compat, base_url: http://127.0.0.1:9, targets: [m], max_concurrency: 2 }
model_groups:
  - { name: m, providers: [a] }
";
        let config = crate::config::EdgeConfig::from_yaml_str(yaml, "test.yaml").expect("config");
        let pools = Pools::new(&config);
        Self {
            shard: OverlayShard::new(),
            provider: Arc::clone(&pools.providers()[0]),
            sink: HealthSink {
                metrics: Arc::new(HealthMetrics::new(["a".to_owned()])),
                wake: Arc::new(tokio::sync::Notify::new()),
            },
        }
    }

    fn update(
        &self,
        generation: u64,
        seq: Option<u64>,
        health: ProviderHealth,
        target: &str,
        source: EvidenceSource,
    ) -> HealthUpdate {
        HealthUpdate {
            provider: Arc::clone(&self.provider),
            generation,
            seq,
            health,
            target: target.to_owned(),
            source,
            sink: self.sink.clone(),
        }
    }

    fn apply_stall(
        &mut self,
        generation: u64,
        seq: Option<u64>,
        health: ProviderHealth,
        target: &str,
    ) -> EvidenceOutcome {
        let update = self.update(generation, seq, health, target, EvidenceSource::Stall);
        self.shard.receive(true, &update)
    }

    fn apply_probe(
        &mut self,
        generation: u64,
        seq: u64,
        health: ProviderHealth,
        target: &str,
    ) -> EvidenceOutcome {
        let source = EvidenceSource::Capabilities;
        let update = self.update(generation, Some(seq), health, target, source);
        self.shard.receive(true, &update)
    }

    fn unavailable_at(&self, generation: u64) -> bool {
        self.provider.overlay().unavailable_at(generation)
    }

    fn lowered(&self) -> Option<(u64, String)> {
        self.provider.overlay().lowered()
    }
}

#[test]
fn a_core_that_no_longer_holds_the_generation_drops_the_evidence() {
    let mut o = Owned::new();
    let update = o.update(
        1,
        Some(1),
        ProviderHealth::Unavailable,
        "m",
        EvidenceSource::Stall,
    );
    assert_eq!(
        o.shard.receive(false, &update),
        EvidenceOutcome::StaleGeneration
    );
    assert!(!o.unavailable_at(1));
    assert_eq!(
        o.sink.metrics.evidence_count(
            "a",
            EvidenceSource::Stall,
            "unavailable",
            EvidenceOutcome::StaleGeneration
        ),
        1
    );
    // Dropped without a trace in the fence: sequence 1 still counts.
    assert_eq!(
        o.apply_stall(1, Some(1), ProviderHealth::Unavailable, "m"),
        EvidenceOutcome::Lowered
    );
}

#[test]
fn only_fresh_unavailable_lowers_and_only_newer_available_restores() {
    let mut o = Owned::new();
    assert!(!o.unavailable_at(1));
    assert_eq!(
        o.apply_stall(1, Some(1), ProviderHealth::Available, "m"),
        EvidenceOutcome::Recorded
    );
    assert_eq!(
        o.apply_stall(1, Some(2), ProviderHealth::Unknown, "m"),
        EvidenceOutcome::Recorded
    );
    assert!(!o.unavailable_at(1));
    assert_eq!(
        o.apply_stall(1, Some(2), ProviderHealth::Unavailable, "m"),
        EvidenceOutcome::StaleSequence
    );
    assert_eq!(
        o.apply_stall(1, None, ProviderHealth::Unavailable, "m"),
        EvidenceOutcome::Unsequenced
    );
    assert_eq!(
        o.apply_stall(1, Some(3), ProviderHealth::Unavailable, "m"),
        EvidenceOutcome::Lowered
    );
    assert!(o.unavailable_at(1));
    assert!(!o.unavailable_at(2), "only on its generation");
    assert_eq!(o.lowered(), Some((1, "m".to_owned())));
    assert_eq!(
        o.apply_stall(1, Some(4), ProviderHealth::Unavailable, "m"),
        EvidenceOutcome::Recorded,
        "already lowered"
    );
    // Probe answers: stale (≤ 4), wrong target, not available: no change.
    assert_eq!(
        o.apply_probe(1, 4, ProviderHealth::Available, "m"),
        EvidenceOutcome::StaleSequence
    );
    assert_eq!(
        o.apply_probe(1, 5, ProviderHealth::Available, "x"),
        EvidenceOutcome::Unmatched
    );
    assert_eq!(
        o.apply_probe(1, 5, ProviderHealth::Unavailable, "m"),
        EvidenceOutcome::Recorded
    );
    assert_eq!(
        o.apply_probe(2, 5, ProviderHealth::Available, "m"),
        EvidenceOutcome::Unmatched
    );
    assert!(o.unavailable_at(1));
    assert_eq!(
        o.apply_probe(1, 5, ProviderHealth::Available, "m"),
        EvidenceOutcome::Restored
    );
    assert!(!o.unavailable_at(1));
    assert_eq!(o.lowered(), None);
}

#[test]
fn generations_fence_the_overlay() {
    let mut o = Owned::new();
    assert_eq!(
        o.apply_stall(3, Some(9), ProviderHealth::Unavailable, "m"),
        EvidenceOutcome::Lowered
    );
    assert_eq!(
        o.apply_stall(2, Some(10), ProviderHealth::Unavailable, "m"),
        EvidenceOutcome::StaleGeneration
    );
    assert_eq!(
        o.apply_probe(2, 10, ProviderHealth::Available, "m"),
        EvidenceOutcome::StaleGeneration
    );
    // Generation 4 starts fresh: sequence 1 counts, nothing lowered.
    assert_eq!(
        o.apply_stall(4, Some(1), ProviderHealth::Available, "m"),
        EvidenceOutcome::Recorded
    );
    assert!(!o.unavailable_at(3) && !o.unavailable_at(4));
}

#[test]
fn evidence_pairs_fail_closed() {
    let pairs = [
        (
            ProviderHealth::Available,
            LivenessClassification::RequestStalled,
            ProviderHealth::Available,
        ),
        (
            ProviderHealth::Unavailable,
            LivenessClassification::ProviderUnhealthy,
            ProviderHealth::Unavailable,
        ),
        (
            ProviderHealth::Unknown,
            LivenessClassification::HealthUnknown,
            ProviderHealth::Unknown,
        ),
        (
            ProviderHealth::Unavailable,
            LivenessClassification::HealthUnknown,
            ProviderHealth::Unknown,
        ),
        (
            ProviderHealth::Available,
            LivenessClassification::ProviderUnhealthy,
            ProviderHealth::Unknown,
        ),
        (
            ProviderHealth::Unspecified,
            LivenessClassification::Unspecified,
            ProviderHealth::Unknown,
        ),
    ];
    for (health, class, expected) in pairs {
        let mut f = ExecutionFailure::default();
        f.set_provider_health(health);
        f.set_liveness_classification(class);
        assert_eq!(validated_health(&f), expected, "{health:?}/{class:?}");
    }
}

#[test]
fn metrics_list_every_closed_combination_at_zero() {
    let m = HealthMetrics::new(["a".to_owned(), "b".to_owned()]);
    let mut out = String::new();
    m.render(&mut out);
    let evidence: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("iop_edge_provider_health_evidence_total{"))
        .collect();
    assert_eq!(evidence.len(), 2 * 2 * 3 * EvidenceOutcome::ALL.len());
    assert!(evidence.iter().all(|l| l.ends_with(" 0")));
    assert!(out.contains(
        "iop_edge_provider_health_evidence_total{provider=\"b\",source=\"capabilities\",health=\"unknown\",outcome=\"ambiguous\"} 0"
    ));
    let transitions: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("iop_edge_provider_health_transitions_total{"))
        .collect();
    assert_eq!(
        transitions,
        [
            "iop_edge_provider_health_transitions_total{provider=\"a\",from=\"available\",to=\"unavailable\"} 0",
            "iop_edge_provider_health_transitions_total{provider=\"a\",from=\"unavailable\",to=\"available\"} 0",
            "iop_edge_provider_health_transitions_total{provider=\"b\",from=\"available\",to=\"unavailable\"} 0",
            "iop_edge_provider_health_transitions_total{provider=\"b\",from=\"unavailable\",to=\"available\"} 0",
        ]
    );
    assert!(out.contains("# TYPE iop_edge_provider_health_evidence_total counter"));
    assert!(out.contains("# TYPE iop_edge_provider_health_transitions_total counter"));
    // Counting moves exactly one series; unknown ids are not counted.
    m.evidence(
        "a",
        EvidenceSource::Stall,
        ProviderHealth::Unavailable,
        EvidenceOutcome::Lowered,
    );
    m.evidence(
        "client-supplied-id",
        EvidenceSource::Stall,
        ProviderHealth::Unavailable,
        EvidenceOutcome::Lowered,
    );
    let mut out = String::new();
    m.render(&mut out);
    assert!(out.contains(
        "iop_edge_provider_health_evidence_total{provider=\"a\",source=\"stall\",health=\"unavailable\",outcome=\"lowered\"} 1"
    ));
    assert!(out.contains(
        "iop_edge_provider_health_transitions_total{provider=\"a\",from=\"available\",to=\"unavailable\"} 1"
    ));
    assert!(!out.contains("client-supplied-id"));
    assert_eq!(out.lines().filter(|l| l.ends_with(" 1")).count(), 2);
}
