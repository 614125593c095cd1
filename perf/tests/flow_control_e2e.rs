//! Credit-based flow control end to end on the smallest window a link may
//! configure (`link.initial_stream_window: 1024`): a streamed tunnel and a
//! streamed normalized run, each hundreds of times the window, reach their
//! client whole — the Edge's grants and the Node's resume points never
//! leave a stream waiting (docs/wire.md, "Flow control").

use std::net::SocketAddr;

mod support;
use support::stack::*;

/// Tokens each stream carries, each event padded to about 300 bytes:
/// ~600 KB a stream, ~600 windows of 1 KiB.
const TOKENS: usize = 2000;

/// Tokens of the run whose events (~2.5 KB) each overdraw the window: the
/// case that bounds how much credit the Edge may hold back.
const BIG_TOKENS: usize = 300;

fn smallest_window(mock: SocketAddr, _garbage: SocketAddr) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
link:
  initial_stream_window: 1024
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: tunnel
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "{TOKENS}", x-mock-event-bytes: "300"}}
      - id: run
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "{TOKENS}", x-mock-event-bytes: "300"}}
      - id: run-big
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "{BIG_TOKENS}", x-mock-event-bytes: "2500"}}
model_groups:
  - name: tunnel
    target: m
    providers: [tunnel]
  - name: run
    target: m
    providers: [run]
  - name: run-big
    target: m
    providers: [run-big]
"#
    )
}

#[test]
fn long_streams_cross_the_smallest_window_whole_on_both_paths() {
    for driver in drivers() {
        let mut stack = Stack::start_edge(driver, "flow-control", smallest_window);
        stack.start_node();
        let ingress = stack.edge.ingress_addr;
        for (model, tokens) in [("tunnel", TOKENS), ("run", TOKENS), ("run-big", BIG_TOKENS)] {
            let response = post_chat(
                ingress,
                &format!(
                    r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}"#
                ),
            );
            assert!(
                response.starts_with("HTTP/1.1 200"),
                "{model} ({driver:?}): {}",
                &response[..response.len().min(300)]
            );
            let body = http_body(&response);
            let content_events = body.matches("data: {").count();
            assert!(
                content_events >= tokens,
                "{model} ({driver:?}): {content_events} data events, {tokens} tokens sent"
            );
            assert!(
                body.trim_end().ends_with("data: [DONE]"),
                "{model} ({driver:?}): no [DONE] at the end"
            );
        }
    }
}
