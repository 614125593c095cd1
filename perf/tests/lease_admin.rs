//! The admin API end to end (issue 7, F29): an operator revokes a
//! principal's leases and disables a provider over HTTP on the Edge's
//! ingress, against the in-process Edge, a real `iop-node` and the mock
//! provider (which counts requests and records `Authorization` headers).
//!
//! - Revoking principal `team-b`: its next request gets 503
//!   `credential_unavailable` with zero provider calls; `team-a` still works.
//! - Disabling provider `p2`: requests to its group get the same 503 with
//!   zero provider calls; `p1` still works.
//! - 401 (no key, a client key, a wrong key), 400 (bad bodies), 404
//!   (unknown provider or route), 405 (wrong method), and an Edge without
//!   `admin.keys` answers 404.

use framing::io_driver::IoDriver;
use perf::mock_provider::Route;

mod support;
use support::stack::*;

/// The provider credential; it must reach the provider and nowhere else.
const SENTINEL: &str = "sk-ADMIN-SENTINEL-52c1";
const KEY_A: &str = "client-key-team-a";
const KEY_B: &str = "client-key-team-b";
const ADMIN_KEY: &str = "admin-key-ops-9e0d";

fn config_with(mock: std::net::SocketAddr, admin: &str) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
leases:
  ttl_ms: 60000
api_keys:
  - name: team-a
    key: "{KEY_A}"
  - name: team-b
    key: "{KEY_B}"
{admin}
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: p1
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "3"}}
        credential:
          api_key: "{SENTINEL}"
      - id: p2
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "3"}}
        credential:
          api_key: "{SENTINEL}"
      - id: bare
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
model_groups:
  - name: g1
    target: m
    providers: [p1]
  - name: g2
    target: m
    providers: [p2]
"#
    )
}

fn start(name: &str, admin: bool) -> Stack {
    let mut stack = if admin {
        Stack::start_edge(IoDriver::Epoll, name, |mock, _| {
            config_with(
                mock,
                &format!("admin:\n  keys:\n    - name: ops\n      key: \"{ADMIN_KEY}\""),
            )
        })
    } else {
        Stack::start_edge(IoDriver::Epoll, name, |mock, _| config_with(mock, ""))
    };
    stack.start_node();
    stack
}

fn provider_calls(stack: &Stack) -> u64 {
    stack.mock.stats().requests(Route::ChatCompletions)
}

#[test]
fn revoking_a_principal_or_disabling_a_provider_stops_its_requests_at_the_edge() {
    let stack = start("lease-admin", true);
    for key in [KEY_A, KEY_B] {
        let response = chat(&stack, key, "g1");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }
    assert_eq!(provider_calls(&stack), 2);

    let response = admin(
        &stack,
        "POST",
        "/admin/leases/revoke",
        r#"{"principal":"team-b"}"#,
    );
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains(r#"{"revoked":{"kind":"principal","value":"team-b"}}"#),
        "{response}"
    );
    let response = chat(&stack, KEY_B, "g1");
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    assert!(response.contains("credential_unavailable"), "{response}");
    assert_eq!(
        provider_calls(&stack),
        2,
        "revoked principal: no provider call"
    );
    let response = chat(&stack, KEY_A, "g1");
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "team-a unaffected: {response}"
    );
    assert_eq!(provider_calls(&stack), 3);

    let response = admin(&stack, "POST", "/admin/providers/p2/disable", "");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains(r#"{"disabled":"p2"}"#), "{response}");
    let response = chat(&stack, KEY_A, "g2");
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    assert!(response.contains("credential_unavailable"), "{response}");
    assert_eq!(
        provider_calls(&stack),
        3,
        "disabled provider: no provider call"
    );
    let response = chat(&stack, KEY_A, "g1");
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "p1 unaffected: {response}"
    );
    assert_eq!(provider_calls(&stack), 4);

    // Every provider call carried the credential, never a client or admin key.
    assert_eq!(
        stack.mock.stats().authorizations(),
        vec![Some(format!("Bearer {SENTINEL}")); 4]
    );
    for line in stack.node_log.lock().unwrap().iter() {
        assert!(
            !line.contains(SENTINEL) && !line.contains(ADMIN_KEY),
            "{line}"
        );
    }
}

#[test]
fn admin_requests_are_authenticated_and_checked() {
    let stack = start("lease-admin-errors", true);
    let revoke = "/admin/leases/revoke";
    let body = r#"{"principal":"team-a"}"#;
    let status = |r: &str| r.get(9..12).unwrap_or_default().to_owned();
    let cases: [Case<'_>; 14] = [
        ("POST", None, revoke, body, "401", "missing_admin_key"),
        (
            "POST",
            Some(KEY_A),
            revoke,
            body,
            "401",
            "invalid_admin_key",
        ),
        (
            "POST",
            Some("nope"),
            revoke,
            body,
            "401",
            "invalid_admin_key",
        ),
        (
            "GET",
            None,
            "/admin/nothing",
            "",
            "401",
            "missing_admin_key",
        ),
        (
            "GET",
            Some(ADMIN_KEY),
            revoke,
            "",
            "405",
            "method_not_allowed",
        ),
        (
            "PUT",
            Some(ADMIN_KEY),
            revoke,
            body,
            "405",
            "method_not_allowed",
        ),
        ("POST", Some(ADMIN_KEY), revoke, "{", "400", "invalid_body"),
        (
            "POST",
            Some(ADMIN_KEY),
            revoke,
            r#"{"principal":"a","x":1}"#,
            "400",
            "invalid_body",
        ),
        (
            "POST",
            Some(ADMIN_KEY),
            revoke,
            "{}",
            "400",
            "invalid_selector",
        ),
        (
            "POST",
            Some(ADMIN_KEY),
            revoke,
            r#"{"principal":"a","node":"node-a"}"#,
            "400",
            "invalid_selector",
        ),
        (
            "POST",
            Some(ADMIN_KEY),
            revoke,
            r#"{"provider":"nope"}"#,
            "404",
            "unknown_provider",
        ),
        (
            "POST",
            Some(ADMIN_KEY),
            "/admin/providers/nope/disable",
            "",
            "404",
            "unknown_provider",
        ),
        (
            "POST",
            Some(ADMIN_KEY),
            "/admin/providers/bare/disable",
            "",
            "409",
            "no_credential",
        ),
        (
            "POST",
            Some(ADMIN_KEY),
            "/admin/providers/p1/enable",
            "",
            "404",
            "not_found",
        ),
    ];
    for (method, key, path, body, want, code) in cases {
        let response = request(&stack, method, key, path, body);
        assert_eq!(
            status(&response),
            want,
            "{method} {path} {body}: {response}"
        );
        assert!(
            response.contains(code),
            "{method} {path} {body}: {response}"
        );
    }
    // Nothing was revoked by the refused requests.
    let response = chat(&stack, KEY_A, "g1");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    // An Edge without admin keys has no admin API.
    let plain = start("lease-admin-off", false);
    let response = admin(&plain, "POST", revoke, body);
    assert_eq!(status(&response), "404", "{response}");
    let response = request(&plain, "POST", Some(KEY_A), revoke, body);
    assert_eq!(status(&response), "404", "{response}");
}

/// method, admin key, path, body, expected status, expected error code.
type Case<'a> = (&'a str, Option<&'a str>, &'a str, &'a str, &'a str, &'a str);

fn admin(stack: &Stack, method: &str, path: &str, body: &str) -> String {
    request(stack, method, Some(ADMIN_KEY), path, body)
}

fn chat(stack: &Stack, key: &str, model: &str) -> String {
    let body = serde_json::json!({
        "model": model,
        "stream": true,
        "messages": [{"role": "user", "content": "hello"}],
    })
    .to_string();
    request(stack, "POST", Some(key), "/v1/chat/completions", &body)
}

fn request(stack: &Stack, method: &str, key: Option<&str>, path: &str, body: &str) -> String {
    use std::io::Write;
    let auth = key.map_or(String::new(), |k| format!("authorization: Bearer {k}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut socket = std::net::TcpStream::connect(stack.edge.ingress_addr).unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(15)))
        .unwrap();
    socket.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match read_some(&mut socket, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
        }
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    assert!(!response.contains(SENTINEL), "response: {response}");
    assert!(!response.contains(ADMIN_KEY), "response: {response}");
    response
}
