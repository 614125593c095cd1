//! The fixture and assertions the `config_*` integration tests share.

#![allow(dead_code)] // each test crate uses a different subset

use edge_proxy::config::{ConfigError, EdgeConfig};

/// A valid file every rule test breaks in one place.
pub(crate) const BASE: &str = "\
listen:
  ingress: 127.0.0.1:8080
  nodes: 127.0.0.1:7070
nodes:
  - id: node-1
    token: tok-1
    providers:
      - id: p1
        kind: openai_compat
        base_url: http://127.0.0.1:8000
        targets: [m1]
      - id: p2
        kind: ollama
        base_url: http://127.0.0.1:11434
        targets: [m2]
  - id: node-2
    token_blake3: HASH2
    providers:
      - id: p3
        kind: vllm
        base_url: https://gpu.example:8443/v1
        targets: [m1]
model_groups:
  - name: m1
    providers: [p1, p3]
  - name: m2
    providers: [p2]
";

pub(crate) fn base() -> String {
    BASE.replace("HASH2", &hex(&blake3::hash(b"tok-2")))
}

pub(crate) fn hex(h: &blake3::Hash) -> String {
    h.to_hex().to_string()
}

/// `BASE` with `from` replaced by `to` (exactly once).
pub(crate) fn with(from: &str, to: &str) -> String {
    let text = base();
    assert_eq!(
        text.matches(from).count(),
        1,
        "{from:?} must occur once in BASE"
    );
    text.replacen(from, to, 1)
}

pub(crate) fn parse(text: &str) -> Result<EdgeConfig, ConfigError> {
    EdgeConfig::from_yaml_str(text, "edge.yaml")
}

pub(crate) fn error(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts the error has a line starting `edge.yaml: {path}: ` that contains
/// `fragment`.
#[track_caller]
pub(crate) fn assert_line(text: &str, path: &str, fragment: &str) {
    let msg = error(text);
    let prefix = format!("edge.yaml: {path}: ");
    assert!(
        msg.lines()
            .any(|l| l.starts_with(&prefix) && l.contains(fragment)),
        "no line `{prefix}…{fragment}…` in:\n{msg}"
    );
}
