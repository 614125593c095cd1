//! F29 at dispatch: the credential lease a run or tunnel carries (bound
//! to its principal, API, model group, slot, provider, node, generation
//! and revision), and revocations pushed to every ready node.

use super::{Dispatcher, SubmitError, Target};
use crate::link::inbox::CoreMsg;
use crate::pool::Lease;
use crate::registry::NodeDirectory;
use proto::v1::envelope::Msg;

impl<D: NodeDirectory> Dispatcher<D> {
    /// The sealed credential lease for the scope `scope` makes, empty when
    /// `lease`'s provider has no managed credential; then `scope` is not
    /// called (most providers have none, and a scope is eight strings a
    /// request).
    pub(super) fn credential(
        &self,
        lease: &Lease,
        scope: impl FnOnce() -> crate::lease::LeaseScope,
    ) -> Result<bytes::Bytes, SubmitError> {
        let credentialed = (self.registry.leases())
            .is_some_and(|leases| leases.has_credential(&lease.provider().id));
        if credentialed {
            self.issue(&scope())
        } else {
            Ok(bytes::Bytes::new())
        }
    }

    /// What a credential lease for `lease` on `target` binds.
    pub(super) fn lease_scope(
        &self,
        lease: &Lease,
        target: &Target,
        slot: &str,
        principal: &str,
        api: &str,
    ) -> crate::lease::LeaseScope {
        let provider = lease.provider();
        crate::lease::LeaseScope {
            principal: principal.to_owned(),
            api: api.to_owned(),
            model_group: lease.group().to_owned(),
            slot: slot.to_owned(),
            provider_id: provider.id.clone(),
            adapter: String::from(&*provider.adapter),
            target: lease.target().to_owned(),
            node_id: target.node_id.to_string(),
            generation: target.generation,
            revision: self
                .registry
                .leases()
                .map_or(0, |l| l.revision_of(&target.node_id)),
        }
    }

    /// The sealed lease for `scope`, empty when its provider has none.
    pub fn issue(&self, scope: &crate::lease::LeaseScope) -> Result<bytes::Bytes, SubmitError> {
        match self.registry.leases() {
            Some(leases) => Ok(leases.issue(scope)?.unwrap_or_default()),
            None => Ok(bytes::Bytes::new()),
        }
    }

    /// Revokes credential leases by `kind`/`value` (F29) and pushes the
    /// revocation to every ready node. False when no authority is installed.
    pub fn revoke_leases(&self, kind: proto::v1::LeaseRevocationKind, value: &str) -> bool {
        let Some(leases) = self.registry.leases() else {
            return false;
        };
        let revocation = leases.revoke(kind, value);
        self.push_revocations(vec![revocation]);
        true
    }

    /// Disables `provider_id`'s credential (F29): no new lease, and nodes
    /// refuse outstanding ones. False when no authority is installed.
    pub fn disable_provider(&self, provider_id: &str) -> bool {
        let Some(leases) = self.registry.leases() else {
            return false;
        };
        let revocation = leases.disable_provider(provider_id);
        self.push_revocations(vec![revocation]);
        true
    }

    pub(super) fn push_revocations(&self, revocations: Vec<proto::v1::LeaseRevocation>) {
        for (node_id, generation, core) in self.registry.ready_nodes() {
            if let Some(inbox) = self.inboxes.get(core) {
                let _ = inbox.send(CoreMsg::Send {
                    node_id: std::sync::Arc::from(node_id),
                    generation,
                    stream_id: 0,
                    msg: Msg::LeaseRevocations(proto::v1::LeaseRevocations {
                        revocations: revocations.clone(),
                    }),
                });
            }
        }
    }
}
