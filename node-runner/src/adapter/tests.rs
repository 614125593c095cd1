//! Parser and request-body tests (no I/O); the adapters against the mock
//! provider are in `perf/tests/adapters.rs`.

use std::collections::VecDeque;

use proptest::prelude::*;
use proto::v1::{ChatMessage, FailureCode, FailureSide, RunEventKind, RunInput, Usage};
use serde_json::{Value, json};

use super::ollama::NdjsonParser;
use super::openai::SseParser;
use super::{ExecuteSpec, OllamaAdapter, OpenAiAdapter, RuntimeEvent, failure};

const SSE: &str = concat!(
    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hmm \"}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"content\":\"tok \\\"q\\\"\"}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
    "data: [DONE]\n\n",
);

const NDJSON: &str = concat!(
    "{\"message\":{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\"hmm \"},\"done\":false}\n",
    "{\"message\":{\"role\":\"assistant\",\"content\":\"tok \"},\"done\":false}\r\n",
    "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,",
    "\"done_reason\":\"length\",\"prompt_eval_count\":7,\"eval_count\":2}\n",
);

fn sse_events(chunks: &[&[u8]]) -> Vec<RuntimeEvent> {
    let mut parser = SseParser::default();
    let mut out = VecDeque::new();
    for chunk in chunks {
        parser.feed(chunk, &mut out);
    }
    parser.finish(&mut out);
    out.into()
}

fn ndjson_events(chunks: &[&[u8]]) -> Vec<RuntimeEvent> {
    let mut parser = NdjsonParser::default();
    let mut out = VecDeque::new();
    for chunk in chunks {
        parser.feed(chunk, &mut out);
    }
    parser.finish(&mut out);
    out.into()
}

fn sse_expected() -> Vec<RuntimeEvent> {
    vec![
        RuntimeEvent::ReasoningDelta("hmm ".into()),
        RuntimeEvent::Delta("tok \"q\"".into()),
        RuntimeEvent::Complete {
            finish_reason: "stop".into(),
            usage: Some(Usage {
                input_tokens: 3,
                output_tokens: 2,
                reasoning_tokens: None,
                cached_input_tokens: None,
            }),
        },
    ]
}

fn ndjson_expected() -> Vec<RuntimeEvent> {
    vec![
        RuntimeEvent::ReasoningDelta("hmm ".into()),
        RuntimeEvent::Delta("tok ".into()),
        RuntimeEvent::Complete {
            finish_reason: "length".into(),
            usage: Some(Usage {
                input_tokens: 7,
                output_tokens: 2,
                reasoning_tokens: None,
                cached_input_tokens: None,
            }),
        },
    ]
}

fn error_code(events: &[RuntimeEvent]) -> FailureCode {
    match events.last() {
        Some(RuntimeEvent::Error(f)) => f.code(),
        other => panic!("no error terminal: {other:?}"),
    }
}

#[test]
fn sse_whole_body() {
    assert_eq!(sse_events(&[SSE.as_bytes()]), sse_expected());
}

#[test]
fn ndjson_whole_body() {
    assert_eq!(ndjson_events(&[NDJSON.as_bytes()]), ndjson_expected());
}

proptest! {
    /// Any split of the body into three chunks gives the same events.
    #[test]
    fn splits_do_not_matter(a in 0usize..1000, b in 0usize..1000) {
        for (body, expected, sse) in [
            (SSE, sse_expected(), true),
            (NDJSON, ndjson_expected(), false),
        ] {
            let bytes = body.as_bytes();
            let (i, j) = {
                let (x, y) = (a % (bytes.len() + 1), b % (bytes.len() + 1));
                (x.min(y), x.max(y))
            };
            let chunks = [&bytes[..i], &bytes[i..j], &bytes[j..]];
            let events = if sse { sse_events(&chunks) } else { ndjson_events(&chunks) };
            prop_assert_eq!(events, expected);
        }
    }
}

#[test]
fn usage_breakdown_only_when_reported() {
    let usage = super::openai::usage_of(&json!({
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }));
    assert_eq!(usage.cached_input_tokens, Some(4));
    assert_eq!(usage.reasoning_tokens, Some(3));
    let usage = super::openai::usage_of(&json!({
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "prompt_tokens_details": null,
    }));
    assert_eq!(
        (usage.cached_input_tokens, usage.reasoning_tokens),
        (None, None)
    );
}

#[test]
fn truncation_and_malformed_are_errors() {
    let cut = &SSE.as_bytes()[..SSE.len() - "data: [DONE]\n\n".len()];
    let events = sse_events(&[cut]);
    assert_eq!(error_code(&events), FailureCode::ProviderUnreachable);
    assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1);

    let events = sse_events(&[b"data: {nope\n\ndata: [DONE]\n\n"]);
    assert_eq!(events.len(), 1, "nothing after the error: {events:?}");
    assert_eq!(error_code(&events), FailureCode::ProviderMalformed);

    let events = sse_events(&[b"data: {\"error\":{\"message\":\"x\",\"type\":\"oom\"}}\n\n"]);
    assert_eq!(error_code(&events), FailureCode::ProviderHttpStatus);

    let cut = &NDJSON.as_bytes()[..NDJSON.len() - 40];
    assert_eq!(
        error_code(&ndjson_events(&[cut])),
        FailureCode::ProviderMalformed,
        "a cut final line is not JSON"
    );
    let two_lines = NDJSON.split_inclusive('\n').take(2).collect::<String>();
    assert_eq!(
        error_code(&ndjson_events(&[two_lines.as_bytes()])),
        FailureCode::ProviderUnreachable
    );
    assert_eq!(
        error_code(&ndjson_events(&[b"{\"error\":\"model not found\"}\n"])),
        FailureCode::ProviderHttpStatus
    );
    assert_eq!(
        error_code(&ndjson_events(&[b"[1]\n"])),
        FailureCode::ProviderMalformed
    );
}

#[test]
fn nothing_after_the_terminal() {
    let mut body = SSE.to_string();
    body.push_str("data: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\n");
    assert_eq!(sse_events(&[body.as_bytes()]), sse_expected());
    let mut body = NDJSON.to_string();
    body.push_str("{\"message\":{\"content\":\"late\"},\"done\":false}\n");
    assert_eq!(ndjson_events(&[body.as_bytes()]), ndjson_expected());
}

fn spec(params: &str) -> ExecuteSpec {
    ExecuteSpec {
        target: "m".into(),
        input: RunInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "hi".into(),
                extra_json: b"{\"name\":\"bob\"}".to_vec().into(),
            }],
            parameters_json: params.as_bytes().to_vec().into(),
            escaped_content: false,
            parameters_index: Vec::new(),
        },
        ..ExecuteSpec::default()
    }
}

#[test]
fn openai_body_merges_parameters() {
    let body = OpenAiAdapter::body(&spec(
        r#"{"temperature":0.2,"model":"x","stream":false,"stream_options":{"a":1}}"#,
    ))
    .unwrap();
    let body: Value = serde_json::from_slice(&body.to_bytes()).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi", "name": "bob"}],
            "temperature": 0.2,
            "stream": true,
            "stream_options": {"a": 1, "include_usage": true},
        })
    );
    let err = OpenAiAdapter::body(&spec("7")).unwrap_err();
    assert_eq!(
        (err.code(), err.side()),
        (FailureCode::InvalidRequest, FailureSide::Client)
    );
}

#[test]
fn ollama_body_maps_parameters() {
    let body = OllamaAdapter::body(&spec(
        r#"{"temperature":0.2,"max_tokens":5,"think":true,"n":3,"options":{"num_ctx":8}}"#,
    ))
    .unwrap();
    let body: Value = serde_json::from_slice(&body.to_bytes()).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi", "name": "bob"}],
            "stream": true,
            "think": true,
            "options": {"num_ctx": 8, "temperature": 0.2, "num_predict": 5},
        })
    );
}

#[test]
fn run_event_mapping() {
    let cases = [
        (RuntimeEvent::Start, RunEventKind::Start),
        (RuntimeEvent::Delta("a".into()), RunEventKind::Delta),
        (
            RuntimeEvent::ReasoningDelta("r".into()),
            RunEventKind::ReasoningDelta,
        ),
        (RuntimeEvent::Usage(Usage::default()), RunEventKind::Usage),
        (
            RuntimeEvent::Complete {
                finish_reason: "stop".into(),
                usage: None,
            },
            RunEventKind::Complete,
        ),
        (
            RuntimeEvent::Error(failure(FailureCode::Internal, FailureSide::Node, "x")),
            RunEventKind::Error,
        ),
    ];
    for (seq, (event, kind)) in cases.into_iter().enumerate() {
        let terminal = event.is_terminal();
        let wire = event.into_run_event(seq as u64 + 1);
        assert_eq!(wire.kind(), kind);
        assert_eq!(wire.seq, seq as u64 + 1);
        assert_eq!(
            terminal,
            matches!(kind, RunEventKind::Complete | RunEventKind::Error)
        );
    }
    let wire = RuntimeEvent::Delta("hello".into()).into_run_event(2);
    assert_eq!(wire.text, "hello");
    let wire = RuntimeEvent::Complete {
        finish_reason: "length".into(),
        usage: Some(Usage::default()),
    }
    .into_run_event(3);
    assert_eq!(
        (wire.finish_reason.as_str(), wire.usage.is_some()),
        ("length", true)
    );
}
