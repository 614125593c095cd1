//! The typed chunk reads what the `serde_json::Value` walk it replaced
//! read, for any JSON (the old walk is kept here as the reference).

use proptest::prelude::*;
use proto::v1::Usage;
use serde_json::{Value, json};

use super::{ChunkJson, usage_from};

/// What the adapter takes from one chunk.
#[derive(Debug, PartialEq)]
struct Reading {
    object: bool,
    error: Option<String>,
    reasoning: Option<String>,
    content: Option<String>,
    finish: Option<String>,
    usage: Option<Usage>,
}

fn typed(data: &str) -> Reading {
    match ChunkJson::parse(data).expect("valid JSON") {
        ChunkJson::NotObject => Reading {
            object: false,
            error: None,
            reasoning: None,
            content: None,
            finish: None,
            usage: None,
        },
        ChunkJson::Object(chunk) => {
            let text = |s: &Option<std::borrow::Cow<'_, str>>| {
                s.as_deref().filter(|s| !s.is_empty()).map(str::to_owned)
            };
            let choice = chunk.choice.as_ref();
            Reading {
                object: true,
                error: chunk
                    .error
                    .map(|e| e.kind.as_deref().unwrap_or("unknown").to_owned()),
                reasoning: choice
                    .and_then(|c| text(&c.reasoning_content).or_else(|| text(&c.reasoning))),
                content: choice.and_then(|c| text(&c.content)),
                finish: choice.and_then(|c| c.finish_reason.as_deref().map(str::to_owned)),
                usage: chunk.usage.map(Usage::from),
            }
        }
    }
}

/// The `Value` walk the adapter did before.
fn reference(value: &Value) -> Reading {
    let mut reading = Reading {
        object: value.is_object(),
        error: None,
        reasoning: None,
        content: None,
        finish: None,
        usage: None,
    };
    if !value.is_object() {
        return reading;
    }
    reading.error = value.get("error").map(|error| {
        error
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned()
    });
    if let Some(choice) = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    {
        let delta = choice.get("delta");
        let text = |key: &str| {
            delta
                .and_then(|d| d.get(key))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        reading.reasoning = text("reasoning_content").or_else(|| text("reasoning"));
        reading.content = text("content");
        reading.finish = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
        let count = |v: Option<&Value>| v.and_then(Value::as_u64);
        reading.usage = Some(Usage {
            input_tokens: count(usage.get("prompt_tokens")).unwrap_or(0),
            output_tokens: count(usage.get("completion_tokens")).unwrap_or(0),
            reasoning_tokens: count(usage.pointer("/completion_tokens_details/reasoning_tokens")),
            cached_input_tokens: count(usage.pointer("/prompt_tokens_details/cached_tokens")),
        });
    }
    reading
}

fn same(data: &str) {
    let value: Value = serde_json::from_str(data).expect("valid JSON");
    assert_eq!(typed(data), reference(&value), "{data}");
}

#[test]
fn real_chunks_read_as_before() {
    for data in [
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        r#"{"choices":[{"delta":{"reasoning_content":"hmm "}}]}"#,
        r#"{"choices":[{"delta":{"reasoning":"r","content":"tok \"q\" \u00e9\n"}}]}"#,
        r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1},"completion_tokens_details":{"reasoning_tokens":2}}}"#,
        r#"{"error":{"message":"x","type":"oom"}}"#,
        r#"{"error":null}"#,
        r#"{"error":"boom","choices":[{"delta":{"content":"a"}}]}"#,
        r#"{"choices":{"delta":{"content":"a"}}}"#,
        r#"{"choices":[5,{"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"delta":null,"finish_reason":7}]}"#,
        r#"{"choices":[{"delta":{"content":5,"reasoning_content":""}}]}"#,
        r#"{"usage":{"prompt_tokens":-1,"completion_tokens":2.0}}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":18446744073709551616}}"#,
        r#"{"usage":null}"#,
        r#"{"usage":{"prompt_tokens_details":[1],"completion_tokens_details":{"reasoning_tokens":"3"}}}"#,
        r#"{"choices":[{"delta":{"content":"a","content":"b"}}],"choices":[{"delta":{"content":"c"}}]}"#,
        r#"{"ch\u006fices":[{"delta":{"c\u006fntent":"escaped keys"}}]}"#,
        r#"[1,2]"#,
        r#""text""#,
        r#"null"#,
        r#"12"#,
    ] {
        same(data);
    }
}

#[test]
fn not_json_is_an_error() {
    for data in [r#"{nope"#, r#"{"choices":[}"#, r#"{"a":1} x"#, ""] {
        assert!(ChunkJson::parse(data).is_err(), "{data}");
        assert!(serde_json::from_str::<Value>(data).is_err(), "{data}");
    }
}

#[test]
fn usage_reads_from_a_value_too() {
    let value = json!({"prompt_tokens": 4, "completion_tokens_details": {"reasoning_tokens": 1}});
    let usage = usage_from(&value).unwrap().map(Usage::from);
    assert_eq!(
        usage,
        Some(Usage {
            input_tokens: 4,
            output_tokens: 0,
            reasoning_tokens: Some(1),
            cached_input_tokens: None,
        })
    );
    assert_eq!(usage_from(&json!([1])).unwrap(), None);
}

/// JSON values built from the keys the adapter looks at.
fn json_value() -> impl Strategy<Value = Value> {
    crate::adapter::lenient::json_value(vec![
        "error",
        "type",
        "choices",
        "delta",
        "content",
        "reasoning",
        "reasoning_content",
        "finish_reason",
        "usage",
        "prompt_tokens",
        "completion_tokens",
        "completion_tokens_details",
        "prompt_tokens_details",
        "reasoning_tokens",
        "cached_tokens",
        "id",
    ])
}

proptest! {
    #[test]
    fn any_json_reads_as_before(value in json_value()) {
        let data = value.to_string();
        prop_assert_eq!(typed(&data), reference(&value), "{}", data);
    }
}
