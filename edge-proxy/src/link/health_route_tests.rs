//! Health evidence received off its node's home core is applied by that
//! core, through its inbox; a core that no longer holds the generation
//! drops it (no sockets, no sleeps).

use std::cell::RefCell;
use std::sync::Arc;

use proto::v1::{
    ExecutionFailure, FailureCode, LivenessClassification, ProviderHealth, RegisterRequest,
};
use tokio::sync::mpsc::unbounded_channel;

use super::core::Core;
use super::inbox::{CoreMsg, InboxRoute};
use super::test_support::{Dir, link_shared};
use crate::config::EdgeConfig;
use crate::health::shard::OverlayShard;
use crate::health::{EvidenceOutcome, EvidenceSource};
use crate::pool::Pools;
use crate::registry::NodeRegistry;
use crate::runtime::{IoDriver, block_on};

const YAML: &str = "
listen: { ingress: 127.0.0.1:0, nodes: 127.0.0.1:0 }
nodes:
  - id: n1
    token: token-of-node-one
    providers:
      - { id: a, kind: openai_compat, base_url: http://127.0.0.1:9, targets: [m], max_concurrency: 2 }
model_groups:
  - { name: m, providers: [a] }
";

/// `n1` ready on `core`; its generation.
fn connect(registry: &NodeRegistry<Dir>, core: usize) -> u64 {
    let request = RegisterRequest {
        token: "n1".into(),
        ..RegisterRequest::default()
    };
    let accepted = registry.register(&request, core, 0).expect("register");
    assert!(registry.mark_ready("n1", accepted.generation));
    accepted.generation
}

fn unavailable(seq: u64) -> ExecutionFailure {
    let mut failure = ExecutionFailure {
        health_observation_seq: Some(seq),
        ..ExecutionFailure::default()
    };
    failure.set_code(FailureCode::ResponseStalled);
    failure.set_provider_health(ProviderHealth::Unavailable);
    failure.set_liveness_classification(LivenessClassification::ProviderUnhealthy);
    failure
}

fn lowered(pools: &Pools, count: u64) -> bool {
    let m = pools.health_metrics();
    m.evidence_count(
        "a",
        EvidenceSource::Stall,
        "unavailable",
        EvidenceOutcome::Lowered,
    ) == count
}

#[test]
fn evidence_received_off_core_is_applied_by_the_home_core_only() {
    let config = EdgeConfig::from_yaml_str(YAML, "test.yaml").expect("config");
    let pools = Pools::new(&config);
    let registry = Arc::new(NodeRegistry::new(Dir));
    pools.attach_generations(registry.clone());
    let (core0, mut inbox0) = unbounded_channel();
    let (core1, mut inbox1) = unbounded_channel();
    let route = InboxRoute::new(Arc::clone(&registry), vec![core0, core1]);
    pools.attach_overlay_route(Arc::new(route));
    let g1 = connect(&registry, 1);
    let lease = block_on(IoDriver::Epoll, pools.acquire("m", &registry))
        .unwrap()
        .unwrap();

    // Received on this thread (not core 1): validated and handed off at
    // once, but not applied here.
    let handoff = pools
        .handoff_stall(&lease, ("n1", g1), &unavailable(1))
        .expect("validated");
    assert_eq!(handoff.health, ProviderHealth::Unavailable);
    let provider = Arc::clone(&pools.providers()[0]);
    assert!(!provider.overlay().unavailable_at(g1), "not applied here");
    assert!(lowered(&pools, 0));
    assert!(inbox0.try_recv().is_err(), "core 0 does not own n1");
    let Ok(msg @ CoreMsg::Health(_)) = inbox1.try_recv() else {
        panic!("the update goes to n1's home core");
    };

    // Core 1's real handler, its g1 connection gone before the message
    // arrived (no ready connection): dropped there, nothing changes.
    let shared = link_shared(&registry);
    Core::new(1, shared).handle(msg);
    assert!(!provider.overlay().unavailable_at(g1));
    assert!(lowered(&pools, 0));
    let m = pools.health_metrics();
    let stale = |m: &crate::health::metrics::HealthMetrics| {
        m.evidence_count(
            "a",
            EvidenceSource::Stall,
            "unavailable",
            EvidenceOutcome::StaleGeneration,
        )
    };
    assert_eq!(stale(m), 1);

    // Core 1 holding g1 — its own thread and its own shard — applies and
    // publishes; the summary is then read here without a lock.
    pools
        .handoff_stall(&lease, ("n1", g1), &unavailable(2))
        .expect("validated");
    let Ok(CoreMsg::Health(update)) = inbox1.try_recv() else {
        panic!("the update goes to n1's home core");
    };
    assert_eq!(
        (
            update.node_id(),
            update.generation,
            update.seq,
            update.health
        ),
        ("n1", g1, Some(2), ProviderHealth::Unavailable)
    );
    let applied = std::thread::spawn(move || {
        let shard = RefCell::new(OverlayShard::new());
        shard.borrow_mut().receive(true, &update)
    })
    .join()
    .unwrap();
    assert_eq!(applied, EvidenceOutcome::Lowered);
    assert!(provider.overlay().unavailable_at(g1));
    assert!(lowered(&pools, 1));
    assert!(inbox0.try_recv().is_err() && inbox1.try_recv().is_err());
}
