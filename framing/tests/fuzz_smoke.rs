//! Runs the fuzz entry points (`framing::fuzzing`) on the stable toolchain:
//! over the committed seed corpus in `framing/fuzz/corpus/<target>/` and over
//! proptest-generated arbitrary bytes. `hack/fuzz.sh` runs the same entry
//! points under libFuzzer for coverage-guided fuzzing.

use std::path::Path;

use proptest::prelude::*;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut inputs = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            inputs.push(std::fs::read(entry.path()).expect("read seed"));
        }
    }
    inputs
}

#[test]
fn frame_decoder_seed_corpus() {
    let seeds = corpus("frame_decoder");
    assert!(
        !seeds.is_empty(),
        "framing/fuzz/seeds/frame_decoder is empty"
    );
    for seed in seeds {
        framing::fuzzing::frame_decoder(&seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn frame_decoder_arbitrary(data in proptest::collection::vec(any::<u8>(), 0..8192)) {
        framing::fuzzing::frame_decoder(&data);
    }
}

#[test]
fn sse_parser_seed_corpus() {
    let seeds = corpus("sse_parser");
    assert!(!seeds.is_empty(), "framing/fuzz/seeds/sse_parser is empty");
    for seed in seeds {
        framing::fuzzing::sse_parser(&seed);
    }
}

#[test]
fn http_request_head_seed_corpus() {
    let seeds = corpus("http_request_head");
    assert!(
        !seeds.is_empty(),
        "framing/fuzz/seeds/http_request_head is empty"
    );
    for seed in seeds {
        framing::fuzzing::http_request_head(&seed);
    }
}

#[test]
fn chunked_decoder_seed_corpus() {
    let seeds = corpus("chunked_decoder");
    assert!(
        !seeds.is_empty(),
        "framing/fuzz/seeds/chunked_decoder is empty"
    );
    for seed in seeds {
        framing::fuzzing::chunked_decoder(&seed);
    }
}

/// Bytes biased towards each format's syntax, so random cases reach deep
/// states instead of failing on the first byte.
fn syntax_bytes(alphabet: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
    (
        any::<u8>(),
        proptest::collection::vec(proptest::sample::select(alphabet), 0..200),
    )
        .prop_map(|(read, parts)| {
            let mut out = vec![read];
            for p in parts {
                out.extend_from_slice(p);
            }
            out
        })
}

const SSE_ALPHABET: &[&[u8]] = &[
    b"data",
    b"data:",
    b": ",
    b"event:",
    b"id:",
    b"retry:",
    b"\n",
    b"\r",
    b"\r\n",
    b" ",
    b"x",
    b"[DONE]",
    b"\0",
    b"\xef\xbb\xbf",
    b"{\"a\":1}",
];
const HTTP_ALPHABET: &[&[u8]] = &[
    b"GET ",
    b"POST ",
    b"/v1/x ",
    b"HTTP/1.1",
    b"HTTP/1.0",
    b"\r\n",
    b"\n",
    b"Host: a",
    b"Content-Length: ",
    b"Transfer-Encoding: ",
    b"chunked",
    b"gzip, ",
    b"Connection: close",
    b"Expect: 100-continue",
    b"5",
    b"-1",
    b" ",
    b":",
    b"\x7f",
];
const CHUNKED_ALPHABET: &[&[u8]] = &[
    b"0",
    b"5",
    b"a",
    b"F",
    b"\r\n",
    b"\n",
    b"\r",
    b";ext",
    b"=v",
    b"hello",
    b"Trailer: t",
    b"ffffffffffffffffffff",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn sse_parser_arbitrary(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        framing::fuzzing::sse_parser(&data);
    }

    #[test]
    fn sse_parser_syntax(data in syntax_bytes(SSE_ALPHABET)) {
        framing::fuzzing::sse_parser(&data);
    }

    #[test]
    fn http_request_head_arbitrary(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        framing::fuzzing::http_request_head(&data);
    }

    #[test]
    fn http_request_head_syntax(data in syntax_bytes(HTTP_ALPHABET)) {
        framing::fuzzing::http_request_head(&data);
    }

    #[test]
    fn chunked_decoder_arbitrary(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        framing::fuzzing::chunked_decoder(&data);
    }

    #[test]
    fn chunked_decoder_syntax(data in syntax_bytes(CHUNKED_ALPHABET)) {
        framing::fuzzing::chunked_decoder(&data);
    }

    #[test]
    fn json_skip_syntax(data in syntax_bytes(JSON_ALPHABET)) {
        framing::fuzzing::json_skip(&data);
    }
}

#[test]
fn json_skip_seed_corpus() {
    let seeds = corpus("json_skip");
    assert!(!seeds.is_empty(), "framing/fuzz/seeds/json_skip is empty");
    for seed in seeds {
        framing::fuzzing::json_skip(&seed);
    }
}

/// JSON's syntax and pieces one step off it (`framing::fuzzing::JSON_PIECES`),
/// and runs long enough to cross a 64-byte block.
const JSON_ALPHABET: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\"",
    b" ",
    b"\n",
    b"\t",
    b"\\",
    b"\\n",
    b"\\u0041",
    b"\\ud800",
    b"\\ud83d\\ude00",
    b"0",
    b"-1.5",
    b"01",
    b"e3",
    b"true",
    b"fals",
    b"null",
    b"\x01",
    b"\xc3\xa9",
    b"\"key\": ",
    b"\"a description of a tool, long enough to cross a block\"",
];
