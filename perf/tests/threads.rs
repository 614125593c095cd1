//! The thread-per-core server the binary runs: shared stats, one port.

mod common;

use common::*;
use perf::mock_provider::{MockConfig, serve_threads};

#[tokio::test]
async fn thread_per_core_serves_on_one_port_with_shared_stats() {
    let server = serve_threads("127.0.0.1:0".parse().unwrap(), MockConfig::default(), 2).unwrap();
    let url = format!("http://{}", server.local_addr());
    // Separate clients -> separate connections, spread over the threads.
    for _ in 0..8 {
        let r = client()
            .post(format!("{url}/v1/chat/completions?tokens=3"))
            .body(chat_body(true, Some(true)).to_string())
            .send()
            .await
            .unwrap();
        let events = parse_sse(&r.text().await.unwrap());
        assert_eq!(events.last().unwrap().data, "[DONE]");
    }
    let st: serde_json::Value = client()
        .get(format!("{url}/mock/stats"))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(st["requests"]["chat_completions"], 8);
    assert_eq!(st["streams_completed"], 8);
    tokio::task::spawn_blocking(move || server.shutdown())
        .await
        .unwrap();
    assert!(
        client().get(format!("{url}/health")).send().await.is_err(),
        "stopped"
    );
}
