//! A tunnel's frames on the link: batched for an Edge that takes batches
//! (`NodeConfigPayload.tunnel_batches`), apart for one that does not, and
//! the same frames either way once a batch is taken apart.

use std::io::{Read, Write};

use bytes::Bytes;
use framing::link::Outgoing;
use proto::Envelope;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{
    NodeConfigPayload, ProviderTunnelRequest, TunnelEnd, TunnelHeaders, TunnelStatus, Usage,
    envelope::Msg,
};
use tokio::sync::mpsc::UnboundedReceiver;

use super::outbox::tests::tunnel_frames;
use super::stall_admission_tests::{self, MAX_FRAME, manager_with};
use crate::provider_http::tests::{accept, read_request, serve};
use crate::stall::testkit::{Harness, block_on};

const BODY: &str = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}"#;

/// A provider that answers one request with a small JSON body: its head
/// and body in one write (so the Node reads them in one read), or, given
/// a gate, the head first and the body once the gate opens.
fn provider(gate: Option<std::sync::mpsc::Receiver<()>>) -> String {
    let (base, _) = serve(move |listener| {
        let mut conn = accept(&listener);
        read_request(&mut conn);
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            BODY.len()
        );
        match gate {
            None => conn
                .write_all(format!("{head}{BODY}").as_bytes())
                .expect("write"),
            Some(gate) => {
                conn.write_all(head.as_bytes()).expect("write");
                gate.recv().expect("the gate opens");
                conn.write_all(BODY.as_bytes()).expect("write");
            }
        }
        // Held open: the pool keeps it.
        let _ = conn.read(&mut [0u8; 1]);
    });
    base.to_string()
}

fn payload(base_url: String, tunnel_batches: bool) -> NodeConfigPayload {
    NodeConfigPayload {
        tunnel_batches,
        ..stall_admission_tests::payload(base_url)
    }
}

fn tunnel() -> Envelope {
    Envelope {
        stream_id: 3,
        msg: Some(Msg::ProviderTunnelRequest(Box::new(
            ProviderTunnelRequest {
                tunnel_id: "t".into(),
                adapter: "chat".into(),
                target: "m".into(),
                method: "POST".into(),
                path: "/v1/chat/completions".into(),
                body: Bytes::from_static(b"{}"),
                extract_usage: true,
                ..ProviderTunnelRequest::default()
            },
        ))),
    }
}

/// The tunnel frames sent, each as the Edge decodes it.
fn sent(rx: &mut UnboundedReceiver<(u64, Outgoing)>) -> Vec<Frame> {
    tunnel_frames(rx, MAX_FRAME)
        .into_iter()
        .map(|(stream_id, frame)| {
            assert_eq!(stream_id, 3);
            frame
        })
        .collect()
}

/// Waits (a real millisecond at a time, at most 5 s) until `done`.
async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..5_000 {
        if done() {
            return;
        }
        monoio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("not within 5 s");
}

/// The frames a tunnel sends to an Edge that takes batches or not, once
/// it has ended; the provider answers in one write.
fn relayed(tunnel_batches: bool) -> Vec<Frame> {
    let h = Harness::new();
    block_on(async {
        let (manager, mut rx) = manager_with(&h, &payload(provider(None), tunnel_batches));
        manager.handle(tunnel());
        until(|| manager.active_runs() == 0).await;
        sent(&mut rx)
    })
}

fn status() -> TunnelStatus {
    TunnelStatus { code: 200 }
}

fn headers() -> TunnelHeaders {
    let length = BODY.len().to_string();
    TunnelHeaders::copied(&[
        (b"content-type", b"application/json"),
        (b"content-length", length.as_bytes()),
    ])
}

fn end() -> TunnelEnd {
    TunnelEnd {
        usage: Some(Usage {
            input_tokens: 3,
            output_tokens: 5,
            ..Usage::default()
        }),
    }
}

#[test]
fn a_small_answer_is_one_batch_to_an_edge_that_takes_them() {
    let frames = relayed(true);
    let [Frame::Batch(batch)] = &frames[..] else {
        panic!("{frames:?}");
    };
    assert_eq!(batch.status, Some(status()));
    assert_eq!(batch.headers, Some(headers()));
    assert_eq!(batch.body, BODY.as_bytes());
    assert_eq!(batch.end, Some(end()));
}

#[test]
fn a_small_answer_is_four_frames_to_an_edge_that_takes_no_batches() {
    assert_eq!(
        relayed(false),
        [
            Frame::Status(status()),
            Frame::Headers(headers()),
            Frame::Body(Bytes::from_static(BODY.as_bytes())),
            Frame::End(end()),
        ]
    );
}

#[test]
fn a_head_that_came_alone_goes_before_the_wait_and_the_body_with_the_end() {
    let (open, gate) = std::sync::mpsc::channel();
    let h = Harness::new();
    let (first, rest) = block_on(async {
        let (manager, mut rx) = manager_with(&h, &payload(provider(Some(gate)), true));
        manager.handle(tunnel());
        // The body is not written until the head has reached the link.
        until(|| !rx.is_empty()).await;
        let first = sent(&mut rx);
        open.send(()).expect("the provider waits");
        until(|| manager.active_runs() == 0).await;
        (first, sent(&mut rx))
    });
    let [Frame::Batch(head)] = &first[..] else {
        panic!("{first:?}");
    };
    assert_eq!(head.status, Some(status()));
    assert_eq!(head.headers, Some(headers()));
    assert!(head.body.is_empty() && head.end.is_none());
    let [Frame::Batch(last)] = &rest[..] else {
        panic!("{rest:?}");
    };
    assert!(last.status.is_none() && last.headers.is_none());
    assert_eq!(last.body, BODY.as_bytes());
    assert_eq!(last.end, Some(end()));
}
