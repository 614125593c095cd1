//! End-to-end use of the HTTP/1.1 codecs the way the two drivers use them,
//! with byte-at-a-time reads to stand in for the worst socket:
//! - the Edge ingress: pipelined requests (one `Content-Length`, one chunked)
//!   on a keep-alive connection, answered with a chunked SSE response;
//! - the Node's provider client: a request head out, then a `100 Continue`,
//!   a chunked streaming response and a second response on the same
//!   connection.

use bytes::{Buf, Bytes, BytesMut};
use framing::http::{
    BodyDecoder, BodyFraming, BodyItem, ChunkedEncoder, HeadLimits, Method, parse_request_head,
    parse_response_head, write_request_head, write_response_head,
};

/// A served request: method, target, body, keep-alive.
type Served = (Method, Vec<u8>, Vec<u8>, bool);

/// A request whose head is parsed and whose body is still arriving.
struct InFlight {
    method: Method,
    path: Vec<u8>,
    decoder: BodyDecoder,
    body: Vec<u8>,
    keep_alive: bool,
}

/// Feed `wire` one byte per "read", pulling requests and their bodies.
fn serve(wire: &[u8]) -> Vec<Served> {
    let limits = HeadLimits::default();
    let mut rx = BytesMut::new();
    let mut served = Vec::new();
    let mut current: Option<InFlight> = None;
    for &byte in wire {
        rx.extend_from_slice(&[byte]);
        loop {
            match current.as_mut() {
                None => match parse_request_head(&mut rx, &limits).unwrap() {
                    Some(head) => {
                        current = Some(InFlight {
                            method: head.method(),
                            path: head.path().to_vec(),
                            decoder: BodyDecoder::new(head.body()),
                            body: Vec::new(),
                            keep_alive: head.keep_alive(),
                        });
                    }
                    None => break,
                },
                Some(req) => match req.decoder.decode(&mut rx).unwrap() {
                    Some(BodyItem::Data(d)) => req.body.extend_from_slice(&d),
                    Some(BodyItem::End) => {
                        let req = current.take().unwrap();
                        served.push((req.method, req.path, req.body, req.keep_alive));
                    }
                    None => break,
                },
            }
        }
    }
    assert!(current.is_none() && rx.is_empty());
    served
}

#[test]
fn edge_ingress_pipelined_requests() {
    let wire = b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Length: 11\r\n\r\n{\"a\":\"b c\"}\
POST /v1/embeddings HTTP/1.1\r\nHost: edge\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"x\"\r\n3;e=1\r\n:1}\r\n0\r\n\r\n\
GET /v1/models HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n";
    let served = serve(wire);
    assert_eq!(
        served,
        [
            (
                Method::Post,
                b"/v1/chat/completions".to_vec(),
                b"{\"a\":\"b c\"}".to_vec(),
                true
            ),
            (
                Method::Post,
                b"/v1/embeddings".to_vec(),
                b"{\"x\":1}".to_vec(),
                true
            ),
            (Method::Get, b"/v1/models".to_vec(), Vec::new(), false),
        ]
    );
}

#[test]
fn edge_streams_sse_as_chunks_and_a_client_decodes_them() {
    // Edge side: head, then each SSE event as a vectored chunk, then the end.
    let mut out = BytesMut::new();
    let fields = [
        ("content-type", "text/event-stream"),
        ("transfer-encoding", "chunked"),
    ];
    write_response_head(&mut out, 200, fields).unwrap();
    let events = [
        "data: {\"delta\":\"Hel\"}\n\n",
        "data: {\"delta\":\"lo\"}\n\n",
        "data: [DONE]\n\n",
    ];
    let mut encoder = ChunkedEncoder::new();
    for event in events {
        let mut frame = encoder
            .encode(Bytes::from_static(event.as_bytes()))
            .unwrap();
        // What a vectored socket write would do, one slice at a time.
        while frame.has_remaining() {
            let n = frame.chunk().len();
            out.extend_from_slice(frame.chunk());
            frame.advance(n);
        }
    }
    out.extend_from_slice(&ChunkedEncoder::last_chunk());

    // Client side (the Node talks to providers the same way).
    let limits = HeadLimits::default();
    let mut rx = BytesMut::new();
    let mut head = None;
    let mut decoder = None;
    let mut body = Vec::new();
    for &byte in out.iter() {
        rx.extend_from_slice(&[byte]);
        if head.is_none() {
            head = parse_response_head(&mut rx, &limits, false).unwrap();
            decoder = head.as_ref().map(|h| BodyDecoder::new(h.body()));
            continue;
        }
        let decoder = decoder.as_mut().unwrap();
        while let Some(item) = decoder.decode(&mut rx).unwrap() {
            if let BodyItem::Data(d) = item {
                body.extend_from_slice(&d);
            }
        }
    }
    let head = head.unwrap();
    assert_eq!(head.body(), BodyFraming::Chunked);
    assert_eq!(
        head.headers().get("Content-Type"),
        Some(&b"text/event-stream"[..])
    );
    assert!(decoder.unwrap().is_done());
    assert_eq!(body, events.concat().as_bytes());
}

#[test]
fn node_client_reads_interim_chunked_and_length_responses() {
    let mut request = BytesMut::new();
    let fields = [
        ("host", "127.0.0.1:8000"),
        ("content-length", "2"),
        ("expect", "100-continue"),
    ];
    write_request_head(&mut request, "POST", "/v1/completions", fields).unwrap();
    assert!(request.starts_with(b"POST /v1/completions HTTP/1.1\r\n"));

    let wire = b"HTTP/1.1 100 Continue\r\n\r\n\
HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n\
HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbye";
    let limits = HeadLimits::default();
    let mut rx = BytesMut::from(&wire[..]);
    let mut responses = Vec::new();
    while !rx.is_empty() {
        let head = parse_response_head(&mut rx, &limits, false)
            .unwrap()
            .unwrap();
        let mut decoder = BodyDecoder::new(head.body());
        let mut body = Vec::new();
        while let Some(item) = decoder.decode_eof(&mut rx).unwrap() {
            if let BodyItem::Data(d) = item {
                body.extend_from_slice(&d);
            }
        }
        responses.push((head.status(), body, head.keep_alive()));
    }
    assert_eq!(
        responses,
        [
            (100, Vec::new(), true),
            (200, b"hello".to_vec(), true),
            (200, b"bye".to_vec(), true),
        ]
    );
}
