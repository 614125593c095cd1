//! Building a node's `NodeConfigPayload` (F2) and the typed refusals (F3).

use edge_proxy::config::{
    EdgeConfig, LinkConfig, NodeRecord, PayloadError, register_response_frame_len,
};
use prost::Message;
use proto::v1::{
    AdapterKind, Envelope, Header, HealthProbeConfig, NodeConfigPayload, ProviderConfig,
    RegisterRejectReason, RegisterResponse, envelope,
};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/edge.example.yaml");

fn example() -> EdgeConfig {
    EdgeConfig::load(EXAMPLE).unwrap()
}

/// Large enough for any payload in these tests.
const ROOMY: u32 = 1 << 20;

#[test]
fn every_field_is_mapped() {
    let config = example();
    let node = config.nodes().get("gpu-box-1").unwrap();
    let payload = node.build_payload(config.link(), 7, ROOMY).unwrap();
    let expected = NodeConfigPayload {
        revision: 7,
        providers: vec![
            ProviderConfig {
                provider_id: "gpu-box-1-vllm".into(),
                adapter: "vllm-main".into(),
                kind: AdapterKind::Vllm.into(),
                base_url: "http://127.0.0.1:8000".into(),
                targets: vec![
                    "qwen2.5-7b-instruct".into(),
                    "Qwen/Qwen2.5-7B-Instruct".into(),
                ],
                max_concurrency: 32,
                response_stall_timeout_ms: 120_000,
                request_timeout_ms: 0,
                supports_tunnel: true,
                health_probe: Some(HealthProbeConfig {
                    path: "/health".into(),
                    timeout_ms: 2000,
                }),
                headers: vec![Header {
                    name: "x-request-source".into(),
                    value: "iop".into(),
                }],
                credential_lease_required: false,
            },
            ProviderConfig {
                provider_id: "gpu-box-1-llamacpp".into(),
                adapter: "gpu-box-1-llamacpp".into(),
                kind: AdapterKind::OpenaiCompat.into(),
                base_url: "http://127.0.0.1:8081/".into(),
                targets: vec!["qwen2.5-7b-instruct".into()],
                max_concurrency: 4,
                // 0 = the default (300000 ms) stays 0 on the wire (F20).
                response_stall_timeout_ms: 0,
                request_timeout_ms: 0,
                supports_tunnel: true,
                health_probe: Some(HealthProbeConfig {
                    path: "/v1/models".into(),
                    timeout_ms: 0,
                }),
                headers: vec![],
                credential_lease_required: false,
            },
        ],
        max_frame_len: 4 * 1024 * 1024,
        initial_stream_window: 256 * 1024,
        max_body_chunk: 64 * 1024,
        // F29: set at registration by the lease authority, not here.
        lease_verifying_key: Default::default(),
        lease_revocations: vec![],
        tunnel_batches: true,
    };
    assert_eq!(payload, expected);
    assert_eq!(node.providers[1].effective_stall_timeout_ms(), 300_000);
    assert_eq!(node.providers[0].effective_stall_timeout_ms(), 120_000);
}

#[test]
fn ollama_gets_no_tunnel_and_link_limits_travel() {
    let config = example();
    let node = config.nodes().get("cpu-box-2").unwrap();
    let link = LinkConfig {
        max_frame_len: 2048,
        initial_stream_window: 4096,
        max_body_chunk: 1024,
        register_timeout_ms: 1,
    };
    let payload = node.build_payload(&link, 1, ROOMY).unwrap();
    let p = &payload.providers[0];
    assert_eq!(p.kind(), AdapterKind::Ollama);
    assert!(!p.supports_tunnel, "F17: ollama is dispatched normalized");
    assert_eq!(p.health_probe.as_ref().unwrap().path, "/api/tags");
    assert_eq!(
        (
            payload.max_frame_len,
            payload.initial_stream_window,
            payload.max_body_chunk
        ),
        (2048, 4096, 1024)
    );
}

#[test]
fn payload_round_trips_on_the_wire() {
    let config = example();
    for node in config.nodes() {
        let payload = node.build_payload(config.link(), u64::MAX, ROOMY).unwrap();
        let back = NodeConfigPayload::decode(payload.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, payload);
    }
}

#[test]
fn frame_len_is_the_accepting_envelope_at_its_largest() {
    let config = example();
    let node = config.nodes().get("gpu-box-1").unwrap();
    let payload = node.build_payload(config.link(), 3, ROOMY).unwrap();
    let len = register_response_frame_len(&node.id, &payload);
    for generation in [0, 1, 1 << 35, u64::MAX] {
        let frame = Envelope {
            stream_id: 0,
            msg: Some(envelope::Msg::RegisterResponse(Box::new(
                RegisterResponse {
                    accepted: true,
                    node_id: node.id.clone(),
                    generation,
                    config: Some(payload.clone()),
                    ..Default::default()
                },
            ))),
        };
        assert!(frame.encoded_len() <= len);
        if generation == u64::MAX {
            assert_eq!(frame.encoded_len(), len);
        }
    }
}

#[test]
fn too_large_at_the_limit_and_one_past() {
    let config = example();
    let node = config.nodes().get("gpu-box-1").unwrap();
    let payload = node.build_payload(config.link(), 3, ROOMY).unwrap();
    let need = u32::try_from(register_response_frame_len(&node.id, &payload)).unwrap();
    assert_eq!(node.build_payload(config.link(), 3, need), Ok(payload));
    let err = node.build_payload(config.link(), 3, need - 1).unwrap_err();
    assert_eq!(
        err,
        PayloadError::TooLarge {
            node_id: "gpu-box-1".into(),
            len: need as usize,
            max: need - 1
        }
    );
    assert_eq!(err.reject_reason(), RegisterRejectReason::ConfigBuildFailed);
    let msg = err.to_string();
    assert!(
        msg.contains("gpu-box-1") && msg.contains(&format!("{need}")),
        "{msg}"
    );
    assert!(matches!(
        node.build_payload(config.link(), 3, 0),
        Err(PayloadError::TooLarge { max: 0, .. })
    ));
}

#[test]
fn a_node_without_providers_cannot_register() {
    let text = format!(
        "nodes:\n  - id: empty\n    token_blake3: {}\n",
        blake3::hash(b"t").to_hex()
    );
    let config = EdgeConfig::from_yaml_str(&text, "edge.yaml").unwrap();
    let node = config.nodes().lookup("t").unwrap();
    let err = node.build_payload(config.link(), 1, ROOMY).unwrap_err();
    assert_eq!(
        err,
        PayloadError::NoProviders {
            node_id: "empty".into()
        }
    );
    assert_eq!(err.reject_reason(), RegisterRejectReason::ConfigBuildFailed);
    assert_eq!(err.to_string(), "node \"empty\" has no providers");
}

#[test]
fn a_record_built_in_code_behaves_the_same() {
    let config = EdgeConfig::embedded_default();
    let mut record: NodeRecord = config.nodes().get("node-1").unwrap().clone();
    let full = record.build_payload(config.link(), 1, ROOMY).unwrap();
    assert_eq!(full.providers.len(), 2);
    record.providers.clear();
    assert!(matches!(
        record.build_payload(config.link(), 1, ROOMY),
        Err(PayloadError::NoProviders { .. })
    ));
}
