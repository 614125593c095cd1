//! The dispatcher's run ids, a run stream's credit grants, and a tunnel
//! stream's batches.

use super::stream::{
    GRANT_AT_LEAST, grant_due, grant_threshold, grant_threshold_of, tunnel_grant_threshold,
};
use super::*;
use crate::link::streams::{StreamItem, stream_channel};
use crate::runtime::{IoDriver, block_on};
use bytes::Bytes;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{
    ProviderTunnelFrame, ProviderTunnelRequest, RunEvent, RunEventKind, RunRequest, TunnelBatch,
    TunnelEnd, TunnelHeaders, TunnelStatus, WindowUpdate,
};

fn event(seq: u64, kind: RunEventKind, text: &str) -> StreamItem {
    let mut event = RunEvent {
        seq,
        text: bytes::Bytes::copy_from_slice(text.as_bytes()),
        ..RunEvent::default()
    };
    event.set_kind(kind);
    StreamItem::Frame(Msg::RunEvent(Box::new(event)))
}

/// The credit a run stream has granted so far (its window updates).
fn granted(inbox: &mut tokio::sync::mpsc::UnboundedReceiver<CoreMsg>) -> Vec<u32> {
    let mut out = Vec::new();
    while let Ok(msg) = inbox.try_recv() {
        if let CoreMsg::Send {
            stream_id: 7,
            msg: Msg::WindowUpdate(WindowUpdate { increment }),
            ..
        } = msg
        {
            out.push(increment);
        }
    }
    out
}

#[test]
fn credit_is_granted_back_in_quarters_or_halves_a_waiting_node_always_gets() {
    let mut pending = 0;
    assert_eq!(grant_due(&mut pending, 500, GRANT_AT_LEAST), None);
    assert_eq!(grant_due(&mut pending, 12, GRANT_AT_LEAST), Some(512));
    assert_eq!(pending, 0, "granted: it starts over");
    assert_eq!(grant_due(&mut pending, 1, GRANT_AT_LEAST), None);
    assert_eq!(
        grant_due(&mut pending, 70_000, GRANT_AT_LEAST),
        Some(70_001)
    );
    assert_eq!(grant_threshold(256 * 1024), 64 * 1024);
    assert_eq!(grant_threshold(0), GRANT_AT_LEAST, "a window not known");
    assert_eq!(grant_threshold(1024), 512);
    // A node that took its whole window back sees more than `window −
    // threshold` of credit, and a run resumes at a quarter of its window,
    // at most 64 KiB (node_runner::tunnel::Credit::resume_point, restated
    // here as the contract): it is always granted again.
    let smallest = crate::config::MIN_INITIAL_STREAM_WINDOW as u32;
    let largest = crate::config::MAX_INITIAL_STREAM_WINDOW as u32;
    let windows = (smallest..=smallest + 4100).chain([256 * 1024, 300_001, 1 << 20, largest]);
    for window in windows {
        let resume = (window / 4).clamp(1, 64 * 1024);
        let threshold = grant_threshold(window);
        assert!(threshold >= GRANT_AT_LEAST);
        assert!(
            window - threshold >= resume,
            "window {window}: a node may wait for {resume} with {threshold} held back"
        );
        // A tunnel resumes at its first byte of credit.
        let threshold = tunnel_grant_threshold(window);
        assert!(threshold >= GRANT_AT_LEAST);
        assert!(
            window - threshold >= 1,
            "window {window}: a tunnel may wait with {threshold} held back"
        );
    }
}

#[test]
fn a_tunnel_grants_in_halves_of_its_window_and_a_run_in_quarters() {
    assert_eq!(tunnel_grant_threshold(256 * 1024), 128 * 1024);
    assert_eq!(tunnel_grant_threshold(1024), 512);
    assert_eq!(
        tunnel_grant_threshold(0),
        GRANT_AT_LEAST,
        "a window not known"
    );
    let run = Opening::Msg(Msg::RunRequest(Box::new(RunRequest {
        initial_window: 256 * 1024,
        ..RunRequest::default()
    })));
    let tunnel = Opening::Tunnel(TunnelOpen {
        initial_window: 256 * 1024,
        ..TunnelOpen::default()
    });
    let prost_tunnel = Opening::Msg(Msg::ProviderTunnelRequest(Box::new(
        ProviderTunnelRequest {
            initial_window: 256 * 1024,
            ..ProviderTunnelRequest::default()
        },
    )));
    assert_eq!(grant_threshold_of(&run), 64 * 1024);
    assert_eq!(grant_threshold_of(&tunnel), 128 * 1024);
    assert_eq!(grant_threshold_of(&prost_tunnel), 128 * 1024);
    let other = Opening::Msg(Msg::CancelRequest(Box::default()));
    assert_eq!(grant_threshold_of(&other), GRANT_AT_LEAST);
}

type Sink = crate::link::streams::StreamSink;

/// A stream's handle on node `n1` (`stream_id`), the sink that feeds it,
/// and what it sends to the link.
fn handle(
    stream_id: u64,
) -> (
    Sink,
    StreamHandle,
    tokio::sync::mpsc::UnboundedReceiver<CoreMsg>,
) {
    let (sink, rx) = stream_channel();
    let (inbox, sent) = tokio::sync::mpsc::unbounded_channel();
    let handle = StreamHandle {
        node_id: "n1".into(),
        generation: 1,
        stream_id,
        rx,
        inbox,
        ended: false,
        taken: 0,
        grant_at: GRANT_AT_LEAST,
    };
    (sink, handle, sent)
}

/// A run stream (id 7, run `r`) fed by the returned sink, and what it sends
/// to the link.
fn run_stream() -> (
    Sink,
    tokio::sync::mpsc::UnboundedReceiver<CoreMsg>,
    RunStream,
) {
    let (sink, handle, sent) = handle(7);
    let stream = RunStream {
        handle,
        run_id: "r".into(),
        last_seq: 0,
    };
    (sink, sent, stream)
}

#[test]
fn a_delta_that_is_not_utf8_ends_the_stream_and_cancels_the_run() {
    let (sink, mut sent, mut stream) = run_stream();
    sink.send(event(1, RunEventKind::Delta, "fine"));
    let mut bad = RunEvent {
        seq: 2,
        text: bytes::Bytes::from_static(b"ab\xff"),
        ..RunEvent::default()
    };
    bad.set_kind(RunEventKind::Delta);
    sink.send(StreamItem::Frame(Msg::RunEvent(Box::new(bad))));
    sink.send(event(3, RunEventKind::Delta, "never seen"));
    block_on(IoDriver::Epoll, async {
        let first = stream.next().await.unwrap();
        assert_eq!(run_event_text(&first), "fine");
        let error = stream.next().await.unwrap();
        assert_eq!(error.kind(), RunEventKind::Error);
        assert_eq!(error.seq, 2);
        let failure = error.failure.unwrap();
        assert_eq!(failure.code(), proto::v1::FailureCode::Internal);
        assert_eq!(failure.side(), proto::v1::FailureSide::Node);
        assert!(stream.next().await.is_none(), "that was the terminal");
    })
    .unwrap();
    let cancels: Vec<_> = std::iter::from_fn(|| sent.try_recv().ok())
        .filter(|msg| {
            matches!(msg, CoreMsg::Send { msg: Msg::CancelRequest(c), .. } if c.run_id == "r")
        })
        .collect();
    assert_eq!(cancels.len(), 1, "the node is told to stop the run");
}

#[test]
fn a_run_stream_grants_what_it_handed_out_when_asked_for_more() {
    let (sink, mut sent, mut stream) = run_stream();
    let text = "x".repeat(500);
    let cost = proto::RUN_EVENT_CREDIT_BASE + 500;
    sink.send(event(1, RunEventKind::Delta, &text));
    sink.send(event(2, RunEventKind::Delta, &text));
    block_on(IoDriver::Epoll, async {
        assert!(stream.next().await.is_some());
        assert!(stream.try_next().is_some());
        assert_eq!(
            granted(&mut sent),
            Vec::<u32>::new(),
            "nothing before the caller asks again: the batch is not written"
        );
        sink.send(event(3, RunEventKind::Delta, ""));
        assert!(stream.next().await.is_some());
        assert_eq!(
            granted(&mut sent),
            vec![2 * cost],
            "both events of the written batch, in one update"
        );
        sink.send(event(4, RunEventKind::Complete, ""));
        assert!(stream.next().await.is_some(), "the terminal");
        assert_eq!(
            granted(&mut sent),
            Vec::<u32>::new(),
            "64 taken: under half a kilobyte, kept for the next update"
        );
        assert!(stream.next().await.is_none());
        assert_eq!(
            granted(&mut sent),
            Vec::<u32>::new(),
            "nothing after the terminal: the run is over"
        );
    })
    .unwrap();
}

#[test]
fn run_ids_count_up_and_the_longest_fits() {
    let ids = RunIds::starting(0x18f3a2b4c5d, 1);
    assert_eq!(&*ids.next(), "run-18f3a2b4c5d-1");
    assert_eq!(&*ids.next(), "run-18f3a2b4c5d-2");
    assert!(RunIds::new().next().starts_with("run-"));
    let longest = RunIds::starting(u64::MAX, u64::MAX);
    assert_eq!(
        &*longest.next(),
        format!("run-ffffffffffffffff-{}", u64::MAX)
    );
}

/// A tunnel stream (id 9) fed by the returned sink.
fn tunnel_stream() -> (Sink, TunnelStream) {
    let (sink, handle, _sent) = handle(9);
    let stream = TunnelStream {
        handle,
        tunnel_id: "t".into(),
        batch: None,
    };
    (sink, stream)
}

fn tunnel_item(frame: Frame) -> StreamItem {
    StreamItem::Frame(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
        frame: Some(frame),
    }))
}

#[test]
fn a_batch_is_handed_out_as_the_frames_it_holds_in_their_order() {
    let (sink, mut stream) = tunnel_stream();
    let headers = TunnelHeaders::copied(&[(b"content-type", b"application/json")]);
    let end = TunnelEnd {
        usage: Some(proto::v1::Usage {
            input_tokens: 3,
            ..Default::default()
        }),
    };
    sink.send(tunnel_item(Frame::Batch(Box::new(TunnelBatch {
        status: Some(TunnelStatus { code: 200 }),
        headers: Some(headers.clone()),
        ..TunnelBatch::default()
    }))));
    // An empty batch holds no frame, and is skipped.
    sink.send(tunnel_item(Frame::Batch(Box::default())));
    sink.send(tunnel_item(Frame::Usage(proto::v1::Usage::default())));
    sink.send(tunnel_item(Frame::Batch(Box::new(TunnelBatch {
        end: Some(end),
        body: Bytes::from_static(b"{}"),
        ..TunnelBatch::default()
    }))));
    // Nothing follows a batch's end, even what the link would still pass.
    sink.send(tunnel_item(Frame::Body(Bytes::from_static(b"late"))));
    block_on(IoDriver::Epoll, async {
        assert_eq!(
            stream.next().await,
            Some(Frame::Status(TunnelStatus { code: 200 }))
        );
        assert_eq!(stream.try_next(), Some(Frame::Headers(headers)));
        assert!(stream.batch.is_none(), "a spent batch is let go of");
        assert_eq!(
            stream.next().await,
            Some(Frame::Usage(proto::v1::Usage::default()))
        );
        assert_eq!(
            stream.next().await,
            Some(Frame::Body(Bytes::from_static(b"{}")))
        );
        assert_eq!(stream.try_next(), Some(Frame::End(end)));
        assert!(stream.handle.ended, "the batch's end is the terminal");
        assert_eq!(stream.next().await, None);
        assert_eq!(stream.try_next(), None);
    })
    .unwrap();
}

#[test]
fn a_batch_without_a_body_goes_from_its_headers_to_its_end() {
    let (sink, mut stream) = tunnel_stream();
    sink.send(tunnel_item(Frame::Batch(Box::new(TunnelBatch {
        status: Some(TunnelStatus { code: 204 }),
        end: Some(TunnelEnd::default()),
        ..TunnelBatch::default()
    }))));
    block_on(IoDriver::Epoll, async {
        assert_eq!(
            stream.next().await,
            Some(Frame::Status(TunnelStatus { code: 204 }))
        );
        assert_eq!(stream.next().await, Some(Frame::End(TunnelEnd::default())));
        assert_eq!(stream.next().await, None);
    })
    .unwrap();
}
