//! Selection, preference, handoff and recovery over real pools and a real
//! registry (no sockets, no sleeps).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use proto::v1::{
    ExecutionFailure, FailureCode, LivenessClassification, ProviderHealth, RegisterRequest,
};

use super::{AcquireError, Lease, Pools, Preference, load_key};
use crate::config::EdgeConfig;
use crate::health::{EvidenceOutcome, EvidenceSource};
use crate::registry::{NodeRegistry, TokenIsNodeId as Dir};
use crate::runtime::{IoDriver, block_on};

/// Model `m` over `a` (node n1) and `b` (node n2), two slots each.
pub(super) const YAML: &str = "
listen: { ingress: 127.0.0.1:0, nodes: 127.0.0.1:0 }
nodes:
  - id: n1
    token: token-of-node-one
    providers:
      - { id: a, kind: openai_compat, base_url: http://127.0.0.1:9, targets: [m], max_concurrency: 2 }
  - id: n2
    token: token-of-node-two
    providers:
      - { id: b, kind: openai_compat, base_url: http://127.0.0.1:9, targets: [m], max_concurrency: 2 }
model_groups:
  - { name: m, providers: [a, b] }
queue: { max_waiting: 8, timeout_ms: 600000 }
";

pub(super) struct World {
    pub(super) pools: Arc<Pools>,
    pub(super) registry: Arc<NodeRegistry<Dir>>,
}

impl World {
    pub(super) fn new() -> Self {
        let world = Self::bare();
        let owner = crate::health::shard::SyncOwner::default();
        world.pools.attach_overlay_route(Arc::new(owner));
        world.connect("n1");
        world.connect("n2");
        world
    }

    /// Pools over a registry, with no overlay route and no node connected.
    pub(super) fn bare() -> Self {
        Self::bare_with(&EdgeConfig::from_yaml_str(YAML, "test.yaml").expect("config"))
    }

    /// [`World::bare`] of `config`.
    pub(super) fn bare_with(config: &EdgeConfig) -> Self {
        let pools = Arc::new(Pools::new(config));
        let registry = Arc::new(NodeRegistry::new(Dir));
        pools.attach_generations(registry.clone());
        Self { pools, registry }
    }

    /// A new ready connection (generation) of `node`.
    pub(super) fn connect(&self, node: &str) -> u64 {
        self.connect_on(node, 0)
    }

    /// A new ready connection of `node`, homed on `core`.
    pub(super) fn connect_on(&self, node: &str, core: usize) -> u64 {
        let request = RegisterRequest {
            token: node.to_owned(),
            ..RegisterRequest::default()
        };
        let accepted = self.registry.register(&request, core, 0).expect("register");
        assert!(self.registry.mark_ready(node, accepted.generation));
        accepted.generation
    }

    /// Drops `node`'s live connection.
    pub(super) fn disconnect(&self, node: &str) {
        if let Some(generation) = self
            .registry
            .status()
            .iter()
            .find(|s| s.node_id == node)
            .map(|s| s.generation)
        {
            self.registry.release(node, generation);
        }
    }

    pub(super) fn lease(&self, preference: &Preference) -> Result<Lease, AcquireError> {
        let table = self.pools.table();
        let (name, group) = table.groups.get("m").expect("group");
        match self
            .pools
            .try_lease(name, group, &self.registry, preference)
        {
            Ok(Some(lease)) => Ok(lease),
            Ok(None) => Err(AcquireError::QueueFull("full".into())),
            Err(e) => Err(e),
        }
    }

    pub(super) fn eligible(&self, id: &str) -> bool {
        let providers = self.pools.providers();
        let p = providers.iter().find(|p| p.id == id).unwrap();
        let generation =
            crate::health::GenerationView::current_generation(self.registry.as_ref(), &p.node_id);
        generation.is_some_and(|g| p.runtime_eligible(g))
    }
}

pub(super) fn stall(health: ProviderHealth, seq: Option<u64>) -> ExecutionFailure {
    let mut failure = ExecutionFailure {
        message: "no progress".into(),
        health_observation_seq: seq,
        retryable: health == ProviderHealth::Available,
        ..ExecutionFailure::default()
    };
    failure.set_code(FailureCode::ResponseStalled);
    failure.set_provider_health(health);
    failure.set_liveness_classification(match health {
        ProviderHealth::Available => LivenessClassification::RequestStalled,
        ProviderHealth::Unavailable => LivenessClassification::ProviderUnhealthy,
        _ => LivenessClassification::HealthUnknown,
    });
    failure
}

pub(super) fn avoid(id: &str, fallback: bool) -> Preference {
    Preference {
        avoid_provider_id: Some(id.into()),
        allow_avoided_provider_fallback: fallback,
    }
}

/// Polls `fut` once: `Some` if it finished.
pub(super) async fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Option<F::Output> {
    let mut fut = fut;
    std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        Poll::Ready(v) => Poll::Ready(Some(v)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

#[test]
fn weights_and_capacity_scale_a_providers_share() {
    assert!(load_key(1, 8, 1) < load_key(2, 8, 1));
    assert_eq!(load_key(2, 8, 2), load_key(1, 8, 1));
    assert_eq!(load_key(2, 16, 1), load_key(1, 8, 1));
    assert_eq!(load_key(0, 8, 1), load_key(0, 64, 1000));
    assert!(load_key(u32::MAX, 1, 1) > load_key(u32::MAX - 1, 1, 1));
    let _ = load_key(u32::MAX, u32::MAX, 1000);
}

#[test]
fn a_full_provider_that_weighs_least_loaded_gives_way_to_the_next() {
    // `a` has one slot and weight 4, `b` four slots: once `a` is taken it
    // still reads as loaded 1 / (1 × 4), no more than `b` with one of its
    // four taken, and less than `b` with two or three: picked first, it is
    // full, and the lease goes to `b` until everything is full.
    let yaml = YAML
        .replacen("max_concurrency: 2", "max_concurrency: 1", 1)
        .replacen("max_concurrency: 2", "max_concurrency: 4", 1)
        .replace(
            "providers: [a, b] }",
            "providers: [a, b], weights: { a: 4 } }",
        );
    let config = EdgeConfig::from_yaml_str(&yaml, "test.yaml").expect("config");
    let w = World::bare_with(&config);
    w.connect("n1");
    w.connect("n2");
    let leases: Vec<Lease> = (0..5)
        .map(|_| w.lease(&Preference::default()).expect("a free slot"))
        .collect();
    let ids: Vec<&str> = leases.iter().map(|l| l.provider().id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "b", "b", "b"]);
    assert!(matches!(
        w.lease(&Preference::default()),
        Err(AcquireError::QueueFull(_))
    ));
}

#[test]
fn zero_preference_is_todays_selection() {
    let w = World::new();
    let first = w.lease(&Preference::default()).unwrap();
    assert_eq!(first.provider().id, "a", "ties go to config order");
    let second = w.lease(&Preference::default()).unwrap();
    assert_eq!(second.provider().id, "b", "least outstanding");
    // The avoided id names no provider of the group: nothing changes.
    let third = w.lease(&avoid("zzz", false)).unwrap();
    assert_eq!(third.provider().id, "a");
}

#[test]
fn avoidance_prefers_an_alternate_and_falls_back_only_when_allowed() {
    let w = World::new();
    let lease = w.lease(&avoid("a", false)).unwrap();
    assert_eq!(lease.provider().id, "b");
    drop(lease);
    // No alternate (b's node is gone): refused unless fallback is allowed.
    w.disconnect("n2");
    assert_eq!(
        w.lease(&avoid("a", false)).unwrap_err(),
        AcquireError::Unavailable("m".into())
    );
    assert_eq!(w.lease(&avoid("a", true)).unwrap().provider().id, "a");
    // An alternate that is runtime-ineligible (lowered) is no alternate.
    w.connect("n2");
    let g2 = w.registry.dispatchable("n2").unwrap().0;
    let b = w.lease(&avoid("a", false)).unwrap();
    assert_eq!(b.provider().id, "b");
    let handoff =
        w.pools
            .handoff_stall(&b, ("n2", g2), &stall(ProviderHealth::Unavailable, Some(1)));
    assert!(handoff.is_some());
    drop(b);
    assert_eq!(
        w.lease(&avoid("a", false)).unwrap_err(),
        AcquireError::Unavailable("m".into())
    );
    assert_eq!(w.lease(&avoid("a", true)).unwrap().provider().id, "a");
    // Fallback never revives an avoided provider that is itself lowered.
    assert_eq!(
        w.lease(&avoid("b", true)).unwrap().provider().id,
        "a",
        "a is the alternate"
    );
}

#[test]
fn a_full_alternate_queues_rather_than_returning_to_the_avoided() {
    let w = World::new();
    let b1 = w.lease(&avoid("a", false)).unwrap();
    let b2 = w.lease(&avoid("a", false)).unwrap();
    assert_eq!(
        (b1.provider().id.as_str(), b2.provider().id.as_str()),
        ("b", "b")
    );
    block_on(IoDriver::Epoll, async {
        let preference = avoid("a", true);
        let mut queued = pin!(w.pools.acquire_preferring("m", &w.registry, &preference));
        assert!(poll_once(queued.as_mut()).await.is_none(), "waits for b");
        assert_eq!(w.pools.waiting(), 1);
        drop(b1);
        let lease = queued.await.unwrap();
        assert_eq!(
            lease.provider().id,
            "b",
            "the queued re-resolution avoids a too"
        );
    })
    .unwrap();
    assert_eq!(w.pools.waiting(), 0);
}

#[test]
fn queued_fallback_reselects_the_avoided_when_no_alternate_exists() {
    let w = World::new();
    w.disconnect("n2");
    let a1 = w.lease(&Preference::default()).unwrap();
    let _a2 = w.lease(&Preference::default()).unwrap();
    block_on(IoDriver::Epoll, async {
        let preference = avoid("a", true);
        let mut queued = pin!(w.pools.acquire_preferring("m", &w.registry, &preference));
        assert!(poll_once(queued.as_mut()).await.is_none());
        drop(a1);
        assert_eq!(queued.await.unwrap().provider().id, "a");
        // Without the flag the same admission is refused at once.
        let refused = w
            .pools
            .acquire_preferring("m", &w.registry, &avoid("a", false))
            .await;
        assert_eq!(refused.unwrap_err(), AcquireError::Unavailable("m".into()));
    })
    .unwrap();
}

#[test]
fn unavailable_lowers_the_overlay_available_and_unknown_do_not() {
    let w = World::new();
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let lease = w.lease(&Preference::default()).unwrap();
    assert_eq!(lease.provider().id, "a");
    for (i, health) in [ProviderHealth::Available, ProviderHealth::Unknown]
        .into_iter()
        .enumerate()
    {
        let handoff = w
            .pools
            .handoff_stall(&lease, ("n1", g1), &stall(health, Some(i as u64 + 1)))
            .expect("validated");
        assert_eq!(handoff.health, health);
        assert_eq!(handoff.provider_id, "a");
        assert!(w.eligible("a"), "{health:?} does not lower");
    }
    // A mismatched pair is unknown (fail-closed) and does not lower.
    let mut odd = stall(ProviderHealth::Unavailable, Some(3));
    odd.set_liveness_classification(LivenessClassification::RequestStalled);
    let handoff = w.pools.handoff_stall(&lease, ("n1", g1), &odd).unwrap();
    assert_eq!(handoff.health, ProviderHealth::Unknown);
    assert!(w.eligible("a"));
    // Unsequenced (unbound) evidence never lowers.
    let handoff = w
        .pools
        .handoff_stall(
            &lease,
            ("n1", g1),
            &stall(ProviderHealth::Unavailable, None),
        )
        .unwrap();
    assert_eq!(handoff.health_observation_seq, None);
    assert!(w.eligible("a"));
    // Fresh unavailable lowers; it is annotated, and grants nothing.
    let handoff = w
        .pools
        .handoff_stall(
            &lease,
            ("n1", g1),
            &stall(ProviderHealth::Unavailable, Some(4)),
        )
        .unwrap();
    assert_eq!(
        handoff,
        crate::health::StallHandoff {
            provider_id: "a".into(),
            health: ProviderHealth::Unavailable,
            retryable: false,
            health_observation_seq: Some(4),
        }
    );
    assert!(!w.eligible("a"));
    drop(lease);
    // Selection skips a lowered provider; the config is untouched.
    assert_eq!(w.lease(&Preference::default()).unwrap().provider().id, "b");
    assert_eq!(w.pools.providers()[0].max_concurrency, 2);
    let m = w.pools.health_metrics();
    assert_eq!(
        m.evidence_count(
            "a",
            EvidenceSource::Stall,
            "unavailable",
            EvidenceOutcome::Lowered
        ),
        1
    );
    assert_eq!(
        m.evidence_count(
            "a",
            EvidenceSource::Stall,
            "unknown",
            EvidenceOutcome::Recorded
        ),
        2
    );
}

#[test]
fn a_plain_error_is_no_handoff() {
    let w = World::new();
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let lease = w.lease(&Preference::default()).unwrap();
    let mut failure = stall(ProviderHealth::Unavailable, Some(1));
    failure.set_code(FailureCode::ProviderHttpStatus);
    assert_eq!(w.pools.handoff_stall(&lease, ("n1", g1), &failure), None);
    assert!(w.eligible("a"));
}

#[test]
fn stale_and_equal_sequences_are_ignored() {
    let w = World::new();
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let lease = w.lease(&Preference::default()).unwrap();
    let r = ("n1", g1);
    assert!(
        w.pools
            .handoff_stall(&lease, r, &stall(ProviderHealth::Available, Some(7)))
            .is_some()
    );
    for seq in [7, 6, 1] {
        // Still a validated stall for this lease, but stale evidence.
        let handoff =
            w.pools
                .handoff_stall(&lease, r, &stall(ProviderHealth::Unavailable, Some(seq)));
        assert!(handoff.is_some());
        assert!(w.eligible("a"), "seq {seq} is stale");
    }
    let m = w.pools.health_metrics();
    assert_eq!(
        m.evidence_count(
            "a",
            EvidenceSource::Stall,
            "unavailable",
            EvidenceOutcome::StaleSequence
        ),
        3
    );
    w.pools
        .handoff_stall(&lease, r, &stall(ProviderHealth::Unavailable, Some(8)))
        .unwrap();
    assert!(!w.eligible("a"));
}

#[test]
fn stale_generation_evidence_is_ignored_and_a_new_generation_starts_fresh() {
    let w = World::new();
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let old = w.lease(&Preference::default()).unwrap();
    w.disconnect("n1");
    let g2 = w.connect("n1");
    assert!(g2 > g1);
    // The old lease's terminal, arriving on the old generation: refused.
    let late = stall(ProviderHealth::Unavailable, Some(9));
    assert_eq!(w.pools.handoff_stall(&old, ("n1", g1), &late), None);
    assert!(w.eligible("a"));
    assert_eq!(
        w.pools.health_metrics().evidence_count(
            "a",
            EvidenceSource::Stall,
            "unavailable",
            EvidenceOutcome::StaleGeneration
        ),
        1
    );
    drop(old);
    // Lowered on g2 …
    let lease = w.lease(&Preference::default()).unwrap();
    assert_eq!(lease.generation(), g2);
    w.pools
        .handoff_stall(
            &lease,
            ("n1", g2),
            &stall(ProviderHealth::Unavailable, Some(1)),
        )
        .unwrap();
    assert!(!w.eligible("a"));
    drop(lease);
    // … and a new connection (g3, sequence restarting at 1) is fresh.
    w.disconnect("n1");
    let g3 = w.connect("n1");
    assert!(w.eligible("a"));
    let lease = w.lease(&avoid("b", false)).unwrap();
    assert_eq!(lease.generation(), g3);
    w.pools
        .handoff_stall(
            &lease,
            ("n1", g3),
            &stall(ProviderHealth::Unavailable, Some(1)),
        )
        .unwrap();
    assert!(!w.eligible("a"), "seq 1 is fresh on a new generation");
}

#[test]
fn a_mismatched_lease_or_reception_is_ignored() {
    let w = World::new();
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let g2 = w.registry.dispatchable("n2").unwrap().0;
    let lease = w.lease(&Preference::default()).unwrap();
    let evidence = stall(ProviderHealth::Unavailable, Some(1));
    // Arrived on another node, or on a generation other than the lease's.
    assert_eq!(w.pools.handoff_stall(&lease, ("n2", g2), &evidence), None);
    assert_eq!(
        w.pools.handoff_stall(&lease, ("n1", g1 + 1), &evidence),
        None
    );
    // A lease some other pools made (same ids, not this provider).
    let other = World::new();
    let foreign = other.lease(&Preference::default()).unwrap();
    assert_eq!(w.pools.handoff_stall(&foreign, ("n1", g1), &evidence), None);
    assert!(w.eligible("a"));
    assert_eq!(
        w.pools.health_metrics().evidence_count(
            "a",
            EvidenceSource::Stall,
            "unavailable",
            EvidenceOutcome::LeaseMismatch
        ),
        3
    );
    // Without the registry's view attached, nothing is validated.
    let config = EdgeConfig::from_yaml_str(YAML, "test.yaml").unwrap();
    let detached = Pools::new(&config);
    let table = detached.table();
    let (name, group) = table.groups.get("m").unwrap();
    let lease = detached
        .try_lease(name, group, &w.registry, &Preference::default())
        .unwrap()
        .unwrap();
    assert_eq!(detached.handoff_stall(&lease, ("n1", g1), &evidence), None);
}

#[test]
fn the_first_look_takes_a_free_unit_and_never_queues() {
    let w = World::new();
    let look = || {
        w.pools
            .try_acquire_preferring("m", &w.registry, &Preference::default())
    };
    // Two providers of two units each: four leases, then none, never queued.
    let leases: Vec<Lease> = (0..4)
        .map(|_| look().unwrap().expect("a free unit"))
        .collect();
    assert!(look().unwrap().is_none(), "every unit is taken");
    assert_eq!(w.pools.waiting(), 0, "a look is not a place in the queue");
    assert_eq!(
        w.pools
            .try_acquire_preferring("nope", &w.registry, &Preference::default())
            .unwrap_err(),
        AcquireError::UnknownModel("nope".into())
    );
    drop(leases);
    assert!(look().unwrap().is_some(), "a released unit is free again");
}
