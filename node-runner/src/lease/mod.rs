//! Managed credential leases, the Node's side (F29). See `docs/leases.md`.
//!
//! The Node has an X25519 key pair in its data dir (`lease.key`, created on
//! first start, mode 0600) and sends the public half in `RegisterRequest`.
//! The Edge seals one lease per request to it. [`LeaseOpener::open`] runs
//! only after capacity admission, right before the provider call, and
//! checks, in order:
//!
//! 1. it unseals with this Node's key, names this node and this key
//!    (else `WRONG_RECIPIENT`); it decodes and its Ed25519 signature verifies
//!    with the Edge's key from the config payload (else `INVALID`);
//! 2. its id was never presented before (`REPLAYED`); the id is recorded
//!    durably now, so a lease is single-use even when a later check fails;
//! 3. no revocation covers it (`DISABLED` for a disabled provider, else
//!    `REVOKED`);
//! 4. it has not expired (`EXPIRED`);
//! 5. its revision and generation are the connection's (`STALE` if older,
//!    `MISMATCH` if newer);
//! 6. adapter, target, slot (run/tunnel id), profile (provider id) and,
//!    for tunnels, the route API match the request (`MISMATCH`).
//!
//! Only then is the credential handed to the provider request, as one
//! header. The secret is never logged, stored or put in an error message;
//! the buffers holding it are zeroed on drop.

mod keys;
mod open;
mod revocations;

#[cfg(test)]
mod tests;

use std::fmt;

use proto::v1::{ExecutionFailure, FailureCode, FailureSide};
use zeroize::Zeroizing;

pub use keys::{LEASE_KEY_FILE, NodeLeaseKey};
pub use open::{Expected, LeaseClock, LeaseOpener, SystemClock};
pub use revocations::{MAX_REVOCATIONS, Revocations, hex as lease_id_hex};

/// Domain separation of the signed bytes (as the Edge's
/// `edge_proxy::lease::SIGNATURE_DOMAIN`).
pub const SIGNATURE_DOMAIN: &[u8] = b"iop-credential-lease-v1";

/// Why a lease was refused: a typed, secret-free terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRejection {
    /// One of the `CREDENTIAL_LEASE_*` codes.
    pub code: FailureCode,
    /// Safe detail (field names, never values of the credential).
    pub message: String,
}

impl LeaseRejection {
    pub(crate) fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The terminal's failure (side EDGE: the request was not allowed).
    pub fn into_failure(self) -> ExecutionFailure {
        let mut failure = ExecutionFailure {
            message: format!("credential lease refused: {}", self.message),
            ..ExecutionFailure::default()
        };
        failure.set_code(self.code);
        failure.set_side(FailureSide::Edge);
        failure
    }
}

/// An opened credential: the header to set on the provider request.
#[derive(Clone)]
pub struct OpenedCredential {
    /// Header name (lowercase).
    pub header: String,
    /// Header value (prefix + secret), zeroed on drop.
    pub value: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for OpenedCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenedCredential")
            .field("header", &self.header)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// The bytes the Edge signs (see the Edge's `signed_message`).
pub(crate) fn signed_message(lease: &[u8], credential: &[u8]) -> Zeroizing<Vec<u8>> {
    let len = u32::try_from(lease.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(SIGNATURE_DOMAIN.len() + 4 + lease.len() + credential.len());
    out.extend_from_slice(SIGNATURE_DOMAIN);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(lease);
    out.extend_from_slice(credential);
    Zeroizing::new(out)
}

/// The route API of a tunnel path (as the Edge's `api_of_path`).
pub fn api_of_path(path: &str) -> &'static str {
    match path.split('?').next().unwrap_or_default() {
        "/v1/chat/completions" => "chat",
        "/v1/responses" => "responses",
        _ => "",
    }
}
