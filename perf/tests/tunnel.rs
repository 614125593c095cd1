//! The Node's raw provider tunnel (`node_runner::tunnel`, F16, F18) against
//! the real mock provider on loopback, under both monoio drivers: bytes
//! relayed exactly, usage observed and stripped (also when the usage event
//! arrives one byte at a time), provider HTTP errors, refused connections
//! and aborts. Credit, stops and zero copy are in `tunnel_flow.rs`.

use std::io::{Read, Write};
use std::net::TcpListener;

use node_runner::provider_http::BaseUrl;
use node_runner::tunnel::TunnelOutcome;
use proto::v1::{FailureCode, ProviderTunnelRequest, Usage, provider_tunnel_frame::Frame};

mod support;
use support::{each_driver, start};
mod tunnel_support;
use tunnel_support::{
    chat_body, direct, end_usage, error_code, normalize, target_config, tunnel, tunnel_request,
};

#[test]
fn streaming_chat_is_relayed_byte_for_byte() {
    each_driver(|| async {
        let (_mock, base) = start();
        let config = target_config(&base, &[("tokens", "5"), ("reasoning-tokens", "2")]);
        let (outcome, sink) = tunnel(&config, tunnel_request(chat_body(true, false))).await;
        let (status, body) = direct(&config, chat_body(true, false)).await;
        assert_eq!(
            outcome,
            TunnelOutcome::Completed {
                status: 200,
                usage: None
            }
        );
        assert_eq!(sink.shape().0, Some(u32::from(status)));
        assert_eq!(normalize(&sink.body()), normalize(&body));
        let Frame::Headers(headers) = &sink.frames()[1] else {
            panic!("headers second")
        };
        let names: Vec<_> = headers
            .headers
            .iter()
            .map(|h| String::from_utf8_lossy(&h.name).to_ascii_lowercase())
            .collect();
        assert!(names.contains(&"content-type".to_owned()), "{names:?}");
        assert!(
            !names
                .iter()
                .any(|n| n == "transfer-encoding" || n == "connection")
        );
    });
}

#[test]
fn non_stream_json_is_relayed_and_its_usage_extracted() {
    each_driver(|| async {
        let (_mock, base) = start();
        let knobs = [
            ("tokens", "4"),
            ("reasoning-tokens", "2"),
            ("cached-tokens", "1"),
        ];
        let config = target_config(&base, &knobs);
        let request = ProviderTunnelRequest {
            extract_usage: true,
            ..tunnel_request(chat_body(false, false))
        };
        let (outcome, sink) = tunnel(&config, request).await;
        let (_, body) = direct(&config, chat_body(false, false)).await;
        assert_eq!(normalize(&sink.body()), normalize(&body));
        let usage = Usage {
            input_tokens: 2,
            output_tokens: 6,
            reasoning_tokens: Some(2),
            cached_input_tokens: Some(1),
        };
        assert_eq!(end_usage(&sink.shape().1), Some(usage));
        assert_eq!(
            outcome,
            TunnelOutcome::Completed {
                status: 200,
                usage: Some(usage)
            }
        );
    });
}

#[test]
fn usage_event_is_stripped_and_reported() {
    each_driver(|| async {
        let (_mock, base) = start();
        let shapes: [&[(&str, &str)]; 3] = [
            &[
                ("tokens", "6"),
                ("reasoning-tokens", "3"),
                ("cached-tokens", "2"),
            ],
            &[("tokens", "7"), ("chunk-size", "3")],
            &[("tokens", "9"), ("event-bytes", "7000")],
        ];
        for knobs in shapes {
            let config = target_config(&base, knobs);
            for strip in [false, true] {
                let request = ProviderTunnelRequest {
                    extract_usage: true,
                    strip_usage_event: strip,
                    ..tunnel_request(chat_body(true, true))
                };
                let (outcome, sink) = tunnel(&config, request).await;
                let (_, with_usage) = direct(&config, chat_body(true, true)).await;
                let (_, without) = direct(&config, chat_body(true, false)).await;
                let expected = if strip { without } else { with_usage };
                assert_eq!(normalize(&sink.body()), normalize(&expected), "{knobs:?}");
                let usages: Vec<_> = sink
                    .frames()
                    .into_iter()
                    .filter_map(|f| match f {
                        Frame::Usage(u) => Some(u),
                        _ => None,
                    })
                    .collect();
                assert_eq!(usages.len(), 1, "{knobs:?}");
                let terminal = sink.shape().1;
                assert_eq!(end_usage(&terminal), Some(usages[0]));
                assert!(matches!(
                    outcome,
                    TunnelOutcome::Completed { usage: Some(_), .. }
                ));
            }
        }
    });
}

/// A provider that answers one request with `sse` in one-byte HTTP chunks,
/// so every body chunk the tunnel reads is one byte.
fn byte_split_provider(sse: &'static str) -> BaseUrl {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            conn.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        conn.read_exact(&mut vec![0; len]).unwrap();
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
            transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            .to_vec();
        for b in sse.bytes() {
            out.extend_from_slice(b"1\r\n");
            out.push(b);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        conn.write_all(&out).unwrap();
    });
    BaseUrl::parse(&format!("http://{addr}")).unwrap()
}

#[test]
fn usage_event_split_at_every_byte_is_stripped() {
    const TOKEN: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n";
    const USAGE: &str = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\
        \"completion_tokens\":2}}\r\n\r\n";
    const DONE: &str = "data: [DONE]\r\n\r\n";
    each_driver(|| async {
        let sse = Box::leak(format!("{TOKEN}{TOKEN}{USAGE}{DONE}").into_boxed_str());
        let config = target_config(&byte_split_provider(sse), &[]);
        let request = ProviderTunnelRequest {
            strip_usage_event: true,
            ..tunnel_request(chat_body(true, true))
        };
        let (_, sink) = tunnel(&config, request).await;
        assert_eq!(sink.body(), format!("{TOKEN}{TOKEN}{DONE}").as_bytes());
        let usage = Usage {
            input_tokens: 1,
            output_tokens: 2,
            ..Usage::default()
        };
        assert_eq!(end_usage(&sink.shape().1), Some(usage));
        assert!(sink.frames().contains(&Frame::Usage(usage)));
    });
}

#[test]
fn provider_http_errors_are_relayed_faithfully() {
    each_driver(|| async {
        let (_mock, base) = start();
        for status in ["400", "503"] {
            let config = target_config(&base, &[("status", status)]);
            let (outcome, sink) = tunnel(&config, tunnel_request(chat_body(true, false))).await;
            let (direct_status, body) = direct(&config, chat_body(true, false)).await;
            let code: u16 = status.parse().unwrap();
            assert_eq!(direct_status, code);
            assert_eq!(
                outcome,
                TunnelOutcome::Completed {
                    status: code,
                    usage: None
                }
            );
            let (seen, terminal) = sink.shape();
            assert_eq!(seen, Some(u32::from(code)));
            assert!(matches!(terminal, Frame::End(_)));
            assert_eq!(sink.body(), body);
        }
    });
}

#[test]
fn refused_connection_and_mid_stream_abort_are_error_terminals() {
    each_driver(|| async {
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = target_config(&BaseUrl::parse(&format!("http://{closed}")).unwrap(), &[]);
        let (outcome, sink) = tunnel(&config, tunnel_request(chat_body(true, false))).await;
        let (status, terminal) = sink.shape();
        assert_eq!(
            (status, error_code(&terminal)),
            (None, FailureCode::ProviderUnreachable)
        );
        assert!(matches!(outcome, TunnelOutcome::Failed(_)));

        let (_mock, base) = start();
        let config = target_config(&base, &[("tokens", "10"), ("abort-after", "3")]);
        let (_, sink) = tunnel(&config, tunnel_request(chat_body(true, false))).await;
        let (status, terminal) = sink.shape();
        assert_eq!(status, Some(200));
        assert_eq!(error_code(&terminal), FailureCode::ProviderUnreachable);
        let body = String::from_utf8(sink.body()).unwrap();
        assert_eq!(body.matches("\"content\":\"tok \"").count(), 3, "{body}");
    });
}
