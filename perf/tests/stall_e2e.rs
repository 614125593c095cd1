//! The Node stall watchdog end to end (F21–F23): the Edge (in-process), the
//! real `iop-node` and the mock provider with its stall knob
//! (`x-mock-stall-after`). A stalled normalized run and a stalled raw
//! tunnel each end with exactly one `RESPONSE_STALLED` terminal carrying
//! typed evidence and the connection's observation sequence; a provider
//! down at probe time gives `UNAVAILABLE`/`PROVIDER_UNHEALTHY`; a slow but
//! steady stream never stalls. Nothing here asserts a duration.

use edge_proxy::dispatch::SubmitRun;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{
    ChatMessage, ExecutionFailure, FailureCode, FailureSide, LivenessClassification,
    ProviderHealth, ProviderTunnelRequest, RunEventKind, RunInput,
};

mod support;
use support::stack::*;

/// Stall timeout of the stalling providers, in ms.
const STALL_MS: u64 = 300;

fn config(mock: std::net::SocketAddr, _garbage: std::net::SocketAddr) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: stalls
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        health_probe: {{path: /health}}
        headers: {{x-mock-tokens: "10", x-mock-stall-after: "2"}}
      - id: steady
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        health_probe: {{path: /health}}
        headers: {{x-mock-tokens: "8", x-mock-delay-ms: "100"}}
      - id: stalls-head
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        health_probe: {{path: /health, timeout_ms: 200}}
        headers: {{x-mock-headers-delay-ms: "600000"}}
model_groups:
  - name: stalls-head
    target: m
    providers: [stalls-head]
  - name: stalls
    target: m
    providers: [stalls]
  - name: steady
    target: m
    providers: [steady]
queue:
  max_waiting: 4
  timeout_ms: 400
"#
    )
}

fn start(driver: framing::io_driver::IoDriver, name: &str) -> Stack {
    let mut stack = Stack::start_edge(driver, name, config);
    stack.start_node();
    stack
}

async fn submit(stack: &Stack, adapter: &str) -> Vec<proto::v1::RunEvent> {
    let run = SubmitRun {
        adapter: adapter.into(),
        target: "m".into(),
        input: RunInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "hello".into(),
                ..ChatMessage::default()
            }],
            ..RunInput::default()
        },
        node: Some("node-a".into()),
        response_stall_timeout_ms: STALL_MS,
        ..SubmitRun::default()
    };
    let stream = within(stack.edge.dispatcher.submit_run(run))
        .await
        .expect("submitted");
    events(stream).await
}

fn stall_failure(events: &[proto::v1::RunEvent]) -> ExecutionFailure {
    assert_eq!(
        error_code(events),
        FailureCode::ResponseStalled,
        "{events:?}"
    );
    events.last().unwrap().failure.clone().unwrap()
}

fn assert_stall(f: &ExecutionFailure, health: ProviderHealth, seq: u64) {
    let liveness = match health {
        ProviderHealth::Available => LivenessClassification::RequestStalled,
        ProviderHealth::Unavailable => LivenessClassification::ProviderUnhealthy,
        _ => LivenessClassification::HealthUnknown,
    };
    assert_eq!(f.code(), FailureCode::ResponseStalled);
    assert_eq!(f.side(), FailureSide::Provider);
    assert_eq!(f.stall_timeout_ms, STALL_MS);
    assert_eq!(f.provider_health(), health, "{f:?}");
    assert_eq!(f.liveness_classification(), liveness, "{f:?}");
    assert_eq!(f.health_observation_seq, Some(seq), "{f:?}");
}

/// A streamed chat completion with one user message.
const CHAT_STREAM: &str =
    r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}"#;

/// A tunnel request for `POST /v1/chat/completions` with `body`, carrying
/// the leased provider's stall timeout and a credit window (0 = default).
fn chat_tunnel(
    lease: &edge_proxy::pool::Lease,
    body: &'static str,
    initial_window: u32,
) -> ProviderTunnelRequest {
    ProviderTunnelRequest {
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        body: body.as_bytes().to_vec().into(),
        response_stall_timeout_ms: lease.provider().response_stall_timeout_ms,
        initial_window,
        ..ProviderTunnelRequest::default()
    }
}

#[test]
fn a_stalled_run_ends_with_one_typed_stall_and_the_sequence_counts() {
    for driver in drivers() {
        let stack = start(driver, "stall-run");
        block_on(async {
            let first = submit(&stack, "stalls").await;
            assert_eq!(first[0].kind(), RunEventKind::Start);
            assert!(
                !text(&first, RunEventKind::Delta).is_empty(),
                "the tokens before the stall were relayed: {first:?}"
            );
            assert_stall(&stall_failure(&first), ProviderHealth::Available, 1);
            let second = submit(&stack, "stalls").await;
            assert_stall(&stall_failure(&second), ProviderHealth::Available, 2);
        });
    }
}

#[test]
fn a_provider_down_at_probe_time_is_unhealthy_evidence() {
    for driver in drivers() {
        let stack = start(driver, "stall-down");
        stack.mock.stats().set_healthy(false);
        block_on(async {
            let events = submit(&stack, "stalls").await;
            assert_stall(&stall_failure(&events), ProviderHealth::Unavailable, 1);
        });
        stack.mock.stats().set_healthy(true);
    }
}

#[test]
fn a_slow_but_steady_stream_never_stalls() {
    // A token every 100 ms under a 300 ms stall timeout.
    for driver in drivers() {
        let stack = start(driver, "stall-steady");
        block_on(async {
            let events = submit(&stack, "steady").await;
            assert_eq!(
                events.last().unwrap().kind(),
                RunEventKind::Complete,
                "{events:?}"
            );
        });
    }
}

#[test]
fn a_stalled_tunnel_ends_with_one_typed_stall_error_frame() {
    for driver in drivers() {
        let stack = start(driver, "stall-tunnel");
        // A run stalls first on this connection: runs and tunnels share
        // its sequence, so the tunnel's observation is the second.
        let run = block_on(submit(&stack, "stalls"));
        assert_stall(&stall_failure(&run), ProviderHealth::Available, 1);
        let edge = &stack.edge;
        let lease = block_on(edge.pools.acquire("stalls", &edge.registry)).expect("a lease");
        let request = chat_tunnel(&lease, CHAT_STREAM, 0);
        let frames = block_on(async {
            let mut tunnel = edge
                .dispatcher
                .open_tunnel(&lease, request)
                .expect("tunnel opened");
            let mut frames = Vec::new();
            while let Some(frame) = within(tunnel.next()).await {
                if let Frame::Body(_) = &frame {
                    // Keep the window open: the client is never the holdup.
                    tunnel.grant(1 << 20);
                }
                frames.push(frame);
            }
            frames
        });
        drop(lease);
        assert!(
            matches!(frames.first(), Some(Frame::Status(s)) if s.code == 200),
            "{frames:?}"
        );
        assert!(frames.iter().any(|f| matches!(f, Frame::Body(_))));
        let terminals: Vec<_> = frames
            .iter()
            .filter(|f| matches!(f, Frame::End(_) | Frame::Error(_)))
            .collect();
        assert_eq!(terminals.len(), 1, "exactly one terminal: {frames:?}");
        let Some(Frame::Error(failure)) = frames.last() else {
            panic!("an error terminal last: {frames:?}");
        };
        assert_stall(failure, ProviderHealth::Available, 2);
        assert!(failure.retryable, "the response was dropped at the claim");
    }
}

#[test]
fn a_tunnel_stalled_after_its_head_ends_the_client_stream_with_one_error_event() {
    // Through the front door: the head and two tokens reached the client,
    // so the StreamGate (F27) cannot recover: one OpenAI error event, then
    // a clean end of the chunked body — never `[DONE]`, never a silent cut.
    for driver in drivers() {
        let stack = start(driver, "stall-http");
        let response = http_chat(&stack, "stalls");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("data: "), "{response}");
        assert!(!response.contains("[DONE]"), "{response}");
        assert_eq!(
            response.matches(r#"data: {"error""#).count(),
            1,
            "{response}"
        );
        assert!(response.ends_with("0\r\n\r\n"), "a clean end: {response}");
        wait_until("the lease released", || stack.edge.pools.outstanding() == 0);
    }
}

#[test]
fn a_tunnel_waiting_on_its_client_does_not_stall() {
    // A tiny window the client leaves spent for longer than the stall
    // timeout: the client, not the provider, holds the stream, so the
    // watchdog is held and the tunnel still ends cleanly.
    for driver in drivers() {
        let stack = start(driver, "stall-credit");
        let edge = &stack.edge;
        let lease = block_on(edge.pools.acquire("steady", &edge.registry)).expect("a lease");
        let request = chat_tunnel(&lease, CHAT_STREAM, 16);
        let frames = block_on(async {
            let mut tunnel = edge
                .dispatcher
                .open_tunnel(&lease, request)
                .expect("tunnel opened");
            let mut frames = Vec::new();
            let mut held = false;
            while let Some(frame) = within(tunnel.next()).await {
                if let Frame::Body(_) = &frame {
                    if !held {
                        held = true;
                        tokio::time::sleep(std::time::Duration::from_millis(3 * STALL_MS)).await;
                    }
                    tunnel.grant(1 << 20);
                }
                frames.push(frame);
            }
            frames
        });
        drop(lease);
        assert!(
            matches!(frames.last(), Some(Frame::End(_))),
            "a clean end: {frames:?}"
        );
    }
}

#[test]
fn a_tunnel_stalled_before_its_head_is_one_error_frame_with_unknown_health() {
    // The provider never answers its head; its probe (which carries the
    // provider's headers, so the mock delays it too) times out: the
    // evidence is fail-closed UNKNOWN/HEALTH_UNKNOWN.
    for driver in drivers() {
        let stack = start(driver, "stall-head");
        let edge = &stack.edge;
        let lease = block_on(edge.pools.acquire("stalls-head", &edge.registry)).expect("a lease");
        let request = chat_tunnel(&lease, "{}", 0);
        let frames = block_on(async {
            let mut tunnel = edge
                .dispatcher
                .open_tunnel(&lease, request)
                .expect("tunnel opened");
            let mut frames = Vec::new();
            while let Some(frame) = within(tunnel.next()).await {
                frames.push(frame);
            }
            frames
        });
        drop(lease);
        assert_eq!(frames.len(), 1, "a lone terminal: {frames:?}");
        let Some(Frame::Error(failure)) = frames.last() else {
            panic!("an error terminal: {frames:?}");
        };
        assert_stall(failure, ProviderHealth::Unknown, 1);
        // Through the front door, nothing was sent yet: an HTTP error.
        let response = http_chat(&stack, "stalls-head");
        assert!(response.starts_with("HTTP/1.1 5"), "{response}");
        wait_until("the lease released", || stack.edge.pools.outstanding() == 0);
    }
}

/// A streamed chat request to the Edge's ingress; the whole response.
fn http_chat(stack: &Stack, model: &str) -> String {
    let body = serde_json::json!({
        "model": model,
        "stream": true,
        "messages": [{"role": "user", "content": "hello"}],
    });
    post_chat(stack.edge.ingress_addr, &body.to_string())
}
