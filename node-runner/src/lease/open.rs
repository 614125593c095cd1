//! [`LeaseOpener`]: unseal, verify, check, record (see the module docs).

use std::fmt::Debug;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use foldhash::HashMap;
use prost::Message;
use proto::v1::{CredentialLease, FailureCode, LeaseRevocation, SealedLease};
use zeroize::Zeroizing;

use super::{LeaseRejection, NodeLeaseKey, OpenedCredential, Revocations, signed_message};
use crate::store::ReplayStore;

/// Wall-clock ms since the Unix epoch (leases carry absolute times).
pub trait LeaseClock: Send + Sync + Debug {
    /// Now.
    fn now_unix_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl LeaseClock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// What the request a lease arrived with says; every field must match.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// This node's id (from the RegisterResponse).
    pub node_id: &'a str,
    /// This connection's generation.
    pub generation: u64,
    /// The config revision applied.
    pub revision: u64,
    /// The Edge's verifying key from the config payload.
    pub verifying_key: &'a [u8],
    /// The request's adapter and target.
    pub adapter: &'a str,
    /// The request's target.
    pub target: &'a str,
    /// The run or tunnel id.
    pub slot: &'a str,
    /// The provider id of the adapter.
    pub profile: &'a str,
    /// The route API of a tunnel's path; `None` for runs.
    pub api: Option<&'a str>,
}

#[derive(Debug)]
enum Replay {
    Durable(ReplayStore),
    Memory(Mutex<HashMap<Vec<u8>, u64>>),
}

/// Opens leases for this Node; one per process, shared by its cores.
#[derive(Debug)]
pub struct LeaseOpener {
    key: NodeLeaseKey,
    replay: Replay,
    revocations: Revocations,
    clock: Arc<dyn LeaseClock>,
}

impl LeaseOpener {
    /// The opener of a Node whose data dir is `data_dir`: its key
    /// (created on first start) and its durable replay set.
    ///
    /// # Errors
    /// The key or the replay store cannot be opened.
    pub fn open_data_dir(data_dir: &Path) -> anyhow::Result<Self> {
        let key = NodeLeaseKey::load_or_create(data_dir)?;
        let replay = ReplayStore::open(data_dir)?;
        Ok(Self {
            key,
            replay: Replay::Durable(replay),
            revocations: Revocations::default(),
            clock: Arc::new(SystemClock),
        })
    }

    /// An opener with an in-memory replay set and `clock` (tests).
    pub fn in_memory(key: NodeLeaseKey, clock: Arc<dyn LeaseClock>) -> Self {
        Self {
            key,
            replay: Replay::Memory(Mutex::new(HashMap::default())),
            revocations: Revocations::default(),
            clock,
        }
    }

    /// The public key to register.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.public_bytes()
    }

    /// Adds revocations from the Edge.
    pub fn revoke(&self, revocations: &[LeaseRevocation]) {
        self.revocations.add(revocations);
    }

    /// Opens `sealed` for the request `expected` describes; see the module
    /// docs for the checks and their order.
    ///
    /// # Errors
    /// A typed [`LeaseRejection`]; the request must then fail closed.
    pub fn open(
        &self,
        sealed: &[u8],
        expected: &Expected<'_>,
    ) -> Result<OpenedCredential, LeaseRejection> {
        use FailureCode as C;
        let reject = |code, message: &str| Err(LeaseRejection::new(code, message));
        if sealed.is_empty() {
            return reject(
                C::CredentialLeaseInvalid,
                "the provider needs a lease and none came",
            );
        }
        let Some(plain) = self.key.unseal(sealed) else {
            return reject(
                C::CredentialLeaseWrongRecipient,
                "not sealed to this node's key",
            );
        };
        let Ok(outer) = SealedLease::decode(plain.as_slice()) else {
            return reject(C::CredentialLeaseInvalid, "malformed lease");
        };
        let credential = Zeroizing::new(outer.credential.to_vec());
        let verified = VerifyingKey::try_from(expected.verifying_key)
            .ok()
            .zip(Signature::from_slice(&outer.signature).ok())
            .is_some_and(|(key, signature)| {
                key.verify(&signed_message(&outer.lease, &credential), &signature)
                    .is_ok()
            });
        if !verified {
            return reject(
                C::CredentialLeaseInvalid,
                "the Edge's signature does not verify",
            );
        }
        let Ok(lease) = CredentialLease::decode(outer.lease.as_ref()) else {
            return reject(C::CredentialLeaseInvalid, "malformed lease");
        };
        if lease.recipient_key.as_ref() != self.key.public_bytes()
            || lease.node_id != expected.node_id
        {
            return reject(C::CredentialLeaseWrongRecipient, "issued to another node");
        }
        let now = self.clock.now_unix_ms();
        // Burned on first presentation, whatever the later checks say: a
        // lease is single-use.
        match self.first_open(&lease.lease_id, lease.expires_at_unix_ms, now) {
            Ok(true) => {}
            Ok(false) => return reject(C::CredentialLeaseReplayed, "the lease was already used"),
            Err(why) => {
                tracing::error!(error = %why, "lease replay store failed; refusing the lease");
                return reject(C::CredentialLeaseInvalid, "the replay check failed");
            }
        }
        if let Some(code) = self.revocations.check(&lease) {
            let what = if code == C::CredentialLeaseDisabled {
                "the provider's credential is disabled"
            } else {
                "the lease is revoked"
            };
            return reject(code, what);
        }
        if now >= lease.expires_at_unix_ms {
            return reject(C::CredentialLeaseExpired, "the lease expired");
        }
        for (name, got, want) in [
            ("revision", lease.revision, expected.revision),
            ("generation", lease.generation, expected.generation),
        ] {
            if got < want {
                return Err(LeaseRejection::new(
                    C::CredentialLeaseStale,
                    format!("issued for an older {name}"),
                ));
            }
            if got > want {
                return Err(LeaseRejection::new(
                    C::CredentialLeaseMismatch,
                    format!("issued for another {name}"),
                ));
            }
        }
        let api_matches = expected.api.is_none_or(|api| api == lease.api);
        for (name, ok) in [
            ("adapter", lease.adapter == expected.adapter),
            ("target", lease.target == expected.target),
            ("slot", lease.slot == expected.slot),
            ("profile", lease.profile == expected.profile),
            ("route", api_matches),
        ] {
            if !ok {
                return Err(LeaseRejection::new(
                    C::CredentialLeaseMismatch,
                    format!("the lease's {name} differs from the request's"),
                ));
            }
        }
        let mut value = Zeroizing::new(Vec::with_capacity(
            lease.header_prefix.len() + credential.len(),
        ));
        value.extend_from_slice(lease.header_prefix.as_bytes());
        value.extend_from_slice(&credential);
        let header = if lease.header_name.is_empty() {
            "authorization".to_owned()
        } else {
            lease.header_name.to_ascii_lowercase()
        };
        Ok(OpenedCredential { header, value })
    }

    fn first_open(
        &self,
        id: &[u8],
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<bool, crate::store::ReplayError> {
        match &self.replay {
            Replay::Durable(store) => store.first_open(id, expires_ms, now_ms),
            Replay::Memory(seen) => {
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.retain(|_, until| *until > now_ms);
                Ok(seen.insert(id.to_vec(), expires_ms).is_none())
            }
        }
    }
}
