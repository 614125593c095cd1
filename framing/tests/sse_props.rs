//! SSE properties: encoder → parser round trip, split-point independence of
//! both fronts against a naive whole-input model of the spec, and arbitrary
//! bytes never panic nor grow memory past the limits. Seeds are fixed, so
//! every run checks the same cases.

use bytes::{Bytes, BytesMut};
use framing::sse::{
    SseConfig, SseDecoder, SseError, SseEvent, SseItem, SseObserver, encode_comment, encode_event,
    encode_retry,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed};

fn config(cases: u32) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(0x05EE_05EE),
        failure_persistence: None,
        ..Config::default()
    }
}

/// The spec's algorithm, written for clarity over a whole input: split
/// into lines, interpret them in order, drop the unterminated tail.
fn model(input: &[u8], comments: bool) -> Vec<SseItem> {
    let mut rest = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut lines = Vec::new();
    while let Some(at) = rest.iter().position(|&b| b == b'\r' || b == b'\n') {
        lines.push(&rest[..at]);
        let crlf = rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n');
        rest = &rest[at + 1 + usize::from(crlf)..];
    }
    let (mut data, mut event, mut id) = (Vec::new(), Vec::new(), Vec::new());
    let mut has_data = false;
    let mut out = Vec::new();
    for line in lines {
        if line.is_empty() {
            if has_data {
                let non_empty = |v: &[u8]| (!v.is_empty()).then(|| Bytes::copy_from_slice(v));
                out.push(SseItem::Event(SseEvent {
                    event: non_empty(&event),
                    data: Bytes::copy_from_slice(&data),
                    id: non_empty(&id),
                }));
            }
            data.clear();
            event.clear();
            has_data = false;
            continue;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"" if comments => out.push(SseItem::Comment(Bytes::copy_from_slice(value))),
            b"data" => {
                if has_data {
                    data.push(b'\n');
                }
                data.extend_from_slice(value);
                has_data = true;
            }
            b"event" => event = value.to_vec(),
            b"id" if !value.contains(&0) => id = value.to_vec(),
            _ => {}
        }
    }
    out
}

/// Cuts `input` at the given points (any order, duplicates allowed).
fn partition<'a>(input: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
    at.extend([0, input.len()]);
    at.sort_unstable();
    at.windows(2).map(|w| &input[w[0]..w[1]]).collect()
}

/// Feeds chunks to an observer; checks its copy-aside memory on the way.
fn observe(cfg: SseConfig, chunks: &[&[u8]]) -> (Vec<SseItem>, Option<SseError>) {
    let mut obs = SseObserver::with_config(cfg);
    let mut items = Vec::new();
    for chunk in chunks {
        let res = obs.feed(chunk, |item| items.push(item.to_owned_item()));
        assert!(obs.buffered() <= cfg.max_line_len + cfg.max_data_len);
        if let Err(err) = res {
            return (items, Some(err));
        }
    }
    (items, None)
}

/// Feeds chunks to a decoder; checks what it leaves in the buffer.
fn decode(cfg: SseConfig, chunks: &[&[u8]]) -> (Vec<SseItem>, Option<SseError>) {
    let mut dec = SseDecoder::with_config(cfg);
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match dec.decode_item(&mut buf) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => break,
                Err(err) => return (items, Some(err)),
            }
        }
        assert!(buf.len() <= cfg.max_line_len, "only a partial line is left");
    }
    (items, None)
}

/// Bytes an SSE parser has opinions about, plus a few it has not.
fn sse_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => prop::sample::select(b"data:eventidry \r\n\n:0\x00\xEF\xBB\xBFx".to_vec()),
        1 => any::<u8>(),
    ]
}

/// Streams made of plausible lines (field names, separators, endings).
fn sse_stream() -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(vec![
        "data",
        "event",
        "id",
        "retry",
        "",
        "dat",
        "datas",
        "foo",
        "\u{FEFF}data",
    ]);
    let sep = prop::sample::select(vec![":", ": ", ":  ", "", ":x:"]);
    let value = prop::collection::vec(
        sse_byte().prop_filter("no EOL", |b| *b != b'\r' && *b != b'\n'),
        0..6,
    );
    let ending = prop::sample::select(vec!["\n", "\r", "\r\n", "\n\n", "\r\n\r\n", "\r\r"]);
    let line = (name, sep, value, ending).prop_map(|(n, s, v, e)| {
        let mut l = Vec::from(n.as_bytes());
        l.extend_from_slice(s.as_bytes());
        l.extend(v);
        l.extend_from_slice(e.as_bytes());
        l
    });
    (
        any::<bool>(),
        prop::collection::vec(line, 0..16),
        prop::collection::vec(sse_byte(), 0..4),
    )
        .prop_map(|(bom, lines, tail)| {
            let mut s = if bom {
                b"\xEF\xBB\xBF".to_vec()
            } else {
                Vec::new()
            };
            s.extend(lines.concat());
            s.extend(tail);
            s
        })
}

fn any_stream() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![sse_stream(), prop::collection::vec(sse_byte(), 0..96)]
}

fn cuts() -> impl Strategy<Value = Vec<Index>> {
    prop::collection::vec(any::<Index>(), 0..12)
}

proptest! {
    #![proptest_config(config(2000))]

    /// (b) Any partition gives the model's events, through both fronts.
    #[test]
    fn split_point_independence(input in any_stream(), cuts in cuts(), comments in any::<bool>()) {
        let cfg = SseConfig::new().with_comments(comments);
        let want = model(&input, comments);
        let chunks = partition(&input, &cuts);
        prop_assert_eq!(observe(cfg, &[&input]), (want.clone(), None));
        prop_assert_eq!(observe(cfg, &chunks), (want.clone(), None));
        prop_assert_eq!(decode(cfg, &[&input]), (want.clone(), None));
        prop_assert_eq!(decode(cfg, &chunks), (want, None));
    }

    /// (c) Arbitrary bytes under tight limits: no panic, bounded memory
    /// (asserted inside the feeders), and the same events and error however
    /// the bytes are split.
    #[test]
    fn arbitrary_bytes_bounded(
        input in prop_oneof![any_stream(), prop::collection::vec(any::<u8>(), 0..256)],
        cuts in cuts(),
        max_line in 0usize..24,
        max_data in 0usize..24,
        comments in any::<bool>(),
    ) {
        let cfg = SseConfig::new()
            .with_max_line_len(max_line)
            .with_max_data_len(max_data)
            .with_comments(comments);
        let whole = observe(cfg, &[&input]);
        let chunks = partition(&input, &cuts);
        prop_assert_eq!(&observe(cfg, &chunks), &whole);
        prop_assert_eq!(&decode(cfg, &[&input]), &whole);
        prop_assert_eq!(&decode(cfg, &chunks), &whole);
        if whole.1.is_none() {
            prop_assert_eq!(whole.0, model(&input, comments));
        }
    }
}

/// Event types and ids the encoder accepts.
fn field(extra_banned: u8) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        any::<u8>().prop_filter("encodable", move |b| {
            ![b'\r', b'\n', extra_banned].contains(b)
        }),
        0..8,
    )
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![3 => any::<u8>(), 1 => prop::sample::select(b"\r\n ".to_vec())],
        0..48,
    )
}

fn normalize_newlines(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        match data[i] {
            b'\r' if data.get(i + 1) == Some(&b'\n') => {
                out.push(b'\n');
                i += 1;
            }
            b'\r' => out.push(b'\n'),
            b => out.push(b),
        }
        i += 1;
    }
    out
}

type Spec = (Option<Vec<u8>>, Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>);

proptest! {
    #![proptest_config(config(600))]

    /// (a) Whatever the encoder writes, both fronts read back, in any split:
    /// data with line breaks normalised to `\n`, empty event type as `None`,
    /// the id carried forward until changed. Comments and `retry` blocks in
    /// between change nothing.
    #[test]
    fn encoder_round_trip(
        events in prop::collection::vec(
            (prop::option::of(field(b'\r')), data(), prop::option::of(field(0)), prop::option::of(data())),
            0..8,
        ),
        cuts in cuts(),
    ) {
        let events: Vec<Spec> = events;
        let mut wire = BytesMut::new();
        let mut want = Vec::new();
        let mut id = None;
        for (i, (event, data, new_id, comment)) in events.into_iter().enumerate() {
            if let Some(text) = comment {
                encode_comment(&text, &mut wire);
            }
            if i % 3 == 2 {
                encode_retry(i as u64, &mut wire);
            }
            let ev = SseEvent {
                event: event.map(Bytes::from),
                data: Bytes::from(data),
                id: new_id.map(Bytes::from),
            };
            encode_event(&ev, &mut wire).unwrap();
            if let Some(new_id) = &ev.id {
                id = (!new_id.is_empty()).then(|| new_id.clone());
            }
            want.push(SseItem::Event(SseEvent {
                event: ev.event.filter(|e| !e.is_empty()),
                data: Bytes::from(normalize_newlines(&ev.data)),
                id: id.clone(),
            }));
        }
        let chunks = partition(&wire, &cuts);
        let cfg = SseConfig::new();
        prop_assert_eq!(observe(cfg, &chunks), (want.clone(), None));
        prop_assert_eq!(decode(cfg, &chunks), (want.clone(), None));
        prop_assert_eq!(model(&wire, false), want);
    }
}

/// Every two-way and three-way split of a stream that exercises the tricky
/// rules agrees with the model, in both fronts.
#[test]
fn exhaustive_three_way_splits() {
    let input: &[u8] = b"\xEF\xBB\xBF: hi\r\nevent: e\rdata:a\r\ndata\nid: 1\0\nid: 7\n\r\
        retry: 10\nfoo\n\ndata:  b\r\r";
    for comments in [false, true] {
        let cfg = SseConfig::new().with_comments(comments);
        let want = (model(input, comments), None);
        assert_eq!(want.0.len(), 2 + usize::from(comments));
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let chunks = [&input[..i], &input[i..j], &input[j..]];
                assert_eq!(observe(cfg, &chunks), want, "observer {i} {j}");
                assert_eq!(decode(cfg, &chunks), want, "decoder {i} {j}");
            }
        }
    }
}
