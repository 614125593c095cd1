//! Every SSE parsing rule, checked through both fronts (observer and
//! decoder), each fed the input whole, byte by byte, and split at every
//! offset: all must agree.

use bytes::{Bytes, BytesMut};
use framing::sse::{
    DEFAULT_MAX_DATA_LEN, DEFAULT_MAX_LINE_LEN, SseConfig, SseDecoder, SseError, SseEvent, SseItem,
    SseObserver,
};

/// What a parser made of a whole stream: items, the error that stopped it,
/// and whether an unterminated event was left at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    items: Vec<SseItem>,
    error: Option<SseError>,
    truncated: bool,
}

fn observe(cfg: SseConfig, chunks: &[&[u8]]) -> Outcome {
    let mut obs = SseObserver::with_config(cfg);
    let mut items = Vec::new();
    for chunk in chunks {
        if let Err(error) = obs.feed(chunk, |item| items.push(item.to_owned_item())) {
            return Outcome {
                items,
                error: Some(error),
                truncated: false,
            };
        }
    }
    let truncated = obs.finish();
    Outcome {
        items,
        error: None,
        truncated,
    }
}

fn decode(cfg: SseConfig, chunks: &[&[u8]]) -> Outcome {
    let mut dec = SseDecoder::with_config(cfg);
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match dec.decode_item(&mut buf) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => break,
                Err(error) => {
                    return Outcome {
                        items,
                        error: Some(error),
                        truncated: false,
                    };
                }
            }
        }
    }
    let truncated = dec.is_mid_event();
    assert_eq!(dec.decode_item_eof(&mut buf), Ok(None));
    assert!(buf.is_empty() && !dec.is_mid_event());
    Outcome {
        items,
        error: None,
        truncated,
    }
}

/// Parses `input` every way and checks all ways agree.
fn parse_with(cfg: SseConfig, input: &[u8]) -> Outcome {
    let whole = observe(cfg, &[input]);
    let bytewise: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(observe(cfg, &bytewise), whole, "observer, byte by byte");
    assert_eq!(decode(cfg, &[input]), whole, "decoder, whole");
    assert_eq!(decode(cfg, &bytewise), whole, "decoder, byte by byte");
    for at in 1..input.len() {
        let (a, b) = input.split_at(at);
        assert_eq!(observe(cfg, &[a, b]), whole, "observer split at {at}");
        assert_eq!(decode(cfg, &[a, b]), whole, "decoder split at {at}");
    }
    whole
}

fn parse(input: &[u8]) -> Vec<SseItem> {
    let out = parse_with(SseConfig::new(), input);
    assert_eq!(out.error, None);
    out.items
}

fn ev(data: &'static str) -> SseItem {
    SseItem::Event(SseEvent::new(data))
}

fn ev_full(event: Option<&'static str>, data: &'static str, id: Option<&'static str>) -> SseItem {
    SseItem::Event(SseEvent {
        event: event.map(Bytes::from),
        data: Bytes::from_static(data.as_bytes()),
        id: id.map(Bytes::from),
    })
}

#[test]
fn line_endings_lf_crlf_cr_and_mixed() {
    assert_eq!(parse(b"data: a\n\n"), [ev("a")]);
    assert_eq!(parse(b"data: a\r\n\r\n"), [ev("a")]);
    assert_eq!(parse(b"data: a\r\r"), [ev("a")]);
    assert_eq!(parse(b"data: a\rdata: b\r\ndata: c\n\r\n"), [ev("a\nb\nc")]);
}

#[test]
fn cr_at_chunk_end_then_lf_is_one_line_ending() {
    // postmortem-style guard: treating the LF as a second ending would make
    // a blank line and dispatch "a" on its own.
    let chunks: [&[u8]; 2] = [b"data: a\r", b"\ndata: b\r\n\r\n"];
    let want = [ev("a\nb")];
    assert_eq!(observe(SseConfig::new(), &chunks).items, want);
    assert_eq!(decode(SseConfig::new(), &chunks).items, want);
    assert_eq!(parse(b"data: a\r\ndata: b\r\n\r\n"), want);
}

#[test]
fn blank_line_dispatch_is_immediate_on_cr() {
    let mut obs = SseObserver::new();
    let mut n = 0;
    obs.feed(b"data: a\r\r", |_| n += 1).unwrap();
    assert_eq!(n, 1, "no need to wait for a possible LF");
}

#[test]
fn comments_are_skipped_or_observed() {
    let input = b": ping\n:\n:  two spaces\ndata: x\n\n";
    assert_eq!(parse(input), [ev("x")]);
    let out = parse_with(SseConfig::new().with_comments(true), input);
    let comment = |c: &'static str| SseItem::Comment(Bytes::from_static(c.as_bytes()));
    assert_eq!(
        out.items,
        [
            comment("ping"),
            comment(""),
            comment(" two spaces"),
            ev("x")
        ]
    );
}

#[test]
fn event_with_only_comments_is_not_dispatched() {
    assert_eq!(parse(b": a\n: b\n\n: c\n\n"), []);
}

#[test]
fn multi_line_data_joined_with_lf() {
    assert_eq!(
        parse(b"data: a\ndata: b\ndata:\ndata: c\n\n"),
        [ev("a\nb\n\nc")]
    );
}

#[test]
fn data_field_without_colon_is_empty_data() {
    assert_eq!(parse(b"data\n\n"), [ev("")]);
    assert_eq!(parse(b"data\ndata\n\n"), [ev("\n")]);
    assert_eq!(parse(b"data:\n\n"), [ev("")]);
}

#[test]
fn only_one_space_after_colon_is_dropped() {
    assert_eq!(parse(b"data:x\n\n"), [ev("x")]);
    assert_eq!(parse(b"data: x\n\n"), [ev("x")]);
    assert_eq!(parse(b"data:  x \n\n"), [ev(" x ")]);
    assert_eq!(parse(b"data:\tx\n\n"), [ev("\tx")]);
    assert_eq!(parse(b"data: a: b\n\n"), [ev("a: b")]);
}

#[test]
fn field_names_are_exact() {
    assert_eq!(parse(b"Data: x\n\n"), []);
    assert_eq!(parse(b"data : x\n\n"), []);
    assert_eq!(parse(b" data: x\n\n"), []);
    assert_eq!(parse(b"datas: x\nfoo: y\nfoo\n\n"), []);
}

#[test]
fn event_type_set_and_reset() {
    let input = b"event: a\ndata: 1\n\ndata: 2\n\nevent: b\n\ndata: 3\n\nevent:\ndata: 4\n\n";
    assert_eq!(
        parse(input),
        [ev_full(Some("a"), "1", None), ev("2"), ev("3"), ev("4")]
    );
}

#[test]
fn id_persists_resets_and_ignores_nul() {
    let input =
        b"id: 1\ndata: a\n\ndata: b\n\nid: x\0y\ndata: c\n\nid\ndata: d\n\nid: 2\n\ndata: e\n\n";
    assert_eq!(
        parse(input),
        [
            ev_full(None, "a", Some("1")),
            ev_full(None, "b", Some("1")),
            ev_full(None, "c", Some("1")),
            ev_full(None, "d", None),
            ev_full(None, "e", Some("2")),
        ]
    );
}

#[test]
fn retry_only_for_ascii_digits() {
    for (input, want) in [
        (&b"retry: 1500\n\n"[..], Some(1500)),
        (b"retry:1500\n", Some(1500)),
        (b"retry: 15x\n", None),
        (b"retry: -1\n", None),
        (b"retry:\n", None),
        (b"retry: 99999999999999999999\n", None),
        (b"retry: 1\nretry: x\n", Some(1)),
    ] {
        let mut obs = SseObserver::new();
        obs.feed(input, |_| {}).unwrap();
        assert_eq!(obs.retry(), want, "{input:?}");
        let mut dec = SseDecoder::new();
        assert_eq!(dec.decode(&mut BytesMut::from(input)), Ok(None));
        assert_eq!(dec.retry(), want, "{input:?}");
    }
    assert_eq!(parse(b"retry: 5\ndata: x\n\n"), [ev("x")]);
}

#[test]
fn leading_bom_is_dropped_once() {
    assert_eq!(parse(b"\xEF\xBB\xBFdata: a\n\n"), [ev("a")]);
    // A second BOM is content: the line's field name is "\u{FEFF}data".
    assert_eq!(
        parse(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n"),
        [ev("b")]
    );
    // Not at the start: not a BOM.
    assert_eq!(parse(b"\n\xEF\xBB\xBFdata: a\n\n"), []);
    // A partial BOM is the start of an ignored line.
    assert_eq!(parse(b"\xEF\xBBdata: a\n\ndata: b\n\n"), [ev("b")]);
    assert_eq!(parse(b"\xEF\xBB\xBF"), []);
}

#[test]
fn trailing_event_without_blank_line_is_not_dispatched() {
    let out = parse_with(SseConfig::new(), b"data: a\n\ndata: b\n");
    assert_eq!((out.items, out.truncated), (vec![ev("a")], true));
    let out = parse_with(SseConfig::new(), b"data: a\n\ndata: b");
    assert_eq!((out.items, out.truncated), (vec![ev("a")], true));
    let out = parse_with(SseConfig::new(), b"data: a\n\n");
    assert!(!out.truncated);
}

#[test]
fn done_sentinel() {
    let items = parse(b"data: {\"x\":1}\n\ndata: [DONE]\n\n");
    let done: Vec<bool> = items
        .iter()
        .map(|i| matches!(i, SseItem::Event(e) if e.is_done()))
        .collect();
    assert_eq!(done, [false, true]);
    assert!(SseEvent::done().as_event_ref().is_done());
    assert!(!SseEvent::new("[DONE] ").is_done());
}

#[test]
fn openai_and_anthropic_shaped_streams() {
    let openai = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n\
        data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n\
        data: [DONE]\n\n";
    let items = parse(openai);
    assert_eq!(items.len(), 3);
    let anthropic = b"event: message_start\ndata: {\"type\":\"message_start\"}\n\n\
        event: ping\ndata: {\"type\": \"ping\"}\n\n\
        event: message_delta\ndata: {\"usage\":{\"output_tokens\":15}}\n\n";
    let types: Vec<_> = parse(anthropic)
        .into_iter()
        .map(|i| match i {
            SseItem::Event(e) => e.event.unwrap(),
            SseItem::Comment(_) => unreachable!(),
        })
        .collect();
    assert_eq!(types, ["message_start", "ping", "message_delta"]);
}

#[test]
fn default_limits_are_the_documented_consts() {
    let cfg = SseConfig::default();
    assert_eq!(
        (cfg.max_line_len, cfg.max_data_len),
        (DEFAULT_MAX_LINE_LEN, DEFAULT_MAX_DATA_LEN)
    );
    assert!(!cfg.comments);
}

#[test]
fn line_limit_at_bound_and_one_past() {
    let cfg = SseConfig::new().with_max_line_len(10);
    // "data: " + 4 bytes = 10: accepted, with every line ending.
    for ending in ["\n", "\r\n", "\r"] {
        let input = format!("data: 1234{ending}{ending}");
        let out = parse_with(cfg, input.as_bytes());
        assert_eq!(
            (out.items, out.error),
            (vec![ev("1234")], None),
            "{ending:?}"
        );
    }
    let too_long = SseError::LineTooLong { limit: 10 };
    for input in [
        &b"data: 12345\n\n"[..],
        b"data: 12345",
        b": a comment over it\n",
        b"unknown: field over it\n",
        b"data: 1\n\ndata: 12345\n\n",
    ] {
        let out = parse_with(cfg, input);
        assert_eq!(out.error, Some(too_long.clone()), "{input:?}");
    }
    let out = parse_with(cfg, b"data: 1\n\ndata: 12345\n\n");
    assert_eq!(
        out.items,
        [ev("1")],
        "events before the long line are reported"
    );
}

#[test]
fn data_limit_at_bound_and_one_past() {
    let cfg = SseConfig::new().with_max_data_len(5);
    let out = parse_with(cfg, b"data: 12345\n\n");
    assert_eq!((out.items, out.error), (vec![ev("12345")], None));
    let out = parse_with(cfg, b"data: 12\ndata: 45\n\n");
    assert_eq!((out.items, out.error), (vec![ev("12\n45")], None));
    let too_large = SseError::DataTooLarge { limit: 5 };
    assert_eq!(
        parse_with(cfg, b"data: 123456\n\n").error,
        Some(too_large.clone())
    );
    assert_eq!(
        parse_with(cfg, b"data: 123\ndata: 45\n\n").error,
        Some(too_large.clone())
    );
    // The limit is per event.
    let out = parse_with(cfg, b"data: 12345\n\ndata: 12345\n\n");
    assert_eq!((out.items.len(), out.error), (2, None));
    assert_eq!(too_large.to_string(), "SSE event data longer than 5 bytes");
}

#[test]
fn errors_convert_into_the_crate_error() {
    let err: framing::Error = SseError::LineTooLong { limit: 1 }.into();
    assert_eq!(err, framing::Error::Sse(SseError::LineTooLong { limit: 1 }));
}
