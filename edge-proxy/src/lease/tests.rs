use std::collections::HashMap;
use std::sync::Arc;

use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use prost::Message;
use proto::v1::{
    CredentialLease, FailureCode, LeaseRevocationKind, NodeConfigPayload, ProviderConfig,
    SealedLease,
};

use super::*;
use crate::config::{CredentialSecret, CredentialSpec, LeaseSettings};

const SENTINEL: &str = "sk-SENTINEL-edge-0001";

fn authority(clock: Arc<ManualClock>, allow_change: bool) -> LeaseAuthority {
    let credential = CredentialSpec {
        header: "authorization".into(),
        prefix: "Bearer ".into(),
        managed: true,
        secret: CredentialSecret::new(SENTINEL.as_bytes().to_vec()),
    };
    let settings = LeaseSettings {
        enabled: true,
        ttl_ms: 1_000,
        signing_key_path: None,
        state_dir: None,
        allow_node_key_change: allow_change,
    };
    LeaseAuthority::new(
        [7; 32],
        settings,
        HashMap::from([("remote".to_owned(), credential)]),
        clock,
    )
}

fn node_key() -> crypto_box::SecretKey {
    crypto_box::SecretKey::from_bytes([9; 32])
}

fn payload() -> NodeConfigPayload {
    NodeConfigPayload {
        revision: 3,
        providers: vec![ProviderConfig {
            provider_id: "remote".into(),
            credential_lease_required: true,
            ..ProviderConfig::default()
        }],
        ..NodeConfigPayload::default()
    }
}

fn scope() -> LeaseScope {
    LeaseScope {
        principal: "team-a".into(),
        api: "chat".into(),
        model_group: "gpt".into(),
        slot: "run-1".into(),
        provider_id: "remote".into(),
        adapter: "remote".into(),
        target: "m".into(),
        node_id: "node-a".into(),
        generation: 2,
        revision: 3,
    }
}

fn registered(clock: Arc<ManualClock>) -> LeaseAuthority {
    let a = authority(clock, false);
    let public = node_key().public_key();
    a.register_node("node-a", public.as_bytes(), &mut payload())
        .unwrap();
    a
}

/// Opens like a node would: unseal, verify, decode.
fn open(a: &LeaseAuthority, sealed: &[u8]) -> (CredentialLease, Vec<u8>) {
    let plain = node_key().unseal(sealed).expect("sealed to the node");
    let sealed = SealedLease::decode(plain.as_slice()).unwrap();
    let key = VerifyingKey::from_bytes(&a.verifying_key()).unwrap();
    let signature = Signature::from_slice(&sealed.signature).unwrap();
    key.verify(
        &signed_message(&sealed.lease, &sealed.credential),
        &signature,
    )
    .expect("signature verifies");
    (
        CredentialLease::decode(sealed.lease.as_ref()).unwrap(),
        sealed.credential.to_vec(),
    )
}

#[test]
fn an_issued_lease_binds_every_field_and_expires_after_the_ttl() {
    let clock = Arc::new(ManualClock::new(10_000));
    let a = registered(Arc::clone(&clock));
    let sealed = a.issue(&scope()).unwrap().expect("remote has a credential");
    assert!(
        !sealed
            .windows(SENTINEL.len())
            .any(|w| w == SENTINEL.as_bytes()),
        "the credential is sealed, never in the clear"
    );
    let (lease, credential) = open(&a, &sealed);
    assert_eq!(credential, SENTINEL.as_bytes());
    assert_eq!(lease.lease_id.len(), 16);
    assert_eq!(
        (
            lease.principal.as_str(),
            lease.api.as_str(),
            lease.model_group.as_str(),
            lease.slot.as_str(),
            lease.profile.as_str(),
            lease.adapter.as_str(),
            lease.target.as_str(),
            lease.node_id.as_str(),
        ),
        (
            "team-a", "chat", "gpt", "run-1", "remote", "remote", "m", "node-a"
        )
    );
    assert_eq!((lease.generation, lease.revision), (2, 3));
    assert_eq!(
        (lease.issued_at_unix_ms, lease.expires_at_unix_ms),
        (10_000, 11_000)
    );
    assert_eq!(
        lease.recipient_key.as_ref(),
        node_key().public_key().as_bytes()
    );
    assert_eq!(lease.header_name, "authorization");
    let again = open(&a, &a.issue(&scope()).unwrap().unwrap()).0;
    assert_ne!(again.lease_id, lease.lease_id, "ids are unique");
}

#[test]
fn a_provider_without_credential_gets_no_lease() {
    let a = registered(Arc::new(ManualClock::new(1)));
    let mut s = scope();
    s.provider_id = "local".into();
    assert_eq!(a.issue(&s), Ok(None));
}

#[test]
fn a_disabled_provider_fails_closed() {
    let a = registered(Arc::new(ManualClock::new(1)));
    let pushed = a.disable_provider("remote");
    assert_eq!(pushed.kind(), LeaseRevocationKind::ProviderDisabled);
    let err = a.issue(&scope()).unwrap_err();
    assert_eq!(err.failure_code(), FailureCode::CredentialLeaseDisabled);
}

#[test]
fn revoked_principal_provider_or_node_fails_closed() {
    for (kind, value) in [
        (LeaseRevocationKind::Principal, "team-a"),
        (LeaseRevocationKind::Provider, "remote"),
        (LeaseRevocationKind::Node, "node-a"),
    ] {
        let a = registered(Arc::new(ManualClock::new(1)));
        a.revoke(kind, "someone-else");
        assert!(a.issue(&scope()).is_ok());
        a.revoke(kind, value);
        let err = a.issue(&scope()).unwrap_err();
        assert_eq!(err.failure_code(), FailureCode::CredentialLeaseRevoked);
        assert_eq!(a.revocations().len(), 2);
    }
}

#[test]
fn a_node_without_a_pinned_key_is_a_wrong_recipient() {
    let a = authority(Arc::new(ManualClock::new(1)), false);
    let err = a.issue(&scope()).unwrap_err();
    assert_eq!(
        err.failure_code(),
        FailureCode::CredentialLeaseWrongRecipient
    );
}

#[test]
fn the_node_key_is_pinned_per_node_id() {
    let a = registered(Arc::new(ManualClock::new(1)));
    let other = crypto_box::SecretKey::from_bytes([4; 32]).public_key();
    let mut p = payload();
    assert_eq!(
        a.register_node("node-a", other.as_bytes(), &mut p),
        Err(RegisterKeyError::Changed("node-a".into()))
    );
    // The same key again is fine, and the payload gets the verifying key.
    let mut p = payload();
    a.register_node("node-a", node_key().public_key().as_bytes(), &mut p)
        .unwrap();
    assert_eq!(p.lease_verifying_key.as_ref(), a.verifying_key());
    // Malformed or missing keys are refused.
    assert_eq!(
        a.register_node("node-b", &[1, 2, 3], &mut payload()),
        Err(RegisterKeyError::Malformed(3))
    );
    assert_eq!(
        a.register_node("node-b", &[], &mut payload()),
        Err(RegisterKeyError::Missing("node-b".into()))
    );
    // Allowed by config: the new key replaces the pinned one.
    let a = authority(Arc::new(ManualClock::new(1)), true);
    a.register_node("node-a", node_key().public_key().as_bytes(), &mut payload())
        .unwrap();
    a.register_node("node-a", other.as_bytes(), &mut payload())
        .unwrap();
    assert_eq!(a.node_key("node-a"), Some(*other.as_bytes()));
}

#[test]
fn revocations_travel_in_the_registration_payload() {
    let a = registered(Arc::new(ManualClock::new(1)));
    a.revoke(LeaseRevocationKind::LeaseId, "00ff");
    let mut p = payload();
    a.register_node("node-a", node_key().public_key().as_bytes(), &mut p)
        .unwrap();
    assert_eq!(p.lease_revocations.len(), 1);
    assert_eq!(p.lease_revocations[0].value, "00ff");
}

#[test]
fn api_of_path_names_the_route() {
    assert_eq!(api_of_path("/v1/chat/completions"), "chat");
    assert_eq!(api_of_path("/v1/responses?x=1"), "responses");
    assert_eq!(api_of_path("/v1/models"), "");
}

#[test]
fn revocations_stay_bounded() {
    let clock = Arc::new(ManualClock::new(10_000));
    let a = registered(Arc::clone(&clock));
    a.revoke(LeaseRevocationKind::Principal, "team-a");
    a.revoke(LeaseRevocationKind::Principal, "team-a");
    a.revoke(LeaseRevocationKind::LeaseId, "01");
    assert_eq!(a.revocations().len(), 2, "a repeat is kept once");
    // Past the ttl (1 s here) every lease "01" could cover has expired.
    clock.advance(1_001);
    a.revoke(LeaseRevocationKind::LeaseId, "02");
    let values: Vec<String> = a.revocations().into_iter().map(|r| r.value).collect();
    assert_eq!(values, ["team-a", "02"]);
}

#[test]
fn a_probe_lease_binds_route_probe_and_the_probe_id() {
    let a = registered(Arc::new(ManualClock::new(10_000)));
    let scope = probe_scope("probe-7", "remote", ("remote", "m"), ("node-a", 2), 3);
    let sealed = a.issue(&scope).unwrap().expect("remote has a credential");
    let (lease, credential) = open(&a, &sealed);
    assert_eq!(credential, SENTINEL.as_bytes());
    assert_eq!(
        (
            lease.principal.as_str(),
            lease.api.as_str(),
            lease.model_group.as_str(),
            lease.slot.as_str(),
            lease.profile.as_str(),
            lease.adapter.as_str(),
            lease.target.as_str(),
            lease.node_id.as_str(),
        ),
        (
            "",
            PROBE_ROUTE,
            "",
            "probe-7",
            "remote",
            "remote",
            "m",
            "node-a"
        )
    );
    assert_eq!((lease.generation, lease.revision), (2, 3));
    assert!(
        !["chat", "responses", ""].contains(&PROBE_ROUTE),
        "no client route can present a probe lease"
    );
    // A revoked provider's probe gets no lease, as its runs get none.
    a.revoke(LeaseRevocationKind::Provider, "remote");
    assert_eq!(
        a.issue(&scope).unwrap_err().failure_code(),
        FailureCode::CredentialLeaseRevoked
    );
    // A provider without a managed credential: nothing to lease.
    let plain = probe_scope("probe-8", "local", ("local", "m"), ("node-a", 2), 3);
    assert_eq!(a.issue(&plain).unwrap(), None);
}
