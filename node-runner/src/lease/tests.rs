//! Every fail-closed case of [`LeaseOpener::open`], with a manual clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use crypto_box::aead::OsRng;
use ed25519_dalek::{Signer, SigningKey};
use prost::Message;
use proto::v1::{CredentialLease, FailureCode, LeaseRevocation, LeaseRevocationKind, SealedLease};

use super::*;

const SENTINEL: &[u8] = b"sk-SENTINEL-node-0002";

#[derive(Debug, Default)]
struct Manual(AtomicU64);

impl LeaseClock for Manual {
    fn now_unix_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

struct Fixture {
    ids: AtomicU64,
    clock: Arc<Manual>,
    opener: LeaseOpener,
    edge: SigningKey,
    verifying: [u8; 32],
}

fn fixture() -> Fixture {
    let clock = Arc::new(Manual(AtomicU64::new(1_000)));
    let opener = LeaseOpener::in_memory(NodeLeaseKey::from_bytes([3; 32]), clock.clone());
    let edge = SigningKey::from_bytes(&[5; 32]);
    let verifying = edge.verifying_key().to_bytes();
    Fixture {
        ids: AtomicU64::new(0),
        clock,
        opener,
        edge,
        verifying,
    }
}

impl Fixture {
    fn lease(&self) -> CredentialLease {
        CredentialLease {
            lease_id: {
                // Unique per lease: every id is single-use.
                let n = self.ids.fetch_add(1, Ordering::Relaxed);
                let mut id = [0xab; 16];
                id[8..].copy_from_slice(&n.to_be_bytes());
                Bytes::copy_from_slice(&id)
            },
            principal: "team-a".into(),
            api: "chat".into(),
            model_group: "gpt".into(),
            slot: "tun-1".into(),
            profile: "remote".into(),
            adapter: "remote".into(),
            target: "m".into(),
            node_id: "node-a".into(),
            generation: 4,
            revision: 2,
            issued_at_unix_ms: 900,
            expires_at_unix_ms: 2_000,
            recipient_key: Bytes::copy_from_slice(&self.opener.public_key()),
            header_name: "authorization".into(),
            header_prefix: "Bearer ".into(),
        }
    }

    fn seal_to(&self, lease: &CredentialLease, recipient: [u8; 32]) -> Vec<u8> {
        let encoded = lease.encode_to_vec();
        let signature = self.edge.sign(&signed_message(&encoded, SENTINEL));
        let plain = SealedLease {
            lease: encoded.into(),
            signature: Bytes::copy_from_slice(&signature.to_bytes()),
            credential: Bytes::from_static(SENTINEL),
        }
        .encode_to_vec();
        crypto_box::PublicKey::from_bytes(recipient)
            .seal(&mut OsRng, &plain)
            .unwrap()
    }

    fn seal(&self, lease: &CredentialLease) -> Vec<u8> {
        self.seal_to(lease, self.opener.public_key())
    }

    fn expected(&self) -> Expected<'_> {
        Expected {
            node_id: "node-a",
            generation: 4,
            revision: 2,
            verifying_key: &self.verifying,
            adapter: "remote",
            target: "m",
            slot: "tun-1",
            profile: "remote",
            api: Some("chat"),
        }
    }

    fn code(&self, sealed: &[u8]) -> FailureCode {
        let rejection = self.opener.open(sealed, &self.expected()).unwrap_err();
        let failure = rejection.clone().into_failure();
        let text = format!("{rejection:?} {failure:?}");
        assert!(
            !text.contains("SENTINEL"),
            "errors never carry the secret: {text}"
        );
        rejection.code
    }
}

#[test]
fn a_valid_lease_opens_once_into_the_header() {
    let f = fixture();
    let sealed = f.seal(&f.lease());
    let opened = f.opener.open(&sealed, &f.expected()).unwrap();
    assert_eq!(opened.header, "authorization");
    assert_eq!(opened.value.as_slice(), b"Bearer sk-SENTINEL-node-0002");
    assert!(!format!("{opened:?}").contains("SENTINEL"));
    // Replayed: the same sealed bytes again.
    assert_eq!(f.code(&sealed), FailureCode::CredentialLeaseReplayed);
}

#[test]
fn an_expired_lease_fails_closed() {
    let f = fixture();
    let sealed = f.seal(&f.lease());
    f.clock.0.store(2_000, Ordering::Relaxed);
    assert_eq!(f.code(&sealed), FailureCode::CredentialLeaseExpired);
}

#[test]
fn a_stale_revision_or_generation_fails_closed() {
    let f = fixture();
    let mut lease = f.lease();
    lease.revision = 1;
    assert_eq!(f.code(&f.seal(&lease)), FailureCode::CredentialLeaseStale);
    let mut lease = f.lease();
    lease.generation = 3;
    assert_eq!(f.code(&f.seal(&lease)), FailureCode::CredentialLeaseStale);
    let mut lease = f.lease();
    lease.generation = 5;
    assert_eq!(
        f.code(&f.seal(&lease)),
        FailureCode::CredentialLeaseMismatch
    );
}

#[test]
fn a_lease_for_another_node_fails_closed() {
    let f = fixture();
    let other = NodeLeaseKey::from_bytes([8; 32]).public_bytes();
    assert_eq!(
        f.code(&f.seal_to(&f.lease(), other)),
        FailureCode::CredentialLeaseWrongRecipient
    );
    let mut lease = f.lease();
    lease.node_id = "node-b".into();
    assert_eq!(
        f.code(&f.seal(&lease)),
        FailureCode::CredentialLeaseWrongRecipient
    );
    let mut lease = f.lease();
    lease.recipient_key = Bytes::copy_from_slice(&other);
    assert_eq!(
        f.code(&f.seal(&lease)),
        FailureCode::CredentialLeaseWrongRecipient
    );
}

#[test]
fn every_mismatched_bound_field_fails_closed() {
    let f = fixture();
    let edits: [fn(&mut CredentialLease); 5] = [
        |l| l.adapter = "other".into(),
        |l| l.target = "other".into(),
        |l| l.slot = "tun-2".into(),
        |l| l.profile = "other".into(),
        |l| l.api = "responses".into(),
    ];
    for edit in edits {
        let mut lease = f.lease();
        edit(&mut lease);
        assert_eq!(
            f.code(&f.seal(&lease)),
            FailureCode::CredentialLeaseMismatch
        );
    }
}

#[test]
fn revoked_and_disabled_leases_fail_closed() {
    let cases = [
        (
            LeaseRevocationKind::LeaseId,
            format!("{}{}", "ab".repeat(8), "00".repeat(8)), // the first id
            FailureCode::CredentialLeaseRevoked,
        ),
        (
            LeaseRevocationKind::Principal,
            "team-a".into(),
            FailureCode::CredentialLeaseRevoked,
        ),
        (
            LeaseRevocationKind::Provider,
            "remote".into(),
            FailureCode::CredentialLeaseRevoked,
        ),
        (
            LeaseRevocationKind::Node,
            "node-a".into(),
            FailureCode::CredentialLeaseRevoked,
        ),
        (
            LeaseRevocationKind::ProviderDisabled,
            "remote".into(),
            FailureCode::CredentialLeaseDisabled,
        ),
    ];
    for (kind, value, code) in cases {
        let f = fixture();
        let mut r = LeaseRevocation {
            value,
            ..LeaseRevocation::default()
        };
        r.set_kind(kind);
        f.opener.revoke(&[r]);
        assert_eq!(f.code(&f.seal(&f.lease())), code, "{kind:?}");
    }
    // A time-bounded revocation spares leases issued after it.
    let f = fixture();
    let mut r = LeaseRevocation {
        value: "team-a".into(),
        issued_before_unix_ms: 800,
        ..LeaseRevocation::default()
    };
    r.set_kind(LeaseRevocationKind::Principal);
    f.opener.revoke(&[r]);
    assert!(f.opener.open(&f.seal(&f.lease()), &f.expected()).is_ok());
}

#[test]
fn missing_forged_or_garbage_leases_are_invalid_or_unsealable() {
    let f = fixture();
    assert_eq!(f.code(&[]), FailureCode::CredentialLeaseInvalid);
    assert_eq!(
        f.code(b"garbage"),
        FailureCode::CredentialLeaseWrongRecipient
    );
    // Signed by someone other than the Edge.
    let forger = Fixture {
        edge: SigningKey::from_bytes(&[6; 32]),
        ..fixture()
    };
    let sealed = forger.seal(&f.lease());
    assert_eq!(f.code(&sealed), FailureCode::CredentialLeaseInvalid);
    // A valid sealed box whose content is not a lease.
    let junk = crypto_box::PublicKey::from_bytes(f.opener.public_key())
        .seal(&mut OsRng, b"\xff\xff\xff")
        .unwrap();
    assert_eq!(f.code(&junk), FailureCode::CredentialLeaseInvalid);
}

#[test]
fn a_durable_replay_set_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let sealed = {
        let opener = LeaseOpener::open_data_dir(dir.path()).unwrap();
        let mut lease = f.lease();
        lease.recipient_key = Bytes::copy_from_slice(&opener.public_key());
        // The durable opener reads the system clock: a far-future expiry.
        lease.expires_at_unix_ms = u64::MAX;
        let sealed = f.seal_to(&lease, opener.public_key());
        assert!(opener.open(&sealed, &f.expected()).is_ok());
        let again = opener.open(&sealed, &f.expected()).unwrap_err();
        assert_eq!(again.code, FailureCode::CredentialLeaseReplayed);
        sealed
    };
    // Same data dir: same key, same replay set.
    let opener = LeaseOpener::open_data_dir(dir.path()).unwrap();
    let again = opener.open(&sealed, &f.expected()).unwrap_err();
    assert_eq!(
        again.code,
        FailureCode::CredentialLeaseReplayed,
        "after restart"
    );
}

#[test]
fn a_probe_lease_opens_only_as_that_probe() {
    let f = fixture();
    let probe = |lease: &mut CredentialLease| {
        lease.principal.clear();
        lease.model_group.clear();
        lease.api = crate::commands::PROBE_ROUTE.into();
        lease.slot = "probe-9".into();
    };
    let as_probe = Expected {
        slot: "probe-9",
        api: Some(crate::commands::PROBE_ROUTE),
        ..f.expected()
    };
    let mut lease = f.lease();
    probe(&mut lease);
    let opened = f.opener.open(&f.seal(&lease), &as_probe).unwrap();
    assert_eq!(opened.value.as_slice(), b"Bearer sk-SENTINEL-node-0002");
    // A client route's lease cannot open as a probe, a probe's lease cannot
    // open on a client route, and another probe id is another slot.
    let mut chat_in_probe_slot = f.lease();
    chat_in_probe_slot.slot = "probe-9".into();
    let mut probe_on_chat = lease.clone();
    probe_on_chat.slot = "tun-1".into();
    let mut other_probe = f.lease();
    probe(&mut other_probe);
    other_probe.slot = "probe-10".into();
    for (lease, expected) in [
        (chat_in_probe_slot, as_probe),
        (probe_on_chat, f.expected()),
        (other_probe, as_probe),
    ] {
        let mut lease = lease;
        lease.lease_id = f.lease().lease_id;
        let rejection = f.opener.open(&f.seal(&lease), &expected).unwrap_err();
        assert_eq!(rejection.code, FailureCode::CredentialLeaseMismatch);
    }
    // Single-use like any lease.
    let mut again = f.lease();
    probe(&mut again);
    let sealed = f.seal(&again);
    f.opener.open(&sealed, &as_probe).unwrap();
    let rejection = f.opener.open(&sealed, &as_probe).unwrap_err();
    assert_eq!(rejection.code, FailureCode::CredentialLeaseReplayed);
}
