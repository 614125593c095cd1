//! The quick usage reader against serde's typed reading, its oracle.

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::super::usage::observe_with_serde;
use super::read;

/// What the mock provider answers to a small non-streaming chat.
const MOCK_BODY: &str = r#"{"id":"chatcmpl-mock-1","object":"chat.completion","created":1700000000,"model":"mock-chat","choices":[{"index":0,"message":{"role":"assistant","content":"tok tok tok tok "},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"total_tokens":28,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#;

#[test]
fn compact_bodies_and_chunks_are_read_as_serde_reads_them() {
    for doc in [
        MOCK_BODY,
        // vLLM's: details as null, extra members in usage.
        r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a \"quoted\"\nline","tool_calls":[]},"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}"#,
        // The usage-only chunk of a stream.
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":2}}}"#,
        // A body followed by a newline.
        "{\"choices\":null,\"usage\":{\"prompt_tokens\":9}}\n",
        // Counts that are not unsigned integers read as absent.
        r#"{"usage":{"prompt_tokens":"3","completion_tokens":[1],"completion_tokens_details":{"reasoning_tokens":{"n":1}}},"choices":{"x":1}}"#,
        // Skipped members may hold escapes and numbers of any sign.
        r#"{"id":"\u00e9\n","created":-1,"x":[0.5,-2.25],"usage":{"prompt_tokens":1}}"#,
        // No usage.
        r#"{"choices":[{"delta":{"content":"\"usage\":{}"}}],"usage":null}"#,
    ] {
        let quick = read(doc).unwrap_or_else(|| panic!("declined {doc}"));
        assert_eq!(quick, observe_with_serde(doc), "{doc}");
    }
    let observed = read(MOCK_BODY).unwrap().unwrap();
    assert_eq!(
        (observed.usage.input_tokens, observed.usage.output_tokens),
        (12, 16)
    );
    assert_eq!(observed.usage.cached_input_tokens, Some(0));
    assert!(!observed.usage_only);
}

#[test]
fn what_serde_reads_otherwise_is_declined() {
    for doc in [
        // Whitespace between tokens (OpenAI's own pretty-printed bodies).
        "{\n  \"usage\": {\"prompt_tokens\": 1}\n}",
        " {\"usage\":{\"prompt_tokens\":1}}",
        // A known key twice: serde refuses the document.
        r#"{"usage":{"prompt_tokens":1},"usage":null}"#,
        r#"{"choices":[],"choices":[]}"#,
        r#"{"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
        r#"{"usage":{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":1}}}"#,
        // serde reads an array as a struct's fields in order.
        r#"{"usage":[1,2]}"#,
        r#"{"usage":{"completion_tokens_details":[4]}}"#,
        r#"[{"usage":{}}]"#,
        // A scalar where an object is wanted: serde refuses.
        r#"{"usage":7}"#,
        r#"{"usage":{"prompt_tokens_details":"x"}}"#,
        // What the cursor leaves to serde.
        r#"{"usage":{"prompt_tokens":1.5}}"#,
        r#"{"usage":{"prompt_tokens":-1}}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551616}}"#,
        r#"{"id":"\ud83d","usage":{"prompt_tokens":1}}"#,
        r#"{"id":1e5,"usage":{"prompt_tokens":1}}"#,
        r#"{"usage":{"prompt_tokens":1}}x"#,
        r#"{"usage":{"prompt_tokens":1}"#,
    ] {
        assert_eq!(read(doc), None, "{doc}");
    }
}

#[test]
fn nesting_past_the_bound_is_declined() {
    let deep = format!(
        r#"{{"x":{}1{},"usage":{{"prompt_tokens":1}}}}"#,
        "[".repeat(40),
        "]".repeat(40)
    );
    assert_eq!(read(&deep), None);
    let shallow = format!(
        r#"{{"x":{}1{},"usage":{{"prompt_tokens":1}}}}"#,
        "[".repeat(8),
        "]".repeat(8)
    );
    assert_eq!(read(&shallow), Some(observe_with_serde(&shallow)));
}

/// The keys the readers look at, and a few they skip.
const KEYS: [&str; 10] = [
    "usage",
    "choices",
    "prompt_tokens",
    "completion_tokens",
    "completion_tokens_details",
    "prompt_tokens_details",
    "reasoning_tokens",
    "cached_tokens",
    "id",
    "message",
];

/// A top-level object of any members with those keys.
fn document() -> impl Strategy<Value = String> {
    let member = (
        prop::sample::select(KEYS.to_vec()),
        crate::adapter::json_value(KEYS.to_vec()),
    );
    prop::collection::vec(member, 0..5).prop_map(|members| {
        Value::Object(
            members
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<Map<String, Value>>(),
        )
        .to_string()
    })
}

/// A compact body with up to three edits: a piece put in, or bytes taken
/// out, anywhere (duplicates, arrays for objects, escapes, whitespace…).
fn edited_document() -> impl Strategy<Value = String> {
    let mut pieces = framing::fuzzing::JSON_PIECES.to_vec();
    pieces.extend([
        "\"usage\":",
        "\"choices\":",
        "\"prompt_tokens\":",
        "\"cached_tokens\":",
        "{\"reasoning_tokens\":1}",
        "\"usage\":null,",
        "\"choices\":[],",
        "\"prompt_tokens\":1,",
        "\"cached_tokens\":2,",
    ]);
    let piece = prop::sample::select(pieces);
    let edit = (any::<prop::sample::Index>(), 0usize..4, piece);
    (
        prop::sample::select(vec![
            MOCK_BODY,
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":2}}}"#,
            r#"{"usage":{"prompt_tokens":7,"prompt_tokens_details":null},"choices":null}"#,
        ]),
        prop::collection::vec(edit, 1..4),
    )
        .prop_map(|(base, edits)| {
            let mut doc = base.to_owned();
            for (at, cut, piece) in edits {
                let at = at.index(doc.len() + 1);
                framing::fuzzing::edit(&mut doc, at, cut, piece);
            }
            doc
        })
}

/// An object of members drawn from a list, any of them twice: known keys
/// given twice, `usage` in every shape, details objects of every kind.
fn member_document() -> impl Strategy<Value = String> {
    let usage_member = prop::sample::select(vec![
        r#""prompt_tokens":1"#,
        r#""prompt_tokens":"2""#,
        r#""completion_tokens":5"#,
        r#""completion_tokens":null"#,
        r#""completion_tokens_details":{"reasoning_tokens":2}"#,
        r#""completion_tokens_details":null"#,
        r#""completion_tokens_details":[1]"#,
        r#""prompt_tokens_details":{"cached_tokens":1,"cached_tokens":3}"#,
        r#""prompt_tokens_details":{"x":[1,{}],"cached_tokens":4}"#,
        r#""prompt_tokens_details":true"#,
        r#""total_tokens":9"#,
    ]);
    let usage = prop::collection::vec(usage_member, 0..4)
        .prop_map(|members| format!(r#""usage":{{{}}}"#, members.join(",")));
    let member = prop_oneof![
        prop::sample::select(vec![
            r#""usage":null"#,
            r#""usage":[1,2]"#,
            r#""usage":3"#,
            r#""choices":[]"#,
            r#""choices":[{"index":0}]"#,
            r#""choices":null"#,
            r#""choices":"x""#,
            r#""id":"c""#,
            r#""x":{"usage":{"prompt_tokens":8}}"#,
        ])
        .prop_map(str::to_owned),
        usage,
    ];
    prop::collection::vec(member, 0..4).prop_map(|members| format!("{{{}}}", members.join(",")))
}

proptest! {
    // Of these, the reader takes about half the compact documents (~2 % with
    // a usage) and a fifth of the edited bodies (nearly all with a usage).
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn any_compact_document_is_read_as_serde_reads_it(doc in document()) {
        if let Some(quick) = read(&doc) {
            prop_assert_eq!(quick, observe_with_serde(&doc), "{}", doc);
        }
    }

    #[test]
    fn a_document_of_any_members_is_read_as_serde_reads_it(doc in member_document()) {
        if let Some(quick) = read(&doc) {
            prop_assert_eq!(quick, observe_with_serde(&doc), "{}", doc);
        }
    }

    #[test]
    fn an_edited_body_is_read_as_serde_reads_it_or_declined(doc in edited_document()) {
        if let Some(quick) = read(&doc) {
            prop_assert_eq!(quick, observe_with_serde(&doc), "{}", doc);
        }
    }
}
