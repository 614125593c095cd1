//! F25 recovery over real pools and a real registry: the CAPABILITIES
//! answer matrix, the probe schedule, and the wake-up of queued requests.

use std::pin::pin;

use proto::v1::{
    CapabilitiesResult, NodeCommandKind, NodeCommandResponse, ProviderHealth, TargetHealth,
};

use super::Preference;
use super::tests::{World, poll_once, stall};
use crate::health::recovery::{ProbeSchedule, ProbeTarget};
use crate::health::{EvidenceOutcome, EvidenceSource};
use crate::runtime::{IoDriver, block_on};

/// A CAPABILITIES answer with one probe result.
fn answer(target: &str, status: ProviderHealth, seq: u64) -> NodeCommandResponse {
    let mut probe = TargetHealth {
        adapter: "a".into(),
        target: target.into(),
        health_observation_seq: seq,
        ..TargetHealth::default()
    };
    probe.set_status(status);
    let mut response = NodeCommandResponse {
        ok: true,
        r#final: true,
        capabilities: Some(CapabilitiesResult {
            probe: Some(probe),
            ..CapabilitiesResult::default()
        }),
        ..NodeCommandResponse::default()
    };
    response.set_kind(NodeCommandKind::Capabilities);
    response
}

#[test]
fn recovery_restores_only_from_a_strictly_newer_available_answer() {
    use EvidenceOutcome::*;
    let w = World::new();
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let lease = w.lease(&Preference::default()).unwrap();
    w.pools
        .handoff_stall(
            &lease,
            ("n1", g1),
            &stall(ProviderHealth::Unavailable, Some(5)),
        )
        .unwrap();
    drop(lease);
    let ok = |seq| answer("m", ProviderHealth::Available, seq);
    let no_probe = {
        let mut r = ok(6);
        r.capabilities = Some(CapabilitiesResult::default());
        r
    };
    let failed = {
        let mut r = ok(6);
        r.ok = false;
        r
    };
    let wrong_kind = {
        let mut r = ok(6);
        r.set_kind(NodeCommandKind::TransportStatus);
        r
    };
    let empty_adapter = {
        let mut r = ok(6);
        r.capabilities
            .as_mut()
            .unwrap()
            .probe
            .as_mut()
            .unwrap()
            .adapter = String::new();
        r
    };
    let other_adapter = {
        let mut r = ok(6);
        r.capabilities
            .as_mut()
            .unwrap()
            .probe
            .as_mut()
            .unwrap()
            .adapter = "b".into();
        r
    };
    let matrix: Vec<(&str, Vec<NodeCommandResponse>, u64, EvidenceOutcome)> = vec![
        ("no answer", vec![], g1, Malformed),
        ("no probe result", vec![no_probe], g1, Malformed),
        ("failed", vec![failed], g1, Malformed),
        ("not CAPABILITIES", vec![wrong_kind], g1, Malformed),
        ("empty adapter", vec![empty_adapter], g1, Malformed),
        ("sequence 0", vec![ok(0)], g1, Malformed),
        (
            "unspecified",
            vec![answer("m", ProviderHealth::Unspecified, 6)],
            g1,
            Malformed,
        ),
        ("two results", vec![ok(6), ok(7)], g1, Ambiguous),
        ("equal seq", vec![ok(5)], g1, StaleSequence),
        ("older seq", vec![ok(4)], g1, StaleSequence),
        (
            "unknown",
            vec![answer("m", ProviderHealth::Unknown, 6)],
            g1,
            Recorded,
        ),
        (
            "unavailable",
            vec![answer("m", ProviderHealth::Unavailable, 6)],
            g1,
            Recorded,
        ),
        ("older generation", vec![ok(6)], g1 - 1, StaleGeneration),
        ("newer generation", vec![ok(6)], g1 + 1, StaleGeneration),
        (
            "other target",
            vec![answer("x", ProviderHealth::Available, 6)],
            g1,
            Unmatched,
        ),
        ("other adapter", vec![other_adapter], g1, Unmatched),
    ];
    for (name, responses, generation, expected) in matrix {
        let outcome = w
            .pools
            .apply_capabilities("a", ("n1", generation), &responses);
        assert_eq!(outcome, Some(expected), "{name}");
        assert!(!w.eligible("a"), "{name} changed nothing");
    }
    // On another node: no provider there is lowered.
    let g2 = w.registry.dispatchable("n2").unwrap().0;
    assert_eq!(
        w.pools.apply_capabilities("a", ("n2", g2), &[ok(6)]),
        Some(Unmatched)
    );
    // Strictly newer available (6 > 5, the unknown/unavailable answers moved
    // nothing) restores exactly the one provider.
    assert_eq!(
        w.pools.apply_capabilities("a", ("n1", g1), &[ok(6)]),
        Some(Restored)
    );
    assert!(w.eligible("a"));
    // Once restored, the same answer again matches nothing.
    assert_eq!(
        w.pools.apply_capabilities("a", ("n1", g1), &[ok(7)]),
        Some(Unmatched)
    );
    let m = w.pools.health_metrics();
    assert_eq!(
        m.evidence_count("a", EvidenceSource::Capabilities, "available", Restored),
        1
    );
}

#[test]
fn recovery_does_not_restore_a_provider_lowered_on_a_generation_since_replaced() {
    let w = World::new();
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let lease = w.lease(&Preference::default()).unwrap();
    w.pools
        .handoff_stall(
            &lease,
            ("n1", g1),
            &stall(ProviderHealth::Unavailable, Some(1)),
        )
        .unwrap();
    drop(lease);
    w.disconnect("n1");
    // Offline: the old generation's answer is stale.
    assert_eq!(
        w.pools.apply_capabilities(
            "a",
            ("n1", g1),
            &[answer("m", ProviderHealth::Available, 2)]
        ),
        Some(EvidenceOutcome::StaleGeneration)
    );
    let g2 = w.connect("n1");
    // The new generation is fresh: nothing lowered to restore.
    assert!(w.eligible("a"));
    assert_eq!(
        w.pools.apply_capabilities(
            "a",
            ("n1", g2),
            &[answer("m", ProviderHealth::Available, 2)]
        ),
        Some(EvidenceOutcome::Unmatched)
    );
}

#[test]
fn a_restore_wakes_a_queued_request() {
    let w = World::new();
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let a = w.lease(&Preference::default()).unwrap();
    w.pools
        .handoff_stall(&a, ("n1", g1), &stall(ProviderHealth::Unavailable, Some(1)))
        .unwrap();
    let _b1 = w.lease(&Preference::default()).unwrap();
    let _b2 = w.lease(&Preference::default()).unwrap();
    block_on(IoDriver::Epoll, async {
        let mut queued = pin!(w.pools.acquire("m", &w.registry));
        assert!(
            poll_once(queued.as_mut()).await.is_none(),
            "a lowered, b full"
        );
        let outcome = w.pools.apply_capabilities(
            "a",
            ("n1", g1),
            &[answer("m", ProviderHealth::Available, 2)],
        );
        assert_eq!(outcome, Some(EvidenceOutcome::Restored));
        let lease = queued.await.unwrap();
        assert_eq!(lease.provider().id, "a");
    })
    .unwrap();
    drop(a);
}

#[test]
fn probes_are_scheduled_for_lowered_providers_at_a_bounded_rate() {
    let w = World::new();
    let mut schedule = ProbeSchedule::new(5_000);
    assert!(schedule.due(0, &w.pools).is_empty(), "nothing lowered");
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let lease = w.lease(&Preference::default()).unwrap();
    w.pools
        .handoff_stall(
            &lease,
            ("n1", g1),
            &stall(ProviderHealth::Unavailable, Some(1)),
        )
        .unwrap();
    drop(lease);
    let due = schedule.due(1_000, &w.pools);
    assert_eq!(
        due,
        [ProbeTarget {
            provider_id: "a".into(),
            node_id: "n1".into(),
            generation: g1,
            adapter: "a".into(),
            target: "m".into(),
        }]
    );
    let request = due[0].request();
    assert_eq!(request.kind(), NodeCommandKind::Capabilities);
    assert_eq!(
        (request.adapter.as_str(), request.target.as_str()),
        ("a", "m")
    );
    // In flight: never two at once, whatever the time.
    assert!(schedule.due(60_000, &w.pools).is_empty());
    schedule.finished("a");
    // At most one per interval, counted from the last send.
    assert!(schedule.due(5_999, &w.pools).is_empty());
    assert_eq!(schedule.due(6_000, &w.pools).len(), 1);
    schedule.finished("a");
    // Restored: no more probes.
    let outcome = w.pools.apply_capabilities(
        "a",
        ("n1", g1),
        &[answer("m", ProviderHealth::Available, 2)],
    );
    assert_eq!(outcome, Some(EvidenceOutcome::Restored));
    assert!(schedule.due(20_000, &w.pools).is_empty());
    // Lowered again, then the node reconnects: the old generation's
    // lowering is not probed (the new generation is fresh).
    let lease = w.lease(&Preference::default()).unwrap();
    w.pools
        .handoff_stall(
            &lease,
            ("n1", g1),
            &stall(ProviderHealth::Unavailable, Some(3)),
        )
        .unwrap();
    drop(lease);
    w.disconnect("n1");
    assert!(schedule.due(30_000, &w.pools).is_empty(), "offline");
    w.connect("n1");
    assert!(schedule.due(40_000, &w.pools).is_empty(), "new generation");
}
