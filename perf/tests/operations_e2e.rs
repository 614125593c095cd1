//! Operations end to end, with real processes: a real `iop-edge` and a real
//! `iop-node` in front of the mock provider, driven by signals.
//!
//! - SIGTERM on the Edge mid-stream: the stream completes, new connections
//!   are refused, the Edge exits 0 within the grace.
//! - SIGTERM past the grace: the in-flight stream ends with a clean error
//!   terminal, the Edge exits 0.
//! - SIGHUP adding a model group: it serves without a node reconnect.
//! - SIGHUP with an invalid file: rejected and logged, the old config serves.
//! - SIGHUP removing a node: it is disconnected (`shutdown`).
//! - SIGTERM on the Node mid-run: the run completes, the Node deregisters
//!   and exits 0.
//!
//! Timing: only bounded polls on process state and log lines.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use perf::mock_provider::{MockConfig, MockThreads, serve_threads};
use serde_json::Value;
use support::process::{PATIENCE, Process, bin, spawn_logged};
use support::stack::read_some;

/// The Edge's config: one node with a ~1 s stream provider and an endless
/// one. `extra_groups` is appended to `model_groups`.
fn edge_yaml(mock: SocketAddr, extra_groups: &str, with_node_a: bool) -> String {
    let node_a = if with_node_a {
        format!(
            r#"
  - id: node-a
    token: tok-a
    providers:
      - id: oa
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "40", x-mock-delay-ms: "25"}}
      - id: endless
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "100000", x-mock-delay-ms: "20"}}
      - id: big
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "64", x-mock-event-bytes: "16384", x-mock-delay-ms: "5"}}
      - id: endless-ol
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "100000", x-mock-delay-ms: "20"}}"#
        )
    } else {
        String::new()
    };
    let groups = if with_node_a {
        "  - name: m\n    providers: [oa]\n  - name: endless\n    target: m\n    providers: [endless]\n  \
         - name: endless-ol\n    target: m\n    providers: [endless-ol]\n  \
         - name: both\n    target: m\n    providers: [oa, b-oa]\n  \
         - name: big\n    target: m\n    providers: [big]\n"
    } else {
        "  - name: b\n    target: m\n    providers: [b-oa]\n"
    };
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:{node_a}
  - id: node-b
    token: tok-b
    providers:
      - id: b-oa
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
model_groups:
{groups}{extra_groups}
"#
    )
}

/// A process whose stderr lines are all kept.
struct Logged {
    process: Process,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    fn spawn(cmd: Command) -> Self {
        let (process, rx) = spawn_logged(cmd);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in rx {
                keep.lock().unwrap().push(line);
            }
        });
        Self { process, lines }
    }

    /// The first line with `needle` (waiting for it, bounded).
    fn wait_line(&self, needle: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| l.contains(needle)) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {needle:?}; log:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn count(&self, needle: &str) -> usize {
        self.lines().iter().filter(|l| l.contains(needle)).count()
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.process.0.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Waits (bounded) for the process to exit; its exit code.
    fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.process.0.try_wait().expect("try_wait") {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "the process did not exit; log:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A real Edge, a real Node (node-a) and the mock provider.
struct Ops {
    edge: Logged,
    node: Option<Logged>,
    ingress: SocketAddr,
    nodes: SocketAddr,
    config: PathBuf,
    mock: SocketAddr,
    dir: PathBuf,
    _mock: MockThreads,
}

impl Ops {
    fn start(name: &str, grace_ms: u64) -> Self {
        let mock = serve_threads("127.0.0.1:0".parse().unwrap(), MockConfig::default(), 1)
            .expect("mock provider");
        let mock_addr = mock.local_addr();
        let dir = std::env::temp_dir().join(format!("iop-ops-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("edge.yaml");
        std::fs::write(&config, edge_yaml(mock_addr, "", true)).unwrap();
        let mut cmd = Command::new(bin("iop-edge"));
        cmd.args(["--config", config.to_str().unwrap(), "--workers", "1"])
            .args(["--log-format", "json", "--drain-grace-ms"])
            .arg(grace_ms.to_string());
        let edge = Logged::spawn(cmd);
        let started: Value = serde_json::from_str(&edge.wait_line("edge_started")).unwrap();
        let addr = |key: &str| started[key].as_str().unwrap().parse().unwrap();
        let mut ops = Self {
            ingress: addr("ingress"),
            nodes: addr("node_socket"),
            edge,
            node: None,
            config,
            mock: mock_addr,
            dir,
            _mock: mock,
        };
        ops.node = Some(ops.start_node("tok-a"));
        ops.edge.wait_line("\"node_ready\"");
        ops
    }

    /// Starts an `iop-node` with `token` and waits until it is ready.
    fn start_node(&self, token: &str) -> Logged {
        let mut cmd = Command::new(bin("iop-node"));
        cmd.args(["--edge", &self.nodes.to_string(), "--workers", "1"])
            .args(["--data-dir", self.dir.join(token).to_str().unwrap()])
            .args(["--admin-addr", "off", "--log-format", "json"])
            .args(["--drain-grace-ms", "10000"])
            .env("IOP_NODE_TOKEN", token);
        let node = Logged::spawn(cmd);
        node.wait_line("node_ready");
        node
    }

    fn write_config(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }
}

impl Drop for Ops {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends a chat completion for `model` (streamed when `stream`), with
/// `Connection: close`.
fn send_chat(ingress: SocketAddr, model: &str, stream: bool) -> TcpStream {
    let mut socket = TcpStream::connect(ingress).expect("connect to the ingress");
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    let body = format!(
        r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).unwrap();
    socket
}

/// Reads until `needle` has arrived; everything read so far.
fn read_until(socket: &mut TcpStream, needle: &str) -> String {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&all).contains(needle) {
        let n = read_some(socket, &mut buf).expect("read");
        assert!(
            n > 0,
            "closed before {needle:?}: {}",
            String::from_utf8_lossy(&all)
        );
        all.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&all).into_owned()
}

/// Reads to the end of the connection.
fn read_to_close(socket: &mut TcpStream) -> String {
    let mut all = Vec::new();
    socket.read_to_end(&mut all).expect("read to the end");
    String::from_utf8_lossy(&all).into_owned()
}

/// `GET path` with `Connection: close`; the whole response.
fn get(ingress: SocketAddr, path: &str) -> String {
    let mut socket = TcpStream::connect(ingress).expect("connect to the ingress");
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: edge\r\nconnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).unwrap();
    read_to_close(&mut socket)
}

fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {response}"))
}

/// Polls (bounded) until a connection to `addr` is refused.
fn wait_refused(addr: SocketAddr) {
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "{addr} still accepts connections"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn json_line(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|_| panic!("JSON log line: {line}"))
}

#[test]
fn sigterm_mid_stream_finishes_the_stream_refuses_new_connections_and_exits_0() {
    let mut ops = Ops::start("drain", 10_000);
    let mut stream = send_chat(ops.ingress, "m", true);
    read_until(&mut stream, "data: ");
    let signalled = Instant::now();
    ops.edge.signal("TERM");
    let draining = json_line(&ops.edge.wait_line("\"edge_draining\""));
    assert_eq!(draining["in_flight"], 1, "{draining}");
    // New connections are refused while the stream keeps flowing.
    wait_refused(ops.ingress);
    let rest = read_to_close(&mut stream);
    assert!(
        rest.contains("data: [DONE]"),
        "the stream completes: {rest}"
    );
    assert!(!rest.contains("\"error\""), "{rest}");
    assert_eq!(ops.edge.exit_code(PATIENCE), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "within the grace"
    );
    let drained = json_line(&ops.edge.wait_line("\"edge_drained\""));
    assert_eq!(drained["in_flight_at_start"], 1, "{drained}");
    assert_eq!(drained["in_flight"], 0, "{drained}");
    assert_eq!(drained["grace_exceeded"], false, "{drained}");
    assert_eq!(drained["links_closed"], 1, "{drained}");
    let closed = json_line(&ops.edge.wait_line("\"node_disconnected\""));
    assert_eq!(closed["reason"], "shutdown", "{closed}");
}

#[test]
fn sigterm_past_the_grace_ends_a_normalized_stream_with_an_error_event_and_exits_0() {
    let mut ops = Ops::start("grace", 300);
    let mut stream = send_chat(ops.ingress, "endless-ol", true);
    read_until(&mut stream, "data: ");
    ops.edge.signal("TERM");
    let rest = read_to_close(&mut stream);
    let tail = &rest[rest.len().saturating_sub(600)..];
    assert!(rest.contains("\"error\""), "a terminal error event: {tail}");
    assert!(
        rest.ends_with("0\r\n\r\n"),
        "the chunked body ends cleanly: {tail:?}"
    );
    assert_eq!(ops.edge.exit_code(PATIENCE), Some(0));
    let drained = json_line(&ops.edge.wait_line("\"edge_drained\""));
    assert_eq!(drained["grace_exceeded"], true, "{drained}");
    assert_eq!(drained["in_flight_at_close"], 1, "{drained}");
    assert_eq!(drained["in_flight"], 0, "{drained}");
}

/// A raw tunnel's body is the provider's own bytes: past the grace it is
/// cut (no last chunk), the documented ending of any non-stall failure
/// after commit, so the client sees the truncation.
#[test]
fn sigterm_past_the_grace_cuts_a_tunnel_body_and_exits_0() {
    let mut ops = Ops::start("grace-tunnel", 300);
    let mut stream = send_chat(ops.ingress, "endless", true);
    read_until(&mut stream, "data: ");
    ops.edge.signal("TERM");
    let rest = read_to_close(&mut stream);
    assert!(!rest.ends_with("0\r\n\r\n"), "no clean end");
    assert!(!rest.contains("[DONE]"));
    assert_eq!(ops.edge.exit_code(PATIENCE), Some(0));
    let drained = json_line(&ops.edge.wait_line("\"edge_drained\""));
    assert_eq!(drained["grace_exceeded"], true, "{drained}");
    assert_eq!(drained["in_flight"], 0, "{drained}");
}

#[test]
fn a_draining_edge_answers_open_connections_503_and_readyz_draining() {
    let mut ops = Ops::start("keepalive", 10_000);
    // An idle keep-alive connection opened before the drain.
    let mut idle = TcpStream::connect(ops.ingress).unwrap();
    idle.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut watcher = TcpStream::connect(ops.ingress).unwrap();
    watcher.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut stream = send_chat(ops.ingress, "m", true);
    read_until(&mut stream, "data: ");
    ops.edge.signal("TERM");
    ops.edge.wait_line("\"edge_draining\"");
    idle.write_all(b"GET /readyz HTTP/1.1\r\nhost: edge\r\n\r\n")
        .unwrap();
    let readyz = read_to_close(&mut idle);
    assert_eq!(status_of(&readyz), 503, "{readyz}");
    assert!(readyz.to_ascii_lowercase().contains("connection: close"));
    assert!(readyz.contains("draining"), "{readyz}");
    // An open connection still reaches /metrics, which says so.
    watcher
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: edge\r\nconnection: close\r\n\r\n")
        .unwrap();
    let metrics = read_to_close(&mut watcher);
    assert_eq!(status_of(&metrics), 200, "{metrics}");
    assert!(metrics.contains("iop_edge_draining 1"), "{metrics}");
    read_to_close(&mut stream);
    assert_eq!(ops.edge.exit_code(PATIENCE), Some(0));
}

#[test]
fn sighup_adds_a_model_group_without_a_node_reconnect() {
    let ops = Ops::start("reload-add", 10_000);
    let before = read_to_close(&mut send_chat(ops.ingress, "m2", false));
    assert_eq!(status_of(&before), 404, "{before}");
    ops.write_config(&edge_yaml(
        ops.mock,
        "  - name: m2\n    target: m\n    providers: [oa]\n",
        true,
    ));
    ops.edge.signal("HUP");
    let reloaded = json_line(&ops.edge.wait_line("\"edge_config_reloaded\""));
    assert_eq!(reloaded["groups_added"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_removed"], 0, "{reloaded}");
    let after = read_to_close(&mut send_chat(ops.ingress, "m2", false));
    assert_eq!(status_of(&after), 200, "{after}");
    // /metrics follows: the new group's tokens are counted, the reload too.
    let metrics = get(ops.ingress, "/metrics");
    assert!(
        metrics.contains(r#"iop_tokens_total{model="m2",provider="oa",kind="output"} 40"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"iop_edge_config_reloads_total{result="applied"} 1"#));
    assert!(metrics.contains("iop_edge_draining 0"));
    // One registration, one generation: the node never reconnected.
    assert_eq!(ops.edge.count("\"node_registered\""), 1);
    assert_eq!(ops.edge.count("\"node_disconnected\""), 0);
    let node = ops.node.as_ref().unwrap();
    assert_eq!(node.count("node_ready"), 1);
}

#[test]
fn sighup_with_an_invalid_file_keeps_the_old_config() {
    let ops = Ops::start("reload-bad", 10_000);
    ops.write_config(&edge_yaml(
        ops.mock,
        "  - name: broken\n    target: m\n    providers: [no-such-provider]\n",
        true,
    ));
    ops.edge.signal("HUP");
    let rejected = json_line(&ops.edge.wait_line("\"edge_config_reload_rejected\""));
    let error = rejected["error"].as_str().unwrap();
    assert!(
        error.contains("no-such-provider"),
        "names the field: {error}"
    );
    let response = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&response), 200, "{response}");
    let broken = read_to_close(&mut send_chat(ops.ingress, "broken", false));
    assert_eq!(status_of(&broken), 404, "{broken}");
    assert_eq!(ops.edge.count("edge_config_reloaded"), 0);
    let metrics = get(ops.ingress, "/metrics");
    assert!(metrics.contains(r#"iop_edge_config_reloads_total{result="rejected"} 1"#));
    assert!(metrics.contains(r#"iop_edge_config_reloads_total{result="applied"} 0"#));
}

#[test]
fn sighup_removing_a_node_disconnects_it() {
    let mut ops = Ops::start("reload-remove", 10_000);
    ops.write_config(&edge_yaml(ops.mock, "", false));
    ops.edge.signal("HUP");
    let reloaded = json_line(&ops.edge.wait_line("\"edge_config_reloaded\""));
    assert_eq!(reloaded["nodes_removed"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_disconnected"], 1, "{reloaded}");
    let closed = json_line(&ops.edge.wait_line("\"node_disconnected\""));
    assert_eq!(closed["reason"], "shutdown", "{closed}");
    // Its token is gone too: the node's next registration is refused for
    // good, and it exits with its "rejected" code.
    let node = ops.node.as_mut().unwrap();
    assert_eq!(node.exit_code(PATIENCE), Some(2));
    let gone = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&gone), 404, "{gone}");
}

#[test]
fn sigterm_on_the_node_mid_run_finishes_the_run_sends_new_work_elsewhere_and_exits_0() {
    let mut ops = Ops::start("node-drain", 10_000);
    let node_b = ops.start_node("tok-b");
    let mut stream = send_chat(ops.ingress, "m", true);
    read_until(&mut stream, "data: ");
    let node = ops.node.as_mut().unwrap();
    node.signal("TERM");
    let draining = json_line(&node.wait_line("\"node_draining\""));
    assert_eq!(draining["in_flight"], 1, "{draining}");
    // The Edge took the notice: new work goes to the other node, and a
    // model only the draining node serves has no provider now.
    let notice = json_line(&ops.edge.wait_line("\"node_draining\""));
    assert_eq!(notice["node_id"], "node-a", "{notice}");
    for _ in 0..3 {
        let elsewhere = read_to_close(&mut send_chat(ops.ingress, "both", false));
        assert_eq!(status_of(&elsewhere), 200, "{elsewhere}");
    }
    let only_a = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&only_a), 503, "{only_a}");
    // The run in flight completes.
    let rest = read_to_close(&mut stream);
    assert!(rest.contains("data: [DONE]"), "the run completes: {rest}");
    assert!(!rest.contains("\"error\""), "{rest}");
    let node = ops.node.as_mut().unwrap();
    assert_eq!(node.exit_code(PATIENCE), Some(0));
    let drained = json_line(&node.wait_line("\"node_drained\""));
    assert_eq!(drained["in_flight"], 0, "{drained}");
    assert_eq!(drained["grace_exceeded"], false, "{drained}");
    // It deregistered: the Edge saw it leave, and it did not come back.
    ops.edge.wait_line("\"node_disconnected\"");
    assert_eq!(node.count("node_reconnecting"), 0);
    assert_eq!(
        ops.edge.count("\"node_registered\""),
        2,
        "node-a and node-b once each"
    );
    // Node B served the requests that went elsewhere.
    assert_eq!(node_b.count("node_draining"), 0);
}

/// Content tokens in a non-streamed mock answer (`"tok "` each).
fn tokens(response: &str) -> usize {
    response.matches("tok ").count()
}

#[test]
fn sighup_changing_a_provider_setting_reaches_the_node_without_a_reconnect() {
    let ops = Ops::start("reload-change", 10_000);
    let before = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&before), 200, "{before}");
    assert_eq!(tokens(&before), 40, "{before}");
    let yaml = edge_yaml(ops.mock, "", true).replace(
        r#"x-mock-tokens: "40", x-mock-delay-ms: "25""#,
        r#"x-mock-tokens: "3""#,
    );
    ops.write_config(&yaml);
    ops.edge.signal("HUP");
    let reloaded = json_line(&ops.edge.wait_line("\"edge_config_reloaded\""));
    assert_eq!(reloaded["nodes_changed"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_refreshed"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_disconnected"], 0, "{reloaded}");
    let node = ops.node.as_ref().unwrap();
    let refreshed = json_line(&node.wait_line("\"node_config_refreshed\""));
    assert_eq!(refreshed["generation"], 1, "{refreshed}");
    let after = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&after), 200, "{after}");
    assert_eq!(
        tokens(&after),
        3,
        "the new header reached the node: {after}"
    );
    // Same connection, same generation.
    assert_eq!(ops.edge.count("\"node_registered\""), 1);
    assert_eq!(ops.edge.count("\"node_disconnected\""), 0);
    assert_eq!(node.count("node_ready"), 1);
}

/// A 1 MiB stream (past the tunnel's credit window, so its window updates
/// must reach the retired run manager) in flight across a refresh.
#[test]
fn sighup_mid_stream_keeps_the_running_stream_on_its_old_adapter() {
    let ops = Ops::start("reload-inflight", 10_000);
    let mut stream = send_chat(ops.ingress, "big", true);
    let first = read_until(&mut stream, "data: ");
    let yaml = edge_yaml(ops.mock, "", true).replace(
        r#"x-mock-tokens: "40", x-mock-delay-ms: "25""#,
        r#"x-mock-tokens: "3""#,
    );
    ops.write_config(&yaml);
    ops.edge.signal("HUP");
    ops.node
        .as_ref()
        .unwrap()
        .wait_line("\"node_config_refreshed\"");
    let rest = read_to_close(&mut stream);
    assert!(
        rest.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n"),
        "ends cleanly"
    );
    let whole = format!("{first}{rest}");
    // Whole: the mock's 64 token events plus its opening and closing chunks.
    assert_eq!(whole.matches("chat.completion.chunk").count(), 64 + 2);
    let after = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(tokens(&after), 3, "{after}");
}

#[test]
fn sighup_adding_a_provider_to_a_node_re_registers_it() {
    let ops = Ops::start("reload-reshape", 10_000);
    let yaml = edge_yaml(
        ops.mock,
        "  - name: extra\n    target: m\n    providers: [oa-2]\n",
        true,
    )
    .replace(
        "      - id: endless-ol\n",
        &format!(
            "      - id: oa-2\n        kind: openai_compat\n        base_url: http://{}\n        \
                 targets: [m]\n      - id: endless-ol\n",
            ops.mock
        ),
    );
    ops.write_config(&yaml);
    ops.edge.signal("HUP");
    let reloaded = json_line(&ops.edge.wait_line("\"edge_config_reloaded\""));
    assert_eq!(reloaded["nodes_changed"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_disconnected"], 1, "{reloaded}");
    let closed = json_line(&ops.edge.wait_line("\"node_disconnected\""));
    assert_eq!(closed["reason"], "shutdown", "{closed}");
    // It re-registers with the new payload and the new provider serves.
    let deadline = Instant::now() + PATIENCE;
    while ops.edge.count("\"node_ready\"") < 2 {
        assert!(Instant::now() < deadline, "the node re-registers");
        std::thread::sleep(Duration::from_millis(10));
    }
    let extra = read_to_close(&mut send_chat(ops.ingress, "extra", false));
    assert_eq!(status_of(&extra), 200, "{extra}");
}
