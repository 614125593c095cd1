//! Managed-mode end-to-end kit: the `iop-edge` and `iop-node` binaries as
//! processes (their log lines collected), the mock provider in-process, a
//! test PKI ([`pki`]) and a minimal HTTP client for the Edge's ingress.

#![allow(dead_code)] // each test binary uses a different subset

pub(crate) mod pki;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use framing::io_driver::IoDriver;
use perf::mock_provider::{MockConfig, MockThreads, MockTls, serve_threads};

use crate::support::process::{PATIENCE, Process, bin, spawn_logged};
use crate::support::stack::read_some;

/// A scratch directory, removed on drop.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    /// `$TMP/iop-<name>-<pid>-<driver>`, empty.
    pub(crate) fn new(name: &str, driver: IoDriver) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "iop-{name}-{}-{}",
            std::process::id(),
            driver.as_str()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every log line a process has written so far (drained by a thread, so
/// the process never blocks on a full pipe).
#[derive(Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn collect(lines: Receiver<String>) -> Self {
        let log = Self::default();
        let keep = Arc::clone(&log.0);
        std::thread::spawn(move || {
            for line in lines {
                keep.lock().unwrap().push(line);
            }
        });
        log
    }

    /// A copy of the lines so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Waits for a line containing every one of `needles`; returns it.
    pub(crate) fn wait_for(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(line) = self
                .lines()
                .into_iter()
                .find(|line| needles.iter().all(|n| line.contains(n)))
            {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {needles:?}; log:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until exactly `count` lines contain `needle` (a log line may
    /// arrive after the event it reports is visible elsewhere).
    pub(crate) fn wait_count(&self, needle: &str, count: usize) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let seen = self.lines().iter().filter(|l| l.contains(needle)).count();
            if seen == count {
                return;
            }
            assert!(
                seen < count && Instant::now() < deadline,
                "{seen} lines with {needle:?}, expected {count}; log:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether any line contains `needle`.
    pub(crate) fn contains(&self, needle: &str) -> bool {
        self.lines().iter().any(|line| line.contains(needle))
    }
}

/// A running `iop-edge` and where it listens.
pub(crate) struct Edge {
    pub(crate) process: Process,
    pub(crate) log: Log,
    pub(crate) nodes: String,
    pub(crate) ingress: SocketAddr,
    /// The `edge_started` line.
    pub(crate) started: String,
}

/// Starts `iop-edge` with `yaml` (written to `dir/edge.yaml`), JSON logs at
/// `log_filter`, under `driver`.
pub(crate) fn start_edge(dir: &Path, yaml: &str, driver: IoDriver, log_filter: &str) -> Edge {
    let config = dir.join("edge.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut cmd = Command::new(bin("iop-edge"));
    cmd.args(["--config", config.to_str().unwrap(), "--workers", "2"])
        .args(["--log-format", "json"])
        .env("IOP_IO_DRIVER", driver.as_str())
        .env("IOP_LOG", log_filter);
    let (process, lines) = spawn_logged(cmd);
    let log = Log::collect(lines);
    let started = log.wait_for(&["edge_started"]);
    let fields: serde_json::Value = serde_json::from_str(&started).expect("JSON log line");
    Edge {
        process,
        nodes: fields["node_socket"].as_str().unwrap().to_owned(),
        ingress: fields["ingress"].as_str().unwrap().parse().unwrap(),
        log,
        started,
    }
}

/// A running `iop-node`.
pub(crate) struct Node {
    pub(crate) process: Process,
    pub(crate) log: Log,
}

/// Starts `iop-node` against `edge` with `token` and `args`, under `driver`.
pub(crate) fn start_node(
    edge: &Edge,
    data_dir: &Path,
    token: &str,
    args: &[String],
    driver: IoDriver,
    log_filter: &str,
) -> Node {
    let mut cmd = Command::new(bin("iop-node"));
    cmd.args([
        "--edge",
        &edge.nodes,
        "--data-dir",
        data_dir.to_str().unwrap(),
    ])
    .args(["--log-format", "json"])
    .args(args)
    .env("IOP_NODE_TOKEN", token)
    .env("IOP_IO_DRIVER", driver.as_str())
    .env("IOP_LOG", log_filter);
    if !args.iter().any(|arg| arg == "--admin-addr") {
        cmd.args(["--admin-addr", "off"]);
    }
    let (process, lines) = spawn_logged(cmd);
    Node {
        process,
        log: Log::collect(lines),
    }
}

/// The mock provider on a free loopback port.
pub(crate) fn mock() -> MockThreads {
    serve_threads("127.0.0.1:0".parse().unwrap(), MockConfig::default(), 1)
        .expect("mock provider starts")
}

/// The mock provider serving `https://` with `leaf` on a free loopback
/// port.
pub(crate) fn mock_tls(leaf: &pki::Leaf) -> MockThreads {
    let tls = MockTls::from_pem_files(&leaf.cert, &leaf.key).expect("the provider's certificate");
    let config = MockConfig {
        tls: Some(tls),
        ..MockConfig::default()
    };
    serve_threads("127.0.0.1:0".parse().unwrap(), config, 1).expect("mock provider starts")
}

/// Sends one HTTP/1.1 request (`connection: close`) and returns the whole
/// response as text.
pub(crate) fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> String {
    let mut socket = TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // A GET carries no body framing at all (the Node's admin port refuses
    // even `content-length: 0`).
    let framing = if method == "GET" {
        String::new()
    } else {
        format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        )
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\n{framing}connection: close\r\n{headers}\r\n{body}"
    );
    socket.write_all(request.as_bytes()).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = read_some(&mut socket, &mut buf) {
        all.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&all).into_owned()
}

/// A non-streaming chat completion for model group `model`.
pub(crate) fn chat(edge: &Edge, model: &str, headers: &str) -> String {
    let body = format!(
        r#"{{"model":"{model}","stream":false,"messages":[{{"role":"user","content":"hello"}}]}}"#
    );
    http(edge.ingress, "POST", "/v1/chat/completions", headers, &body)
}
