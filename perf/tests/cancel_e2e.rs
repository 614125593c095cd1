//! Cancellation end to end (issue 8): a client that closes its socket
//! mid-stream makes the provider's own socket see its connection closed —
//! through the raw tunnel (F16) and a normalized run (F17), on each I/O
//! driver, with the real `iop-node`.
//!
//! The providers stall after one token (`stall-after: 1`) and their
//! response-stall timeout is the 5-minute default, so nothing but the
//! cancellation can end the provider's stream within the test's patience:
//! when the mock reports the cut, with the instant its socket saw the close
//! ([`perf::mock_provider::StreamCut`]), the close came from IOP. How fast
//! it comes is measured by `cargo bench -p perf --bench stream -- cancel`,
//! not asserted here.

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

mod support;
use support::process::PATIENCE;
use support::stack::*;

/// One node, one stalling provider of each wire, a model group each.
fn config(mock: SocketAddr, _garbage: SocketAddr) -> String {
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
        headers: {{x-mock-tokens: "1000", x-mock-stall-after: "1"}}
      - id: stalls-ol
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "1000", x-mock-stall-after: "1"}}
model_groups:
  - name: tunnel
    target: m
    providers: [stalls]
  - name: normalized
    target: m
    providers: [stalls-ol]
"#
    )
}

/// Opens a streaming chat completion for `model` and reads until its
/// first SSE event.
fn first_event(addr: SocketAddr, model: &str) -> TcpStream {
    let body = format!(
        r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut socket = TcpStream::connect(addr).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket.write_all(request.as_bytes()).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(6).any(|w| w == b"data: ") {
        let n = read_some(&mut socket, &mut buf).expect("the first event");
        assert!(
            n > 0,
            "{model}: closed before the first event: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(seen.starts_with(b"HTTP/1.1 200"), "{model}: not a 200");
    socket
}

#[test]
fn a_client_that_leaves_mid_stream_closes_the_providers_connection() {
    for driver in drivers() {
        let mut stack = Stack::start_edge(driver, "cancel", config);
        stack.start_node();
        let cuts = stack.mock.stats().watch_cuts();
        for model in ["tunnel", "normalized"] {
            let socket = first_event(stack.edge.ingress_addr, model);
            assert!(cuts.try_recv().is_err(), "{model}: no cut before the close");
            let left = Instant::now();
            drop(socket);
            let cut = cuts
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("{model}/{driver:?}: the provider never saw the close"));
            let seen = cut
                .closed_at
                .unwrap_or_else(|| panic!("{model}: the provider's socket saw no close: {cut:?}"));
            assert!(seen >= left, "{model}: the close came after the client's");
            assert_eq!(cut.tokens_sent, 1, "{model}: stalled, not ended: {cut:?}");
            wait_until("the lease released", || stack.edge.pools.outstanding() == 0);
        }
    }
}
