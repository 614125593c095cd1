//! Shared helpers: an in-process mock on port 0, a client, SSE/NDJSON parsing.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use perf::mock_provider::{MockConfig, MockServer, bind};
use serde_json::Value;

/// Starts a mock provider with `config` on an ephemeral loopback port.
pub async fn start(config: MockConfig) -> MockServer {
    bind("127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("bind mock provider")
}

/// Starts a mock provider with the default config.
pub async fn start_default() -> MockServer {
    start(MockConfig::default()).await
}

/// A client that never reuses sockets across tests and fails fast.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A chat completions request body.
pub fn chat_body(stream: bool, include_usage: Option<bool>) -> Value {
    let mut v = serde_json::json!({
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "be brief"},          // 8 bytes
            {"role": "user", "content": "hello, mock world!"}   // 18 bytes
        ],
        "stream": stream,
    });
    if let Some(u) = include_usage {
        v["stream_options"] = serde_json::json!({ "include_usage": u });
    }
    v
}

/// prompt_tokens of [`chat_body`]: ceil((8 + 18) / 4).
pub const CHAT_PROMPT_TOKENS: u64 = 7;

/// POSTs JSON to `path` (may carry a query) with extra headers.
pub async fn post(
    server: &MockServer,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut rb = client()
        .post(format!("{}{path}", server.url()))
        .body(body.to_string());
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    rb.send().await.expect("send")
}

/// GETs `path`.
pub async fn get(server: &MockServer, path: &str) -> reqwest::Response {
    client()
        .get(format!("{}{path}", server.url()))
        .send()
        .await
        .expect("send")
}

/// `GET /mock/stats` as JSON.
pub async fn stats(server: &MockServer) -> Value {
    get(server, "/mock/stats").await.json_value().await
}

/// Polls `/mock/stats` until `pred` holds (at most 5 s), returning the stats.
pub async fn wait_stats(server: &MockServer, pred: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..500 {
        let s = stats(server).await;
        if pred(&s) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("stats never matched: {}", stats(server).await);
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub event: Option<String>,
    pub data: String,
    /// Bytes of the event on the wire, including its blank line.
    pub wire_len: usize,
}

impl Sse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {}", self.data))
    }
}

/// Splits a complete SSE body into events; panics on a trailing partial event.
pub fn parse_sse(body: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let end = rest
            .find("\n\n")
            .unwrap_or_else(|| panic!("partial event: {rest:?}"));
        let block = &rest[..end];
        let (mut event, mut data) = (None, Vec::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push(v);
            } else {
                panic!("unexpected SSE line {line:?}");
            }
        }
        out.push(Sse {
            event,
            data: data.join("\n"),
            wire_len: end + 2,
        });
        rest = &rest[end + 2..];
    }
    out
}

/// Splits an NDJSON body into JSON values; every line must end with `\n`.
pub fn parse_ndjson(body: &str) -> Vec<Value> {
    assert!(body.ends_with('\n'), "NDJSON body must end with a newline");
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Extension: parse a response body as JSON.
pub trait JsonValue {
    async fn json_value(self) -> Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> Value {
        let text = self.text().await.expect("body");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

/// Reads a streaming body until it errors or ends, returning what arrived
/// and whether it ended with an error.
pub async fn read_all_lossy(resp: reqwest::Response) -> (String, bool) {
    use futures_util::StreamExt;
    let mut s = resp.bytes_stream();
    let mut buf = Vec::new();
    while let Some(item) = s.next().await {
        match item {
            Ok(b) => buf.extend_from_slice(&b),
            Err(_) => return (String::from_utf8(buf).unwrap(), true),
        }
    }
    (String::from_utf8(buf).unwrap(), false)
}
