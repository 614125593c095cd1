//! F29 end to end: the in-process Edge, a real `iop-node` and the mock
//! provider, which records every `Authorization` header it receives.
//!
//! - Happy path: a client request through the ingress reaches the provider
//!   with the configured credential exactly once; replaying that lease is
//!   refused.
//! - The seven fail-closed cases — revoked, disabled, expired, stale,
//!   replayed, wrong recipient, mismatched — each end in a typed
//!   `CREDENTIAL_LEASE_*` terminal with the provider receiving zero requests.
//! - A stall probe of a provider that needs its key on `/v1/models`
//!   carries the stalled request's own credential: evidence `AVAILABLE`
//!   (without a credential the same provider's probe is `UNKNOWN`).
//! - The F25 recovery probe (CAPABILITIES for one adapter/target) of that
//!   provider carries its own lease (route `probe`): `AVAILABLE` with one
//!   `/v1/models` call; a revoked, tampered, mismatched or replayed probe
//!   lease is a typed `CREDENTIAL_LEASE_*` answer with no provider call.
//! - The sentinel credential never appears in the node's logs, the run
//!   store, `/metrics` or any error.

use bytes::Bytes;
use edge_proxy::dispatch::{SubmitError, TunnelStream};
use edge_proxy::lease::{LeaseAuthority, LeaseScope};
use framing::io_driver::IoDriver;
use perf::mock_provider::Route;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{
    CredentialLease, FailureCode, LeaseRevocationKind, LivenessClassification, ProviderHealth,
    ProviderTunnelRequest,
};

mod lease_probe;
mod support;
use support::stack::*;

/// The credential; it must reach the provider and nowhere else.
const SENTINEL: &str = "sk-LEASE-SENTINEL-7f3a91";
/// The client's API key (principal `team-a`); it never reaches the provider.
const CLIENT_KEY: &str = "client-key-team-a";

fn config(mock: std::net::SocketAddr, _garbage: std::net::SocketAddr) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
leases:
  ttl_ms: 60000
api_keys:
  - name: team-a
    key: "{CLIENT_KEY}"
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: remote
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "3"}}
        credential:
          api_key: "{SENTINEL}"
      - id: remote-ol
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "3"}}
        credential:
          api_key: "{SENTINEL}"
      - id: keyed-stall
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: 300
        headers: {{x-mock-tokens: "10", x-mock-stall-after: "2", x-mock-require-auth: "1"}}
        credential:
          api_key: "{SENTINEL}"
      - id: bare-stall
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: 300
        headers: {{x-mock-tokens: "10", x-mock-stall-after: "2", x-mock-require-auth: "1"}}
model_groups:
  - name: remote
    target: m
    providers: [remote]
  - name: keyed-stall
    target: m
    providers: [keyed-stall]
  - name: bare-stall
    target: m
    providers: [bare-stall]
  - name: remote-ol
    target: m
    providers: [remote-ol]
"#
    )
}

fn start(name: &str) -> Stack {
    let mut stack = Stack::start_edge(IoDriver::Epoll, name, config);
    stack.start_node();
    stack
}

fn chat_request() -> ProviderTunnelRequest {
    ProviderTunnelRequest {
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        body: Bytes::from_static(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#),
        ..ProviderTunnelRequest::default()
    }
}

fn authority(stack: &Stack) -> &LeaseAuthority {
    stack
        .edge
        .registry
        .leases()
        .expect("the edge has a lease authority")
}

/// The lease the Edge would issue for `scope`, unsigned and unsealed.
fn lease_for(scope: &LeaseScope, stack: &Stack, now_ms: u64) -> CredentialLease {
    let key = authority(stack).node_key(&scope.node_id).expect("pinned");
    CredentialLease {
        lease_id: Bytes::copy_from_slice(&fastrand_id()),
        principal: scope.principal.clone(),
        api: scope.api.clone(),
        model_group: scope.model_group.clone(),
        slot: scope.slot.clone(),
        profile: scope.provider_id.clone(),
        adapter: scope.adapter.clone(),
        target: scope.target.clone(),
        node_id: scope.node_id.clone(),
        generation: scope.generation,
        revision: scope.revision,
        issued_at_unix_ms: now_ms,
        expires_at_unix_ms: now_ms + 60_000,
        recipient_key: Bytes::copy_from_slice(&key),
        header_name: "authorization".into(),
        header_prefix: "Bearer ".into(),
    }
}

fn fastrand_id() -> [u8; 16] {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&u64::from(std::process::id()).to_be_bytes());
    id[8..].copy_from_slice(&NEXT.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    id
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Opens a tunnel on the `remote` group whose lease `seal` makes, and
/// returns every frame; `Err` when the Edge refused before sending.
fn tunnel(
    stack: &Stack,
    principal: &str,
    seal: impl FnOnce(&LeaseScope) -> Result<Bytes, SubmitError>,
) -> Result<Vec<Frame>, SubmitError> {
    let edge = &stack.edge;
    let lease = block_on(edge.pools.acquire("remote", &edge.registry)).expect("a lease");
    let frames = block_on(async {
        let mut stream: TunnelStream =
            edge.dispatcher
                .open_tunnel_sealed_by(&lease, chat_request(), principal, seal)?;
        let mut frames = Vec::new();
        while let Some(frame) = within(stream.next()).await {
            if let Frame::Body(_) = &frame {
                stream.grant(1 << 20);
            }
            frames.push(frame);
        }
        Ok(frames)
    });
    drop(lease);
    frames
}

/// The code of a tunnel's lone error terminal.
fn refused(frames: &[Frame]) -> FailureCode {
    match frames {
        [Frame::Error(failure)] => {
            assert!(!failure.message.contains(SENTINEL));
            failure.code()
        }
        other => panic!("expected one error frame, got {other:?}"),
    }
}

fn provider_calls(stack: &Stack) -> u64 {
    stack.mock.stats().requests(Route::ChatCompletions)
}

/// Seals `lease` with the Edge's key to `recipient`.
fn seal(stack: &Stack, lease: &CredentialLease, recipient: &[u8; 32]) -> Bytes {
    authority(stack)
        .seal(lease, SENTINEL.as_bytes(), recipient)
        .expect("sealed")
}

fn pinned(stack: &Stack) -> [u8; 32] {
    authority(stack).node_key("node-a").expect("pinned")
}

#[test]
fn the_provider_gets_the_credential_exactly_once_and_a_replay_is_refused() {
    let stack = start("lease-happy");
    // Through the ingress, as a client would.
    let response = http_chat(&stack, "remote");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(provider_calls(&stack), 1);
    assert_eq!(
        stack.mock.stats().authorizations(),
        vec![Some(format!("Bearer {SENTINEL}"))]
    );
    // A normalized run (Ollama) carries it the same way.
    let response = http_chat(&stack, "remote-ol");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(stack.mock.stats().requests(Route::OllamaChat), 1);
    assert_eq!(
        stack.mock.stats().authorizations(),
        vec![Some(format!("Bearer {SENTINEL}")); 2]
    );
    stack.mock.stats().reset();
    // Replayed: the bytes of a lease the node already opened.
    let mut captured = Bytes::new();
    let frames = tunnel(&stack, "", |scope| {
        captured = stack.edge.dispatcher.issue(scope)?;
        Ok(captured.clone())
    })
    .expect("sent");
    assert!(matches!(frames.last(), Some(Frame::End(_))), "{frames:?}");
    assert_eq!(provider_calls(&stack), 1, "counted since the reset");
    let before = provider_calls(&stack);
    // The same sealed lease again (the dispatcher's new scope is ignored).
    let replay = captured.clone();
    let frames = tunnel(&stack, "", |_| Ok(replay)).expect("sent");
    assert_eq!(refused(&frames), FailureCode::CredentialLeaseReplayed);
    assert_eq!(provider_calls(&stack), before, "no provider call");
    // A restarted node (same data dir: same key, same replay set) still
    // refuses it: the restart does not reopen the window.
    let mut stack = stack;
    stack.kill_node();
    stack.start_node();
    let frames = tunnel(&stack, "", |_| Ok(captured)).expect("sent");
    assert_eq!(refused(&frames), FailureCode::CredentialLeaseReplayed);
    assert_eq!(provider_calls(&stack), before, "no provider call");
    assert_eq!(stack.mock.stats().authorizations().len(), 1);
    // The ingress binds the client key's name: revoking the principal
    // `team-a` stops its requests at the Edge.
    assert!(
        stack
            .edge
            .dispatcher
            .revoke_leases(LeaseRevocationKind::Principal, "team-a")
    );
    let response = http_chat(&stack, "remote");
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    assert!(response.contains("credential_unavailable"), "{response}");
    assert_eq!(
        provider_calls(&stack),
        before,
        "revoked principal: no provider call"
    );
    assert_no_secret(&stack, 1);
}

#[test]
fn every_fail_closed_case_makes_no_provider_call() {
    let stack = start("lease-fail-closed");
    let other_node_key = node_runner::lease::NodeLeaseKey::from_bytes([42; 32]).public_bytes();
    // Each case: (name, the code expected, how its lease is made).
    type Make<'a> = Box<dyn Fn(&LeaseScope) -> Bytes + 'a>;
    let cases: Vec<(&str, FailureCode, Make<'_>)> = vec![
        (
            "expired",
            FailureCode::CredentialLeaseExpired,
            Box::new(|scope| {
                let mut lease = lease_for(scope, &stack, now_ms() - 120_000);
                lease.expires_at_unix_ms = now_ms() - 1;
                seal(&stack, &lease, &pinned(&stack))
            }),
        ),
        (
            "stale generation",
            FailureCode::CredentialLeaseStale,
            Box::new(|scope| {
                let mut lease = lease_for(scope, &stack, now_ms());
                lease.generation -= 1;
                seal(&stack, &lease, &pinned(&stack))
            }),
        ),
        (
            "stale revision",
            FailureCode::CredentialLeaseStale,
            Box::new(|scope| {
                let mut lease = lease_for(scope, &stack, now_ms());
                lease.revision -= 1;
                seal(&stack, &lease, &pinned(&stack))
            }),
        ),
        (
            "wrong recipient",
            FailureCode::CredentialLeaseWrongRecipient,
            Box::new(|scope| {
                let mut lease = lease_for(scope, &stack, now_ms());
                lease.recipient_key = Bytes::copy_from_slice(&other_node_key);
                seal(&stack, &lease, &other_node_key)
            }),
        ),
        (
            "mismatched target",
            FailureCode::CredentialLeaseMismatch,
            Box::new(|scope| {
                let mut lease = lease_for(scope, &stack, now_ms());
                lease.target = "another-model".into();
                seal(&stack, &lease, &pinned(&stack))
            }),
        ),
        (
            "mismatched slot",
            FailureCode::CredentialLeaseMismatch,
            Box::new(|scope| {
                let mut lease = lease_for(scope, &stack, now_ms());
                lease.slot = "run-0-0".into();
                seal(&stack, &lease, &pinned(&stack))
            }),
        ),
        (
            "mismatched route",
            FailureCode::CredentialLeaseMismatch,
            Box::new(|scope| {
                let mut lease = lease_for(scope, &stack, now_ms());
                lease.api = "responses".into();
                seal(&stack, &lease, &pinned(&stack))
            }),
        ),
        (
            "revoked by lease id",
            FailureCode::CredentialLeaseRevoked,
            Box::new(|scope| {
                let lease = lease_for(scope, &stack, now_ms());
                // Pushed before the tunnel opens, on the same connection.
                let id = node_runner::lease::lease_id_hex(&lease.lease_id);
                assert!(
                    stack
                        .edge
                        .dispatcher
                        .revoke_leases(LeaseRevocationKind::LeaseId, &id)
                );
                seal(&stack, &lease, &pinned(&stack))
            }),
        ),
        (
            "forged (not signed by the edge)",
            FailureCode::CredentialLeaseInvalid,
            Box::new(|scope| {
                let lease = lease_for(scope, &stack, now_ms());
                let forger = edge_proxy::lease::LeaseAuthority::new(
                    [99; 32],
                    Default::default(),
                    Default::default(),
                    std::sync::Arc::new(edge_proxy::lease::SystemClock),
                );
                forger
                    .seal(&lease, SENTINEL.as_bytes(), &pinned(&stack))
                    .unwrap()
            }),
        ),
        (
            "missing",
            FailureCode::CredentialLeaseInvalid,
            Box::new(|_| Bytes::new()),
        ),
    ];
    for (name, code, make) in cases {
        let frames = tunnel(&stack, "", |scope| Ok(make(scope))).expect(name);
        assert_eq!(refused(&frames), code, "{name}");
        assert_eq!(provider_calls(&stack), 0, "{name}: no provider call");
    }
    // Revoked at the Edge: a principal gets no lease at all.
    assert!(
        stack
            .edge
            .dispatcher
            .revoke_leases(LeaseRevocationKind::Principal, "mallory")
    );
    let refusal = tunnel(&stack, "mallory", |scope| {
        stack.edge.dispatcher.issue(scope)
    });
    assert!(
        matches!(&refusal, Err(SubmitError::Lease(e)) if e.failure_code() == FailureCode::CredentialLeaseRevoked),
        "{refusal:?}"
    );
    // Disabled: the Edge issues no lease, and the node refuses an
    // outstanding one (the disable is pushed to it).
    let outstanding = std::cell::RefCell::new(None);
    assert!(stack.edge.dispatcher.disable_provider("remote"));
    let refusal = tunnel(&stack, "", |scope| {
        *outstanding.borrow_mut() = Some(lease_for(scope, &stack, now_ms()));
        stack.edge.dispatcher.issue(scope)
    });
    assert!(
        matches!(&refusal, Err(SubmitError::Lease(e)) if e.failure_code() == FailureCode::CredentialLeaseDisabled),
        "{refusal:?}"
    );
    let frames = tunnel(&stack, "", |scope| {
        let lease = lease_for(scope, &stack, now_ms());
        Ok(seal(&stack, &lease, &pinned(&stack)))
    })
    .expect("sent");
    assert_eq!(refused(&frames), FailureCode::CredentialLeaseDisabled);
    assert_eq!(provider_calls(&stack), 0, "disabled: no provider call");
    // A client of a disabled provider gets a typed 503, not a retry hint.
    let response = http_chat(&stack, "remote");
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    assert!(response.contains("credential_unavailable"), "{response}");
    assert!(!response.to_ascii_lowercase().contains("retry-after"));
    assert_eq!(
        provider_calls(&stack),
        0,
        "disabled via http: no provider call"
    );
    // Capacity was released every time: the group still has its unit.
    assert_eq!(stack.edge.pools.outstanding(), 0);
    assert!(stack.mock.stats().authorizations().is_empty());
    assert_no_secret(&stack, 11);
}

#[test]
fn a_node_presenting_a_different_lease_key_is_refused_for_good() {
    let mut stack = start("lease-key-pin");
    let pinned_before = pinned(&stack);
    stack.kill_node();
    // Same token, new key: as if another machine took the node's token.
    std::fs::remove_file(stack.data_dir.join(node_runner::lease::LEASE_KEY_FILE)).unwrap();
    let mut cmd = std::process::Command::new(support::process::bin("iop-node"));
    cmd.args([
        "--edge",
        &stack.edge.node_addr.to_string(),
        "--data-dir",
        stack.data_dir.to_str().unwrap(),
        "--log-format",
        "json",
    ])
    .env("IOP_NODE_TOKEN", "tok-a");
    let (mut node, log) = support::process::spawn_logged(cmd);
    let line = support::process::wait_for_line(&log, "node_rejected");
    assert!(line.contains("lease_key_mismatch"), "{line}");
    // A permanent refusal: the node exits instead of retrying.
    let status = node.0.wait().expect("the node exits");
    assert!(!status.success());
    assert_eq!(stack.generation(), 0, "never registered");
    assert_eq!(pinned(&stack), pinned_before, "the pin is unchanged");
}

/// The sentinel is in no node log line, stored run, `/metrics` answer.
/// The stall evidence of a streamed chat tunnel on `group`, whose
/// provider stalls after two tokens.
fn stalled_tunnel_health(stack: &Stack, group: &str) -> (ProviderHealth, LivenessClassification) {
    let edge = &stack.edge;
    let lease = block_on(edge.pools.acquire(group, &edge.registry)).expect("a lease");
    let mut request = chat_request();
    request.body = Bytes::from_static(
        br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    request.response_stall_timeout_ms = lease.provider().response_stall_timeout_ms;
    let frames = block_on(async {
        let mut stream = edge
            .dispatcher
            .open_tunnel_as(&lease, request, "")
            .expect("tunnel opened");
        let mut frames = Vec::new();
        while let Some(frame) = within(stream.next()).await {
            if let Frame::Body(_) = &frame {
                stream.grant(1 << 20);
            }
            frames.push(frame);
        }
        frames
    });
    drop(lease);
    let Some(Frame::Error(failure)) = frames.last() else {
        panic!("a stall error last: {frames:?}");
    };
    assert_eq!(failure.code(), FailureCode::ResponseStalled, "{failure:?}");
    assert!(!failure.message.contains(SENTINEL));
    (failure.provider_health(), failure.liveness_classification())
}

#[test]
fn a_stall_probe_carries_the_stalled_requests_own_credential() {
    let stack = start("lease-stall-probe");
    // The provider answers /v1/models 401 without a key: with the
    // request's credential the probe sees it healthy.
    assert_eq!(
        stalled_tunnel_health(&stack, "keyed-stall"),
        (
            ProviderHealth::Available,
            LivenessClassification::RequestStalled
        )
    );
    let calls = stack.mock.stats().requests(Route::Models);
    assert!(calls >= 1, "the probe asked the list");
    // The same provider without a credential: 401, so we cannot tell.
    assert_eq!(
        stalled_tunnel_health(&stack, "bare-stall"),
        (
            ProviderHealth::Unknown,
            LivenessClassification::HealthUnknown
        )
    );
    // Only the chat requests are recorded: the keyed one carried the
    // credential, the bare one none.
    assert_eq!(
        stack.mock.stats().authorizations(),
        vec![Some(format!("Bearer {SENTINEL}")), None]
    );
    assert_no_secret(&stack, 2);
}

/// No trace of the sentinel in the Node's log, its `runs` records (once
/// the store holds the `runs` the test made: it gathers before it
/// commits) or the Edge's metrics.
fn assert_no_secret(stack: &Stack, runs: usize) {
    for line in stack.node_log.lock().unwrap().iter() {
        assert!(!line.contains(SENTINEL), "node log: {line}");
    }
    let mut stored = Vec::new();
    wait_until("the test's runs in the run store", || {
        stored = stack.stored_runs();
        stored.len() >= runs
    });
    for run in stored {
        assert!(!run.to_string().contains(SENTINEL), "run store: {run}");
    }
    let metrics = http_get(stack, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(!metrics.contains(SENTINEL));
}

fn http_get(stack: &Stack, path: &str) -> String {
    http(
        stack,
        &format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
    )
}

fn http_chat(stack: &Stack, model: &str) -> String {
    let body = serde_json::json!({
        "model": model,
        "stream": true,
        "messages": [{"role": "user", "content": "hello"}],
    })
    .to_string();
    http(
        stack,
        &format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {CLIENT_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

fn http(stack: &Stack, request: &str) -> String {
    use std::io::Write;
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
    response
}
