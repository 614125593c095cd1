//! An Edge restart keeps its lease state (F29): the same signing key,
//! pinned node keys, revocations and disabled providers, read back from the
//! state dir next to `edge.yaml`.

use std::path::PathBuf;

use proto::v1::{LeaseRevocationKind, NodeConfigPayload, ProviderConfig};

use super::*;
use crate::config::EdgeConfig;

const YAML: &str = r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: remote
        kind: openai_compat
        base_url: http://127.0.0.1:1
        targets: [m]
        credential:
          api_key: "sk-restart-test"
model_groups:
  - name: remote
    target: m
    providers: [remote]
"#;

fn config_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("iop-lease-restart-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("edge.yaml"), YAML).unwrap();
    dir
}

fn start(dir: &std::path::Path) -> LeaseAuthority {
    let config = EdgeConfig::load(dir.join("edge.yaml")).expect("valid config");
    LeaseAuthority::from_config(&config).expect("state loads")
}

fn payload() -> NodeConfigPayload {
    NodeConfigPayload {
        providers: vec![ProviderConfig {
            provider_id: "remote".into(),
            credential_lease_required: true,
            ..ProviderConfig::default()
        }],
        ..NodeConfigPayload::default()
    }
}

fn scope(principal: &str) -> LeaseScope {
    LeaseScope {
        principal: principal.into(),
        provider_id: "remote".into(),
        adapter: "remote".into(),
        target: "m".into(),
        node_id: "node-a".into(),
        ..LeaseScope::default()
    }
}

#[test]
fn a_restart_keeps_the_key_pins_revocations_and_disabled_providers() {
    let dir = config_dir("keeps");
    let first = start(&dir);
    let key = [5u8; 32];
    first
        .register_node("node-a", &key, &mut payload())
        .expect("first key pins");
    first.revoke(LeaseRevocationKind::Principal, "team-a");
    let verifying = first.verifying_key();
    let revocations = first.revocations();
    drop(first);

    let second = start(&dir);
    assert_eq!(second.verifying_key(), verifying, "same signing key");
    assert_eq!(second.node_key("node-a"), Some(key), "pin kept");
    assert_eq!(second.revocations(), revocations, "revocations kept");
    assert!(matches!(
        second.register_node("node-a", &[6u8; 32], &mut payload()),
        Err(RegisterKeyError::Changed(_))
    ));
    let mut sent = payload();
    second.register_node("node-a", &key, &mut sent).unwrap();
    assert_eq!(sent.lease_revocations, revocations, "sent at registration");
    assert!(second.issue(&scope("team-a")).is_err(), "revoked principal");
    assert!(second.issue(&scope("team-b")).unwrap().is_some());
    second.disable_provider("remote");
    drop(second);

    let third = start(&dir);
    assert!(third.issue(&scope("team-b")).is_err(), "still disabled");
    let state = dir.join("edge.lease-state");
    assert!(state.join(persist::STATE_FILE).exists());
    assert!(state.join(persist::SIGNING_KEY_FILE).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_config_not_read_from_a_file_keeps_nothing() {
    let config = EdgeConfig::from_yaml_str(YAML, "inline.yaml").unwrap();
    assert_eq!(config.leases().state_dir, None);
    let a = LeaseAuthority::from_config(&config).unwrap();
    let b = LeaseAuthority::from_config(&config).unwrap();
    assert_ne!(
        a.verifying_key(),
        b.verifying_key(),
        "a fresh key each start"
    );
}

#[test]
fn a_broken_state_file_stops_the_start() {
    let dir = config_dir("broken");
    std::fs::create_dir_all(dir.join("edge.lease-state")).unwrap();
    std::fs::write(dir.join("edge.lease-state").join(persist::STATE_FILE), "[").unwrap();
    let config = EdgeConfig::load(dir.join("edge.yaml")).unwrap();
    assert!(LeaseAuthority::from_config(&config).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
