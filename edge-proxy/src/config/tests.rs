//! Unit tests of the pieces; whole-file behaviour is in `tests/config_*.rs`.

use proto::v1::AdapterKind;

use super::*;

#[test]
fn kind_decides_adapter_tunnel_and_probe() {
    let table = [
        (
            ProviderKind::OpenaiCompat,
            AdapterKind::OpenaiCompat,
            true,
            "/v1/models",
            "openai_compat",
        ),
        (
            ProviderKind::Vllm,
            AdapterKind::Vllm,
            true,
            "/health",
            "vllm",
        ),
        (
            ProviderKind::Ollama,
            AdapterKind::Ollama,
            false,
            "/api/tags",
            "ollama",
        ),
    ];
    for (kind, adapter, tunnel, probe, name) in table {
        assert_eq!(kind.adapter_kind(), adapter);
        assert_eq!(kind.supports_tunnel(), tunnel);
        assert_eq!(kind.default_health_path(), probe);
        assert_eq!(kind.as_str(), name);
        let parsed: ProviderKind = serde_yaml::from_str(name).unwrap();
        assert_eq!(parsed, kind);
    }
}

#[test]
fn defaults_agree_with_the_wire_and_framing() {
    assert_eq!(
        DEFAULT_MAX_FRAME_LEN as usize,
        framing::frame::DEFAULT_MAX_FRAME_LEN
    );
    assert!(MAX_MAX_FRAME_LEN as usize <= framing::frame::MAX_CONFIGURABLE_FRAME_LEN);
    assert!(
        u64::from(DEFAULT_MAX_BODY_CHUNK) + TUNNEL_FRAME_OVERHEAD
            <= u64::from(DEFAULT_MAX_FRAME_LEN)
    );
    assert_eq!(MAX_PROVIDER_TIMEOUT_MS, 86_400_000);
    let link = LinkConfig::default();
    assert_eq!(link.initial_stream_window, 256 * 1024);
}

#[test]
fn tunnel_frame_overhead_covers_the_real_head() {
    use proto::v1::{Envelope, ProviderTunnelFrame, envelope, provider_tunnel_frame};
    let body_len = MAX_MAX_FRAME_LEN - TUNNEL_FRAME_OVERHEAD;
    let body = vec![0u8; usize::try_from(body_len).unwrap()];
    let frame = Envelope {
        stream_id: u64::MAX,
        msg: Some(envelope::Msg::ProviderTunnelFrame(ProviderTunnelFrame {
            frame: Some(provider_tunnel_frame::Frame::Body(body.into())),
        })),
    };
    let len = prost::Message::encoded_len(&frame) as u64;
    assert!(len <= MAX_MAX_FRAME_LEN, "head is {} bytes", len - body_len);
}

#[test]
fn effective_stall_timeout_resolves_zero_only() {
    let config = EdgeConfig::embedded_default();
    let (_, spec) = config.nodes().provider("mock-openai").unwrap();
    let mut spec = spec.clone();
    assert_eq!(spec.response_stall_timeout_ms, 0);
    assert_eq!(
        spec.effective_stall_timeout_ms(),
        proto::DEFAULT_RESPONSE_STALL_TIMEOUT_MS
    );
    spec.response_stall_timeout_ms = 1;
    assert_eq!(spec.effective_stall_timeout_ms(), 1);
    assert!(spec.serves("mock-chat") && !spec.serves("mock"));
}

#[test]
fn error_lines_and_accessors() {
    let e = ConfigError::Invalid {
        origin: "e.yaml".into(),
        issues: vec![
            Issue {
                path: "a".into(),
                message: "x".into(),
            },
            Issue {
                path: "b[0].c".into(),
                message: "y".into(),
            },
        ],
    };
    assert_eq!(e.to_string(), "e.yaml: a: x\ne.yaml: b[0].c: y");
    assert_eq!(e.issues().len(), 2);
    let p = ConfigError::Parse {
        origin: "e.yaml".into(),
        message: "m".into(),
    };
    assert_eq!(
        (p.to_string().as_str(), p.origin()),
        ("e.yaml: m", "e.yaml")
    );
    assert!(p.issues().is_empty());
}

#[test]
fn raw_headers_keep_order_and_repeats() {
    let raw: schema::RawHeaders = serde_yaml::from_str("{ b: '1', a: '2', b: '3' }").unwrap();
    let names: Vec<_> = raw.0.iter().map(|(n, v)| format!("{n}={v}")).collect();
    assert_eq!(names, ["b=1", "a=2", "b=3"]);
    assert!(serde_yaml::from_str::<schema::RawHeaders>("[a, b]").is_err());
}

#[test]
fn embedded_default_text_is_what_embedded_default_parses() {
    let a = EdgeConfig::embedded_default();
    let b = EdgeConfig::from_yaml_str(EMBEDDED_DEFAULT_YAML, EMBEDDED_DEFAULT_ORIGIN).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.origin(), EMBEDDED_DEFAULT_ORIGIN);
    assert!(
        EMBEDDED_DEFAULT_YAML.contains("iop-dev-token"),
        "the comment names the dev token"
    );
}
