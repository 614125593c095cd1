//! Opening a request's credential lease after admission (F29).
//!
//! [`LeaseContext`] is what one connection's payload says about leases: the
//! Edge's verifying key, the config revision, and per adapter its provider
//! id and whether it needs a lease. The run manager calls
//! [`LeaseContext::open`] after it took a unit of capacity and before any
//! provider call; a refusal drops that unit and becomes the stream's one
//! typed terminal.

use std::sync::Arc;

use bytes::Bytes;
use foldhash::HashMap;
use proto::v1::{ExecutionFailure, NodeConfigPayload};

use super::LinkIdentity;
use crate::lease::{Expected, LeaseOpener, LeaseRejection, OpenedCredential};

/// One connection's lease settings (see the module docs).
#[derive(Debug, Default)]
pub(super) struct LeaseContext {
    opener: Option<Arc<LeaseOpener>>,
    verifying_key: Bytes,
    revision: u64,
    /// Adapter → (provider id, needs a lease).
    providers: HashMap<String, (String, bool)>,
}

/// The request a lease arrived with.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeasedRequest<'a> {
    pub(super) adapter: &'a str,
    pub(super) target: &'a str,
    pub(super) slot: &'a str,
    /// The route API of a tunnel's path; `None` for runs.
    pub(super) api: Option<&'a str>,
    pub(super) sealed: &'a [u8],
}

impl LeaseContext {
    /// The context of `payload`, opening with `opener`.
    pub(super) fn new(opener: Option<Arc<LeaseOpener>>, payload: &NodeConfigPayload) -> Self {
        Self {
            opener,
            verifying_key: payload.lease_verifying_key.clone(),
            revision: payload.revision,
            providers: payload
                .providers
                .iter()
                .map(|p| {
                    (
                        p.adapter.clone(),
                        (p.provider_id.clone(), p.credential_lease_required),
                    )
                })
                .collect(),
        }
    }

    /// Opens the request's lease: `Ok(None)` when its provider needs none
    /// and none came; the credential when one opened; the typed terminal
    /// otherwise (never a fallback to another credential).
    pub(super) fn open(
        &self,
        identity: &LinkIdentity,
        request: &LeasedRequest<'_>,
    ) -> Result<Option<OpenedCredential>, ExecutionFailure> {
        let (profile, required) = self
            .providers
            .get(request.adapter)
            .map_or(("", false), |(id, required)| (id.as_str(), *required));
        if !required && request.sealed.is_empty() {
            return Ok(None);
        }
        let Some(opener) = &self.opener else {
            return Err(LeaseRejection::new(
                proto::v1::FailureCode::CredentialLeaseWrongRecipient,
                "this node has no lease key",
            )
            .into_failure());
        };
        let expected = Expected {
            node_id: &identity.node_id,
            generation: identity.generation,
            revision: self.revision,
            verifying_key: &self.verifying_key,
            adapter: request.adapter,
            target: request.target,
            slot: request.slot,
            profile,
            api: request.api,
        };
        opener
            .open(request.sealed, &expected)
            .map(Some)
            .map_err(LeaseRejection::into_failure)
    }
}

/// Sets `credential` as the request's header, replacing any of that name.
pub(super) fn set_header(headers: &mut Vec<proto::v1::Header>, credential: &OpenedCredential) {
    headers.retain(|h| !h.name.eq_ignore_ascii_case(credential.header.as_bytes()));
    headers.push(proto::v1::Header {
        name: credential.header.clone().into(),
        value: Bytes::copy_from_slice(&credential.value),
    });
}
