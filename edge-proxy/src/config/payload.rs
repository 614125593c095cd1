//! Turning a node record into the `NodeConfigPayload` it registers with (F2),
//! or a typed reason why not (F3).

use prost::Message;

use proto::v1::{
    Envelope, Header, HealthProbeConfig, NodeConfigPayload, ProviderConfig, RegisterRejectReason,
    RegisterResponse, envelope,
};

use super::model::{LinkConfig, ProviderSpec};
use super::token::NodeRecord;

/// Why a node's config payload could not be built. Each is a
/// `REGISTER_REJECT_REASON_CONFIG_BUILD_FAILED` refusal (F3).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The record lists no providers: the Node would have nothing to serve.
    #[error("node {node_id:?} has no providers")]
    NoProviders {
        /// The node.
        node_id: String,
    },
    /// The `RegisterResponse` frame carrying the payload would exceed the
    /// largest frame the Node announced.
    #[error(
        "config payload for node {node_id:?} needs a {len}-byte frame, over the node's maximum of {max} bytes"
    )]
    TooLarge {
        /// The node.
        node_id: String,
        /// Envelope bytes of the accepted `RegisterResponse` (see
        /// [`register_response_frame_len`]).
        len: usize,
        /// The node's announced `RegisterRequest.max_frame_len`.
        max: u32,
    },
}

impl PayloadError {
    /// The reject reason to answer the registration with.
    pub fn reject_reason(&self) -> RegisterRejectReason {
        RegisterRejectReason::ConfigBuildFailed
    }
}

/// Envelope bytes (length prefix excluded) of the frame that accepts `node_id`
/// with `config`: stream 0, `RegisterResponse{accepted, node_id, generation,
/// config}` with no message, counted at the largest generation so the bound
/// holds for every generation.
pub fn register_response_frame_len(node_id: &str, config: &NodeConfigPayload) -> usize {
    Envelope {
        stream_id: 0,
        msg: Some(envelope::Msg::RegisterResponse(Box::new(
            RegisterResponse {
                accepted: true,
                reject_reason: RegisterRejectReason::Unspecified.into(),
                message: String::new(),
                node_id: node_id.to_owned(),
                generation: u64::MAX,
                config: Some(config.clone()),
            },
        ))),
    }
    .encoded_len()
}

impl NodeRecord {
    /// Builds this node's `NodeConfigPayload` (F2).
    ///
    /// `link` supplies the frame and window limits, `revision` the config
    /// revision, `peer_max_frame_len` the `max_frame_len` the Node announced
    /// (the caller resolves an unannounced 0 before calling).
    ///
    /// # Errors
    /// [`PayloadError::NoProviders`] for a record without providers;
    /// [`PayloadError::TooLarge`] when the accepting `RegisterResponse` frame
    /// would be longer than `peer_max_frame_len` (equal is fine).
    pub fn build_payload(
        &self,
        link: &LinkConfig,
        revision: u64,
        peer_max_frame_len: u32,
    ) -> Result<NodeConfigPayload, PayloadError> {
        if self.providers.is_empty() {
            return Err(PayloadError::NoProviders {
                node_id: self.id.clone(),
            });
        }
        let payload = NodeConfigPayload {
            revision,
            providers: self.providers.iter().map(provider_config).collect(),
            max_frame_len: link.max_frame_len,
            initial_stream_window: link.initial_stream_window,
            max_body_chunk: link.max_body_chunk,
            // This Edge hands a batch to the relay frame by frame
            // (`dispatch::TunnelStream`).
            tunnel_batches: true,
            // F29: filled in at registration by the lease authority.
            ..NodeConfigPayload::default()
        };
        let len = register_response_frame_len(&self.id, &payload);
        if len > peer_max_frame_len as usize {
            return Err(PayloadError::TooLarge {
                node_id: self.id.clone(),
                len,
                max: peer_max_frame_len,
            });
        }
        Ok(payload)
    }
}

/// One provider on the wire. Zero-means-default values stay zero.
fn provider_config(spec: &ProviderSpec) -> ProviderConfig {
    ProviderConfig {
        provider_id: spec.id.clone(),
        adapter: spec.adapter.clone(),
        kind: spec.kind.adapter_kind().into(),
        base_url: spec.base_url.clone(),
        targets: spec.targets.clone(),
        max_concurrency: spec.max_concurrency,
        response_stall_timeout_ms: spec.response_stall_timeout_ms,
        request_timeout_ms: spec.request_timeout_ms,
        supports_tunnel: spec.supports_tunnel(),
        health_probe: Some(HealthProbeConfig {
            path: spec.health_probe.path.clone(),
            timeout_ms: spec.health_probe.timeout_ms,
        }),
        headers: spec
            .headers
            .iter()
            .map(|(name, value)| Header {
                name: name.clone().into(),
                value: value.clone().into_bytes().into(),
            })
            .chain(super::credential::unmanaged_header(spec))
            .collect(),
        credential_lease_required: spec.credential.as_ref().is_some_and(|c| c.managed),
    }
}
