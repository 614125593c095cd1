//! Normalized runs end to end (F8–F15): the Edge in-process (its
//! `Dispatcher` is the `SubmitRun` surface), the real `iop-node` binary as a
//! process, and the mock provider on loopback — real sockets everywhere.
//!
//! The node's providers all point at one mock provider; each provider's
//! configured `headers` carry the mock's `x-mock-*` knobs, so one node
//! offers a well-behaved provider of each kind plus one per failure.

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use edge_proxy::config::EdgeConfig;
use edge_proxy::dispatch::{RunStream, SubmitError, SubmitRun, is_terminal};
use edge_proxy::server::{EdgeServer, StartOptions};
use framing::io_driver::IoDriver;
use perf::mock_provider::{MockConfig, MockThreads, Route, serve_threads};
use proto::v1::{CancelStatus, ChatMessage, FailureCode, RunEvent, RunEventKind, RunInput};
use serde_json::Value;

mod support;
use support::process::{PATIENCE, Process, bin, spawn_logged, wait_for_line};

fn drivers() -> Vec<IoDriver> {
    let mut all = vec![IoDriver::Epoll];
    if monoio::utils::detect_uring() {
        all.push(IoDriver::Uring);
    }
    all
}

/// A provider that answers every request with an unparsable SSE body.
fn start_garbage_provider() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n\
                      data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {not json\n\n",
                );
            });
        }
    });
    addr
}

fn config(mock: std::net::SocketAddr, garbage: std::net::SocketAddr) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: oa
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "5"}}
      - id: vl
        kind: vllm
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "4", x-mock-reasoning-tokens: "3", x-mock-cached-tokens: "2"}}
      - id: ol
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "4", x-mock-reasoning-tokens: "2"}}
      - id: slow
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        max_concurrency: 1
        headers: {{x-mock-tokens: "100000", x-mock-delay-ms: "20"}}
      - id: broken
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-status: "503"}}
      - id: aborts
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "10", x-mock-abort-after: "2"}}
      - id: hangs
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        request_timeout_ms: 300
        headers: {{x-mock-headers-delay-ms: "600000"}}
      - id: down
        kind: openai_compat
        base_url: http://127.0.0.1:1
        targets: [m]
      - id: garbage
        kind: openai_compat
        base_url: http://{garbage}
        targets: [m]
  - id: node-b
    token: tok-b
    providers:
      - id: b-oa
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
model_groups:
  - name: m
    providers: [oa]
"#
    )
}

/// The Edge (in-process), the mock provider and one `iop-node` process.
struct Stack {
    edge: EdgeServer,
    mock: MockThreads,
    data_dir: PathBuf,
    driver: IoDriver,
    node: Option<Process>,
}

impl Stack {
    fn start(driver: IoDriver, name: &str) -> Self {
        let mock = serve_threads("127.0.0.1:0".parse().unwrap(), MockConfig::default(), 1)
            .expect("mock provider starts");
        let yaml = config(mock.local_addr(), start_garbage_provider());
        let config = EdgeConfig::from_yaml_str(&yaml, "runs-e2e.yaml").expect("valid config");
        let mut options = StartOptions::new(driver);
        options.workers = 2;
        let edge = EdgeServer::start(config, options).expect("edge starts");
        let data_dir = std::env::temp_dir().join(format!(
            "iop-runs-{name}-{}-{}",
            std::process::id(),
            driver.as_str()
        ));
        let _ = std::fs::remove_dir_all(&data_dir);
        let mut stack = Self {
            edge,
            mock,
            data_dir,
            driver,
            node: None,
        };
        stack.start_node();
        stack
    }

    /// Starts `iop-node` and waits until it is ready on the Edge.
    fn start_node(&mut self) {
        let before = self.generation();
        let mut cmd = Command::new(bin("iop-node"));
        cmd.args([
            "--edge",
            &self.edge.node_addr.to_string(),
            "--data-dir",
            self.data_dir.to_str().unwrap(),
            "--log-format",
            "json",
        ])
        .env("IOP_NODE_TOKEN", "tok-a")
        .env("IOP_IO_DRIVER", self.driver.as_str());
        let (node, log) = spawn_logged(cmd);
        wait_for_line(&log, "node_ready");
        // Keep draining the log so the node never blocks on a full pipe.
        std::thread::spawn(move || for _ in log {});
        self.node = Some(node);
        wait_until("the node to be ready on the edge", || {
            self.generation() > before
        });
    }

    fn generation(&self) -> u64 {
        self.edge
            .registry
            .ready_nodes()
            .iter()
            .find(|(id, _, _)| id == "node-a")
            .map_or(0, |(_, generation, _)| *generation)
    }

    fn kill_node(&mut self) {
        drop(self.node.take());
        wait_until("the edge to see the node gone", || self.generation() == 0);
    }

    async fn submit(&self, adapter: &str) -> RunStream {
        self.try_submit(adapter, "m").await.expect("submitted")
    }

    async fn try_submit(&self, adapter: &str, target: &str) -> Result<RunStream, SubmitError> {
        let run = SubmitRun {
            adapter: adapter.into(),
            target: target.into(),
            input: RunInput {
                messages: vec![ChatMessage {
                    role: "user".into(),
                    content: "hello".into(),
                    ..ChatMessage::default()
                }],
                ..RunInput::default()
            },
            node: Some("node-a".into()),
            session_id: "s-1".into(),
            ..SubmitRun::default()
        };
        within(self.edge.dispatcher.submit_run(run)).await
    }

    /// `iop-node runs --json` for this node's data dir.
    fn stored_runs(&self) -> Vec<Value> {
        stored_runs(&self.data_dir)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        drop(self.node.take());
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

fn stored_runs(data_dir: &Path) -> Vec<Value> {
    let out = Command::new(bin("iop-node"))
        .args(["runs", "--json", "--limit", "100", "--data-dir"])
        .arg(data_dir)
        .output()
        .expect("iop-node runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("no answer within the test's patience")
}

fn block_on<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Every event of `stream` up to its end, checking the stream contract:
/// numbered from 1 without gaps, exactly one terminal, and it is last.
async fn events(mut stream: RunStream) -> Vec<RunEvent> {
    let mut all = Vec::new();
    while let Some(event) = within(stream.next()).await {
        all.push(event);
    }
    check_contract(&all);
    all
}

fn check_contract(events: &[RunEvent]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(seqs, expected, "events are numbered 1.. in order");
    assert_eq!(events.iter().filter(|e| is_terminal(e)).count(), 1);
    assert!(is_terminal(events.last().expect("at least one event")));
}

fn kinds(events: &[RunEvent]) -> Vec<RunEventKind> {
    events.iter().map(RunEvent::kind).collect()
}

fn error_code(events: &[RunEvent]) -> FailureCode {
    let last = events.last().expect("events");
    assert_eq!(last.kind(), RunEventKind::Error, "{events:?}");
    last.failure.as_ref().expect("failure").code()
}

fn text(events: &[RunEvent], kind: RunEventKind) -> String {
    events
        .iter()
        .filter(|e| e.kind() == kind)
        .map(|e| e.text.as_str())
        .collect()
}

#[test]
fn each_adapter_streams_ordered_events_ending_in_one_terminal() {
    for driver in drivers() {
        let stack = Stack::start(driver, "adapters");
        let mut bus = stack.edge.bus.subscribe_runs();
        block_on(async {
            // openai_compat: deltas and usage. The mock reports the
            // breakdown (as vLLM does), zeros included, so it is present.
            let stream = stack.submit("oa").await;
            let run_id = stream.run_id().to_owned();
            let all = events(stream).await;
            assert_eq!(all[0].kind(), RunEventKind::Start);
            assert_eq!(all.last().unwrap().kind(), RunEventKind::Complete);
            assert!(!text(&all, RunEventKind::Delta).is_empty());
            assert!(text(&all, RunEventKind::ReasoningDelta).is_empty());
            let usage = all.last().unwrap().usage.expect("usage on complete");
            assert_eq!(usage.output_tokens, 5);
            assert_eq!(usage.reasoning_tokens, Some(0));
            // The bus saw the same run, in order (published on the edge
            // core right after the stream got each event).
            for expected in &all {
                let event = within(bus.recv()).await.expect("bus event");
                assert_eq!(&*event.run_id, run_id);
                assert_eq!(&event.event, expected);
            }

            // vllm: reasoning deltas, and the breakdown it reported.
            let all = events(stack.submit("vl").await).await;
            assert!(!text(&all, RunEventKind::ReasoningDelta).is_empty());
            let usage = all.last().unwrap().usage.expect("usage");
            assert_eq!(usage.reasoning_tokens, Some(3));
            assert_eq!(usage.cached_input_tokens, Some(2));

            // ollama: message.thinking becomes reasoning deltas.
            let all = events(stack.submit("ol").await).await;
            assert_eq!(all.last().unwrap().kind(), RunEventKind::Complete);
            assert!(!text(&all, RunEventKind::ReasoningDelta).is_empty());
            assert!(!text(&all, RunEventKind::Delta).is_empty());
            // Ollama reports no breakdown: nothing is estimated (F18).
            let usage = all.last().unwrap().usage.expect("usage");
            assert!(usage.output_tokens > 0);
            assert_eq!(usage.reasoning_tokens, None);
            assert_eq!(usage.cached_input_tokens, None);
        });
        // Every run is in the node's store as completed.
        wait_until("three completed runs in the store", || {
            stack
                .stored_runs()
                .iter()
                .filter(|r| r["status"] == "completed")
                .count()
                == 3
        });
    }
}

#[test]
fn over_capacity_is_refused_at_once_and_cancel_stops_the_provider_request() {
    for driver in drivers() {
        let stack = Stack::start(driver, "capacity");
        let stats = stack.mock.stats();
        block_on(async {
            let gone_before = stats.streams_client_gone();
            let mut first = stack.submit("slow").await;
            assert_eq!(
                within(first.next()).await.unwrap().kind(),
                RunEventKind::Start
            );
            assert_eq!(
                within(first.next()).await.unwrap().kind(),
                RunEventKind::Delta
            );

            // max_concurrency 1: the second is refused at once, typed.
            let refused = events(stack.submit("slow").await).await;
            assert_eq!(kinds(&refused), [RunEventKind::Error]);
            assert_eq!(error_code(&refused), FailureCode::OverCapacity);

            // Cancel mid-stream: one `cancelled` terminal, and the mock sees
            // its client (the node) leave.
            first.cancel();
            let mut rest = Vec::new();
            while let Some(event) = within(first.next()).await {
                rest.push(event);
            }
            assert_eq!(
                rest.last().map(RunEvent::kind),
                Some(RunEventKind::Cancelled)
            );
            assert_eq!(rest.iter().filter(|e| is_terminal(e)).count(), 1);
            wait_until("the provider to see the request closed", || {
                stats.streams_client_gone() > gone_before
            });

            // Capacity came back; dropping a stream cancels its run too.
            let mut second = stack.submit("slow").await;
            assert_eq!(
                within(second.next()).await.unwrap().kind(),
                RunEventKind::Start
            );
            drop(second);
            wait_until("the dropped run's provider request to close", || {
                stats.streams_client_gone() > gone_before + 1
            });
            // ... and its capacity came back as well.
            let mut third = stack.submit("slow").await;
            assert_eq!(
                within(third.next()).await.unwrap().kind(),
                RunEventKind::Start
            );
            third.cancel();
            while within(third.next()).await.is_some() {}
        });
        wait_until("the cancelled runs in the store", || {
            let runs = stack.stored_runs();
            let count = |s: &str| runs.iter().filter(|r| r["status"] == s).count();
            count("cancelled") == 3 && count("rejected") == 1
        });
    }
}

#[test]
fn bad_input_and_provider_failures_end_in_one_typed_error() {
    let driver = *drivers().last().unwrap();
    let stack = Stack::start(driver, "failures");
    block_on(async {
        let cases = [
            ("nope", "m", FailureCode::UnknownAdapter),
            ("oa", "other-model", FailureCode::UnknownTarget),
            ("broken", "m", FailureCode::ProviderHttpStatus),
            ("aborts", "m", FailureCode::ProviderUnreachable),
            ("hangs", "m", FailureCode::HardTimeout),
            ("down", "m", FailureCode::ProviderUnreachable),
            ("garbage", "m", FailureCode::ProviderMalformed),
        ];
        for (adapter, target, code) in cases {
            let stream = stack.try_submit(adapter, target).await.expect("submitted");
            let all = events(stream).await;
            assert_eq!(error_code(&all), code, "{adapter}/{target}: {all:?}");
            let failure = all.last().unwrap().failure.as_ref().unwrap();
            assert!(!failure.message.is_empty(), "{adapter}: a clear message");
            if adapter == "broken" {
                assert_eq!(failure.http_status, 503);
            }
        }
        // Capacity was returned on every path: a good run still goes.
        let all = events(stack.submit("oa").await).await;
        assert_eq!(all.last().unwrap().kind(), RunEventKind::Complete);
    });
    wait_until("every failure recorded", || {
        let runs = stack.stored_runs();
        let count = |s: &str| runs.iter().filter(|r| r["status"] == s).count();
        count("rejected") == 2 && count("failed") == 5 && count("completed") == 1
    });
    let runs = stack.stored_runs();
    let failed = runs.iter().find(|r| r["status"] == "failed").unwrap();
    assert!(
        failed["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{failed}"
    );
}

#[test]
fn dispatch_refuses_clearly_when_no_node_can_take_the_run() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start(driver, "select");
    block_on(async {
        let mut run = SubmitRun {
            adapter: "oa".into(),
            target: "m".into(),
            ..SubmitRun::default()
        };
        // F8: one ready node, none named → that node.
        let stream = within(stack.edge.dispatcher.submit_run(run.clone()))
            .await
            .expect("single-node fallback");
        assert_eq!(stream.node().0, "node-a");
        drop(stream);

        run.node = Some("node-b".into());
        assert_eq!(
            within(stack.edge.dispatcher.submit_run(run.clone()))
                .await
                .unwrap_err(),
            SubmitError::NodeNotConnected("node-b".into())
        );
        run.adapter.clear();
        assert!(matches!(
            within(stack.edge.dispatcher.submit_run(run.clone())).await,
            Err(SubmitError::Invalid(_))
        ));
    });
    stack.kill_node();
    block_on(async {
        let run = SubmitRun {
            adapter: "oa".into(),
            target: "m".into(),
            ..SubmitRun::default()
        };
        assert_eq!(
            within(stack.edge.dispatcher.submit_run(run))
                .await
                .unwrap_err(),
            SubmitError::NoReadyNode
        );
    });
}

#[test]
fn a_node_that_dies_mid_run_ends_the_stream_with_node_disconnected() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start(driver, "dies");
    block_on(async {
        let mut stream = stack.submit("slow").await;
        assert_eq!(
            within(stream.next()).await.unwrap().kind(),
            RunEventKind::Start
        );
        stack.kill_node();
        let mut rest = Vec::new();
        while let Some(event) = within(stream.next()).await {
            rest.push(event);
        }
        assert_eq!(error_code(&rest), FailureCode::NodeDisconnected);
        assert_eq!(rest.iter().filter(|e| is_terminal(e)).count(), 1);
    });
}

#[test]
fn session_terminate_is_done_where_supported_and_unsupported_elsewhere() {
    let driver = *drivers().last().unwrap();
    let stack = Stack::start(driver, "terminate");
    block_on(async {
        let dispatcher = &stack.edge.dispatcher;
        let ollama = within(dispatcher.terminate_session(None, "ol", "m", "s-1"))
            .await
            .expect("sent");
        assert_eq!(ollama.status(), CancelStatus::Done, "{ollama:?}");
        let openai = within(dispatcher.terminate_session(None, "oa", "m", "s-1"))
            .await
            .expect("sent");
        assert_eq!(openai.status(), CancelStatus::Unsupported);
        let unknown = within(dispatcher.terminate_session(None, "nope", "m", "s-1"))
            .await
            .expect("sent");
        assert_eq!(unknown.status(), CancelStatus::Failed);
        assert!(unknown.message.contains("nope"));
    });
    assert!(stack.mock.stats().requests(Route::OllamaChat) >= 1);
}

#[test]
fn the_run_store_keeps_runs_across_a_node_restart() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start(driver, "restart");
    let first = block_on(async {
        let stream = stack.submit("oa").await;
        let id = stream.run_id().to_owned();
        events(stream).await;
        id
    });
    wait_until("the first run recorded", || {
        stack
            .stored_runs()
            .iter()
            .any(|r| r["run_id"] == first.as_str())
    });
    stack.kill_node();
    stack.start_node();
    let second = block_on(async {
        let stream = stack.submit("ol").await;
        let id = stream.run_id().to_owned();
        events(stream).await;
        id
    });
    wait_until("both runs recorded", || {
        let runs = stack.stored_runs();
        runs.iter().any(|r| r["run_id"] == second.as_str())
            && runs.iter().any(|r| r["run_id"] == first.as_str())
    });
    let runs = stack.stored_runs();
    let record = runs.iter().find(|r| r["run_id"] == first.as_str()).unwrap();
    assert_eq!(record["status"], "completed");
    assert_eq!(record["adapter"], "oa");
    assert_eq!(record["target"], "m");
    assert_eq!(record["session_id"], "s-1");
    assert_eq!(record["background"], false);
}
