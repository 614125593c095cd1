//! NDJSON properties: any partition of a stream yields the lines of a naive
//! whole-input model, through both fronts, with the same error under tight
//! limits and memory bounded by them. Seeds are fixed.

use bytes::BytesMut;
use framing::ndjson::{DEFAULT_MAX_LINE_LEN, NdjsonDecoder, NdjsonError, NdjsonObserver};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed};

type Outcome = (Vec<Vec<u8>>, Option<NdjsonError>);

/// Split at `\n`, strip one `\r` before it, skip empty lines, keep the
/// unterminated tail; stop at the first line over `max`.
fn model(input: &[u8], max: usize) -> Outcome {
    let mut out = Vec::new();
    let mut segments = input.split(|&b| b == b'\n').peekable();
    while let Some(seg) = segments.next() {
        let line = seg.strip_suffix(b"\r").unwrap_or(seg);
        if line.len() > max {
            return (out, Some(NdjsonError::LineTooLong { limit: max }));
        }
        if !line.is_empty() {
            out.push(line.to_vec());
        }
        if segments.peek().is_none() {
            break;
        }
    }
    (out, None)
}

fn partition<'a>(input: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
    at.extend([0, input.len()]);
    at.sort_unstable();
    at.windows(2).map(|w| &input[w[0]..w[1]]).collect()
}

fn decode(max: usize, chunks: &[&[u8]]) -> Outcome {
    let mut dec = NdjsonDecoder::with_max_line_len(max);
    let mut buf = BytesMut::new();
    let mut lines = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(line)) => lines.push(line.to_vec()),
                Ok(None) => break,
                Err(err) => return (lines, Some(err)),
            }
        }
        assert!(
            buf.len() <= max + 1,
            "partial line within the limit (+ a CR)"
        );
    }
    loop {
        match dec.decode_eof(&mut buf) {
            Ok(Some(line)) => lines.push(line.to_vec()),
            Ok(None) => break,
            Err(err) => return (lines, Some(err)),
        }
    }
    assert!(buf.is_empty());
    (lines, None)
}

fn observe(max: usize, chunks: &[&[u8]]) -> Outcome {
    let mut obs = NdjsonObserver::with_max_line_len(max);
    let mut lines = Vec::new();
    for chunk in chunks {
        let res = obs.feed(chunk, |line| lines.push(line.to_vec()));
        assert!(obs.buffered() <= max + 1);
        if let Err(err) = res {
            return (lines, Some(err));
        }
    }
    match obs.finish(|line| lines.push(line.to_vec())) {
        Ok(()) => (lines, None),
        Err(err) => (lines, Some(err)),
    }
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        3 => prop::sample::select(b"{}\"a:1\r\n\n".to_vec()),
        1 => any::<u8>(),
    ];
    prop::collection::vec(byte, 0..128)
}

fn config() -> Config {
    Config {
        cases: 1000,
        rng_seed: RngSeed::Fixed(0x000D_150F),
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Default limit: every partition, both fronts, equal the model.
    #[test]
    fn split_point_independence(input in stream(), cuts in prop::collection::vec(any::<Index>(), 0..12)) {
        let want = model(&input, DEFAULT_MAX_LINE_LEN);
        let chunks = partition(&input, &cuts);
        prop_assert_eq!(decode(DEFAULT_MAX_LINE_LEN, &[&input]), want.clone());
        prop_assert_eq!(decode(DEFAULT_MAX_LINE_LEN, &chunks), want.clone());
        prop_assert_eq!(observe(DEFAULT_MAX_LINE_LEN, &chunks), want);
    }

    /// Tight limits: the same lines and error however the bytes are split,
    /// buffers bounded by the limit (asserted in the feeders), no panic.
    #[test]
    fn limits_are_split_independent(
        input in prop_oneof![stream(), prop::collection::vec(any::<u8>(), 0..128)],
        cuts in prop::collection::vec(any::<Index>(), 0..12),
        max in 0usize..12,
    ) {
        let want = model(&input, max);
        let chunks = partition(&input, &cuts);
        prop_assert_eq!(decode(max, &[&input]), want.clone());
        prop_assert_eq!(decode(max, &chunks), want.clone());
        prop_assert_eq!(observe(max, &chunks), want);
    }
}

#[test]
fn every_single_split_of_an_ollama_stream() {
    let input: &[u8] = b"{\"response\":\"Hi\",\"done\":false}\r\n\n\
        {\"response\":\"!\",\"done\":false}\n\
        {\"done\":true,\"eval_count\":2,\"prompt_eval_count\":5}";
    let want = model(input, 64);
    assert_eq!(want.0.len(), 3);
    for i in 0..=input.len() {
        for j in i..=input.len() {
            let chunks = [&input[..i], &input[i..j], &input[j..]];
            assert_eq!(decode(64, &chunks), want, "decoder {i} {j}");
            assert_eq!(observe(64, &chunks), want, "observer {i} {j}");
        }
    }
}

#[test]
fn limit_bound_with_crlf_split_everywhere() {
    // Lines of exactly the limit pass with \n or \r\n; one more fails.
    let ok: &[u8] = b"abcd\r\nefgh\nijkl";
    let bad: &[u8] = b"abcd\r\nefghi\n";
    for input in [ok, bad] {
        let want = model(input, 4);
        for at in 0..=input.len() {
            let chunks = [&input[..at], &input[at..]];
            assert_eq!(decode(4, &chunks), want, "{input:?} at {at}");
            assert_eq!(observe(4, &chunks), want, "{input:?} at {at}");
        }
    }
    assert_eq!(model(ok, 4).1, None);
    assert_eq!(model(bad, 4).1, Some(NdjsonError::LineTooLong { limit: 4 }));
}
