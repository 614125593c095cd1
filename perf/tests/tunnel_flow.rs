//! The raw provider tunnel's flow control, stops and zero copy, against the
//! mock provider under both monoio drivers: a spent window pauses the
//! provider read, cancel and hard timeout end the tunnel and close the
//! provider stream, relaying allocates nothing per body byte, the chunks of
//! one provider read go out as one frame of uncopied slices, and a long
//! tunnel holds no reference to its request once the provider answered.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use framing::frame::MAX_BODY_PARTS;
use node_runner::provider_http::BaseUrl;
use node_runner::tunnel::{Credit, TunnelLimits, TunnelOutcome, TunnelTarget, run_tunnel};
use proto::v1::{AdapterKind, FailureCode, Header, ProviderTunnelRequest};

mod support;
use support::{each_driver, start};
mod tunnel_support;
use tunnel_support::{
    Item, Recorder, chat_body, client, direct_count, error_code, eventually, spawn_tunnel,
    target_config, tunnel, tunnel_request,
};

/// Counts bytes allocated by the current thread (the mock provider runs on
/// threads of its own, so it is not counted).
struct Counting;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only adds a thread-local count.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATED.try_with(|a| a.set(a.get() + layout.size()));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATED.try_with(|a| a.set(a.get() + new_size));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocated() -> usize {
    ALLOCATED.with(Cell::get)
}

#[test]
fn a_spent_window_pauses_the_provider_read_until_a_grant() {
    each_driver(|| async {
        let (mock, base) = start();
        // 24 MiB: more than the loopback socket buffers hold.
        let config = target_config(&base, &[("tokens", "24576"), ("event-bytes", "1024")]);
        let sink = Recorder::default();
        let (credit, _cancel, handle) = spawn_tunnel(
            config,
            tunnel_request(chat_body(true, false)),
            1024,
            sink.clone(),
        );
        eventually("the first body bytes", || sink.body_bytes.get() > 0).await;
        monoio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(sink.body_bytes.get(), 1024, "exactly the window, no more");
        assert_eq!(sink.frames().len(), 2, "status and headers, no terminal");
        let stats = mock.stats().to_json();
        assert_eq!(
            stats["streams_completed"], 0,
            "the provider is still writing"
        );
        assert_eq!(stats["streams_started"], 1);
        let total_before = sink.body_bytes.get();
        credit.grant(u32::MAX);
        let outcome = handle.await;
        assert!(matches!(
            outcome,
            TunnelOutcome::Completed { status: 200, .. }
        ));
        assert!(sink.body_bytes.get() > 24 * 1024 * 1024 && total_before == 1024);
        assert_eq!(mock.stats().to_json()["streams_completed"], 1);
    });
}

#[test]
fn cancel_and_hard_timeout_end_the_tunnel_and_close_the_provider_stream() {
    each_driver(|| async {
        let (mock, base) = start();
        let config = target_config(&base, &[("tokens", "1000"), ("delay-ms", "5")]);
        let sink = Recorder::default();
        let request = tunnel_request(chat_body(true, false));
        let (_credit, cancel, handle) =
            spawn_tunnel(config.clone(), request.clone(), u32::MAX, sink.clone());
        eventually("some body bytes", || sink.body_bytes.get() > 0).await;
        cancel.send(()).unwrap();
        assert_eq!(handle.await, TunnelOutcome::Cancelled);
        assert_eq!(
            error_code(&sink.frames().pop().unwrap()),
            FailureCode::Cancelled
        );
        let stats = mock.stats().clone();
        eventually("the provider to see the client gone", || {
            stats.streams_client_gone() == 1
        })
        .await;

        let sink = Recorder::default();
        let request = ProviderTunnelRequest {
            hard_timeout_ms: 100,
            ..request
        };
        let (_credit, _cancel, handle) = spawn_tunnel(config, request, u32::MAX, sink.clone());
        assert!(
            matches!(handle.await, TunnelOutcome::Failed(f) if f.code() == FailureCode::HardTimeout)
        );
        assert_eq!(
            error_code(&sink.frames().pop().unwrap()),
            FailureCode::HardTimeout
        );
        eventually("the provider to see the client gone", || {
            stats.streams_client_gone() == 2
        })
        .await;
    });
}

#[test]
fn a_long_tunnel_keeps_no_hold_on_its_request_once_the_provider_answered() {
    each_driver(|| async {
        let (_mock, base) = start();
        let config = target_config(&base, &[("tokens", "1000"), ("delay-ms", "5")]);
        let sink = Recorder::default();
        let body = chat_body(true, false);
        let header = Bytes::from(b"held".to_vec());
        let mut request = tunnel_request(body.clone());
        request.headers.push(Header {
            name: "x-trace".into(),
            value: header.clone(),
        });
        let (_credit, cancel, handle) = spawn_tunnel(config, request, u32::MAX, sink.clone());
        eventually("some body bytes", || sink.body_bytes.get() > 0).await;
        // The prompt (and the headers) went to the provider; the stream,
        // which may last minutes, holds no reference to them.
        assert!(body.is_unique(), "the tunnel still holds the request body");
        assert!(
            header.is_unique(),
            "the tunnel still holds a request header"
        );
        cancel.send(()).unwrap();
        assert_eq!(handle.await, TunnelOutcome::Cancelled);
    });
}

#[test]
fn body_bytes_are_not_copied() {
    each_driver(|| async {
        let (_mock, base) = start();
        // 16 MiB of SSE, observed (usage) and stripped on the way.
        let config = target_config(&base, &[("tokens", "2048"), ("event-bytes", "8192")]);
        let request = ProviderTunnelRequest {
            extract_usage: true,
            strip_usage_event: true,
            ..tunnel_request(chat_body(true, true))
        };
        let client = client();
        let target = TunnelTarget {
            config: &config,
            kind: AdapterKind::Vllm,
            request_timeout_ms: 0,
        };
        // Counting only: the sink drops each slice, as the link writer would
        // once it is written.
        let mut sink = Recorder::default();
        let credit = Credit::new(u32::MAX);
        let before = allocated();
        let outcome = run_tunnel(
            &client,
            Some(target),
            request,
            TunnelLimits::default(),
            &credit,
            std::future::pending(),
            &mut sink,
        )
        .await;
        let spent = allocated() - before;
        let body = sink.body_bytes.get();
        // The client's own reads of the same stream, for comparison.
        let before = allocated();
        let (_, direct_body) = direct_count(&config, chat_body(true, true)).await;
        let baseline = allocated() - before;
        assert!(matches!(
            outcome,
            TunnelOutcome::Completed { usage: Some(_), .. }
        ));
        assert!(body > 16 * 1024 * 1024, "{body}");
        assert!(direct_body > body, "the usage event was stripped");
        // Reading lands the bytes once in the receive buffer (reused as
        // slices are dropped); a copy per chunk would add the body again.
        // What the tunnel adds (frames, the observer's line buffer, a fresh
        // receive buffer when a held event pins the old one) stays small.
        assert!(
            spent < baseline + body / 16,
            "allocated {spent} bytes for a {body} byte body (plain reads: {baseline})"
        );
    });
}

/// A provider on a thread of its own that answers one request with `body`'s
/// pieces as HTTP chunks, all in one write.
fn one_write_provider(pieces: Vec<String>) -> BaseUrl {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        // The request's head and its short body arrive together or soon.
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "the client left before its request");
            request.extend_from_slice(&buf[..n]);
        }
        let mut response = String::from(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
             transfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        );
        for piece in &pieces {
            response.push_str(&format!("{:x}\r\n{piece}\r\n", piece.len()));
        }
        response.push_str("0\r\n\r\n");
        stream.write_all(response.as_bytes()).unwrap();
        // Keep the socket open until the client has read it all.
        let _ = stream.read(&mut buf);
    });
    BaseUrl::parse(&format!("http://{addr}")).unwrap()
}

#[test]
fn the_chunks_of_one_read_go_out_as_one_frame_of_uncopied_slices() {
    each_driver(|| async {
        let events = 100;
        let pieces: Vec<String> = (0..events)
            .map(|i| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{i}\"}}}}]}}\n\n"))
            .collect();
        let config = target_config(&one_write_provider(pieces.clone()), &[]);
        let (outcome, sink) = tunnel(&config, tunnel_request(chat_body(true, false))).await;
        assert!(matches!(
            outcome,
            TunnelOutcome::Completed { status: 200, .. }
        ));
        assert_eq!(
            sink.body(),
            pieces.concat().as_bytes(),
            "every byte, in order"
        );
        let frames = sink.body_frames.get();
        let slices = sink
            .items
            .borrow()
            .iter()
            .filter(|i| matches!(i, Item::Body(_)))
            .count();
        // At least a slice a chunk (the chunk framing is not relayed; a
        // chunk cut by a read is two), gathered into frames of up to
        // MAX_BODY_PARTS: the provider wrote ~5 KB at once, which the
        // client takes in a few reads.
        assert!(slices >= events, "{slices} slices for {events} chunks");
        assert!(
            frames >= events.div_ceil(MAX_BODY_PARTS) && frames <= events / 4,
            "{frames} frames for {events} chunks"
        );
    });
}
