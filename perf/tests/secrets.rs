//! Secrets never leak: sentinel credentials — a client API key, node tokens
//! (the real one and a wrong one) and the TLS private keys of the Edge and
//! the Node — are put through a real managed-mode run (`iop-edge` and
//! `iop-node` processes, mTLS, debug logs), then looked for everywhere an
//! operator or a client can read: both processes' logs, the Edge's and the
//! Node's `/metrics`, every error response, and the Node's run store
//! (as `iop-node runs` prints it, and the raw bytes of its data dir).

mod managed;
mod support;

use std::process::Command;

use managed::pki::{self, Ca, TRUST_DOMAIN};
use managed::{Scratch, chat, http, mock, start_edge, start_node};
use support::process::bin;
use support::stack::{drivers, wait_until};

const API_KEY: &str = "sk-SENTINEL-api-key-7f3c9e1d5a";
const WRONG_API_KEY: &str = "sk-SENTINEL-wrong-key-2b8d4f60";
const NODE_TOKEN: &str = "tok-SENTINEL-node-token-4b2a8c6e";
const WRONG_TOKEN: &str = "tok-SENTINEL-wrong-token-9d1e3a77";

/// The body lines of a PEM private key: any one of them in a log is a leak.
fn key_lines(pem: &str) -> Vec<String> {
    pem.lines()
        .filter(|line| !line.starts_with("-----") && line.len() >= 16)
        .map(str::to_owned)
        .collect()
}

#[test]
fn sentinel_credentials_never_appear_in_logs_metrics_errors_or_the_run_store() {
    for driver in drivers() {
        let dir = Scratch::new("secrets", driver);
        let ca = Ca::new("iop secrets CA");
        let ca_pem = ca.write(&dir.0, "ca.pem");
        let edge_leaf = ca.edge(&dir.0);
        let node_leaf = ca.node(&dir.0, TRUST_DOMAIN, "node-a");
        let mock = mock();
        let yaml = format!(
            r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
api_keys:
  - name: client
    key: {API_KEY}
nodes:
  - id: node-a
    token: {NODE_TOKEN}
    providers:
      - id: oa
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "3"}}
model_groups:
  - name: m
    providers: [oa]
{tls}"#,
            mock = mock.local_addr(),
            tls = pki::edge_tls_yaml(&edge_leaf, &ca_pem),
        );
        let edge = start_edge(&dir.0, &yaml, driver, "debug");
        let data_dir = dir.0.join("data");
        let mut args = pki::node_tls_args(&node_leaf, &ca_pem);
        args.extend(["--admin-addr".into(), "127.0.0.1:0".into()]);
        let node = start_node(&edge, &data_dir, NODE_TOKEN, &args, driver, "debug");
        node.log.wait_for(&["\"node_ready\""]);

        // A served run, and every way a client can be refused.
        let mut seen = Vec::new();
        let ok = chat(&edge, "m", &format!("authorization: Bearer {API_KEY}\r\n"));
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        seen.push(("the served response", ok));
        let wrong = chat(
            &edge,
            "m",
            &format!("authorization: Bearer {WRONG_API_KEY}\r\n"),
        );
        assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
        seen.push(("the invalid-key error", wrong));
        let missing = chat(&edge, "m", "");
        assert!(missing.starts_with("HTTP/1.1 401"), "{missing}");
        seen.push(("the missing-key error", missing));
        let unknown_model = chat(
            &edge,
            "nope",
            &format!("authorization: Bearer {API_KEY}\r\n"),
        );
        seen.push(("the unknown-model error", unknown_model));

        // A node with a wrong token is refused (and says so).
        let impostor = start_node(
            &edge,
            &dir.0.join("impostor"),
            WRONG_TOKEN,
            &pki::node_tls_args(&node_leaf, &ca_pem),
            driver,
            "debug",
        );
        edge.log
            .wait_for(&["\"node_rejected\"", "\"reason\":\"unknown_token\""]);
        impostor.log.wait_for(&["\"node_rejected\""]);

        // Metrics on both sides.
        let edge_metrics = http(edge.ingress, "GET", "/metrics", "", "");
        assert!(edge_metrics.starts_with("HTTP/1.1 200"), "{edge_metrics}");
        seen.push(("the Edge's /metrics", edge_metrics));
        let admin = node.log.wait_for(&["\"admin_listening\""]);
        let admin: serde_json::Value = serde_json::from_str(&admin).unwrap();
        let admin = admin["addr"].as_str().unwrap().parse().unwrap();
        let node_metrics = http(admin, "GET", "/metrics", "", "");
        assert!(node_metrics.starts_with("HTTP/1.1 200"), "{node_metrics}");
        seen.push(("the Node's /metrics", node_metrics));

        // The run store, as `iop-node runs` prints it: the served run (the
        // refused ones never reached the node) once the node committed it
        // (its store gathers updates for up to 100 ms), then the node
        // stopped, so every file below is as it left them.
        let list_runs = || {
            let runs = Command::new(bin("iop-node"))
                .args(["runs", "--json", "--data-dir", data_dir.to_str().unwrap()])
                .output()
                .expect("iop-node runs");
            String::from_utf8_lossy(&runs.stdout).into_owned()
                + &String::from_utf8_lossy(&runs.stderr)
        };
        let mut runs = String::new();
        wait_until("the served run in the run store", || {
            runs = list_runs();
            runs.contains("\"run_id\"")
        });
        drop(node.process);
        seen.push(("the run store", runs));
        // And the raw bytes of every file in the Node's data dir (LMDB).
        let mut raw = Vec::new();
        let mut dirs = vec![data_dir.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    raw.extend(std::fs::read(&path).unwrap());
                }
            }
        }
        assert!(!raw.is_empty(), "the data dir holds the run store");
        seen.push((
            "the Node's data dir (raw bytes)",
            String::from_utf8_lossy(&raw).into_owned(),
        ));

        // Positive controls: what is scanned is the real, debug-level output.
        assert!(edge.log.contains("\"node_registered\""));
        assert!(edge.log.contains("\"level\":\"DEBUG\""));
        assert!(node.log.contains("\"node_ready\""));
        seen.push(("the Edge's log", edge.log.lines().join("\n")));
        seen.push(("the Node's log", node.log.lines().join("\n")));
        seen.push(("the refused node's log", impostor.log.lines().join("\n")));

        let mut sentinels: Vec<(&str, String)> = vec![
            ("the API key", API_KEY.into()),
            ("the wrong API key", WRONG_API_KEY.into()),
            ("the node token", NODE_TOKEN.into()),
            ("the wrong node token", WRONG_TOKEN.into()),
        ];
        for line in key_lines(&edge_leaf.key_pem) {
            sentinels.push(("the Edge's TLS key", line));
        }
        for line in key_lines(&node_leaf.key_pem) {
            sentinels.push(("the Node's TLS key", line));
        }
        assert!(sentinels.len() > 4, "the keys have PEM bodies");
        for (place, text) in &seen {
            assert!(!text.is_empty(), "{place} is empty");
            for (what, secret) in &sentinels {
                assert!(
                    !text.contains(secret.as_str()),
                    "{what} leaked into {place} ({}):\n{text}",
                    driver.as_str()
                );
            }
        }
    }
}
