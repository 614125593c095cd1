//! Property tests for the HTTP/1.1 codecs: chunked round trips, split-point
//! independence for heads and chunked bodies, head writer/parser round trips,
//! and "arbitrary bytes never panic or buffer past a limit".

use bytes::{Bytes, BytesMut};
use framing::http::{
    BodyFraming, BodyItem, ChunkedDecoder, ChunkedEncoder, HeadLimits, HttpError,
    MAX_CHUNK_SIZE_LINE, MAX_TRAILER_BYTES, RequestHead, ResponseHead, parse_request_head,
    parse_response_head, write_request_head, write_response_head,
};
use proptest::prelude::*;

/// What a chunked decode produced: data, whether `End` came, the error (if
/// any) and the bytes left in the buffer.
#[derive(Debug, PartialEq)]
struct Decoded {
    data: Vec<u8>,
    ended: bool,
    error: Option<HttpError>,
    rest: Vec<u8>,
}

/// Feed `input` to a fresh decoder in the reads given by `cuts`, draining
/// after each read. Also checks the buffering bound after every `Ok(None)`.
fn decode_in_reads(input: &[u8], cuts: &[usize]) -> Decoded {
    let mut decoder = ChunkedDecoder::new();
    let mut buf = BytesMut::new();
    let mut out = Decoded {
        data: Vec::new(),
        ended: false,
        error: None,
        rest: Vec::new(),
    };
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    cuts.push(input.len());
    cuts.sort_unstable();
    let mut from = 0;
    'reads: for to in cuts {
        buf.extend_from_slice(&input[from..to]);
        from = to;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(BodyItem::Data(d))) => {
                    assert!(!d.is_empty(), "Data is never empty");
                    out.data.extend_from_slice(&d);
                }
                Ok(Some(BodyItem::End)) => {
                    assert!(!out.ended, "End comes once");
                    out.ended = true;
                }
                Ok(None) => {
                    if !decoder.is_done() {
                        let bound = MAX_CHUNK_SIZE_LINE.max(MAX_TRAILER_BYTES);
                        assert!(buf.len() < bound, "decoder buffered {} bytes", buf.len());
                    }
                    break;
                }
                Err(e) => {
                    out.error = Some(e);
                    // Keep what was not fed yet behind what the decoder left.
                    buf.extend_from_slice(&input[from..]);
                    break 'reads;
                }
            }
        }
    }
    out.rest = buf.to_vec();
    out
}

/// Encode `bodies` with the vectored encoder plus the last chunk.
fn encode(bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut enc = ChunkedEncoder::new();
    let mut wire = Vec::new();
    for body in bodies {
        let body = Bytes::copy_from_slice(body);
        match enc.encode(body.clone()) {
            Some(frame) => {
                assert_eq!(frame.body().as_ptr(), body.as_ptr());
                wire.extend(frame.into_parts().concat());
            }
            None => assert!(body.is_empty()),
        }
    }
    wire.extend_from_slice(&ChunkedEncoder::last_chunk());
    wire
}

fn bodies() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..12)
}

fn cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..4000, 0..12)
}

/// A hand-written chunked body with extensions, uppercase hex, leading
/// zeros and trailers, to exercise more of the grammar than the encoder.
fn decorated_wire(bodies: &[Vec<u8>], ext: &str, trailers: &[(String, String)]) -> Vec<u8> {
    let mut wire = Vec::new();
    for body in bodies.iter().filter(|b| !b.is_empty()) {
        wire.extend_from_slice(format!("0{:X}{ext}\r\n", body.len()).as_bytes());
        wire.extend_from_slice(body);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(format!("0{ext}\r\n").as_bytes());
    for (name, value) in trailers {
        wire.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    wire.extend_from_slice(b"\r\n");
    wire
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,16}"
}

/// Field values as httparse returns them: no leading/trailing whitespace.
fn field_value() -> impl Strategy<Value = Vec<u8>> {
    let edge = prop_oneof![0x21u8..=0x7e, 0x80u8..=0xff];
    let inner = prop_oneof![Just(b' '), Just(b'\t'), 0x21u8..=0x7e, 0x80u8..=0xff];
    (
        prop::option::of((edge.clone(), prop::collection::vec(inner, 0..30), edge)),
        any::<bool>(),
    )
        .prop_map(|(parts, single)| match parts {
            None => Vec::new(),
            Some((first, _, _)) if single => vec![first],
            Some((first, middle, last)) => [vec![first], middle, vec![last]].concat(),
        })
}

/// Extension fields only: `x-` names keep framing fields out.
fn fields() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    prop::collection::vec(
        (token().prop_map(|t| format!("x-{t}")), field_value()),
        0..20,
    )
}

fn same_request(a: &RequestHead, b: &RequestHead) -> bool {
    a.method() == b.method()
        && a.method_bytes() == b.method_bytes()
        && a.path() == b.path()
        && a.version() == b.version()
        && a.keep_alive() == b.keep_alive()
        && a.expects_continue() == b.expects_continue()
        && a.body() == b.body()
        && a.headers().iter().eq(b.headers().iter())
        && a.as_bytes() == b.as_bytes()
}

fn same_response(a: &ResponseHead, b: &ResponseHead) -> bool {
    a.status() == b.status()
        && a.reason() == b.reason()
        && a.version() == b.version()
        && a.keep_alive() == b.keep_alive()
        && a.body() == b.body()
        && a.headers().iter().eq(b.headers().iter())
}

/// Feed `input` in reads, calling `parse` after each, until it completes or
/// fails. Returns the result and the leftover. Checks the buffer bound.
fn parse_in_reads<T>(
    input: &[u8],
    cuts: &[usize],
    limits: &HeadLimits,
    mut parse: impl FnMut(&mut BytesMut) -> Result<Option<T>, HttpError>,
) -> (Result<Option<T>, HttpError>, Vec<u8>) {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    cuts.push(input.len());
    cuts.sort_unstable();
    let mut buf = BytesMut::new();
    let mut from = 0;
    let mut result = Ok(None);
    for to in cuts {
        buf.extend_from_slice(&input[from..to]);
        from = to;
        result = parse(&mut buf);
        match &result {
            Ok(None) => assert!(buf.len() <= limits.effective_head_bytes()),
            _ => {
                // Keep what was not fed yet behind what the parser left.
                buf.extend_from_slice(&input[from..]);
                break;
            }
        }
    }
    (result, buf.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// (a) Encoder output decodes back to the same bytes, ending exactly at
    /// the last chunk.
    #[test]
    fn chunked_round_trip(bodies in bodies()) {
        let wire = encode(&bodies);
        let decoded = decode_in_reads(&wire, &[]);
        prop_assert_eq!(decoded.error, None);
        prop_assert!(decoded.ended);
        prop_assert_eq!(decoded.data, bodies.concat());
        prop_assert!(decoded.rest.is_empty());
    }

    /// (b) Any partition of a chunked body into reads decodes the same.
    #[test]
    fn chunked_split_points(
        bodies in bodies(),
        ext in prop_oneof![Just(String::new()), "(;[a-z]{1,5}(=[a-z0-9]{1,5})?){1,3}"],
        trailers in prop::collection::vec((token(), "[a-z0-9 ]{0,10}[a-z0-9]"), 0..3),
        cuts in cuts(),
        tail in prop::collection::vec(any::<u8>(), 0..20),
    ) {
        let mut wire = decorated_wire(&bodies, &ext, &trailers);
        wire.extend_from_slice(&tail);
        let whole = decode_in_reads(&wire, &[]);
        prop_assert_eq!(whole.error.clone(), None);
        prop_assert!(whole.ended);
        prop_assert_eq!(&whole.data, &bodies.concat());
        prop_assert_eq!(&whole.rest, &tail);
        prop_assert_eq!(decode_in_reads(&wire, &cuts), whole);
    }

    /// (b, d) Corrupted chunked input: never a panic, never buffered past the
    /// line limits, and the outcome (data, end, error) is split-independent.
    #[test]
    fn chunked_corrupted_input(
        bodies in bodies(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..4),
        cuts in cuts(),
    ) {
        let mut wire = encode(&bodies);
        for (at, byte, insert) in edits {
            let i = at.index(wire.len());
            if insert { wire.insert(i, byte) } else { wire[i] = byte }
        }
        prop_assert_eq!(decode_in_reads(&wire, &cuts), decode_in_reads(&wire, &[]));
    }

    /// (d) Arbitrary bytes into the chunked decoder.
    #[test]
    fn chunked_arbitrary_bytes(input in prop::collection::vec(any::<u8>(), 0..2000), cuts in cuts()) {
        prop_assert_eq!(decode_in_reads(&input, &cuts), decode_in_reads(&input, &[]));
    }

    /// (c) A written request head parses back to the same method, path and
    /// fields, and (b) does so under any partition into reads.
    #[test]
    fn request_head_round_trip(
        method in token(),
        path in "/[!-~]{0,40}",
        fields in fields(),
        body in prop::collection::vec(any::<u8>(), 0..16),
        cuts in cuts(),
    ) {
        let mut wire = BytesMut::new();
        let pairs = fields.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
        write_request_head(&mut wire, &method, &path, pairs).unwrap();
        wire.extend_from_slice(&body);
        let limits = HeadLimits::default();

        let (whole, rest) = parse_in_reads(&wire, &[], &limits, |b| parse_request_head(b, &limits));
        let head = whole.unwrap().unwrap();
        prop_assert_eq!(head.method_bytes(), method.as_bytes());
        prop_assert_eq!(head.path(), path.as_bytes());
        let got: Vec<(&[u8], &[u8])> = head.headers().iter().collect();
        let want: Vec<(&[u8], &[u8])> =
            fields.iter().map(|(n, v)| (n.as_bytes(), v.as_slice())).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(head.body(), BodyFraming::Empty);
        prop_assert_eq!(&rest, &body);

        let (split, split_rest) = parse_in_reads(&wire, &cuts, &limits, |b| parse_request_head(b, &limits));
        prop_assert!(same_request(&split.unwrap().unwrap(), &head));
        prop_assert_eq!(split_rest, rest);
    }

    /// (c) A written response head parses back; (b) split-independently.
    #[test]
    fn response_head_round_trip(
        status in 100u16..=999,
        fields in fields(),
        length in prop::option::of(0u64..1_000_000),
        cuts in cuts(),
    ) {
        let mut pairs: Vec<(String, Vec<u8>)> = fields.clone();
        if let Some(n) = length {
            pairs.push(("Content-Length".into(), n.to_string().into_bytes()));
        }
        let mut wire = BytesMut::new();
        write_response_head(&mut wire, status, pairs.iter().map(|(n, v)| (n, v))).unwrap();
        let limits = HeadLimits::default();
        let parse = |b: &mut BytesMut| parse_response_head(b, &limits, false);

        let (whole, rest) = parse_in_reads(&wire, &[], &limits, parse);
        let head = whole.unwrap().unwrap();
        prop_assert!(rest.is_empty());
        prop_assert_eq!(head.status(), status);
        prop_assert_eq!(head.headers().len(), pairs.len());
        let no_body = status < 200 || status == 204 || status == 304;
        let want = match length {
            _ if no_body => BodyFraming::Empty,
            Some(n) => BodyFraming::Length(n),
            None => BodyFraming::CloseDelimited,
        };
        prop_assert_eq!(head.body(), want);

        let (split, _) = parse_in_reads(&wire, &cuts, &limits, parse);
        prop_assert!(same_response(&split.unwrap().unwrap(), &head));
    }

    /// (b, d) Arbitrary or corrupted heads: no panic, never more than the
    /// head limit buffered on `Ok(None)`, same outcome under any partition.
    #[test]
    fn heads_arbitrary_bytes(
        method in token(),
        fields in fields(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        noise in prop::collection::vec(any::<u8>(), 0..300),
        max_head_bytes in 16usize..400,
        max_headers in 0usize..24,
        cuts in cuts(),
    ) {
        let mut wire = BytesMut::new();
        let pairs = fields.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
        write_request_head(&mut wire, &method, "/", pairs).unwrap();
        let mut wire = wire.to_vec();
        for (at, byte) in edits {
            let i = at.index(wire.len());
            wire[i] = byte;
        }
        let limits = HeadLimits { max_head_bytes, max_headers };
        for input in [&wire[..], &noise[..]] {
            let req = |b: &mut BytesMut| parse_request_head(b, &limits);
            let (whole, whole_rest) = parse_in_reads(input, &[], &limits, req);
            let (split, split_rest) = parse_in_reads(input, &cuts, &limits, req);
            match (&whole, &split) {
                (Ok(Some(a)), Ok(Some(b))) => prop_assert!(same_request(a, b)),
                (Ok(None), Ok(None)) => {}
                (Err(a), Err(b)) => prop_assert_eq!(a, b),
                _ => prop_assert!(false, "whole and split outcomes differ"),
            }
            prop_assert_eq!(whole_rest, split_rest);

            let res = |b: &mut BytesMut| parse_response_head(b, &limits, false);
            let (whole, _) = parse_in_reads(input, &[], &limits, res);
            let (split, _) = parse_in_reads(input, &cuts, &limits, res);
            match (&whole, &split) {
                (Ok(Some(a)), Ok(Some(b))) => prop_assert!(same_response(a, b)),
                (Ok(None), Ok(None)) => {}
                (Err(a), Err(b)) => prop_assert_eq!(a, b),
                _ => prop_assert!(false, "whole and split outcomes differ"),
            }
        }
    }
}
