//! `POST /v1/chat/completions`: stream and non-stream shapes, usage,
//! reasoning, chunking and padding.

mod common;

use common::*;
use perf::mock_provider::{CONTENT_TOKEN, REASONING_TOKEN};

#[tokio::test]
async fn non_stream_shape_and_usage() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/v1/chat/completions?tokens=5",
        &chat_body(false, None),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v = resp.json_value().await;
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(v["model"], "test-model");
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert_eq!(c["message"]["content"], CONTENT_TOKEN.repeat(5));
    assert!(c["message"].get("reasoning_content").is_none());
    assert_eq!(c["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(u["prompt_tokens"], CHAT_PROMPT_TOKENS);
    assert_eq!(u["completion_tokens"], 5);
    assert_eq!(u["total_tokens"], CHAT_PROMPT_TOKENS + 5);
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(u["completion_tokens_details"]["reasoning_tokens"], 0);
    s.shutdown().await;
}

#[tokio::test]
async fn non_stream_reasoning_cached_and_max_tokens() {
    let s = start_default().await;
    let mut body = chat_body(false, None);
    body["max_tokens"] = 3.into();
    let h = [
        ("x-mock-reasoning-tokens", "2"),
        ("x-mock-cached-tokens", "4"),
    ];
    let v = post(&s, "/v1/chat/completions?tokens=10", &body, &h)
        .await
        .json_value()
        .await;
    let c = &v["choices"][0];
    assert_eq!(c["message"]["content"], CONTENT_TOKEN.repeat(3));
    assert_eq!(c["message"]["reasoning_content"], REASONING_TOKEN.repeat(2));
    assert_eq!(c["finish_reason"], "length");
    let u = &v["usage"];
    assert_eq!(
        u["completion_tokens"], 5,
        "vLLM counts reasoning in completion tokens"
    );
    assert_eq!(u["completion_tokens_details"]["reasoning_tokens"], 2);
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 4);
    s.shutdown().await;
}

#[tokio::test]
async fn stream_shape_without_usage() {
    let s = start_default().await;
    for include in [None, Some(false)] {
        let resp = post(
            &s,
            "/v1/chat/completions?tokens=4",
            &chat_body(true, include),
            &[],
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let events = parse_sse(&resp.text().await.unwrap());
        assert_eq!(events.last().unwrap().data, "[DONE]");
        let chunks: Vec<_> = events[..events.len() - 1].iter().map(Sse::json).collect();
        // role chunk, 4 content chunks, finish chunk
        assert_eq!(chunks.len(), 6);
        for c in &chunks {
            assert_eq!(c["object"], "chat.completion.chunk");
            assert_eq!(c["model"], "test-model");
            assert_eq!(c["id"], chunks[0]["id"]);
            assert!(c.get("usage").is_none());
        }
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let text: String = chunks[1..5]
            .iter()
            .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(text, CONTENT_TOKEN.repeat(4));
        assert!(chunks[1]["choices"][0]["finish_reason"].is_null());
        assert_eq!(chunks[5]["choices"][0]["finish_reason"], "stop");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn stream_include_usage_and_reasoning() {
    let s = start_default().await;
    let h = [("x-mock-reasoning-tokens", "3")];
    let resp = post(
        &s,
        "/v1/chat/completions?tokens=2",
        &chat_body(true, Some(true)),
        &h,
    )
    .await;
    let events = parse_sse(&resp.text().await.unwrap());
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<_> = events[..events.len() - 1].iter().map(Sse::json).collect();
    // role, 3 reasoning, 2 content, finish, usage
    assert_eq!(chunks.len(), 8);
    let deltas = |field: &str| -> String {
        chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][field].as_str())
            .collect()
    };
    assert_eq!(deltas("reasoning_content"), REASONING_TOKEN.repeat(3));
    assert_eq!(deltas("content"), CONTENT_TOKEN.repeat(2));
    // Reasoning strictly before content.
    assert!(
        chunks[1..4]
            .iter()
            .all(|c| c["choices"][0]["delta"]["reasoning_content"].is_string())
    );
    let usage = &chunks[7];
    assert_eq!(usage["choices"], serde_json::json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], CHAT_PROMPT_TOKENS);
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert_eq!(usage["usage"]["total_tokens"], CHAT_PROMPT_TOKENS + 5);
    assert_eq!(
        usage["usage"]["completion_tokens_details"]["reasoning_tokens"],
        3
    );
    assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let st = stats(&s).await;
    assert_eq!(st["streams_started"], 1);
    assert_eq!(st["streams_completed"], 1);
    assert_eq!(st["streams_client_gone"], 0);
    s.shutdown().await;
}

#[tokio::test]
async fn chunk_size_groups_tokens() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/v1/chat/completions?tokens=10&chunk-size=4",
        &chat_body(true, None),
        &[],
    )
    .await;
    let events = parse_sse(&resp.text().await.unwrap());
    let contents: Vec<String> = events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .filter_map(|e| {
            e.json()["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        contents,
        ["tok tok tok tok ", "tok tok tok tok ", "tok tok "]
    );
    s.shutdown().await;
}

#[tokio::test]
async fn event_bytes_pads_each_token_event() {
    let s = start_default().await;
    for n in [512usize, 65_536] {
        let path = format!("/v1/chat/completions?tokens=3&event-bytes={n}");
        let resp = post(&s, &path, &chat_body(true, None), &[]).await;
        let events = parse_sse(&resp.text().await.unwrap());
        let token_events: Vec<_> = events
            .iter()
            .filter(|e| e.data.contains("\"delta\":{\"content\":\"tok"))
            .collect();
        assert_eq!(token_events.len(), 3);
        for e in token_events {
            assert_eq!(
                e.wire_len, n,
                "each token event is exactly event-bytes on the wire"
            );
            let content = e.json()["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(content.starts_with(CONTENT_TOKEN) && content[4..].bytes().all(|b| b == b'.'));
        }
    }
    s.shutdown().await;
}

#[tokio::test]
async fn model_is_echoed_with_json_escaping() {
    let s = start_default().await;
    let mut body = chat_body(true, None);
    body["model"] = "we\"ird/model\\name".into();
    let events = parse_sse(
        &post(&s, "/v1/chat/completions?tokens=1", &body, &[])
            .await
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(events[0].json()["model"], "we\"ird/model\\name");
    s.shutdown().await;
}

#[tokio::test]
async fn prompt_tokens_follow_content_bytes() {
    let s = start_default().await;
    let body = serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "abcdefghi"}]}],
    });
    let v = post(&s, "/v1/chat/completions", &body, &[])
        .await
        .json_value()
        .await;
    assert_eq!(v["usage"]["prompt_tokens"], 3, "ceil(9 / 4)");
    s.shutdown().await;
}
