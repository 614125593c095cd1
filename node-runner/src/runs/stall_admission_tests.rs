//! F20 at the run manager, on a manual-clock core wheel: an invalid raw
//! stall timeout is refused before any provider call, and a wire 0 arms
//! the 300 000 ms default; a tunnel its adapter refuses (F16) ends with its
//! one typed terminal and gives its capacity back.

use std::rc::Rc;

use bytes::BytesMut;
use framing::frame::FrameDecoder;
use framing::link::Outgoing;
use proto::Envelope;
use proto::v1::{
    AdapterKind, FailureCode, NodeConfigPayload, ProviderConfig, RunEvent, RunEventKind,
    RunRequest, envelope::Msg,
};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::*;
use crate::provider_http::ProviderClientConfig;
use crate::stall::testkit::{Harness, block_on};

pub(super) const MAX_FRAME: usize = 1 << 20;

/// One OpenAI-compatible adapter, `chat`, at `base_url` (tunnels allowed).
pub(super) fn payload(base_url: String) -> NodeConfigPayload {
    NodeConfigPayload {
        providers: vec![ProviderConfig {
            adapter: "chat".into(),
            kind: AdapterKind::OpenaiCompat as i32,
            base_url,
            max_concurrency: 4,
            supports_tunnel: true,
            ..ProviderConfig::default()
        }],
        ..NodeConfigPayload::default()
    }
}

fn manager(h: &Harness, base_url: String) -> (Rc<RunManager>, UnboundedReceiver<(u64, Outgoing)>) {
    manager_with(h, &payload(base_url))
}

/// A run manager on core 0 for `payload`, and what it sends to the Edge.
pub(super) fn manager_with(
    h: &Harness,
    payload: &NodeConfigPayload,
) -> (Rc<RunManager>, UnboundedReceiver<(u64, Outgoing)>) {
    let identity = LinkIdentity {
        node_id: "n".into(),
        generation: 1,
        connected_since_unix_ms: 0,
    };
    let shared = GenShared::new(identity, payload);
    let (tx, rx) = unbounded_channel();
    let (done, _) = unbounded_channel();
    let client = ProviderClient::new(ProviderClientConfig::default());
    let manager = RunManager::new(
        0,
        payload,
        shared,
        &client,
        None,
        Outbox::new(tx, MAX_FRAME),
        done,
        Rc::clone(&h.timers),
    );
    (manager, rx)
}

fn run(stall_ms: u64) -> Envelope {
    Envelope {
        stream_id: 1,
        msg: Some(Msg::RunRequest(Box::new(RunRequest {
            run_id: "r".into(),
            adapter: "chat".into(),
            target: "m".into(),
            response_stall_timeout_ms: stall_ms,
            ..RunRequest::default()
        }))),
    }
}

fn events(rx: &mut UnboundedReceiver<(u64, Outgoing)>) -> Vec<RunEvent> {
    let mut decoder = FrameDecoder::new(MAX_FRAME);
    let mut out = Vec::new();
    while let Ok((_, Outgoing::Frame(bytes))) = rx.try_recv() {
        let mut buf = BytesMut::from(&bytes[..]);
        if let Ok(Some(Envelope {
            msg: Some(Msg::RunEvent(event)),
            ..
        })) = decoder.decode(&mut buf)
        {
            out.push(*event);
        }
    }
    out
}

#[test]
fn an_invalid_raw_stall_timeout_is_refused_before_any_provider_call() {
    let provider = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    provider.set_nonblocking(true).expect("nonblocking");
    let base = format!("http://{}", provider.local_addr().expect("addr"));
    let h = Harness::new();
    block_on(async {
        let (manager, mut rx) = manager(&h, base);
        manager.handle(run(MAX_STALL_TIMEOUT_MS + 1));
        crate::stall::testkit::settle().await;
        let events = events(&mut rx);
        assert_eq!(events.len(), 1, "a lone terminal: {events:?}");
        assert_eq!(events[0].kind(), RunEventKind::Error);
        let f = events[0].failure.as_ref().expect("typed");
        assert_eq!(f.code(), FailureCode::InvalidRequest);
        assert_eq!(manager.active_runs(), 0);
    });
    assert!(provider.accept().is_err(), "the provider was never dialled");
}

#[test]
fn a_wire_zero_stall_timeout_arms_the_300_s_default() {
    // A provider that accepts and never answers.
    let provider = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", provider.local_addr().expect("addr"));
    let h = Harness::new();
    block_on(async {
        let (manager, mut rx) = manager(&h, base);
        manager.handle(run(0));
        // Let the real connect happen before time moves.
        for _ in 0..200 {
            monoio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        h.jump(DEFAULT_STALL_TIMEOUT_MS - 1).await;
        assert!(events(&mut rx).is_empty(), "not before 300 000 ms");
        h.jump(1).await;
        // The probe (the same silent provider) runs to its 2 s bound.
        for _ in 0..2_100 {
            h.advance(1).await;
            if manager.active_runs() == 0 {
                break;
            }
        }
        let events = events(&mut rx);
        let last = events.last().expect("a terminal");
        let f = last.failure.as_ref().expect("typed");
        assert_eq!(f.code(), FailureCode::ResponseStalled);
        assert_eq!(f.stall_timeout_ms, DEFAULT_STALL_TIMEOUT_MS);
        assert_eq!(f.health_observation_seq, Some(1));
    });
    drop(provider);
}

#[test]
fn a_tunnel_its_adapter_refuses_ends_typed_before_any_provider_call() {
    use proto::v1::ProviderTunnelRequest;
    use proto::v1::provider_tunnel_frame::Frame;

    let provider = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    provider.set_nonblocking(true).expect("nonblocking");
    let base = format!("http://{}", provider.local_addr().expect("addr"));
    let valid = ProviderTunnelRequest {
        tunnel_id: "t".into(),
        adapter: "chat".into(),
        target: "m".into(),
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        ..ProviderTunnelRequest::default()
    };
    let refused = [
        ProviderTunnelRequest {
            response_stall_timeout_ms: MAX_STALL_TIMEOUT_MS + 1,
            ..valid.clone()
        },
        ProviderTunnelRequest {
            method: "NOT A TOKEN".into(),
            ..valid.clone()
        },
        ProviderTunnelRequest {
            path: "no-slash".into(),
            ..valid
        },
    ];
    let h = Harness::new();
    block_on(async {
        let (manager, mut rx) = manager(&h, base);
        for (stream_id, request) in (1..).zip(refused) {
            manager.handle(Envelope {
                stream_id,
                msg: Some(Msg::ProviderTunnelRequest(Box::new(request))),
            });
            crate::stall::testkit::settle().await;
            let frames = super::outbox::tests::tunnel_frames(&mut rx, MAX_FRAME);
            let [(id, Frame::Error(failure))] = &frames[..] else {
                panic!("a lone error terminal: {frames:?}");
            };
            assert_eq!(*id, stream_id);
            assert_eq!(failure.code(), FailureCode::InvalidRequest);
            // Its capacity unit is back and the run is gone.
            assert_eq!(manager.active_runs(), 0);
            assert_eq!(manager.active_on("chat"), 0);
        }
    });
    assert!(provider.accept().is_err(), "the provider was never dialled");
}
