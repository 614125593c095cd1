//! The real-process set-up of `operations_e2e`: an `iop-edge` and
//! `iop-node`s in front of the mock provider, their logs kept, signals sent
//! with `kill`, and a minimal HTTP client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) use crate::support::process::PATIENCE;
use crate::support::process::{Process, bin, spawn_logged};
use crate::support::stack::read_some;
use perf::mock_provider::{MockConfig, MockThreads, serve_threads};
use serde_json::Value;

/// The Edge's config: one node with a ~1 s stream provider and an endless
/// one. `extra_groups` is appended to `model_groups`.
pub(crate) fn edge_yaml(mock: SocketAddr, extra_groups: &str, with_node_a: bool) -> String {
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
pub(crate) struct Logged {
    process: Process,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    pub(crate) fn spawn(cmd: Command) -> Self {
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
    pub(crate) fn wait_line(&self, needle: &str) -> String {
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

    pub(crate) fn count(&self, needle: &str) -> usize {
        self.lines().iter().filter(|l| l.contains(needle)).count()
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub(crate) fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.process.0.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Waits (bounded) for the process to exit; its exit code.
    pub(crate) fn exit_code(&mut self, within: Duration) -> Option<i32> {
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
pub(crate) struct Ops {
    pub(crate) edge: Logged,
    pub(crate) node: Option<Logged>,
    pub(crate) ingress: SocketAddr,
    pub(crate) nodes: SocketAddr,
    pub(crate) config: PathBuf,
    pub(crate) mock: SocketAddr,
    pub(crate) dir: PathBuf,
    _mock: MockThreads,
}

impl Ops {
    /// The stack with the Edge's drain grace `grace_ms` (node-a's: 10 s).
    pub(crate) fn start(name: &str, grace_ms: u64) -> Self {
        Self::start_with(name, grace_ms, 10_000)
    }

    /// The stack with the Edge's and node-a's drain graces.
    /// The Edge's drain grace (from edge.yaml) and node-a's.
    pub(crate) fn start_with(name: &str, grace_ms: u64, node_grace_ms: u64) -> Self {
        Self::launch(name, grace_ms, None, node_grace_ms)
    }

    /// edge.yaml says `yaml_grace_ms`; `iop-edge --drain-grace-ms` says
    /// `flag_grace_ms` (which wins).
    pub(crate) fn start_flagged(name: &str, yaml_grace_ms: u64, flag_grace_ms: u64) -> Self {
        Self::launch(name, yaml_grace_ms, Some(flag_grace_ms), 10_000)
    }

    fn launch(name: &str, grace_ms: u64, flag_grace_ms: Option<u64>, node_grace_ms: u64) -> Self {
        let mock = serve_threads("127.0.0.1:0".parse().unwrap(), MockConfig::default(), 1)
            .expect("mock provider");
        let mock_addr = mock.local_addr();
        let dir = std::env::temp_dir().join(format!("iop-ops-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("edge.yaml");
        let yaml = format!(
            "{}\ndrain_grace_ms: {grace_ms}\n",
            edge_yaml(mock_addr, "", true)
        );
        std::fs::write(&config, yaml).unwrap();
        let mut cmd = Command::new(bin("iop-edge"));
        cmd.args(["--config", config.to_str().unwrap(), "--workers", "1"])
            .args(["--log-format", "json"]);
        if let Some(flag) = flag_grace_ms {
            cmd.args(["--drain-grace-ms", &flag.to_string()]);
        }
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
        ops.node = Some(ops.start_node_with("tok-a", node_grace_ms));
        ops.edge.wait_line("\"node_ready\"");
        ops
    }

    /// Starts an `iop-node` with `token` and waits until it is ready.
    pub(crate) fn start_node(&self, token: &str) -> Logged {
        self.start_node_with(token, 10_000)
    }

    /// [`Ops::start_node`] with the node's drain grace.
    pub(crate) fn start_node_with(&self, token: &str, grace_ms: u64) -> Logged {
        let mut cmd = Command::new(bin("iop-node"));
        cmd.args(["--edge", &self.nodes.to_string(), "--workers", "1"])
            .args(["--data-dir", self.dir.join(token).to_str().unwrap()])
            .args(["--admin-addr", "off", "--log-format", "json"])
            .args(["--drain-grace-ms", &grace_ms.to_string()])
            .env("IOP_NODE_TOKEN", token);
        let node = Logged::spawn(cmd);
        node.wait_line("node_ready");
        node
    }

    pub(crate) fn write_config(&self, text: &str) {
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
pub(crate) fn send_chat(ingress: SocketAddr, model: &str, stream: bool) -> TcpStream {
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
pub(crate) fn read_until(socket: &mut TcpStream, needle: &str) -> String {
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
pub(crate) fn read_to_close(socket: &mut TcpStream) -> String {
    let mut all = Vec::new();
    socket.read_to_end(&mut all).expect("read to the end");
    String::from_utf8_lossy(&all).into_owned()
}

/// `GET path` with `Connection: close`; the whole response.
pub(crate) fn get(ingress: SocketAddr, path: &str) -> String {
    let mut socket = TcpStream::connect(ingress).expect("connect to the ingress");
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: edge\r\nconnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).unwrap();
    read_to_close(&mut socket)
}

pub(crate) fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {response}"))
}

/// Polls (bounded) until a connection to `addr` is refused.
pub(crate) fn wait_refused(addr: SocketAddr) {
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "{addr} still accepts connections"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub(crate) fn json_line(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|_| panic!("JSON log line: {line}"))
}

/// Content tokens in a non-streamed mock answer (`"tok "` each).
pub(crate) fn tokens(response: &str) -> usize {
    response.matches("tok ").count()
}

/// The `iop-node` binary.
pub(crate) fn node_bin() -> std::path::PathBuf {
    bin("iop-node")
}
