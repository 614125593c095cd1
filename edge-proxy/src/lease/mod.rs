//! Managed credential leases, the Edge's side (F29). See `docs/leases.md`.
//!
//! The [`LeaseAuthority`] holds the Edge's Ed25519 signing key, every
//! provider credential of `edge.yaml`, the node lease keys pinned at
//! registration, and the revocations and disabled providers. Per request to
//! a provider with a credential it issues one lease:
//!
//! ```text
//!  CredentialLease{id, principal, api, model_group, slot, profile, adapter,
//!                  target, node_id, generation, revision, issued, expires,
//!                  recipient_key, header}
//!     │ encode                      signature = Ed25519(domain ‖ len ‖ lease ‖ credential)
//!     ▼
//!  SealedLease{lease, signature, credential} ──crypto_box seal──▶ node's X25519 key
//! ```
//!
//! # Invariants
//! - A credential leaves the Edge only sealed to the pinned key of the node
//!   the request goes to; never in a config payload, log or error.
//! - A node id's lease key is pinned on its first registration; a different
//!   key is refused unless `leases.allow_node_key_change` is set.
//! - A disabled provider or a revoked principal, provider or node gets no
//!   lease (typed [`IssueError`]), and no other credential is tried.
//! - Revocations are sent to every node at registration and pushed to ready
//!   nodes when made. With `leases.state_dir` (the default for an Edge read
//!   from a file) pins, revocations, disabled providers and the signing key
//!   survive a restart ([`persist`]); otherwise they live as long as the
//!   process.

mod authority;
mod clock;
pub mod persist;

#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod tests;

pub use authority::{IssueError, LeaseAuthority, LeaseScope, RegisterKeyError};
pub use clock::{LeaseClock, ManualClock, SystemClock};

/// Domain separation of the signed bytes (shared with the Node).
pub const SIGNATURE_DOMAIN: &[u8] = b"iop-credential-lease-v1";

/// The bytes the Edge signs and the Node verifies: the domain, the lease's
/// length (u32 big-endian), the encoded lease and the credential.
pub fn signed_message(lease: &[u8], credential: &[u8]) -> Vec<u8> {
    let len = u32::try_from(lease.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(SIGNATURE_DOMAIN.len() + 4 + lease.len() + credential.len());
    out.extend_from_slice(SIGNATURE_DOMAIN);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(lease);
    out.extend_from_slice(credential);
    out
}

/// The route a CAPABILITIES recovery probe's lease is bound to (F25): a
/// closed value no client route has (`chat`, `responses`, empty).
pub const PROBE_ROUTE: &str = "probe";

/// What the lease of the F25 recovery probe `probe_id` of `provider_id`
/// binds: no principal, no model group, route [`PROBE_ROUTE`], slot the
/// probe id, the probed `(adapter, target)`, the `(node, generation)` it is
/// sent on and that node's config `revision`.
pub fn probe_scope(
    probe_id: &str,
    provider_id: &str,
    (adapter, target): (&str, &str),
    (node_id, generation): (&str, u64),
    revision: u64,
) -> LeaseScope {
    LeaseScope {
        principal: String::new(),
        api: PROBE_ROUTE.to_owned(),
        model_group: String::new(),
        slot: probe_id.to_owned(),
        provider_id: provider_id.to_owned(),
        adapter: adapter.to_owned(),
        target: target.to_owned(),
        node_id: node_id.to_owned(),
        generation,
        revision,
    }
}

/// Whether `code` is one of the `CREDENTIAL_LEASE_*` fail-closed codes.
pub fn is_lease_failure(code: proto::v1::FailureCode) -> bool {
    use proto::v1::FailureCode as C;
    matches!(
        code,
        C::CredentialLeaseRevoked
            | C::CredentialLeaseDisabled
            | C::CredentialLeaseExpired
            | C::CredentialLeaseStale
            | C::CredentialLeaseReplayed
            | C::CredentialLeaseWrongRecipient
            | C::CredentialLeaseMismatch
            | C::CredentialLeaseInvalid
    )
}

/// The route API a tunnel path serves: `chat` or `responses`; empty for
/// any other path and for normalized runs (which have no path).
pub fn api_of_path(path: &str) -> &'static str {
    let path = path.split('?').next().unwrap_or_default();
    match path {
        "/v1/chat/completions" => "chat",
        "/v1/responses" => "responses",
        _ => "",
    }
}
