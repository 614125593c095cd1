//! Fault knobs, health, errors and the `/mock/` control routes.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use perf::mock_provider::{MockConfig, Route};
use serde_json::json;

fn content_events(body: &str) -> usize {
    body.matches("\"content\":\"tok").count()
}

#[tokio::test]
async fn status_knob_returns_openai_error_even_for_streams() {
    let s = start_default().await;
    for (status, kind) in [
        (500, "server_error"),
        (429, "rate_limit_error"),
        (400, "invalid_request_error"),
    ] {
        let resp = post(
            &s,
            "/v1/chat/completions",
            &chat_body(true, None),
            &[("x-mock-status", &status.to_string())],
        )
        .await;
        assert_eq!(resp.status(), status);
        assert_eq!(resp.headers()["content-type"], "application/json");
        assert_eq!(resp.headers().contains_key("retry-after"), status == 429);
        let v = resp.json_value().await;
        assert_eq!(v["error"]["type"], kind);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&status.to_string())
        );
    }
    let resp = post(&s, "/api/chat?status=503", &json!({"model": "m"}), &[]).await;
    assert_eq!(resp.status(), 503);
    assert!(resp.json_value().await["error"].is_string());
    let st = stats(&s).await;
    assert_eq!(st["injected_errors"], 4);
    assert_eq!(st["streams_started"], 0);
    s.shutdown().await;
}

#[tokio::test]
async fn abort_after_truncates_the_stream() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/v1/chat/completions?tokens=10&abort-after=3",
        &chat_body(true, Some(true)),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let (body, errored) = read_all_lossy(resp).await;
    assert!(errored, "the client must see an error, not a clean end");
    assert_eq!(content_events(&body), 3);
    assert!(!body.contains("[DONE]") && !body.contains("finish_reason\":\"stop"));
    let st = wait_stats(&s, |v| v["streams_aborted"] == 1).await;
    assert_eq!(st["streams_completed"], 0);
    assert_eq!(
        st["streams_client_gone"], 0,
        "an abort is not the client leaving"
    );

    // Ollama NDJSON, and abort before any token.
    let resp = post(
        &s,
        "/api/chat?tokens=5&abort-after=0",
        &json!({"model": "m"}),
        &[],
    )
    .await;
    let (body, errored) = read_all_lossy(resp).await;
    assert!(errored);
    assert_eq!(body, "");
    s.shutdown().await;
}

#[tokio::test]
async fn stall_after_holds_the_connection_until_the_client_leaves() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/v1/chat/completions?tokens=10&stall-after=2",
        &chat_body(true, None),
        &[],
    )
    .await;
    let mut stream = resp.bytes_stream();
    let mut body = String::new();
    while content_events(&body) < 2 {
        let chunk = stream.next().await.expect("more body").expect("no error");
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    // Nothing more arrives, and the stream does not end.
    let more = tokio::time::timeout(Duration::from_millis(200), stream.next()).await;
    assert!(more.is_err(), "got more bytes after the stall: {more:?}");
    assert_eq!(content_events(&body), 2);
    let st = stats(&s).await;
    assert_eq!(st["streams_stalled"], 1);
    assert_eq!(st["streams_client_gone"], 0);
    drop(stream);
    // The mock sees the connection close and counts the stream as abandoned.
    let st = wait_stats(&s, |v| v["streams_client_gone"] == 1).await;
    assert_eq!(st["streams_completed"], 0);
    assert_eq!(s.stats().streams_client_gone(), 1);
    s.shutdown().await;
}

#[tokio::test]
async fn stall_after_all_tokens_withholds_the_terminator() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/api/chat?tokens=3&stall-after=3",
        &json!({"model": "m"}),
        &[],
    )
    .await;
    let mut stream = resp.bytes_stream();
    let mut body = String::new();
    while body.matches('\n').count() < 3 {
        body.push_str(std::str::from_utf8(&stream.next().await.unwrap().unwrap()).unwrap());
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(100), stream.next())
            .await
            .is_err()
    );
    assert!(!body.contains("\"done\":true"));
    drop(stream);
    wait_stats(&s, |v| v["streams_client_gone"] == 1).await;
    s.shutdown().await;
}

#[tokio::test]
async fn client_leaving_a_slow_stream_is_counted() {
    let s = start_default().await;
    let resp = post(
        &s,
        "/v1/chat/completions?tokens=1000&delay-ms=5",
        &chat_body(true, None),
        &[],
    )
    .await;
    let mut stream = resp.bytes_stream();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    let st = wait_stats(&s, |v| v["streams_client_gone"] == 1).await;
    assert_eq!(st["streams_started"], 1);
    assert_eq!(st["streams_completed"], 0);
    s.shutdown().await;
}

#[tokio::test]
async fn delays_are_honoured() {
    let s = start_default().await;
    // prefill: headers at once, first body byte later (stream).
    let t = Instant::now();
    let resp = post(
        &s,
        "/v1/chat/completions?tokens=1&prefill-ms=150",
        &chat_body(true, None),
        &[],
    )
    .await;
    let mut stream = resp.bytes_stream();
    stream.next().await.unwrap().unwrap();
    assert!(t.elapsed() >= Duration::from_millis(150));
    drop(stream);
    // prefill delays a non-streaming response.
    let t = Instant::now();
    post(
        &s,
        "/api/chat?prefill-ms=120",
        &json!({"model": "m", "stream": false}),
        &[],
    )
    .await;
    assert!(t.elapsed() >= Duration::from_millis(120));
    // headers-delay-ms delays the headers themselves.
    let t = Instant::now();
    post(
        &s,
        "/v1/chat/completions",
        &chat_body(true, None),
        &[("x-mock-headers-delay-ms", "100")],
    )
    .await;
    assert!(t.elapsed() >= Duration::from_millis(100));
    // Per-token delays: 5 × 20 ms and 10 × 2000 µs.
    for (q, min_ms) in [
        ("tokens=5&delay-ms=20", 100),
        ("tokens=10&delay-us=2000", 20),
    ] {
        let t = Instant::now();
        let resp = post(
            &s,
            &format!("/v1/chat/completions?{q}"),
            &chat_body(true, None),
            &[],
        )
        .await;
        let body = resp.text().await.unwrap();
        assert!(body.ends_with("data: [DONE]\n\n"));
        assert!(t.elapsed() >= Duration::from_millis(min_ms), "{q}");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn health_toggles_and_reset_restores_the_default() {
    let s = start(MockConfig {
        unhealthy: true,
        ..Default::default()
    })
    .await;
    let h = get(&s, "/health").await;
    assert_eq!(h.status(), 503);
    let client = client();
    let toggle = |status: &'static str| {
        client
            .post(format!("{}/mock/health?status={status}", s.url()))
            .send()
    };
    assert_eq!(toggle("up").await.unwrap().status(), 200);
    let h = get(&s, "/health").await;
    assert_eq!(h.status(), 200);
    assert_eq!(h.json_value().await, json!({"status": "ok"}));
    assert_eq!(toggle("down").await.unwrap().status(), 200);
    assert_eq!(get(&s, "/health").await.status(), 503);
    assert_eq!(toggle("sideways").await.unwrap().status(), 400);
    toggle("up").await.unwrap();
    assert_eq!(s.stats().requests(Route::Health), 3);
    let r = client
        .post(format!("{}/mock/reset", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let st = stats(&s).await;
    assert_eq!(st["requests"]["health"], 0);
    assert_eq!(
        st["healthy"], false,
        "reset goes back to the configured health"
    );
    assert_eq!(get(&s, "/health").await.status(), 503);
    s.shutdown().await;
}

#[tokio::test]
async fn unknown_routes_bad_json_and_bad_knobs() {
    let s = start_default().await;
    let r = get(&s, "/v2/nothing").await;
    assert_eq!(r.status(), 404);
    assert_eq!(r.json_value().await["error"]["type"], "not_found_error");
    let r = get(&s, "/v1/chat/completions").await;
    assert_eq!(r.status(), 405);
    let r = client()
        .post(format!("{}/v1/chat/completions", s.url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v = r.json_value().await;
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].is_string());
    let r = post(&s, "/v1/chat/completions", &json!({"messages": []}), &[]).await;
    assert_eq!(r.status(), 400, "model is required");
    assert!(
        r.json_value().await["error"]["message"]
            .as_str()
            .unwrap()
            .contains("model")
    );
    let r = post(&s, "/v1/responses", &json!({"model": "m"}), &[]).await;
    assert_eq!(r.status(), 400, "input is required");
    let r = post(
        &s,
        "/v1/chat/completions?chunk-size=0",
        &chat_body(false, None),
        &[],
    )
    .await;
    assert_eq!(r.status(), 400);
    let r = post(
        &s,
        "/v1/chat/completions",
        &chat_body(false, None),
        &[("x-mock-tokns", "3")],
    )
    .await;
    assert_eq!(r.status(), 400);
    assert!(
        r.json_value().await["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tokns")
    );
    let r = post(&s, "/api/chat", &json!({"messages": []}), &[]).await;
    assert_eq!(r.status(), 400);
    assert!(r.json_value().await["error"].is_string());
    let st = stats(&s).await;
    assert_eq!(st["requests"]["not_found"], 2);
    assert_eq!(st["bad_requests"], 6);
    s.shutdown().await;
}

#[tokio::test]
async fn keep_alive_reuses_one_connection_and_counts_it() {
    let s = start_default().await;
    let c = client();
    for _ in 0..5 {
        let r = c
            .post(format!("{}/v1/chat/completions?tokens=2", s.url()))
            .body(chat_body(true, None).to_string())
            .send()
            .await
            .unwrap();
        assert!(r.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    }
    assert_eq!(s.stats().connections_open(), 1);
    drop(c);
    for _ in 0..500 {
        if s.stats().connections_open() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        s.stats().connections_open(),
        0,
        "the mock saw the client close"
    );
    let st = stats(&s).await;
    assert_eq!(st["streams_completed"], 5);
    assert_eq!(
        st["connections_total"], 2,
        "five requests on one socket, plus this stats call"
    );
    s.shutdown().await;
}
