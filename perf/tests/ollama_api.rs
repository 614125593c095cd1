//! Ollama's `/api/chat` (NDJSON and one JSON), `/api/tags`, `/api/show`, `/api/ps`,
//! `/api/pull`.

mod common;

use common::*;
use perf::mock_provider::{CONTENT_TOKEN, MockConfig, REASONING_TOKEN};
use serde_json::json;

fn body(stream: Option<bool>) -> serde_json::Value {
    let mut v =
        json!({"model": "llama3:8b", "messages": [{"role": "user", "content": "hi there"}]});
    if let Some(s) = stream {
        v["stream"] = s.into();
    }
    v
}

#[tokio::test]
async fn chat_streams_ndjson_by_default() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/api/chat?tokens=3&reasoning-tokens=2",
        &body(None),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let lines = parse_ndjson(&resp.text().await.unwrap());
    assert_eq!(lines.len(), 6);
    for l in &lines {
        assert_eq!(l["model"], "llama3:8b");
        assert!(l["created_at"].as_str().unwrap().ends_with('Z'));
        assert_eq!(l["message"]["role"], "assistant");
    }
    let (body, last) = lines.split_at(5);
    assert!(body.iter().all(|l| l["done"] == false));
    let thinking: String = body
        .iter()
        .filter_map(|l| l["message"]["thinking"].as_str())
        .collect();
    let content: String = body
        .iter()
        .map(|l| l["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(thinking, REASONING_TOKEN.repeat(2));
    assert_eq!(content, CONTENT_TOKEN.repeat(3));
    let last = &last[0];
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "stop");
    assert_eq!(last["prompt_eval_count"], 2, "ceil(8 / 4)");
    assert_eq!(last["eval_count"], 5);
    for k in [
        "total_duration",
        "load_duration",
        "prompt_eval_duration",
        "eval_duration",
    ] {
        assert!(last[k].is_u64(), "{k}");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn chat_non_stream_is_one_json() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/api/chat?tokens=4&reasoning-tokens=1",
        &body(Some(false)),
        &[],
    )
    .await;
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v = resp.json_value().await;
    assert_eq!(v["done"], true);
    assert_eq!(v["message"]["content"], CONTENT_TOKEN.repeat(4));
    assert_eq!(v["message"]["thinking"], REASONING_TOKEN);
    assert_eq!(v["eval_count"], 5);
    s.shutdown().await;
}

#[tokio::test]
async fn num_predict_limits_and_reports_length() {
    let s = start_default().await;
    let mut b = body(Some(false));
    b["options"] = json!({"num_predict": 2});
    let v = post(&s, "/api/chat?tokens=9", &b, &[])
        .await
        .json_value()
        .await;
    assert_eq!(v["done_reason"], "length");
    assert_eq!(v["eval_count"], 2);
    s.shutdown().await;
}

#[tokio::test]
async fn tags_show_ps() {
    let config = MockConfig {
        models: vec!["alpha".into(), "beta:7b".into()],
        ..Default::default()
    };
    let s = start(config).await;
    let tags = get(&s, "/api/tags").await.json_value().await;
    let names: Vec<_> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].clone())
        .collect();
    assert_eq!(names, [json!("alpha:latest"), json!("beta:7b")]);
    assert!(tags["models"][0]["details"]["family"].is_string());
    let ps = get(&s, "/api/ps").await.json_value().await;
    assert_eq!(ps["models"].as_array().unwrap().len(), 2);
    assert!(ps["models"][0]["expires_at"].is_string());
    let show = post(&s, "/api/show", &json!({"model": "alpha"}), &[])
        .await
        .json_value()
        .await;
    assert!(show["modelfile"].as_str().unwrap().contains("alpha:latest"));
    assert!(
        show["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("completion"))
    );
    let bad = post(&s, "/api/show", &json!({}), &[]).await;
    assert_eq!(bad.status(), 400);
    assert!(
        bad.json_value().await["error"].is_string(),
        "Ollama errors are plain strings"
    );
    let models = get(&s, "/v1/models").await.json_value().await;
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][1]["id"], "beta:7b");
    s.shutdown().await;
}

#[tokio::test]
async fn pull_streams_progress_for_configured_models_only() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/api/pull?tokens=3",
        &json!({"model": "mock-model"}),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let lines = parse_ndjson(&resp.text().await.unwrap());
    let statuses: Vec<_> = lines
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.len(), 7, "{statuses:?}");
    assert_eq!(statuses[0], "pulling manifest");
    assert_eq!(statuses[6], "success");
    assert_eq!(lines[3]["completed"], lines[3]["total"]);
    assert!(lines[1]["digest"].as_str().unwrap().starts_with("sha256:"));
    let one = post(
        &s,
        "/api/pull",
        &json!({"name": "mock-model:latest", "stream": false}),
        &[],
    )
    .await
    .json_value()
    .await;
    assert_eq!(one, json!({"status": "success"}));
    let missing = post(&s, "/api/pull", &json!({"model": "nope"}), &[]).await;
    assert_eq!(missing.status(), 404);
    assert!(missing.json_value().await["error"].is_string());
    let bad = post(&s, "/api/pull", &json!({}), &[]).await;
    assert_eq!(bad.status(), 400);
    s.shutdown().await;
}
