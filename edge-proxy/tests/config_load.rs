//! Loading `edge.yaml`: the shipped files parse, structure errors keep their
//! path and line, broken rules are reported together, warnings name their
//! field. The rules one by one are in `config_rules.rs`.

mod config_support;

use config_support::{base, error, hex, parse, with};
use edge_proxy::config::{ConfigError, EdgeConfig, ProviderKind, TokenHash, TokenSource};

#[test]
fn base_is_valid() {
    let config = parse(&base()).unwrap();
    assert_eq!(config.nodes().len(), 2);
    assert_eq!(config.model_groups().len(), 2);
    // Only the dev-token warning.
    assert_eq!(config.warnings().len(), 1, "{:?}", config.warnings());
}

#[test]
fn embedded_default_is_the_dev_setup() {
    let config = EdgeConfig::embedded_default();
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
    assert_eq!(config.listen().ingress.to_string(), "127.0.0.1:8080");
    assert_eq!(config.listen().nodes.to_string(), "127.0.0.1:7070");
    let node = config.nodes().lookup("iop-dev-token").expect("dev token");
    assert_eq!(node.id, "node-1");
    assert_eq!(node.token_source, TokenSource::Blake3);
    let kinds: Vec<_> = node
        .providers
        .iter()
        .map(|p| {
            (
                p.id.as_str(),
                p.kind,
                p.base_url.as_str(),
                p.targets.clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (
                "mock-openai",
                ProviderKind::OpenaiCompat,
                "http://127.0.0.1:8000",
                vec!["mock-chat".to_owned()]
            ),
            (
                "mock-ollama",
                ProviderKind::Ollama,
                "http://127.0.0.1:8000",
                vec!["mock-ollama".to_owned()]
            ),
        ]
    );
    assert_eq!(node.providers[1].health_probe.path, "/api/tags");
    assert!(node.providers[0].supports_tunnel());
    assert!(!node.providers[1].supports_tunnel());
    let chat = config.model_group("mock-chat").unwrap();
    assert_eq!(chat.providers, ["mock-openai"]);
    assert_eq!(
        config.model_group("mock-ollama").unwrap().providers,
        ["mock-ollama"]
    );
}

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/edge.example.yaml");

#[test]
fn example_is_valid_and_shows_every_field() {
    let config = EdgeConfig::load(EXAMPLE).unwrap();
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
    assert_eq!(config.origin(), EXAMPLE);
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    for field in [
        "listen:",
        "ingress:",
        "nodes:",
        "workers:",
        "link:",
        "max_frame_len:",
        "initial_stream_window:",
        "max_body_chunk:",
        "register_timeout_ms:",
        "id:",
        "token_blake3:",
        "token:",
        "providers:",
        "adapter:",
        "kind:",
        "base_url:",
        "targets:",
        "max_concurrency:",
        "response_stall_timeout_ms:",
        "request_timeout_ms:",
        "health_probe:",
        "path:",
        "timeout_ms:",
        "headers:",
        "model_groups:",
        "name:",
        "target:",
        "queue:",
        "max_waiting:",
    ] {
        assert!(text.contains(field), "example does not show {field}");
    }
    let ids: Vec<_> = config.nodes().iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["gpu-box-1", "cpu-box-2"]);
    assert!(config.nodes().lookup("example-node-2-token").is_some());
}

#[test]
fn missing_file_names_it() {
    let e = EdgeConfig::load("/nonexistent/edge.yaml").unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert!(
        e.to_string()
            .starts_with("/nonexistent/edge.yaml: cannot read: "),
        "{e}"
    );
}

#[test]
fn unknown_fields_are_rejected_with_their_path() {
    let cases = [
        (
            format!("{}colour: red\n", base()),
            "edge.yaml: unknown field `colour`",
        ),
        (
            with(
                "  nodes: 127.0.0.1:7070\n",
                "  nodes: 127.0.0.1:7070\n  admin: 1\n",
            ),
            "edge.yaml: listen: unknown field `admin`",
        ),
        (
            with("  - id: node-2\n", "  - id: node-2\n    tokn: x\n"),
            "edge.yaml: nodes[1]: unknown field `tokn`",
        ),
        (
            with(
                "        targets: [m2]\n",
                "        targets: [m2]\n        max_concurency: 3\n",
            ),
            "edge.yaml: nodes[0].providers[1]: unknown field `max_concurency`",
        ),
        (
            with(
                "        targets: [m2]\n",
                "        targets: [m2]\n        health_probe: { path: /x, every_ms: 1 }\n",
            ),
            "edge.yaml: nodes[0].providers[1].health_probe: unknown field `every_ms`",
        ),
        (
            with(
                "    providers: [p2]\n",
                "    providers: [p2]\n    weight: 3\n",
            ),
            "edge.yaml: model_groups[1]: unknown field `weight`",
        ),
        (
            format!("{}queue: {{ size: 3 }}\n", base()),
            "edge.yaml: queue: unknown field `size`",
        ),
        (
            format!("{}link: {{ max_frame: 3 }}\n", base()),
            "edge.yaml: link: unknown field `max_frame`",
        ),
    ];
    for (text, want) in cases {
        let e = parse(&text).unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.starts_with(want), "want {want:?}, got {msg:?}");
        assert!(msg.contains(" at line "), "line/column kept: {msg}");
    }
}

#[test]
fn type_errors_keep_path_and_line() {
    let text = with(
        "        targets: [m2]\n",
        "        targets: [m2]\n        max_concurrency: -1\n",
    );
    let msg = error(&text);
    assert!(
        msg.starts_with("edge.yaml: nodes[0].providers[1].max_concurrency: invalid type"),
        "{msg}"
    );
    let text = with("kind: vllm", "kind: tgi");
    let msg = error(&text);
    assert!(
        msg.starts_with("edge.yaml: nodes[1].providers[0].kind: unknown variant `tgi`"),
        "{msg}"
    );
    assert!(error("nodes: 3\n").starts_with("edge.yaml: nodes: invalid type"));
    assert!(error("").contains("missing field `nodes`"));
    assert!(error("nodes: [").starts_with("edge.yaml: "));
}

#[test]
fn every_broken_rule_is_reported_together() {
    let text = with("ingress: 127.0.0.1:8080", "ingress: nowhere")
        .replacen("base_url: http://127.0.0.1:11434", "base_url: ftp://x", 1)
        .replacen("id: p3", "id: p1", 1)
        .replacen("providers: [p2]", "providers: [p9]", 1);
    let e = parse(&text).unwrap_err();
    let paths: Vec<_> = e.issues().iter().map(|i| i.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "listen.ingress",
            "nodes[0].providers[1].base_url",
            "nodes[1].providers[0].id",
            "model_groups[0].providers[1]",
            "model_groups[1].providers[0]",
        ]
    );
    let msg = e.to_string();
    assert_eq!(msg.lines().count(), 5, "{msg}");
    assert!(msg.lines().all(|l| l.starts_with("edge.yaml: ")), "{msg}");
    assert_eq!(e.origin(), "edge.yaml");
}

#[test]
fn warnings_name_file_and_field() {
    let config = parse(&base()).unwrap();
    let w: Vec<String> = config.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(w.len(), 1);
    assert!(
        w[0].starts_with("edge.yaml: nodes[0].token: plaintext token"),
        "{w:?}"
    );
    let text = "nodes:\n  - id: lonely\n    token_blake3: HASH\n"
        .replace("HASH", &hex(&blake3::hash(b"t")));
    let config = parse(&text).unwrap();
    let w: Vec<String> = config.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(
        w,
        [
            "edge.yaml: nodes[0].providers: none: every registration of this node will be refused",
            "edge.yaml: model_groups: none: clients can reach no provider",
        ]
    );
    let node = config.nodes().get("lonely").unwrap();
    assert_eq!(node.token, TokenHash::of("t"));
}
