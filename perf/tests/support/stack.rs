//! One Edge (in-process, its `Dispatcher` is the `SubmitRun` surface), the
//! real `iop-node` binary as a process, and the mock provider on loopback.
//!
//! The node's providers all point at one mock provider; each provider's
//! configured `headers` carry the mock's `x-mock-*` knobs, so one node
//! offers a well-behaved provider of each kind plus one per failure.

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edge_proxy::config::EdgeConfig;
use edge_proxy::dispatch::{RunStream, SubmitError, SubmitRun, is_terminal};
use edge_proxy::server::{EdgeServer, StartOptions};
use framing::io_driver::IoDriver;
use perf::mock_provider::{MockConfig, MockThreads, serve_threads};
use proto::v1::{ChatMessage, FailureCode, RunEvent, RunEventKind, RunInput};
use serde_json::Value;

use super::process::{PATIENCE, Process, bin, spawn_logged};

pub(crate) fn drivers() -> Vec<IoDriver> {
    let mut all = vec![IoDriver::Epoll];
    if monoio::utils::detect_uring() {
        all.push(IoDriver::Uring);
    }
    all
}

/// A provider that answers every request with an unparsable SSE body.
pub(crate) fn start_garbage_provider() -> std::net::SocketAddr {
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

pub(crate) fn config(mock: std::net::SocketAddr, garbage: std::net::SocketAddr) -> String {
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
      - id: oa-big
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "3000000"}}
      - id: rejects
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-status: "400"}}
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
      - id: ol-slow
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        max_concurrency: 1
        headers: {{x-mock-tokens: "100000", x-mock-delay-ms: "20"}}
      - id: garbage-ol
        kind: ollama
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
  - name: chat
    target: m
    providers: [oa]
  - name: ollama
    target: m
    providers: [ol]
  - name: ollama-slow
    target: m
    providers: [ol-slow]
  - name: mixed
    target: m
    providers: [oa, ol]
  - name: big
    target: m
    providers: [oa-big]
  - name: mixed-big
    target: m
    providers: [oa-big, ol]
queue:
  max_waiting: 4
  timeout_ms: 400
"#
    )
}

/// The Edge (in-process), the mock provider and one `iop-node` process.
pub(crate) struct Stack {
    pub(crate) edge: EdgeServer,
    pub(crate) mock: MockThreads,
    pub(crate) data_dir: PathBuf,
    pub(crate) driver: IoDriver,
    pub(crate) node: Option<Process>,
    /// Extra `iop-node` arguments (e.g. `--workers 2`).
    pub(crate) node_args: Vec<String>,
    /// `IOP_LOG` for the node (its default when `None`).
    pub(crate) node_log_filter: Option<String>,
    /// Where the node dials, when not the Edge itself (a proxy in front).
    pub(crate) node_edge: Option<std::net::SocketAddr>,
    /// Every log line of the node processes started so far.
    pub(crate) node_log: Arc<Mutex<Vec<String>>>,
}

impl Stack {
    pub(crate) fn start(driver: IoDriver, name: &str) -> Self {
        let mut stack = Self::start_edge(driver, name, config);
        stack.start_node();
        stack
    }

    /// The Edge (configured by `config(mock, garbage provider)`) and the
    /// mock provider, without a node: set the `node_*` fields, then call
    /// [`start_node`](Self::start_node).
    pub(crate) fn start_edge(
        driver: IoDriver,
        name: &str,
        config: fn(std::net::SocketAddr, std::net::SocketAddr) -> String,
    ) -> Self {
        Self::start_edge_with(driver, name, config, |_| {})
    }

    /// [`start_edge`](Self::start_edge), with `tune` adjusting the Edge's
    /// start options (e.g. a shortened heartbeat profile) last.
    pub(crate) fn start_edge_with(
        driver: IoDriver,
        name: &str,
        config: fn(std::net::SocketAddr, std::net::SocketAddr) -> String,
        tune: impl FnOnce(&mut StartOptions),
    ) -> Self {
        let mock = serve_threads("127.0.0.1:0".parse().unwrap(), MockConfig::default(), 1)
            .expect("mock provider starts");
        let yaml = config(mock.local_addr(), start_garbage_provider());
        let config = EdgeConfig::from_yaml_str(&yaml, "runs-e2e.yaml").expect("valid config");
        let mut options = StartOptions::new(driver);
        options.workers = 2;
        // Short client timeouts, so the slow-client tests are quick.
        options.ingress_limits.head_timeout_ms = 300;
        options.ingress_limits.body_timeout_ms = 300;
        options.ingress_limits.max_body_bytes = 64 * 1024;
        tune(&mut options);
        let edge = EdgeServer::start(config, options).expect("edge starts");
        let data_dir = std::env::temp_dir().join(format!(
            "iop-runs-{name}-{}-{}",
            std::process::id(),
            driver.as_str()
        ));
        let _ = std::fs::remove_dir_all(&data_dir);
        Self {
            edge,
            mock,
            data_dir,
            driver,
            node: None,
            node_args: Vec::new(),
            node_log_filter: None,
            node_edge: None,
            node_log: Arc::default(),
        }
    }

    /// Starts `iop-node` and waits until it is ready on the Edge.
    pub(crate) fn start_node(&mut self) {
        let before = self.generation();
        let mut cmd = Command::new(bin("iop-node"));
        cmd.args([
            "--edge",
            &self.node_edge.unwrap_or(self.edge.node_addr).to_string(),
            "--data-dir",
            self.data_dir.to_str().unwrap(),
            "--log-format",
            "json",
        ])
        .args(&self.node_args)
        .env("IOP_NODE_TOKEN", "tok-a")
        .env("IOP_IO_DRIVER", self.driver.as_str());
        if let Some(filter) = &self.node_log_filter {
            cmd.env("IOP_LOG", filter);
        }
        let (node, log) = spawn_logged(cmd);
        // Keep every line (and keep draining, so the node never blocks on
        // a full pipe).
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let keep = Arc::clone(&self.node_log);
        std::thread::spawn(move || {
            for line in log {
                if line.contains("node_ready") {
                    let _ = ready_tx.send(());
                }
                keep.lock().unwrap().push(line);
            }
        });
        ready_rx
            .recv_timeout(PATIENCE)
            .expect("a node_ready log line");
        self.node = Some(node);
        wait_until("the node to be ready on the edge", || {
            self.generation() > before
        });
    }

    pub(crate) fn generation(&self) -> u64 {
        self.edge
            .registry
            .ready_nodes()
            .iter()
            .find(|(id, _, _)| id == "node-a")
            .map_or(0, |(_, generation, _)| *generation)
    }

    pub(crate) fn kill_node(&mut self) {
        drop(self.node.take());
        wait_until("the edge to see the node gone", || self.generation() == 0);
    }

    pub(crate) async fn submit(&self, adapter: &str) -> RunStream {
        self.try_submit(adapter, "m").await.expect("submitted")
    }

    pub(crate) async fn try_submit(
        &self,
        adapter: &str,
        target: &str,
    ) -> Result<RunStream, SubmitError> {
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

    /// The node's JSON log records whose `event` is `event`, in order.
    pub(crate) fn node_events(&self, event: &str) -> Vec<Value> {
        self.node_log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|record| record["event"] == event)
            .collect()
    }

    /// `iop-node runs --json` for this node's data dir.
    pub(crate) fn stored_runs(&self) -> Vec<Value> {
        stored_runs(&self.data_dir)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        drop(self.node.take());
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

pub(crate) fn stored_runs(data_dir: &Path) -> Vec<Value> {
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

pub(crate) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub(crate) async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("no answer within the test's patience")
}

pub(crate) fn block_on<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Every event of `stream` up to its end, checking the stream contract:
/// numbered from 1 without gaps, exactly one terminal, and it is last.
pub(crate) async fn events(mut stream: RunStream) -> Vec<RunEvent> {
    let mut all = Vec::new();
    while let Some(event) = within(stream.next()).await {
        all.push(event);
    }
    check_contract(&all);
    all
}

pub(crate) fn check_contract(events: &[RunEvent]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(seqs, expected, "events are numbered 1.. in order");
    assert_eq!(events.iter().filter(|e| is_terminal(e)).count(), 1);
    assert!(is_terminal(events.last().expect("at least one event")));
}

pub(crate) fn kinds(events: &[RunEvent]) -> Vec<RunEventKind> {
    events.iter().map(RunEvent::kind).collect()
}

pub(crate) fn error_code(events: &[RunEvent]) -> FailureCode {
    let last = events.last().expect("events");
    assert_eq!(last.kind(), RunEventKind::Error, "{events:?}");
    last.failure.as_ref().expect("failure").code()
}

pub(crate) fn text(events: &[RunEvent], kind: RunEventKind) -> String {
    events
        .iter()
        .filter(|e| e.kind() == kind)
        .map(|e| std::str::from_utf8(&e.text).expect("UTF-8 text"))
        .collect()
}

/// `read` that retries when a signal interrupts it (std's `read` does not;
/// `read_exact` and `read_to_end` do).
pub(crate) fn read_some(socket: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match socket.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// Sends one whole HTTP/1.1 request (it should say `connection: close`) to
/// `addr` and returns every byte of the response, read until the server
/// closes or 15 s pass without a byte.
pub(crate) fn http_exchange(addr: std::net::SocketAddr, request: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut socket = std::net::TcpStream::connect(addr).expect("connect");
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(15)))
        .unwrap();
    socket.write_all(request).unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match read_some(&mut socket, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
        }
    }
    response
}

/// POSTs the JSON `body` to the Edge's `/v1/chat/completions` at `addr`;
/// the whole response, lossily as text.
pub(crate) fn post_chat(addr: std::net::SocketAddr, body: &str) -> String {
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    String::from_utf8_lossy(&http_exchange(addr, request.as_bytes())).into_owned()
}

/// The body of a chunked or close-delimited HTTP/1.1 response, de-chunked.
pub(crate) fn http_body(response: &str) -> String {
    let (head, rest) = response.split_once("\r\n\r\n").expect("a head");
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return rest.to_owned();
    }
    let mut body = String::new();
    let mut rest = rest;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if size == 0 {
            break;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    body
}
