//! The SSE tap (stripping by slicing) and the request checks, without
//! sockets. The tunnel against a real provider is in `perf/tests/tunnel.rs`.

use bytes::Bytes;
use proptest::prelude::*;
use proto::v1::{AdapterKind, FailureCode, Header, ProviderTunnelRequest, Usage};

use super::request::prepare;
use super::sse_tap::{MAX_HELD_EVENT, MAX_UNOBSERVED, Seen, SseTap};
use super::{TunnelLimits, TunnelTarget};
use crate::adapter::AdapterConfig;
use crate::provider_http::BaseUrl;

const USAGE_EVENT: &str = "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":2,\
    \"completion_tokens\":3,\"completion_tokens_details\":{\"reasoning_tokens\":1}}}";

fn usage() -> Usage {
    Usage {
        input_tokens: 2,
        output_tokens: 3,
        reasoning_tokens: Some(1),
        cached_input_tokens: None,
    }
}

/// A stream of `tokens` token events, the usage event, `[DONE]`, with
/// `eol` as every line ending; and the same stream without the usage event.
fn stream(tokens: usize, eol: &str) -> (String, String) {
    let token = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"tok \"}}}}]}}{eol}{eol}");
    let usage = format!("{USAGE_EVENT}{eol}{eol}");
    let done = format!("data: [DONE]{eol}{eol}");
    let body = token.repeat(tokens);
    (format!("{body}{usage}{done}"), format!("{body}{done}"))
}

/// A token event, the usage event with a `pad` string as its first member,
/// `[DONE]`, with `eol` as every line ending; and the same stream without
/// the usage event.
fn padded_usage_stream(pad: &str, eol: &str) -> (String, String) {
    let token = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"t\"}}}}]}}{eol}{eol}");
    let usage_event = USAGE_EVENT.replacen('{', &format!("{{\"pad\":\"{pad}\","), 1);
    let done = format!("data: [DONE]{eol}{eol}");
    (
        format!("{token}{usage_event}{eol}{eol}{done}"),
        format!("{token}{done}"),
    )
}

/// Feeds `input` cut at `cuts`; returns the relayed bytes, the usage events
/// and whether every relayed slice points into the input chunks.
fn run(tap: &mut SseTap, input: &[u8], cuts: &[usize]) -> (Vec<u8>, Vec<Usage>, bool) {
    let mut chunks = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain([&input.len()]) {
        let cut = cut.clamp(start, input.len());
        chunks.push(Bytes::copy_from_slice(&input[start..cut]));
        start = cut;
    }
    let mut out = Vec::new();
    let mut seen = Seen::default();
    for chunk in &chunks {
        tap.feed(chunk.clone(), &mut out, &mut seen);
    }
    tap.finish(&mut out);
    let uncopied = out.iter().all(|piece| {
        chunks.iter().any(|c| {
            let (c, p) = (c.as_ptr_range(), piece.as_ptr_range());
            c.start <= p.start && p.end <= c.end
        })
    });
    let bytes = out.iter().flat_map(|b| b.iter().copied()).collect();
    (bytes, seen.usage_events, uncopied)
}

#[test]
fn strips_the_usage_event_inside_one_chunk_by_slicing() {
    let (input, expected) = stream(3, "\n");
    let mut tap = SseTap::new(true);
    let (out, usages, uncopied) = run(&mut tap, input.as_bytes(), &[]);
    assert_eq!(String::from_utf8(out).unwrap(), expected);
    assert_eq!(usages, [usage()]);
    assert_eq!(tap.last_usage(), Some(usage()));
    assert!(uncopied);
}

#[test]
fn observes_without_stripping_and_holds_nothing() {
    let (input, _) = stream(2, "\r\n");
    let mut tap = SseTap::new(false);
    let mut out = Vec::new();
    let mut seen = Seen::default();
    for (i, byte) in input.as_bytes().chunks(1).enumerate() {
        tap.feed(Bytes::copy_from_slice(byte), &mut out, &mut seen);
        assert_eq!(out.len(), i + 1, "every byte is relayed at once");
        assert_eq!(tap.held(), 0);
    }
    assert_eq!(seen.usage_events, [usage()]);
}

#[test]
fn a_long_unfinished_event_is_relayed_as_it_comes() {
    let big = format!("data: {}\n", "x".repeat(MAX_HELD_EVENT));
    let input = format!("{big}\n{USAGE_EVENT}\n\n");
    let mut tap = SseTap::new(true);
    let mut out = Vec::new();
    let mut seen = Seen::default();
    let mut relayed = 0;
    for chunk in input.as_bytes().chunks(1000) {
        tap.feed(Bytes::copy_from_slice(chunk), &mut out, &mut seen);
        relayed += out.drain(..).map(|b| b.len()).sum::<usize>();
        assert!(tap.held() <= MAX_HELD_EVENT);
    }
    tap.finish(&mut out);
    relayed += out.drain(..).map(|b| b.len()).sum::<usize>();
    assert_eq!(relayed, big.len() + 1, "only the usage event was cut");
    assert_eq!(seen.usage_events, [usage()]);
}

#[test]
fn an_observer_failure_relays_the_rest_unchanged() {
    // The line shows the key, so the observer must read it, and it is
    // longer than the observer takes.
    let line = format!("data: \"usage\" {}", "y".repeat(super::OBSERVER_LIMIT + 1));
    let input = format!("{line}\n\n{USAGE_EVENT}\n\n");
    let mut tap = SseTap::new(true);
    let (out, usages, _) = run(&mut tap, input.as_bytes(), &[10, 5000]);
    assert_eq!(out, input.as_bytes());
    assert!(usages.is_empty());
}

#[test]
fn an_event_without_usage_whole_in_one_chunk_is_not_parsed() {
    // Longer than the observer takes: parsed, it would end the observation
    // (as above); skipped, the usage event after it is still found.
    let line = format!("data: {}", "y".repeat(super::OBSERVER_LIMIT + 1));
    let input = format!("{line}\n\n{USAGE_EVENT}\n\n");
    let mut tap = SseTap::new(true);
    let (out, usages, uncopied) = run(&mut tap, input.as_bytes(), &[line.len() + 2]);
    assert_eq!(out, format!("{line}\n\n").as_bytes());
    assert_eq!(usages, [usage()]);
    assert!(uncopied);
}

#[test]
fn usage_is_found_whatever_the_events_around_it_look_like() {
    // Token events with `"usage":null` (what providers send once usage is
    // asked for), a comment, and the usage event's JSON split over two data
    // lines between the key and its colon: no line shows `"usage":`.
    let token = "data: {\"choices\":[{\"delta\":{\"content\":\"t\"}}],\"usage\":null}\n\n";
    let split = "data: {\"choices\":[],\"usage\"\ndata: :{\"prompt_tokens\":2,\
        \"completion_tokens\":3,\"completion_tokens_details\":{\"reasoning_tokens\":1}}}\n\n";
    let input = format!("{token}: keep-alive\n\n{token}{split}data: [DONE]\n\n");
    let expected = format!("{token}: keep-alive\n\n{token}data: [DONE]\n\n");
    let mut tap = SseTap::new(true);
    let (out, usages, uncopied) = run(&mut tap, input.as_bytes(), &[]);
    assert_eq!(String::from_utf8(out).unwrap(), expected);
    assert_eq!(usages, [usage()]);
    assert!(uncopied);
}

#[test]
fn an_event_spanning_chunks_without_the_key_is_never_observed() {
    // A 64 KiB event cut into three reads: kept aside as slices, never
    // copied into the observer, and dropped at its end; the usage event
    // after it is still found.
    let big = format!("data: {{\"content\":\"{}\"}}\n\n", "x".repeat(64 * 1024));
    let input = format!("{big}{USAGE_EVENT}\n\n");
    for strip in [false, true] {
        let mut tap = SseTap::new(strip);
        let mut out = Vec::new();
        let mut seen = Seen::default();
        for chunk in [&input[..20_000], &input[20_000..50_000]] {
            tap.feed(
                Bytes::copy_from_slice(chunk.as_bytes()),
                &mut out,
                &mut seen,
            );
            assert_eq!(tap.observer_buffered(), 0, "nothing copied");
        }
        assert_eq!(tap.unobserved(), 50_000);
        tap.feed(
            Bytes::copy_from_slice(&input.as_bytes()[50_000..]),
            &mut out,
            &mut seen,
        );
        assert_eq!(tap.unobserved(), 0);
        assert_eq!(tap.observer_buffered(), 0);
        assert_eq!(seen.usage_events, [usage()]);
    }
}

#[test]
fn a_long_usage_event_is_found_past_sparse_or_dense_quotes() {
    // A usage event whose one data line is long enough to be searched quote
    // by quote, with its key after a long quote-free string or after quotes
    // dense enough to send the search back to memmem; whole in a chunk or
    // cut anywhere around the key, and with every line ending.
    let quiet = "q".repeat(3 * super::quoted_key::LONG);
    let dense = "\\\"a".repeat(super::quoted_key::LONG);
    for pad in [quiet, dense] {
        for eol in ["\n", "\r", "\r\n"] {
            let (input, stripped) = padded_usage_stream(&pad, eol);
            let usage_event = input.find("data: {\"pad\"").unwrap();
            let key = input.find("\"usage\"").unwrap();
            for cut in [0, usage_event + 1, key - 3, key + 3, key + 100] {
                for strip in [false, true] {
                    let mut tap = SseTap::new(strip);
                    let (out, usages, _) = run(&mut tap, input.as_bytes(), &[cut]);
                    assert_eq!(usages, [usage()], "cut at {cut}, {eol:?}");
                    let expected = if strip { &stripped } else { &input };
                    assert_eq!(&String::from_utf8(out).unwrap(), expected, "cut at {cut}");
                }
            }
        }
    }
}

#[test]
fn an_unfinished_event_longer_than_the_bound_is_shown_to_the_observer() {
    let big = format!("data: {}\n\n", "x".repeat(MAX_UNOBSERVED + 10));
    let input = format!("{big}{USAGE_EVENT}\n\n");
    let mut tap = SseTap::new(true);
    let mut out = Vec::new();
    let mut seen = Seen::default();
    let mut most = 0;
    for chunk in input.as_bytes().chunks(64 * 1024) {
        tap.feed(Bytes::copy_from_slice(chunk), &mut out, &mut seen);
        most = most.max(tap.unobserved());
    }
    tap.finish(&mut out);
    assert!(most <= MAX_UNOBSERVED, "{most}");
    assert_eq!(seen.usage_events, [usage()]);
    let relayed: usize = out.iter().map(Bytes::len).sum();
    assert_eq!(relayed, big.len(), "only the usage event was cut");
}

#[test]
fn the_key_is_found_across_any_two_cuts() {
    // A usage event long enough before its key to be kept aside (its start
    // in the first chunk is over `MIN_UNOBSERVED`), cut at every pair of
    // points around the key, so the key straddles two or three parts (some
    // of one byte).
    let pad = "p".repeat(super::sse_tap::MIN_UNOBSERVED + 100);
    let (input, stripped) = padded_usage_stream(&pad, "\n");
    let key = input.find("\"usage\"").unwrap();
    for first in key - 2..key + 9 {
        for second in first..key + 9 {
            for strip in [false, true] {
                let mut tap = SseTap::new(strip);
                let (out, usages, uncopied) = run(&mut tap, input.as_bytes(), &[10, first, second]);
                assert_eq!(usages, [usage()], "cuts at {first}, {second}");
                assert!(uncopied);
                let expected = if strip { &stripped } else { &input };
                assert_eq!(&String::from_utf8(out).unwrap(), expected);
            }
        }
    }
}

proptest! {
    #[test]
    fn stripping_is_split_point_independent(
        tokens in 0usize..6,
        eol in prop::sample::select(vec!["\n", "\r\n", "\r"]),
        cuts in prop::collection::vec(0usize..2000, 0..40),
        strip in any::<bool>(),
    ) {
        let (input, stripped) = stream(tokens, eol);
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut tap = SseTap::new(strip);
        let (out, usages, uncopied) = run(&mut tap, input.as_bytes(), &cuts);
        let expected = if strip { stripped } else { input };
        prop_assert_eq!(String::from_utf8(out).unwrap(), expected);
        prop_assert_eq!(usages, vec![usage()]);
        prop_assert!(uncopied);
    }
}

fn target(config: &AdapterConfig, kind: AdapterKind) -> TunnelTarget<'_> {
    TunnelTarget {
        config,
        kind,
        request_timeout_ms: 7,
    }
}

fn request() -> ProviderTunnelRequest {
    ProviderTunnelRequest {
        adapter: "a".into(),
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        ..Default::default()
    }
}

fn code(result: Result<super::request::Prepared, proto::v1::ExecutionFailure>) -> FailureCode {
    result.unwrap_err().code()
}

#[test]
fn requests_are_checked_before_any_provider_call() {
    let mut config = AdapterConfig::new("a", BaseUrl::parse("http://h:1").unwrap());
    config.targets = vec!["m".into()];
    let openai = AdapterKind::OpenaiCompat;
    assert_eq!(
        code(prepare(None, &mut request())),
        FailureCode::UnknownAdapter
    );
    assert_eq!(
        code(prepare(Some(target(&config, openai)), &mut request())),
        FailureCode::Unsupported,
        "supports_tunnel is off"
    );
    config.supports_tunnel = true;
    assert_eq!(
        code(prepare(
            Some(target(&config, AdapterKind::Ollama)),
            &mut request()
        )),
        FailureCode::Unsupported
    );
    let t = Some(target(&config, openai));
    let bad = [
        ProviderTunnelRequest {
            target: "other".into(),
            ..request()
        },
        ProviderTunnelRequest {
            response_stall_timeout_ms: super::MAX_STALL_TIMEOUT_MS + 1,
            ..request()
        },
        ProviderTunnelRequest {
            method: "PO ST".into(),
            ..request()
        },
        ProviderTunnelRequest {
            path: "v1/x".into(),
            ..request()
        },
        ProviderTunnelRequest {
            path: "/v1\r\nX: y".into(),
            ..request()
        },
        ProviderTunnelRequest {
            headers: vec![Header {
                name: "x".into(),
                value: Bytes::from_static(b"a\nb"),
            }],
            ..request()
        },
    ];
    let codes: Vec<_> = bad
        .into_iter()
        .map(|mut r| code(prepare(t, &mut r)))
        .collect();
    assert_eq!(codes[0], FailureCode::UnknownTarget);
    assert!(
        codes[1..].iter().all(|c| *c == FailureCode::InvalidRequest),
        "{codes:?}"
    );
    let ok = prepare(t, &mut request()).unwrap();
    assert_eq!(
        super::effective_stall_timeout_ms(&request()),
        Some(super::DEFAULT_STALL_TIMEOUT_MS)
    );
    assert_eq!(ok.hard_timeout_ms, 7);
}

#[test]
fn request_headers_never_override_configured_ones() {
    let mut config = AdapterConfig::new("a", BaseUrl::parse("http://h:1").unwrap());
    config.supports_tunnel = true;
    config.headers = vec![(
        Bytes::from_static(b"Authorization"),
        Bytes::from_static(b"Bearer node"),
    )];
    let header = |name: &'static str, value: &'static str| Header {
        name: name.into(),
        value: Bytes::from_static(value.as_bytes()),
    };
    let mut req = ProviderTunnelRequest {
        headers: vec![
            header("authorization", "Bearer client"),
            header("content-type", "application/json"),
            header("connection", "close"),
            header("accept-encoding", "gzip"),
        ],
        extract_usage: true,
        hard_timeout_ms: 3,
        ..request()
    };
    let ok = prepare(Some(target(&config, AdapterKind::Vllm)), &mut req).unwrap();
    let names: Vec<_> = ok
        .request
        .headers
        .iter()
        .map(|(n, v)| {
            format!(
                "{}={}",
                String::from_utf8_lossy(n),
                String::from_utf8_lossy(v)
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "Authorization=Bearer node",
            "content-type=application/json",
            "accept-encoding=identity"
        ]
    );
    assert_eq!(ok.hard_timeout_ms, 3);
    assert_eq!(ok.request.method, "POST");
}

#[test]
fn limits_from_config_fit_the_frame() {
    let config = proto::v1::NodeConfigPayload {
        max_body_chunk: 1 << 30,
        ..Default::default()
    };
    let limits = TunnelLimits::from_config(&config, 1024);
    assert_eq!(limits.initial_window, super::DEFAULT_INITIAL_WINDOW);
    assert_eq!(limits.max_body_chunk, 1024 - 64);
    let req = ProviderTunnelRequest {
        initial_window: 5,
        ..request()
    };
    assert_eq!(limits.window_for(req.initial_window), 5);
}
