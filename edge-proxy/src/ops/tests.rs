//! The registry and pool changes drain and reload rely on.

use std::sync::Arc;

use proto::v1::{RegisterRejectReason, RegisterRequest};

use crate::config::EdgeConfig;
use crate::pool::Pools;
use crate::registry::{NodeRegistry, NodeState};

fn config(extra_provider: &str, groups: &str, base_port: u16) -> EdgeConfig {
    let text = format!(
        r#"
nodes:
  - id: a
    token: tok-a
    providers:
      - id: pa
        kind: openai_compat
        base_url: http://127.0.0.1:{base_port}
        targets: [m]
{extra_provider}
model_groups:
{groups}
"#
    );
    EdgeConfig::from_yaml_str(&text, "test").unwrap()
}

const PB: &str = "      - id: pb\n        kind: openai_compat\n        \
                  base_url: http://127.0.0.1:9\n        targets: [m]";

fn register(registry: &NodeRegistry<EdgeConfig>, token: &str) -> Result<u64, RegisterRejectReason> {
    let request = RegisterRequest {
        token: token.into(),
        ..RegisterRequest::default()
    };
    registry
        .register(&request, 0, 0)
        .map(|accepted| accepted.generation)
        .map_err(|rejection| rejection.reason)
}

#[test]
fn a_draining_edge_refuses_registrations_as_unavailable() {
    let registry = NodeRegistry::new(config("", "  - name: m\n    providers: [pa]", 9));
    registry.refuse_registrations();
    assert_eq!(
        register(&registry, "tok-a"),
        Err(RegisterRejectReason::Unavailable)
    );
    assert_eq!(registry.live_count(), 0);
}

#[test]
fn a_draining_generation_takes_no_new_work_but_stays_live() {
    let registry = NodeRegistry::new(config("", "  - name: m\n    providers: [pa]", 9));
    let generation = register(&registry, "tok-a").unwrap();
    assert!(registry.mark_ready("a", generation));
    assert!(registry.dispatchable("a").is_some());
    assert!(!registry.mark_draining("a", generation + 1), "fenced");
    assert!(registry.mark_draining("a", generation));
    assert_eq!(registry.dispatchable("a"), None);
    assert_eq!(registry.node_state("a"), NodeState::Registered);
    assert!(registry.ready_nodes().is_empty());
    assert_eq!(registry.status()[0].state, "draining");
    assert!(!registry.mark_ready("a", generation), "not ready again");
    assert_eq!(registry.live_count(), 1);
}

#[test]
fn a_replaced_directory_authenticates_the_next_registration() {
    let registry = NodeRegistry::new(config("", "  - name: m\n    providers: [pa]", 9));
    let text = "nodes:\n  - id: c\n    token: tok-c\n    providers:\n      - id: pc\n        \
                kind: openai_compat\n        base_url: http://127.0.0.1:9\n        targets: [m]\n";
    registry.replace_directory(EdgeConfig::from_yaml_str(text, "new").unwrap());
    assert_eq!(
        register(&registry, "tok-a"),
        Err(RegisterRejectReason::UnknownToken)
    );
    assert_eq!(register(&registry, "tok-c"), Ok(1));
}

#[test]
fn a_refreshed_payload_is_built_from_the_new_directory_for_the_live_generation() {
    let registry = NodeRegistry::new(config("", "  - name: m\n    providers: [pa]", 9));
    assert!(registry.refreshed_payload("a").is_none(), "not connected");
    let generation = register(&registry, "tok-a").unwrap();
    assert!(registry.refreshed_payload("a").is_none(), "not ready");
    registry.mark_ready("a", generation);
    registry.replace_directory(config("", "  - name: m\n    providers: [pa]", 8123));
    let (live, core, payload) = registry.refreshed_payload("a").unwrap().unwrap();
    assert_eq!((live, core), (generation, 0));
    assert!(
        payload.providers[0].base_url.contains(":8123"),
        "{payload:?}"
    );
    // The node dropped from the config: its payload no longer builds.
    let other = "nodes:\n  - id: c\n    token: tok-c\n    providers:\n      - id: pc\n        \
                 kind: openai_compat\n        base_url: http://127.0.0.1:9\n        targets: [m]\n";
    registry.replace_directory(EdgeConfig::from_yaml_str(other, "other").unwrap());
    assert!(registry.refreshed_payload("a").unwrap().is_err());
}

#[test]
fn a_pool_reload_keeps_unchanged_providers_and_follows_groups() {
    let old = config(
        PB,
        "  - name: m\n    providers: [pa, pb]\n  - name: gone\n    target: m\n    providers: [pb]",
        9,
    );
    let pools = Pools::new(&old);
    let pa = Arc::clone(&pools.providers()[0]);
    let pb = Arc::clone(&pools.providers()[1]);
    let changed = PB.replace("targets: [m]", "targets: [m]\n        max_concurrency: 3");
    let new = config(
        &changed,
        "  - name: m\n    providers: [pa, pb]\n  - name: fresh\n    target: m\n    providers: [pa]",
        9,
    );
    pools.reload(&new);
    let after = pools.providers();
    assert!(
        Arc::ptr_eq(&after[0], &pa),
        "unchanged: kept with its load and overlay"
    );
    assert!(!Arc::ptr_eq(&after[1], &pb), "changed: fresh");
    assert_eq!(after[1].max_concurrency, 3);
    let names: Vec<String> = pools.groups().iter().map(|g| g.name.clone()).collect();
    assert_eq!(names, vec!["fresh".to_owned(), "m".to_owned()]);
    assert!(pools.group("gone").is_none());
}

#[test]
fn a_lease_on_a_removed_provider_releases_into_it() {
    let old = config(PB, "  - name: m\n    providers: [pb]", 9);
    let registry = NodeRegistry::new(old.clone());
    let generation = register(&registry, "tok-a").unwrap();
    registry.mark_ready("a", generation);
    let pools = Pools::new(&old);
    let lease = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .unwrap()
        .block_on(pools.acquire("m", &registry))
        .unwrap();
    let pb = Arc::clone(&pools.providers()[1]);
    assert_eq!(pb.outstanding(), 1);
    pools.reload(&config("", "  - name: m\n    providers: [pa]", 9));
    assert_eq!(pools.outstanding(), 0, "the current providers hold none");
    drop(lease);
    assert_eq!(
        pb.outstanding(),
        0,
        "released once, into the provider it was taken on"
    );
}

#[test]
fn work_refused_by_a_draining_node_answers_503_node_unavailable() {
    let mut failure = proto::v1::ExecutionFailure {
        message: "the node is draining and takes no new work".into(),
        ..Default::default()
    };
    failure.set_code(proto::v1::FailureCode::Unsupported);
    failure.set_side(proto::v1::FailureSide::Node);
    let error = crate::ingress::error::from_failure(&failure);
    assert_eq!((error.status, error.code), (503, "node_unavailable"));
    assert_eq!(error.retry_after_s, Some(1));
    // The same code from the client's side (a kind the node does not serve)
    // stays an upstream error.
    failure.set_side(proto::v1::FailureSide::Client);
    assert_eq!(crate::ingress::error::from_failure(&failure).status, 502);
}

#[test]
fn drain_grace_ms_defaults_to_30_s_and_is_range_checked() {
    let base = "nodes:\n  - id: a\n    token: tok-a\n    providers:\n      - id: pa\n        \
                kind: openai_compat\n        base_url: http://127.0.0.1:9\n        targets: [m]\n";
    let default = EdgeConfig::from_yaml_str(base, "t").unwrap();
    assert_eq!(default.drain_grace_ms(), 30_000);
    let set = EdgeConfig::from_yaml_str(&format!("{base}drain_grace_ms: 1500\n"), "t").unwrap();
    assert_eq!(set.drain_grace_ms(), 1_500);
    let zero = EdgeConfig::from_yaml_str(&format!("{base}drain_grace_ms: 0\n"), "t").unwrap();
    assert_eq!(zero.drain_grace_ms(), 0);
    let error = EdgeConfig::from_yaml_str(&format!("{base}drain_grace_ms: 3600001\n"), "t")
        .unwrap_err()
        .to_string();
    assert!(error.contains("drain_grace_ms"), "{error}");
}
