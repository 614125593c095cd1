//! The Node's provider HTTP client (`node_runner::provider_http`) against
//! the real mock provider (hyper, in-process on its own thread), under both
//! monoio drivers.

use std::time::{Duration, Instant};

use node_runner::provider_http::{
    BaseUrl, ProviderClient, ProviderClientConfig, ProviderError, ProviderRequest, ProviderResponse,
};
use serde_json::Value;

mod support;
use support::{each_driver, start};

const PATIENCE: Duration = Duration::from_secs(10);

fn chat(base: &BaseUrl, knobs: &[(&'static str, &'static str)]) -> ProviderRequest {
    let body = serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": true,
    });
    let mut request = ProviderRequest::new("POST", base.clone(), "/v1/chat/completions")
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in knobs {
        request = request.header(*name, *value);
    }
    request
}

/// Every chunk, in order; the error, if the body failed.
async fn chunks(response: &mut ProviderResponse) -> (Vec<bytes::Bytes>, Option<ProviderError>) {
    let mut all = Vec::new();
    while let Some(chunk) = response.next_chunk().await {
        match chunk {
            Ok(chunk) => all.push(chunk),
            Err(error) => return (all, Some(error)),
        }
    }
    (all, None)
}

fn concat(chunks: &[bytes::Bytes]) -> String {
    String::from_utf8(chunks.concat()).unwrap()
}

async fn mock_stats(client: &ProviderClient, base: &BaseUrl) -> Value {
    let request = ProviderRequest::new("GET", base.clone(), "/mock/stats");
    let mut response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let (body, error) = chunks(&mut response).await;
    assert!(error.is_none());
    serde_json::from_str(&concat(&body)).unwrap()
}

#[test]
fn streaming_chat_completion_ends_with_done() {
    each_driver(|| async {
        let (mock, base) = start();
        let client = ProviderClient::new(ProviderClientConfig::default());
        // One event per chunk (a delay disables the mock's coalescing), so
        // the stream really arrives piece by piece.
        let request = chat(&base, &[("x-mock-tokens", "5"), ("x-mock-delay-ms", "1")]);
        let mut response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers().get("content-type"),
            Some(&b"text/event-stream"[..])
        );
        let (chunks, error) = chunks(&mut response).await;
        assert!(error.is_none(), "{error:?}");
        assert!(chunks.len() > 1, "streamed in pieces, not buffered");
        let text = concat(&chunks);
        assert_eq!(text.matches("\"content\":\"tok \"").count(), 5, "{text}");
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        // The connection went back to the pool and serves the next request.
        drop(response);
        assert_eq!(client.idle_connections(&base), 1);
        let stats = mock_stats(&client, &base).await;
        assert_eq!(stats["streams_completed"], 1);
        assert_eq!(client.stats().connects, 1);
        mock.shutdown();
    });
}

#[test]
fn ollama_ndjson_stream() {
    each_driver(|| async {
        let (mock, base) = start();
        let client = ProviderClient::new(ProviderClientConfig::default());
        let body = serde_json::json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
        });
        let request = ProviderRequest::new("POST", base.clone(), "/api/chat?tokens=3")
            .header("content-type", "application/json")
            .body(body.to_string());
        let mut response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let (chunks, error) = chunks(&mut response).await;
        assert!(error.is_none(), "{error:?}");
        let lines: Vec<Value> = concat(&chunks)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let last = lines.last().unwrap();
        assert_eq!(last["done"], true);
        let content: String = lines
            .iter()
            .filter_map(|l| l["message"]["content"].as_str())
            .collect();
        assert_eq!(content, "tok tok tok ");
        mock.shutdown();
    });
}

#[test]
fn error_status_knob_returns_the_status_and_body() {
    each_driver(|| async {
        let (mock, base) = start();
        let client = ProviderClient::new(ProviderClientConfig::default());
        let mut response = client
            .request(chat(&base, &[("x-mock-status", "500")]))
            .await
            .unwrap();
        assert_eq!(response.status(), 500);
        let (chunks, error) = chunks(&mut response).await;
        assert!(error.is_none(), "{error:?}");
        let body: Value = serde_json::from_str(&concat(&chunks)).unwrap();
        assert!(body["error"]["message"].is_string(), "{body}");
        mock.shutdown();
    });
}

#[test]
fn abort_after_is_a_truncated_body() {
    each_driver(|| async {
        let (mock, base) = start();
        let client = ProviderClient::new(ProviderClientConfig::default());
        let request = chat(
            &base,
            &[("x-mock-tokens", "10"), ("x-mock-abort-after", "2")],
        );
        let mut response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let (chunks, error) = chunks(&mut response).await;
        assert_eq!(error, Some(ProviderError::BodyTruncated));
        assert!(!concat(&chunks).contains("[DONE]"));
        assert_eq!(client.idle_connections(&base), 0);
        mock.shutdown();
    });
}

#[test]
fn dropping_a_response_mid_stream_counts_as_client_gone() {
    each_driver(|| async {
        let (mock, base) = start();
        let client = ProviderClient::new(ProviderClientConfig::default());
        let before = mock_stats(&client, &base).await["streams_client_gone"]
            .as_u64()
            .unwrap();
        let request = chat(
            &base,
            &[("x-mock-tokens", "1000"), ("x-mock-delay-ms", "2")],
        );
        let mut response = client.request(request).await.unwrap();
        let first = response.next_chunk().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: "));
        drop(response);
        // The stream reused the stats request's connection; dropping the
        // response closed it instead of parking it.
        assert_eq!(client.idle_connections(&base), 0);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let gone = mock_stats(&client, &base).await["streams_client_gone"]
                .as_u64()
                .unwrap();
            if gone == before + 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the mock never saw the client go"
            );
            monoio::time::sleep(Duration::from_millis(5)).await;
        }
        mock.shutdown();
    });
}
