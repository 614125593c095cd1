//! Client API keys (`api_keys:` in edge.yaml): validated like node tokens,
//! checked on every `/v1/` route; health and metrics stay open.

use std::io::{Read, Write};
use std::net::TcpStream;

use edge_proxy::config::EdgeConfig;
use edge_proxy::runtime::IoDriver;
use edge_proxy::server::{EdgeServer, StartOptions};

fn config(keys: &str) -> String {
    format!(
        "listen: {{ingress: 127.0.0.1:0, nodes: 127.0.0.1:0}}\n\
         nodes:\n  - id: n\n    token: t\n    providers:\n      - id: p\n        kind: ollama\n        base_url: http://127.0.0.1:9\n        targets: [m]\n\
         model_groups:\n  - name: m\n    providers: [p]\n\
         api_keys:\n{keys}"
    )
}

fn get(addr: std::net::SocketAddr, path: &str, auth: Option<&str>) -> String {
    let mut socket = TcpStream::connect(addr).unwrap();
    let auth = auth.map_or(String::new(), |a| format!("authorization: {a}\r\n"));
    write!(
        socket,
        "GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    socket.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn v1_routes_need_a_configured_key_and_health_does_not() {
    let hashed = blake3::hash(b"sk-hashed").to_hex().to_string();
    let yaml = config(&format!(
        "  - {{name: dev, key: sk-plain}}\n  - {{name: prod, key_blake3: {hashed}}}\n"
    ));
    let config = EdgeConfig::from_yaml_str(&yaml, "auth.yaml").expect("valid");
    let mut options = StartOptions::new(IoDriver::Epoll);
    options.workers = 1;
    let edge = EdgeServer::start(config, options).expect("edge starts");
    let addr = edge.ingress_addr;

    assert!(get(addr, "/healthz", None).starts_with("HTTP/1.1 200"));
    let missing = get(addr, "/v1/models", None);
    assert!(missing.starts_with("HTTP/1.1 401"), "{missing}");
    assert!(missing.contains("www-authenticate: Bearer"));
    assert!(missing.contains("\"code\":\"missing_api_key\""));
    let wrong = get(addr, "/v1/models", Some("Bearer sk-wrong"));
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    assert!(wrong.contains("\"code\":\"invalid_api_key\""));
    assert!(!wrong.contains("sk-wrong"), "the key is never echoed");
    for key in ["Bearer sk-plain", "bearer sk-hashed"] {
        let ok = get(addr, "/v1/models", Some(key));
        assert!(ok.starts_with("HTTP/1.1 200"), "{key}: {ok}");
    }
}

#[test]
fn key_rules_are_checked_at_load() {
    let cases = [
        (
            "  - {name: a}\n",
            "api_keys[0]: missing `key_blake3` (or `key`",
        ),
        (
            "  - {name: a, key: x, key_blake3: x}\n",
            "set exactly one of `key` and `key_blake3`",
        ),
        (
            "  - {name: a, key: x}\n  - {name: a, key: y}\n",
            "duplicate key name \"a\"",
        ),
        (
            "  - {name: a, key: x}\n  - {name: b, key: x}\n",
            "same key as api_keys[0]",
        ),
        (
            "  - {name: a, key_blake3: nothex}\n",
            "api_keys[0].key_blake3: not 64 hex digits",
        ),
        ("  - {name: a, key: \"\"}\n", "api_keys[0].key: empty"),
    ];
    for (keys, expected) in cases {
        let error = EdgeConfig::from_yaml_str(&config(keys), "auth.yaml").unwrap_err();
        assert!(error.to_string().contains(expected), "{keys:?}: {error}");
    }
    let open = EdgeConfig::from_yaml_str(
        &config("  []\n").replace("api_keys:\n  []", "api_keys: []"),
        "auth.yaml",
    )
    .expect("no keys is valid");
    assert!(open.api_keys().is_empty());
}
