//! The revocations the Edge sent (registration payload and pushes).

use std::sync::Mutex;

use proto::v1::{CredentialLease, FailureCode, LeaseRevocation, LeaseRevocationKind};

/// Largest number of revocations kept; beyond it the oldest lease-id ones
/// go first (a lease-id revocation is useless once the lease expired).
pub const MAX_REVOCATIONS: usize = 65_536;

/// Every revocation in force, shared by the Node's cores.
#[derive(Debug, Default)]
pub struct Revocations {
    list: Mutex<Vec<LeaseRevocation>>,
}

impl Revocations {
    /// Adds `revocations` (duplicates ignored).
    pub fn add(&self, revocations: &[LeaseRevocation]) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        for r in revocations {
            if !list.contains(r) {
                list.push(r.clone());
            }
        }
        while list.len() > MAX_REVOCATIONS {
            let victim = list
                .iter()
                .position(|r| r.kind() == LeaseRevocationKind::LeaseId)
                .unwrap_or(0);
            list.remove(victim);
        }
    }

    /// The code refusing `lease`, if a revocation covers it.
    pub fn check(&self, lease: &CredentialLease) -> Option<FailureCode> {
        let list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        let lease_hex = hex(&lease.lease_id);
        list.iter().find_map(|r| {
            if r.issued_before_unix_ms != 0 && lease.issued_at_unix_ms > r.issued_before_unix_ms {
                return None;
            }
            let (field, code) = match r.kind() {
                LeaseRevocationKind::LeaseId => (&lease_hex, FailureCode::CredentialLeaseRevoked),
                LeaseRevocationKind::Principal => {
                    (&lease.principal, FailureCode::CredentialLeaseRevoked)
                }
                LeaseRevocationKind::Provider => {
                    (&lease.profile, FailureCode::CredentialLeaseRevoked)
                }
                LeaseRevocationKind::Node => (&lease.node_id, FailureCode::CredentialLeaseRevoked),
                LeaseRevocationKind::ProviderDisabled => {
                    (&lease.profile, FailureCode::CredentialLeaseDisabled)
                }
                LeaseRevocationKind::Unspecified => return None,
            };
            (*field == r.value).then_some(code)
        })
    }
}

/// Lowercase hex of a lease id, as revocations name it.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
