//! Fuzz entry points, shared by the cargo-fuzz targets in `framing/fuzz/` and
//! by the stable-toolchain smoke test `framing/tests/fuzz_smoke.rs`.
//!
//! Each function takes arbitrary bytes, drives one decoder the way a socket
//! would (the first byte picks the read size, so split points vary), and
//! panics only when an invariant breaks: a decoded value that does not
//! re-encode to itself, or a buffer that grows past its limit. Typed errors
//! are the expected answer to garbage and are not failures.

use bytes::BytesMut;

use crate::frame::{FrameDecoder, FrameEncoder};

/// Largest frame the fuzzed decoder accepts; small so limits are reached.
const FUZZ_MAX_FRAME_LEN: usize = 4096;

/// Splits `data` into its read size (from the first byte) and the stream.
fn read_size_and_stream(data: &[u8]) -> (usize, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (usize::from(*first) + 1, rest),
        None => (1, data),
    }
}

/// Frame decoder: decode, then re-encode every envelope and decode it again.
pub fn frame_decoder(data: &[u8]) {
    let (read, stream) = read_size_and_stream(data);
    let mut decoder = FrameDecoder::new(FUZZ_MAX_FRAME_LEN);
    let mut encoder = FrameEncoder::new(FUZZ_MAX_FRAME_LEN);
    let mut rx = BytesMut::new();
    for chunk in stream.chunks(read) {
        rx.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut rx) {
                Ok(Some(envelope)) => {
                    // Re-encoding drops unknown fields, so the result may be
                    // shorter than the input, never longer than the limit.
                    let wire = encoder
                        .encode(&envelope)
                        .expect("a decoded envelope re-encodes");
                    let mut again = BytesMut::from(&wire[..]);
                    let back = FrameDecoder::new(FUZZ_MAX_FRAME_LEN)
                        .decode(&mut again)
                        .expect("a re-encoded envelope decodes")
                        .expect("a re-encoded envelope is complete");
                    assert_eq!(back, envelope, "envelope did not round-trip");
                }
                Ok(None) => break,
                Err(_) => return, // the connection would be closed here
            }
        }
        assert!(
            rx.len() <= FUZZ_MAX_FRAME_LEN + usize::from(u8::MAX) + 1,
            "receive buffer grew past one frame plus one read"
        );
    }
}

/// SSE parser: the observer (chunks by reference) and the decoder (owned
/// buffer) must report the same items for the same stream, and every event
/// must survive an encode → decode round trip.
pub fn sse_parser(data: &[u8]) {
    use crate::sse::{SseConfig, SseDecoder, SseItem, SseObserver, encode_event};

    const MAX: usize = 4096;
    let config = SseConfig::new()
        .with_max_line_len(MAX)
        .with_max_data_len(MAX)
        .with_comments(true);
    let (read, stream) = read_size_and_stream(data);

    let mut observed = Vec::new();
    let mut observer = SseObserver::with_config(config);
    let mut observer_failed = false;
    for chunk in stream.chunks(read) {
        if observer
            .feed(chunk, |item| observed.push(item.to_owned_item()))
            .is_err()
        {
            observer_failed = true;
            break;
        }
        assert!(
            observer.buffered() <= 2 * MAX + 8,
            "observer buffered past its limits"
        );
    }

    let mut decoded = Vec::new();
    let mut decoder = SseDecoder::with_config(config);
    let mut rx = BytesMut::new();
    let mut decoder_failed = false;
    'feed: for chunk in stream.chunks(read) {
        rx.extend_from_slice(chunk);
        loop {
            match decoder.decode_item(&mut rx) {
                Ok(Some(item)) => decoded.push(item),
                Ok(None) => break,
                Err(_) => {
                    decoder_failed = true;
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(
        observer_failed, decoder_failed,
        "fronts disagree on an error"
    );
    assert_eq!(observed, decoded, "fronts disagree on the items");

    for item in decoded {
        let SseItem::Event(event) = item else {
            continue;
        };
        let mut wire = BytesMut::new();
        if encode_event(&event, &mut wire).is_err() {
            continue; // e.g. an event type with a newline cannot be encoded
        }
        let mut again = SseDecoder::new();
        let back = again
            .decode(&mut wire)
            .expect("an encoded event decodes")
            .expect("an encoded event is complete");
        assert_eq!(back.data, event.data, "event data did not round-trip");
        assert_eq!(back.event, event.event, "event type did not round-trip");
    }
}

/// HTTP request-head parser: split-point independence under limits, and a
/// parsed head written back parses to the same method, target and headers.
pub fn http_request_head(data: &[u8]) {
    use crate::http::{HeadLimits, HttpError, RequestHead, parse_request_head, write_request_head};
    type Parsed = (Vec<u8>, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);
    type HeadSummary = Result<Option<Parsed>, HttpError>;

    let limits = HeadLimits::DEFAULT;
    let (read, stream) = read_size_and_stream(data);
    let whole = parse_request_head(&mut BytesMut::from(stream), &limits);

    let mut rx = BytesMut::new();
    let mut split = Ok(None);
    for chunk in stream.chunks(read) {
        rx.extend_from_slice(chunk);
        split = parse_request_head(&mut rx, &limits);
        if !matches!(split, Ok(None)) {
            break;
        }
        assert!(
            rx.len() <= limits.effective_head_bytes() + usize::from(u8::MAX) + 1,
            "head buffer grew past its limit"
        );
    }
    // Bytes after a complete head may differ between the two runs, so compare
    // what was parsed, not the buffers.
    let summary = |r: &Result<Option<RequestHead>, HttpError>| -> HeadSummary {
        r.clone().map(|h| {
            h.map(|h| {
                (
                    h.method_bytes().to_vec(),
                    h.path().to_vec(),
                    h.headers()
                        .iter()
                        .map(|(n, v)| (n.to_vec(), v.to_vec()))
                        .collect(),
                )
            })
        })
    };
    if matches!(split, Ok(Some(_))) {
        assert_eq!(
            summary(&whole),
            summary(&split),
            "split reads changed the parsed head"
        );
    }

    let Ok(Some(head)) = split else { return };
    let (Ok(method), Ok(path)) = (
        std::str::from_utf8(head.method_bytes()),
        std::str::from_utf8(head.path()),
    ) else {
        return;
    };
    let mut wire = BytesMut::new();
    if write_request_head(&mut wire, method, path, head.headers().iter()).is_err() {
        return;
    }
    wire.extend_from_slice(b"\r\n");
    let back = parse_request_head(&mut wire, &limits)
        .expect("a written head parses")
        .expect("a written head is complete");
    assert_eq!(back.method_bytes(), head.method_bytes());
    assert_eq!(back.path(), head.path());
    assert!(
        back.headers().iter().eq(head.headers().iter()),
        "headers did not round-trip"
    );
}

/// Chunked decoder: the data it yields is the same whatever the read size,
/// and re-encoding it decodes to the same bytes.
pub fn chunked_decoder(data: &[u8]) {
    use crate::http::{BodyItem, ChunkedDecoder, ChunkedEncoder};

    let (read, stream) = read_size_and_stream(data);
    let decode_all = |read: usize| {
        let mut decoder = ChunkedDecoder::new();
        let mut rx = BytesMut::new();
        let mut out = Vec::new();
        for chunk in stream.chunks(read) {
            rx.extend_from_slice(chunk);
            loop {
                match decoder.decode(&mut rx) {
                    Ok(Some(BodyItem::Data(d))) => out.extend_from_slice(&d),
                    Ok(Some(BodyItem::End)) => return Ok((out, true)),
                    Ok(None) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok((out, false))
    };
    let split = decode_all(read);
    let whole = decode_all(stream.len().max(1));
    match (&split, &whole) {
        (Ok((a, true)), Ok((b, true))) => assert_eq!(a, b, "read size changed the body"),
        (Err(a), Err(b)) => assert_eq!(a, b, "read size changed the error"),
        _ => {}
    }

    let Ok((body, true)) = split else { return };
    let mut encoder = ChunkedEncoder::new();
    let mut wire = BytesMut::new();
    if let Some(frame) = encoder.encode(bytes::Bytes::from(body.clone())) {
        for part in frame.into_parts() {
            wire.extend_from_slice(&part);
        }
    }
    wire.extend_from_slice(&ChunkedEncoder::last_chunk());
    let mut decoder = ChunkedDecoder::new();
    let mut again = Vec::new();
    while let Some(item) = decoder.decode(&mut wire).expect("re-encoded body decodes") {
        match item {
            BodyItem::Data(d) => again.extend_from_slice(&d),
            BodyItem::End => break,
        }
    }
    assert_eq!(again, body, "re-encoded body did not round-trip");
}

/// The quick JSON cursor's skip: from each opener and from the first byte
/// (the first input byte picks the depth), a spaced and a compact cursor
/// must answer as the token walk does, to the same end. The structural
/// walk takes only what the token walk takes (`json_quick_walk.rs`); this
/// is the coverage-guided check of that.
pub fn json_skip(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let depth = usize::from(pick) % (crate::json_quick::MAX_SKIP_DEPTH + 3);
    let starts = std::iter::once(0).chain(
        text.bytes()
            .enumerate()
            .filter(|&(_, b)| b == b'{' || b == b'[')
            .map(|(at, _)| at)
            .take(8),
    );
    for at in starts {
        let spaced = crate::json_quick::skip_both::<true>(text, at, depth);
        assert_eq!(
            spaced[0], spaced[1],
            "spaced skip from {at} at depth {depth}"
        );
        let compact = crate::json_quick::skip_both::<false>(text, at, depth);
        assert_eq!(
            compact[0], compact[1],
            "compact skip from {at} at depth {depth}"
        );
    }
}

/// For the quick JSON readers' property tests (near-miss documents):
/// replaces up to `cut` bytes of `text` from `at` (at most its length; both
/// ends moved to char boundaries) with `piece`.
pub fn edit(text: &mut String, at: usize, cut: usize, piece: &str) {
    let at = (0..=at.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let end = (at + cut).min(text.len());
    let end = (end..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text.replace_range(at..end, piece);
}

/// Pieces of JSON and pieces one step off it, for near-miss documents:
/// structure, whitespace, escapes (a surrogate pair, each half alone and
/// an unknown one among them), numbers (a leading zero, an exponent, a
/// sign, a bare fraction), literals and a cut one, a control byte, a
/// non-ASCII letter.
pub const JSON_PIECES: [&str; 30] = [
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "\"",
    " ",
    "\n",
    "\\",
    "\\n",
    "\\\"",
    "\\/",
    "\\u0041",
    "\\ud800",
    "\\udc00",
    "\\ud83d\\ude00",
    "\\q",
    "0",
    "7",
    "01",
    "-",
    ".5",
    "e3",
    "true",
    "fals",
    "null",
    "\u{1}",
    "\u{e9}",
    "\"\u{e9}\"",
];
