//! The [`LeaseAuthority`]: keys, pinning, issue, revocation (module docs).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use crypto_box::aead::OsRng;
use crypto_box::aead::rand_core::RngCore;
use ed25519_dalek::{Signer, SigningKey};
use prost::Message;
use proto::v1::{
    CredentialLease, FailureCode, LeaseRevocation, LeaseRevocationKind, NodeConfigPayload,
    SealedLease,
};
use zeroize::Zeroizing;

use super::persist::{Persisted, StateDir};
use super::{LeaseClock, SystemClock, signed_message};
use crate::config::{CredentialSpec, EdgeConfig, LeaseSettings};

/// What one lease is for. Every field is bound into the lease.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseScope {
    /// The client API key's name (never the key); empty without keys.
    pub principal: String,
    /// Route API: `chat`, `responses`, or empty for a normalized run.
    pub api: String,
    /// Route model group.
    pub model_group: String,
    /// Slot: the run or tunnel id.
    pub slot: String,
    /// Profile: the provider id.
    pub provider_id: String,
    /// Adapter on the node.
    pub adapter: String,
    /// Target on the adapter.
    pub target: String,
    /// Recipient node.
    pub node_id: String,
    /// Its connection generation.
    pub generation: u64,
    /// Its config revision.
    pub revision: u64,
}

/// Why no lease was issued. The request fails closed with
/// [`failure_code`](Self::failure_code); no other credential is tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssueError {
    /// The provider's credential is disabled.
    #[error("the credential of provider {0:?} is disabled")]
    Disabled(String),
    /// The principal, provider or node is revoked.
    #[error("credential leases for this {0} are revoked")]
    Revoked(&'static str),
    /// The node registered no lease key: nothing can be sealed to it.
    #[error("node {0:?} has no lease key")]
    NoNodeKey(String),
    /// Sealing failed (never expected).
    #[error("the lease could not be sealed")]
    Seal,
}

impl IssueError {
    /// The typed terminal code for this refusal.
    pub fn failure_code(&self) -> FailureCode {
        match self {
            Self::Disabled(_) => FailureCode::CredentialLeaseDisabled,
            Self::Revoked(_) => FailureCode::CredentialLeaseRevoked,
            Self::NoNodeKey(_) => FailureCode::CredentialLeaseWrongRecipient,
            Self::Seal => FailureCode::Internal,
        }
    }
}

/// Why a node's lease key was refused at registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterKeyError {
    /// Not 32 bytes.
    #[error("the lease public key must be 32 bytes, got {0}")]
    Malformed(usize),
    /// Another key is pinned for this node id.
    #[error("node {0:?} presented a lease key different from the pinned one")]
    Changed(String),
    /// A provider of this node needs leases and the node sent no key.
    #[error("node {0:?} serves providers with credentials but sent no lease key")]
    Missing(String),
}

#[derive(Debug, Default)]
struct State {
    /// Pinned node lease keys by node id.
    pinned: HashMap<String, [u8; 32]>,
    /// Every revocation made, in order.
    /// With the time each was made (ms since the Unix epoch).
    revocations: Vec<(u64, LeaseRevocation)>,
    /// Disabled provider ids.
    disabled: HashSet<String>,
    /// The config revision each node registered with.
    revisions: HashMap<String, u64>,
}

/// Issues, and revokes, the leases of one Edge (see the module docs).
#[derive(Debug)]
pub struct LeaseAuthority {
    signing: SigningKey,
    settings: LeaseSettings,
    clock: Arc<dyn LeaseClock>,
    credentials: HashMap<String, CredentialSpec>,
    state: Mutex<State>,
    /// Where pins, revocations and disabled providers are kept across
    /// restarts; `None` = memory only.
    store: Option<StateDir>,
}

impl LeaseAuthority {
    /// The authority for `config`: its credentials and lease settings, the
    /// signing key from `leases.signing_key_path` (32 raw bytes), else the
    /// one kept in `leases.state_dir` (created once), else a fresh one; and
    /// the pins, revocations and disabled providers kept in the state dir.
    ///
    /// # Errors
    /// The key file cannot be read or is not 32 bytes; the state dir cannot
    /// be created or its state file is broken.
    pub fn from_config(config: &EdgeConfig) -> std::io::Result<Self> {
        let settings = config.leases().clone();
        let store = settings
            .state_dir
            .as_deref()
            .map(StateDir::open)
            .transpose()?;
        let key = match (&settings.signing_key_path, &store) {
            (Some(path), _) => {
                let bytes = Zeroizing::new(std::fs::read(path)?);
                <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{path}: a lease signing key is 32 raw bytes"),
                    )
                })?
            }
            (None, Some(store)) => store.signing_key(random_32)?,
            (None, None) => random_32(),
        };
        let credentials = config
            .nodes()
            .into_iter()
            .flat_map(|node| node.providers.iter())
            .filter_map(|p| Some((p.id.clone(), p.credential.clone()?)))
            .filter(|(_, credential)| credential.managed)
            .collect();
        let mut authority = Self::new(key, settings, credentials, Arc::new(SystemClock));
        if let Some(store) = store {
            let kept = store.load()?;
            let state = authority.state.get_mut().unwrap_or_else(|e| e.into_inner());
            state.pinned = kept.pinned;
            state.revocations = kept.revocations;
            state.disabled = kept.disabled;
            authority.store = Some(store);
        }
        Ok(authority)
    }

    /// An authority signing with `signing_key`.
    pub fn new(
        signing_key: [u8; 32],
        settings: LeaseSettings,
        credentials: HashMap<String, CredentialSpec>,
        clock: Arc<dyn LeaseClock>,
    ) -> Self {
        let signing = SigningKey::from_bytes(&signing_key);
        Self {
            signing,
            settings,
            clock,
            credentials,
            state: Mutex::new(State::default()),
            store: None,
        }
    }

    /// Writes `state` to the state dir, if there is one. A failed write
    /// keeps the change in memory (it applies now) and is logged: the next
    /// change writes the whole state again.
    fn persist(&self, state: &State) {
        let Some(store) = &self.store else {
            return;
        };
        let kept = Persisted {
            pinned: state.pinned.clone(),
            revocations: state.revocations.clone(),
            disabled: state.disabled.clone(),
        };
        if let Err(error) = store.save(&kept) {
            tracing::error!(event = "lease_state_not_saved", %error, "lease_state_not_saved");
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a single insert/push: a panic cannot leave it
        // half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Edge's Ed25519 verifying key, sent to every node.
    pub fn verifying_key(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    /// The config revision `node_id` registered with (0 if never).
    pub fn revision_of(&self, node_id: &str) -> u64 {
        self.state().revisions.get(node_id).copied().unwrap_or(0)
    }

    /// Whether requests to `provider_id` carry a lease.
    pub fn needs_lease(&self, provider_id: &str) -> bool {
        self.credentials.contains_key(provider_id)
    }

    /// The key pinned for `node_id`.
    pub fn node_key(&self, node_id: &str) -> Option<[u8; 32]> {
        self.state().pinned.get(node_id).copied()
    }

    /// Registration hook: pins `key` for `node_id` (or checks it against
    /// the pinned one) and adds the verifying key and current revocations to
    /// its `config`. `needs_key` says whether any of its providers has a
    /// credential.
    ///
    /// mTLS hook: when the link has a verified peer identity, the caller
    /// checks it names `node_id` before calling this, so the key is bound to
    /// that identity too.
    ///
    /// # Errors
    /// See [`RegisterKeyError`]; the registration is then refused with
    /// `REGISTER_REJECT_REASON_LEASE_KEY_MISMATCH`.
    pub fn register_node(
        &self,
        node_id: &str,
        key: &[u8],
        config: &mut NodeConfigPayload,
    ) -> Result<(), RegisterKeyError> {
        let needs_key = config.providers.iter().any(|p| p.credential_lease_required);
        if key.is_empty() {
            if needs_key {
                return Err(RegisterKeyError::Missing(node_id.to_owned()));
            }
        } else {
            let key =
                <[u8; 32]>::try_from(key).map_err(|_| RegisterKeyError::Malformed(key.len()))?;
            let mut state = self.state();
            match state.pinned.get(node_id) {
                Some(pinned) if *pinned != key && !self.settings.allow_node_key_change => {
                    return Err(RegisterKeyError::Changed(node_id.to_owned()));
                }
                Some(pinned) if *pinned == key => {}
                _ => {
                    state.pinned.insert(node_id.to_owned(), key);
                    self.persist(&state);
                }
            }
        }
        self.state()
            .revisions
            .insert(node_id.to_owned(), config.revision);
        config.lease_verifying_key = Bytes::copy_from_slice(&self.verifying_key());
        config.lease_revocations = self.revocations();
        Ok(())
    }

    /// Whether `provider_id` has a managed credential: [`issue`](Self::issue)
    /// makes no lease for a provider without one.
    pub fn has_credential(&self, provider_id: &str) -> bool {
        self.credentials.contains_key(provider_id)
    }

    /// Issues the sealed lease for `scope`; `None` when the provider has no
    /// credential (nothing to lease).
    ///
    /// # Errors
    /// See [`IssueError`].
    pub fn issue(&self, scope: &LeaseScope) -> Result<Option<Bytes>, IssueError> {
        let Some(credential) = self.credentials.get(&scope.provider_id) else {
            return Ok(None);
        };
        let recipient = {
            let state = self.state();
            if state.disabled.contains(&scope.provider_id) {
                return Err(IssueError::Disabled(scope.provider_id.clone()));
            }
            for (_, r) in &state.revocations {
                if r.issued_before_unix_ms != 0 {
                    continue;
                }
                let hit = match r.kind() {
                    LeaseRevocationKind::Principal => Some(("principal", &scope.principal)),
                    LeaseRevocationKind::Provider => Some(("provider", &scope.provider_id)),
                    LeaseRevocationKind::Node => Some(("node", &scope.node_id)),
                    _ => None,
                };
                if let Some((what, value)) = hit
                    && *value == r.value
                {
                    return Err(IssueError::Revoked(what));
                }
            }
            state
                .pinned
                .get(&scope.node_id)
                .copied()
                .ok_or_else(|| IssueError::NoNodeKey(scope.node_id.clone()))?
        };
        let now = self.clock.now_unix_ms();
        let lease = CredentialLease {
            lease_id: Bytes::copy_from_slice(&random_32()[..16]),
            principal: scope.principal.clone(),
            api: scope.api.clone(),
            model_group: scope.model_group.clone(),
            slot: scope.slot.clone(),
            profile: scope.provider_id.clone(),
            adapter: scope.adapter.clone(),
            target: scope.target.clone(),
            node_id: scope.node_id.clone(),
            generation: scope.generation,
            revision: scope.revision,
            issued_at_unix_ms: now,
            expires_at_unix_ms: now.saturating_add(self.settings.ttl_ms),
            recipient_key: Bytes::copy_from_slice(&recipient),
            header_name: credential.header.clone(),
            header_prefix: credential.prefix.clone(),
        };
        self.seal(&lease, credential.secret.expose(), &recipient)
            .map(Some)
    }

    /// Signs `lease` with `credential` and seals both to `recipient`. The
    /// low-level step of [`issue`](Self::issue), public so tests can build
    /// leases with chosen fields.
    ///
    /// # Errors
    /// [`IssueError::Seal`] if sealing fails.
    pub fn seal(
        &self,
        lease: &CredentialLease,
        credential: &[u8],
        recipient: &[u8; 32],
    ) -> Result<Bytes, IssueError> {
        let lease = lease.encode_to_vec();
        let message = Zeroizing::new(signed_message(&lease, credential));
        let signature = self.signing.sign(&message);
        let sealed = SealedLease {
            lease: lease.into(),
            signature: Bytes::copy_from_slice(&signature.to_bytes()),
            credential: Bytes::copy_from_slice(credential),
        };
        let plain = Zeroizing::new(sealed.encode_to_vec());
        drop(sealed);
        crypto_box::PublicKey::from_bytes(*recipient)
            .seal(&mut OsRng, &plain)
            .map(Bytes::from)
            .map_err(|_| IssueError::Seal)
    }

    /// Records a revocation of `kind`/`value` covering every lease issued so
    /// far and, for principal/provider/node, every later one; returns it for
    /// pushing to nodes.
    ///
    /// The list stays bounded: a repeated revocation is kept once, and a
    /// lease-id revocation is dropped once every lease it could cover has
    /// expired (`ttl_ms` after it was made).
    pub fn revoke(&self, kind: LeaseRevocationKind, value: &str) -> LeaseRevocation {
        let mut revocation = LeaseRevocation {
            value: value.to_owned(),
            issued_before_unix_ms: 0,
            ..LeaseRevocation::default()
        };
        revocation.set_kind(kind);
        let now = self.clock.now_unix_ms();
        let ttl_ms = self.settings.ttl_ms;
        let mut state = self.state();
        state.revocations.retain(|(at, r)| {
            r.kind() != LeaseRevocationKind::LeaseId || at.saturating_add(ttl_ms) >= now
        });
        if !state.revocations.iter().any(|(_, r)| *r == revocation) {
            state.revocations.push((now, revocation.clone()));
        }
        self.persist(&state);
        revocation
    }

    /// Disables `provider_id`'s credential: no new lease, and nodes refuse
    /// outstanding ones. Returns the revocation to push.
    pub fn disable_provider(&self, provider_id: &str) -> LeaseRevocation {
        self.state().disabled.insert(provider_id.to_owned());
        self.revoke(LeaseRevocationKind::ProviderDisabled, provider_id)
    }

    /// Every revocation made so far.
    pub fn revocations(&self) -> Vec<LeaseRevocation> {
        self.state()
            .revocations
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }
}

/// 32 bytes from the OS's CSPRNG.
fn random_32() -> [u8; 32] {
    let mut out = [0u8; 32];
    OsRng.fill_bytes(&mut out);
    out
}
