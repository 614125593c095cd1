//! `https://` providers end to end: the real `iop-edge` and `iop-node`
//! binaries, the mock provider serving TLS with a certificate from a test
//! CA made by `rcgen` (`iop-node --provider-ca-file`). A raw tunnel and a
//! normalized Ollama run both reach it and answer whole; a node that does
//! not trust the provider's CA fails the request as a TLS error of the
//! provider, with nothing sent to it. Both I/O drivers.

mod managed;
mod support;

use framing::io_driver::IoDriver;
use managed::pki::Ca;
use managed::{Edge, Node, Scratch, chat, mock_tls, start_edge, start_node};
use perf::mock_provider::{MockThreads, Route};
use support::stack::{drivers, http_body};

fn yaml(mock: std::net::SocketAddr) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: oa
        kind: openai_compat
        base_url: https://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "3"}}
      - id: ol
        kind: ollama
        base_url: https://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "4"}}
model_groups:
  - name: tunnel
    target: m
    providers: [oa]
  - name: normalized
    target: m
    providers: [ol]
"#
    )
}

/// The Edge, an `https://` mock provider and a node; `trust` gives the
/// node the test CA.
struct Https {
    _dir: Scratch,
    mock: MockThreads,
    edge: Edge,
    node: Node,
}

impl Https {
    fn start(name: &str, driver: IoDriver, trust: bool) -> Self {
        let dir = Scratch::new(name, driver);
        let ca = Ca::new("iop-provider-ca");
        let ca_pem = ca.write(&dir.0, "ca.pem");
        let mock = mock_tls(&ca.provider(&dir.0));
        let edge = start_edge(&dir.0, &yaml(mock.local_addr()), driver, "info");
        let mut args = vec![];
        if trust {
            args = vec![
                "--provider-ca-file".to_owned(),
                ca_pem.to_str().unwrap().to_owned(),
            ];
        }
        let node = start_node(&edge, &dir.0.join("node"), "tok-a", &args, driver, "info");
        edge.log
            .wait_for(&["\"node_ready\"", "\"node_id\":\"node-a\""]);
        Self {
            _dir: dir,
            mock,
            edge,
            node,
        }
    }
}

#[test]
fn a_tunnel_and_a_run_reach_an_https_provider() {
    for driver in drivers() {
        let stack = Https::start("https-ok", driver, true);
        for model in ["tunnel", "normalized"] {
            let response = chat(&stack.edge, model, "");
            assert!(response.starts_with("HTTP/1.1 200"), "{model}: {response}");
            let body: serde_json::Value =
                serde_json::from_str(&http_body(&response)).expect("a JSON answer");
            let tokens = if model == "tunnel" { 3 } else { 4 };
            assert_eq!(
                body["choices"][0]["message"]["content"],
                "tok ".repeat(tokens),
                "{model}: {body}"
            );
            assert_eq!(
                body["usage"]["completion_tokens"], tokens,
                "{model}: {body}"
            );
        }
        assert!(!stack.node.log.contains("\"level\":\"ERROR\""));
    }
}

#[test]
fn a_node_that_does_not_trust_the_provider_fails_the_request_as_tls() {
    for driver in drivers() {
        let stack = Https::start("https-untrusted", driver, false);
        for model in ["tunnel", "normalized"] {
            let response = chat(&stack.edge, model, "");
            assert!(response.starts_with("HTTP/1.1 502"), "{model}: {response}");
            let body: serde_json::Value =
                serde_json::from_str(&http_body(&response)).expect("a JSON error");
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert_eq!(body["error"]["code"], "upstream_error", "{model}: {body}");
            assert!(
                message.contains("TLS handshake") && message.contains("not trusted"),
                "{model}: {body}"
            );
        }
        // Nothing reached the provider's HTTP routes.
        let stats = stack.mock.stats();
        assert_eq!(stats.requests(Route::ChatCompletions), 0);
        assert_eq!(stats.requests(Route::OllamaChat), 0);
    }
}
