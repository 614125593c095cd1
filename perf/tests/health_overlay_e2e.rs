//! The Edge's health overlay end to end (F24, F25, F26, F31): the Edge
//! (in-process), the real `iop-node` and the mock provider with its stall
//! knob and health toggle. A stall observed while the provider is down
//! lowers the provider; selection then avoids it; once the provider is up,
//! the Edge's own CAPABILITIES probes restore it. `/metrics` lists the F31
//! families from start-up. Nothing here asserts a duration.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use edge_proxy::dispatch::SubmitRun;
use edge_proxy::pool::Preference;
use proto::v1::{ChatMessage, FailureCode, ProviderHealth, RunInput};

mod support;
use support::stack::*;

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
        response_stall_timeout_ms: 300
        health_probe: {{path: /health, timeout_ms: 500}}
        headers: {{x-mock-tokens: "10", x-mock-stall-after: "2"}}
      - id: steady
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
model_groups:
  - name: m
    providers: [stalls, steady]
"#
    )
}

/// One HTTP/1.1 exchange, read to the close.
fn http(addr: SocketAddr, request: &str) -> String {
    let mut socket = TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket.write_all(request.as_bytes()).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = read_some(&mut socket, &mut buf) {
        all.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&all).into_owned()
}

fn metrics(stack: &Stack) -> String {
    http(
        stack.edge.ingress_addr,
        "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
}

fn mock_health(stack: &Stack, status: &str) {
    let answer = http(
        stack.mock.local_addr(),
        &format!(
            "POST /mock/health?status={status} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

fn eligible(stack: &Stack, id: &str) -> bool {
    let generation = stack.generation();
    stack
        .edge
        .pools
        .providers()
        .iter()
        .find(|p| p.id == id)
        .is_some_and(|p| p.runtime_eligible(generation))
}

fn series(provider: &str, health: &str, source: &str, outcome: &str, n: u64) -> String {
    format!(
        "iop_edge_provider_health_evidence_total{{provider=\"{provider}\",source=\"{source}\",health=\"{health}\",outcome=\"{outcome}\"}} {n}"
    )
}

#[test]
fn an_unavailable_stall_lowers_the_provider_until_a_probe_restores_it() {
    let driver = drivers()[0];
    let mut stack = Stack::start_edge(driver, "health-overlay", config);
    stack.start_node();
    let edge = &stack.edge;

    // Listed before the first event, at zero.
    let before = metrics(&stack);
    assert!(
        before.contains(&series("stalls", "unavailable", "stall", "lowered", 0)),
        "{before}"
    );
    assert!(before.contains(
        "iop_edge_provider_health_transitions_total{provider=\"stalls\",from=\"unavailable\",to=\"available\"} 0"
    ));

    // The provider is down when its stream stalls: UNAVAILABLE evidence.
    mock_health(&stack, "down");
    let avoid_steady = Preference {
        avoid_provider_id: Some("steady".into()),
        allow_avoided_provider_fallback: false,
    };
    let lease = block_on(
        edge.pools
            .acquire_preferring("m", &edge.registry, &avoid_steady),
    )
    .expect("a lease");
    assert_eq!(lease.provider().id, "stalls");
    let run = SubmitRun {
        input: RunInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "hello".into(),
                ..ChatMessage::default()
            }],
            ..RunInput::default()
        },
        response_stall_timeout_ms: lease.provider().response_stall_timeout_ms,
        ..SubmitRun::default()
    };
    let stream = edge
        .dispatcher
        .submit_leased(&lease, run)
        .expect("submitted");
    let (node, generation) = stream.node();
    let reception = (node.to_owned(), generation);
    let events = block_on(events(stream));
    assert_eq!(error_code(&events), FailureCode::ResponseStalled);
    let failure = events.last().unwrap().failure.clone().unwrap();
    let handoff = edge
        .pools
        .handoff_stall(&lease, (&reception.0, reception.1), &failure)
        .expect("a validated, current, bound stall");
    assert_eq!(handoff.provider_id, "stalls");
    assert_eq!(handoff.health, ProviderHealth::Unavailable);
    assert_eq!(
        handoff.retryable, failure.retryable,
        "the Node's hint, passed on"
    );
    drop(lease);
    assert_eq!(edge.pools.outstanding(), 0);

    // Lowered: not selectable. Avoiding the only eligible provider is
    // refused without the fallback flag, and granted with it.
    // Applied by the node's home core, through its inbox: not at once.
    wait_until("the home core to lower the provider", || {
        !eligible(&stack, "stalls")
    });
    assert_eq!(
        block_on(
            edge.pools
                .acquire_preferring("m", &edge.registry, &avoid_steady)
        )
        .unwrap_err(),
        edge_proxy::pool::AcquireError::Unavailable("m".into())
    );
    let fallback = Preference {
        allow_avoided_provider_fallback: true,
        ..avoid_steady.clone()
    };
    for preference in [Preference::default(), fallback] {
        let lease = block_on(
            edge.pools
                .acquire_preferring("m", &edge.registry, &preference),
        )
        .expect("the alternate");
        assert_eq!(lease.provider().id, "steady");
    }
    let lowered = metrics(&stack);
    assert!(
        lowered.contains(&series("stalls", "unavailable", "stall", "lowered", 1)),
        "{lowered}"
    );

    // Up again: the Edge's scheduled CAPABILITIES probe restores it.
    mock_health(&stack, "up");
    wait_until("a probe to restore the provider", || {
        eligible(&stack, "stalls")
    });
    let restored = metrics(&stack);
    assert!(
        restored.contains(&series(
            "stalls",
            "available",
            "capabilities",
            "restored",
            1
        )),
        "{restored}"
    );
    for (from, to) in [("available", "unavailable"), ("unavailable", "available")] {
        assert!(restored.contains(&format!(
            "iop_edge_provider_health_transitions_total{{provider=\"stalls\",from=\"{from}\",to=\"{to}\"}} 1"
        )));
    }
    let lease = block_on(
        edge.pools
            .acquire_preferring("m", &edge.registry, &avoid_steady),
    )
    .expect("a lease");
    assert_eq!(lease.provider().id, "stalls");
    drop(lease);
    stack.kill_node();
}
