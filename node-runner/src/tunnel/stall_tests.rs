//! The tunnel's stall watchdog against a real loopback provider socket, on
//! a manual clock: the claim fences the sink, closes the provider call
//! explicitly and confirms its return (the provider sees the connection
//! close), joined with the probe. No test sleeps for the watchdog.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpListener;
use proto::v1::{
    AdapterKind, FailureCode, ProviderHealth, ProviderTunnelFrame, ProviderTunnelRequest,
    provider_tunnel_frame::Frame,
};

use super::{
    Credit, TunnelLimits, TunnelOutcome, TunnelSink, TunnelTarget, prepare, run_tunnel_watched,
};
use crate::adapter::AdapterConfig;
use crate::provider_http::{BaseUrl, ProviderClient, ProviderClientConfig};
use crate::stall::StallKind;
use crate::stall::testkit::{FakeHealth, Harness, block_on, settle};

/// What reached the Edge: `frame:<kind>` / `body:<text>`.
#[derive(Default, Clone)]
struct Recorder(Rc<RefCell<Vec<String>>>);

impl TunnelSink for Recorder {
    fn frame(&mut self, frame: ProviderTunnelFrame) {
        let kind = match frame.frame {
            Some(Frame::Status(_)) => "status",
            Some(Frame::Headers(_)) => "headers",
            Some(Frame::Usage(_)) => "usage",
            Some(Frame::End(_)) => "end",
            Some(Frame::Error(f)) => {
                self.0
                    .borrow_mut()
                    .push(format!("error:{}", f.code().as_str_name()));
                return;
            }
            _ => "other",
        };
        self.0.borrow_mut().push(format!("frame:{kind}"));
    }

    fn body(&mut self, body: Bytes, more: Vec<Bytes>) {
        let body: Vec<u8> = std::iter::once(body).chain(more).flatten().collect();
        self.0
            .borrow_mut()
            .push(format!("body:{}", String::from_utf8_lossy(&body)));
    }
}

/// A provider that answers one SSE event and then goes silent; reports
/// when it sees the connection close.
async fn silent_provider(listener: TcpListener, closed: Rc<RefCell<bool>>) {
    let (mut stream, _) = listener.accept().await.expect("accept");
    let (_, buf) = stream.read(vec![0u8; 4096]).await;
    drop(buf);
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                transfer-encoding: chunked\r\n\r\n6\r\ndata: \r\n";
    let (res, _) = stream.write_all(head.as_bytes().to_vec()).await;
    res.expect("write");
    loop {
        let (n, _) = stream.read(vec![0u8; 64]).await;
        if matches!(n, Ok(0) | Err(_)) {
            *closed.borrow_mut() = true;
            return;
        }
    }
}

/// What one watched tunnel against the silent provider did.
struct Ran {
    outcome: Option<TunnelOutcome>,
    frames: Vec<String>,
    provider_saw_close: bool,
    probes: u32,
}

/// Runs one tunnel with a 100 ms stall timeout and `hard_ms` hard timeout
/// against the silent provider, for 100 ms of manual time after its first
/// body bytes arrived.
fn silent_tunnel(hard_ms: u64) -> Ran {
    let h = Harness::new();
    let outcome = Rc::new(RefCell::new(None));
    let sink = Recorder::default();
    let closed = Rc::new(RefCell::new(false));
    let health = FakeHealth::new(&h, ProviderHealth::Available);
    let probes = Rc::clone(&health.probes);
    block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        monoio::spawn(silent_provider(listener, Rc::clone(&closed)));
        let mut config = AdapterConfig::new(
            "chat",
            BaseUrl::parse(&format!("http://{addr}")).expect("url"),
        );
        config.supports_tunnel = true;
        let mut watchdog = h.watchdog(100, health);
        watchdog.kind = StallKind::Tunnel;
        let (out, mut recorder) = (Rc::clone(&outcome), sink.clone());
        monoio::spawn(async move {
            let client = ProviderClient::new(ProviderClientConfig::default());
            let target = TunnelTarget {
                config: &config,
                kind: AdapterKind::OpenaiCompat,
                request_timeout_ms: hard_ms,
            };
            let mut request = ProviderTunnelRequest {
                method: "POST".into(),
                path: "/v1/chat/completions".into(),
                response_stall_timeout_ms: 100,
                ..ProviderTunnelRequest::default()
            };
            let credit = Credit::new(TunnelLimits::default().initial_window);
            let ended = run_tunnel_watched(
                &client,
                Box::new(prepare(Some(target), &mut request)),
                TunnelLimits::default(),
                &credit,
                std::future::pending(),
                Some(watchdog),
                &mut recorder,
            )
            .await;
            *out.borrow_mut() = Some(ended);
        });
        // Real I/O happens at time 0: wait for the head and the first
        // event to arrive before time moves (waiting on sockets, not on
        // the watchdog).
        for _ in 0..10_000 {
            if sink.0.borrow().len() >= 3 {
                break;
            }
            monoio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(
            *sink.0.borrow(),
            ["frame:status", "frame:headers", "body:data: "]
        );
        h.advance(99).await;
        assert!(outcome.borrow().is_none(), "not before the threshold");
        h.advance(1).await;
        settle().await;
        for _ in 0..10_000 {
            if *closed.borrow() {
                break;
            }
            monoio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    });
    let frames = sink.0.borrow().clone();
    let provider_saw_close = *closed.borrow();
    Ran {
        outcome: outcome.take(),
        frames,
        provider_saw_close,
        probes: probes.get(),
    }
}

#[test]
fn a_stalled_tunnel_closes_its_provider_call_and_confirms_the_return() {
    let ran = silent_tunnel(0);
    assert!(
        ran.provider_saw_close,
        "the provider saw its connection close"
    );
    let Some(TunnelOutcome::Failed(failure)) = ran.outcome else {
        panic!("a failed outcome");
    };
    assert_eq!(failure.code(), FailureCode::ResponseStalled);
    assert!(failure.retryable, "the relay's return was confirmed");
    assert_eq!(failure.health_observation_seq, Some(1));
    assert_eq!(ran.probes, 1);
    assert_eq!(
        ran.frames.last().map(String::as_str),
        Some("error:FAILURE_CODE_RESPONSE_STALLED")
    );
    assert_eq!(ran.frames.len(), 4, "one terminal, nothing after it");
}

#[test]
fn a_tunnel_hard_deadline_beats_a_simultaneous_stall() {
    let ran = silent_tunnel(100);
    let Some(TunnelOutcome::Failed(failure)) = ran.outcome else {
        panic!("a failed outcome");
    };
    assert_eq!(failure.code(), FailureCode::HardTimeout);
    assert_eq!(ran.probes, 0, "no stall claimed, no probe");
    assert!(ran.provider_saw_close, "the provider call was dropped");
    assert_eq!(
        ran.frames.last().map(String::as_str),
        Some("error:FAILURE_CODE_HARD_TIMEOUT")
    );
    assert_eq!(ran.frames.len(), 4);
}
