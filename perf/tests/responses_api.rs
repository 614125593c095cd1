//! `POST /v1/responses`: the Responses API event sequence and JSON.

mod common;

use common::*;
use perf::mock_provider::{CONTENT_TOKEN, REASONING_TOKEN};
use serde_json::json;

fn body(stream: bool) -> serde_json::Value {
    // 12 + 4 bytes of prompt text -> 4 input tokens.
    json!({"model": "resp-model", "input": "twelve bytes", "instructions": "four", "stream": stream})
}

#[tokio::test]
async fn non_stream_response_object() {
    let s = start_default().await;
    let v = post(
        &s,
        "/v1/responses?tokens=3&cached-tokens=1",
        &body(false),
        &[],
    )
    .await
    .json_value()
    .await;
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "resp-model");
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["type"], "message");
    assert_eq!(out[0]["content"][0]["type"], "output_text");
    assert_eq!(out[0]["content"][0]["text"], CONTENT_TOKEN.repeat(3));
    let u = &v["usage"];
    assert_eq!(u["input_tokens"], 4);
    assert_eq!(u["input_tokens_details"]["cached_tokens"], 1);
    assert_eq!(u["output_tokens"], 3);
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 0);
    assert_eq!(u["total_tokens"], 7);
    s.shutdown().await;
}

#[tokio::test]
async fn stream_event_sequence() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/v1/responses?tokens=3&reasoning-tokens=2",
        &body(true),
        &[],
    )
    .await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = parse_sse(&resp.text().await.unwrap());
    let names: Vec<_> = events.iter().map(|e| e.event.clone().unwrap()).collect();
    let want = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ];
    assert_eq!(names, want);
    let json: Vec<_> = events.iter().map(Sse::json).collect();
    for (i, (e, name)) in json.iter().zip(&names).enumerate() {
        assert_eq!(&e["type"], name, "data.type matches the event name");
        assert_eq!(
            e["sequence_number"], i as u64,
            "sequence numbers count up from 0"
        );
    }
    let deltas = |kind: &str| -> String {
        json.iter()
            .filter(|e| e["type"] == kind)
            .map(|e| e["delta"].as_str().unwrap())
            .collect()
    };
    assert_eq!(
        deltas("response.output_text.delta"),
        CONTENT_TOKEN.repeat(3)
    );
    assert_eq!(
        deltas("response.reasoning_text.delta"),
        REASONING_TOKEN.repeat(2)
    );
    assert_eq!(json[12]["text"], CONTENT_TOKEN.repeat(3));
    assert_eq!(json[9]["item_id"], json[7]["item"]["id"]);
    assert_eq!(json[9]["output_index"], 1);
    let done = &json[15]["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["usage"]["output_tokens"], 5);
    assert_eq!(
        done["usage"]["output_tokens_details"]["reasoning_tokens"],
        2
    );
    assert_eq!(
        done["output"][0]["content"][0]["text"],
        REASONING_TOKEN.repeat(2)
    );
    assert_eq!(
        done["output"][1]["content"][0]["text"],
        CONTENT_TOKEN.repeat(3)
    );
    assert_eq!(json[0]["response"]["status"], "in_progress");
    s.shutdown().await;
}

#[tokio::test]
async fn done_texts_equal_padded_chunked_deltas() {
    let s = start_default().await;
    let path = "/v1/responses?tokens=7&chunk-size=3&event-bytes=600";
    let events = parse_sse(&post(&s, path, &body(true), &[]).await.text().await.unwrap());
    let json: Vec<_> = events.iter().map(Sse::json).collect();
    let deltas: Vec<_> = events
        .iter()
        .zip(&json)
        .filter(|(_, j)| j["type"] == "response.output_text.delta")
        .collect();
    assert_eq!(deltas.len(), 3);
    for (e, _) in &deltas {
        assert!(
            e.wire_len.abs_diff(600) <= 16,
            "event of {} bytes",
            e.wire_len
        );
    }
    let joined: String = deltas
        .iter()
        .map(|(_, j)| j["delta"].as_str().unwrap())
        .collect();
    let done = json
        .iter()
        .find(|j| j["type"] == "response.output_text.done")
        .unwrap();
    assert_eq!(done["text"], joined);
    let completed = json.last().unwrap();
    assert_eq!(
        completed["response"]["output"][0]["content"][0]["text"],
        joined
    );
    s.shutdown().await;
}

#[tokio::test]
async fn max_output_tokens_makes_it_incomplete() {
    let s = start_default().await;
    let mut b = body(true);
    b["max_output_tokens"] = 2.into();
    let events = parse_sse(
        &post(&s, "/v1/responses?tokens=5", &b, &[])
            .await
            .text()
            .await
            .unwrap(),
    );
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("response.incomplete"));
    let r = &last.json()["response"];
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(r["usage"]["output_tokens"], 2);
    s.shutdown().await;
}

#[tokio::test]
async fn input_items_count_towards_input_tokens() {
    let s = start_default().await;
    let b = json!({
        "model": "m",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "0123456789"}]}],
    });
    let v = post(&s, "/v1/responses", &b, &[]).await.json_value().await;
    assert_eq!(v["usage"]["input_tokens"], 3, "ceil(10 / 4)");
    s.shutdown().await;
}
