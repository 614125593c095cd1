//! The chaos scenarios' world: the network-namespace test bed made by
//! `hack/netns/bed.sh` (the test binary itself runs inside the bed's `edge`
//! namespace, started so by `hack/netns/chaos.sh`), mock providers and
//! `iop-node` processes in their own namespaces, the in-process Edge with a
//! shortened heartbeat profile, and the invariants every scenario checks.

#![allow(dead_code)] // each scenario uses a different subset

pub(crate) mod client;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edge_proxy::config::EdgeConfig;
use edge_proxy::events::LifecycleEvent;
use edge_proxy::server::{EdgeServer, StartOptions};
use framing::io_driver::IoDriver;
use framing::link::HeartbeatConfig;

use crate::support::process::bin;

/// The shortened heartbeat profile of the chaos Edge: ping every second,
/// close after 1.5 s without a pong (production: 30 s / 45 s).
pub(crate) const HEARTBEAT: HeartbeatConfig = HeartbeatConfig {
    interval_ms: 1_000,
    wait_ms: 1_500,
};

/// How long a scenario waits for the system to settle.
pub(crate) const SETTLE: Duration = Duration::from_secs(30);

/// The bed this test binary runs in.
pub(crate) struct Bed {
    run: String,
    nodes: usize,
    script: PathBuf,
    /// Files of this scenario's processes (an Edge config and its lease
    /// state, the nodes' data dirs): each scenario starts with none, and
    /// they are deleted when the bed is dropped, after the processes.
    scratch: tempfile::TempDir,
}

impl Bed {
    /// The bed named by `IOP_NETNS_RUN` (set by hack/netns/chaos.sh), or
    /// `None` with a visible skip message when the binary runs elsewhere.
    pub(crate) fn from_env(test: &str) -> Option<Self> {
        let Ok(run) = std::env::var("IOP_NETNS_RUN") else {
            eprintln!(
                "SKIPPED {test}: needs the netns test bed; run hack/netns/chaos.sh (root, ip netns)"
            );
            return None;
        };
        let nodes = std::env::var("IOP_NETNS_NODES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(2);
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hack/netns/bed.sh");
        let scratch = tempfile::Builder::new()
            .prefix("iop-chaos-")
            .tempdir()
            .expect("chaos scratch dir");
        let bed = Self {
            run,
            nodes,
            script,
            scratch,
        };
        for i in 1..=nodes {
            bed.heal(&format!("n{i}"));
            bed.sh(&["clear", &bed.run, &format!("n{i}")]);
        }
        Some(bed)
    }

    /// The bed's name (`RUN` of bed.sh).
    pub(crate) fn run_name(&self) -> String {
        self.run.clone()
    }

    /// Nodes in the bed.
    pub(crate) fn nodes(&self) -> usize {
        self.nodes
    }

    /// Runs `bed.sh ARGS`, panicking when it fails.
    pub(crate) fn sh(&self, args: &[&str]) {
        let status = Command::new(&self.script)
            .args(args)
            .status()
            .expect("run bed.sh");
        assert!(status.success(), "bed.sh {args:?}: {status}");
    }

    /// The namespace of `host` (`edge`, `nI`, `pI`).
    pub(crate) fn ns(&self, host: &str) -> String {
        format!("iop-{}-{host}", self.run)
    }

    /// `host`'s switch port down: nothing passes either way.
    pub(crate) fn partition(&self, host: &str) {
        self.sh(&["partition", &self.run, host]);
    }

    /// `host`'s switch port up again.
    pub(crate) fn heal(&self, host: &str) {
        self.sh(&["heal", &self.run, host]);
    }

    /// A command that runs `program` inside `host`'s namespace.
    pub(crate) fn command(&self, host: &str, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(host)])
            .arg(bin(program));
        cmd
    }
}

/// The address of `host` in the bed.
pub(crate) fn addr(host: &str) -> String {
    let index = |h: &str| h[1..].parse::<u32>().expect("host index");
    match host {
        "edge" => "10.77.0.1".into(),
        h if h.starts_with('n') => format!("10.77.0.{}", 10 + index(h)),
        h if h.starts_with('p') => format!("10.77.0.{}", 100 + index(h)),
        h => panic!("unknown host {h}"),
    }
}

/// A process in the bed (killed when dropped) and every line it printed.
pub(crate) struct Proc {
    child: Child,
    /// stdout and stderr lines so far.
    pub(crate) lines: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Spawns `cmd`, keeping its output lines.
    pub(crate) fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        for pipe in [Box::new(out) as Box<dyn Read + Send>, Box::new(err)] {
            let keep = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    keep.lock().unwrap().push(line);
                }
            });
        }
        Self { child, lines }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The first line containing `needle`, waiting for it.
    pub(crate) fn wait_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + SETTLE;
        loop {
            if let Some(line) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return line.clone();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "exited ({status}) before {needle:?}: {:?}",
                    self.lines.lock().unwrap()
                );
            }
            assert!(Instant::now() < deadline, "no line {needle:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, and reap.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Resident set size in KiB (0 when gone).
    pub(crate) fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    /// Open file descriptors (0 when gone).
    pub(crate) fn fds(&self) -> usize {
        fds(&format!("/proc/{}/fd", self.pid()))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `VmRSS` of `pid` in KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Entries of a `/proc/…/fd` directory.
pub(crate) fn fds(dir: &str) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

/// Starts `iop-mock-provider` in `pI`'s namespace with model `m` and the
/// given knob flags; returns it and its address.
pub(crate) fn start_provider(bed: &Bed, host: &str, flags: &[&str]) -> (Proc, SocketAddr) {
    let mut cmd = bed.command(host, "iop-mock-provider");
    cmd.args(["--listen", &format!("{}:0", addr(host)), "--workers", "1"])
        .args(["--models", "m"])
        .args(flags);
    let mut proc = Proc::spawn(cmd);
    let line = proc.wait_line("iop-mock-provider listening on ");
    let at = line
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .expect("mock address");
    (proc, at)
}

/// One provider of the Edge's config.
pub(crate) struct ProviderSpec {
    /// Its id (unique across the Edge).
    pub(crate) id: String,
    /// The model group it joins (its target is always `m`).
    pub(crate) group: String,
    /// The mock provider's address.
    pub(crate) at: SocketAddr,
    /// Extra YAML fields, each `key: value` (e.g. `headers: {…}`).
    pub(crate) extra: Vec<String>,
    /// Its `kind` (`openai_compat` unless set).
    pub(crate) kind: &'static str,
}

impl ProviderSpec {
    /// Provider `id` at `at` in group `group`.
    pub(crate) fn new(id: &str, group: &str, at: SocketAddr) -> Self {
        Self {
            id: id.into(),
            group: group.into(),
            at,
            extra: Vec::new(),
            kind: "openai_compat",
        }
    }

    /// Of `kind` (e.g. `ollama`: normalized runs, not tunnels).
    pub(crate) fn kind(mut self, kind: &'static str) -> Self {
        self.kind = kind;
        self
    }

    /// With one more YAML field.
    pub(crate) fn with(mut self, line: &str) -> Self {
        self.extra.push(line.into());
        self
    }
}

/// The Edge's config: node `nI` (token `tok-I`) has `nodes[I-1]`'s
/// providers (openai_compat unless a spec says), all serving target `m`; each model group holds
/// the providers that name it. `listen` is the bed's Edge address with
/// `ports` (ingress, nodes; 0 = any).
pub(crate) fn edge_yaml_at(nodes: &[Vec<ProviderSpec>], ports: (u16, u16)) -> String {
    let edge = addr("edge");
    let mut y = format!(
        "listen:\n  ingress: {edge}:{}\n  nodes: {edge}:{}\nnodes:\n",
        ports.0, ports.1
    );
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (i, providers) in nodes.iter().enumerate() {
        let i = i + 1;
        y += &format!("  - id: n{i}\n    token: tok-{i}\n    providers:\n");
        for p in providers {
            y += &format!(
                "      - id: {}\n        kind: {}\n        base_url: http://{}\n        \
                 targets: [m]\n        max_concurrency: 20000\n",
                p.id, p.kind, p.at
            );
            for line in &p.extra {
                y += &format!("        {line}\n");
            }
            match groups.iter_mut().find(|(g, _)| *g == p.group) {
                Some((_, members)) => members.push(p.id.clone()),
                None => groups.push((p.group.clone(), vec![p.id.clone()])),
            }
        }
    }
    y += "model_groups:\n";
    for (group, members) in &groups {
        y += &format!(
            "  - name: {group}\n    target: m\n    providers: [{}]\n",
            members.join(", ")
        );
    }
    y += "queue:\n  max_waiting: 20000\n  timeout_ms: 5000\n";
    y
}

/// [`edge_yaml_at`] on kernel-chosen ports.
pub(crate) fn edge_yaml(nodes: &[Vec<ProviderSpec>]) -> String {
    edge_yaml_at(nodes, (0, 0))
}

/// The in-process Edge (in the bed's `edge` namespace) with the short
/// heartbeat, and a lifecycle subscription.
pub(crate) struct Edge {
    /// The server.
    pub(crate) server: EdgeServer,
    events: tokio::sync::broadcast::Receiver<LifecycleEvent>,
    /// Lifecycle events seen so far.
    pub(crate) seen: Vec<LifecycleEvent>,
}

impl Edge {
    /// Starts an Edge on `yaml` with the short [`HEARTBEAT`].
    pub(crate) fn start(yaml: &str) -> Self {
        Self::start_with(yaml, HEARTBEAT)
    }

    /// Starts an Edge on `yaml` with `heartbeat`.
    pub(crate) fn start_with(yaml: &str, heartbeat: HeartbeatConfig) -> Self {
        let config = EdgeConfig::from_yaml_str(yaml, "chaos.yaml").expect("valid config");
        let mut options = StartOptions::new(IoDriver::Epoll);
        options.workers = 2;
        options.heartbeat = heartbeat;
        let server = EdgeServer::start(config, options).expect("edge starts");
        let events = server.bus.subscribe();
        Self {
            server,
            events,
            seen: Vec::new(),
        }
    }

    /// The ingress address.
    pub(crate) fn ingress(&self) -> SocketAddr {
        self.server.ingress_addr
    }

    /// The generation of `node`'s ready connection (0 when none).
    pub(crate) fn generation(&self, node: &str) -> u64 {
        self.server
            .registry
            .ready_nodes()
            .iter()
            .find(|(id, _, _)| id == node)
            .map_or(0, |(_, generation, _)| *generation)
    }

    /// Moves the lifecycle events published so far into [`Edge::seen`].
    pub(crate) fn drain_events(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            self.seen.push(event);
        }
    }

    /// Waits until `done` holds, draining lifecycle events meanwhile.
    pub(crate) fn wait(&mut self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + SETTLE;
        loop {
            self.drain_events();
            if done(self) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `GET /metrics`, parsed.
    pub(crate) fn metrics(&self) -> Metrics {
        Metrics::parse(&http_get(self.ingress(), "/metrics"))
    }

    /// The leases/queue invariant: every lease released and nothing
    /// waiting, once the system settles.
    pub(crate) fn assert_drained(&mut self) {
        let mut last = Metrics::default();
        self.wait(
            "outstanding leases 0 and an empty queue on /metrics",
            |edge| {
                last = edge.metrics();
                last.leases == 0 && last.queue_waiting == 0
            },
        );
    }
}

/// A node process, started in `nI`'s namespace against the Edge; waits
/// until the Edge sees it ready.
pub(crate) fn start_node(bed: &Bed, edge: &mut Edge, i: usize) -> Proc {
    let node = format!("n{i}");
    let before = edge.generation(&node);
    let proc = spawn_node(bed, &node, i, edge.server.node_addr);
    edge.wait(&format!("{node} ready on the Edge"), |e| {
        e.generation(&node) > before
    });
    proc
}

/// What the scenarios read from the Edge's `/metrics`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Metrics {
    /// Sum of `iop_provider_leases`.
    pub(crate) leases: u64,
    /// `iop_queue_waiting`.
    pub(crate) queue_waiting: u64,
    /// `iop_nodes_ready`.
    pub(crate) nodes_ready: u64,
    /// Sum of `iop_requests_total` over every API and status.
    pub(crate) requests: u64,
}

impl Metrics {
    fn parse(text: &str) -> Self {
        let mut m = Self::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: u64 = value.parse().unwrap_or(0);
            let family = name.split('{').next().unwrap_or(name);
            match family {
                "iop_provider_leases" => m.leases += value,
                "iop_queue_waiting" => m.queue_waiting = value,
                "iop_nodes_ready" => m.nodes_ready = value,
                "iop_requests_total" => m.requests += value,
                _ => {}
            }
        }
        m
    }
}

/// A blocking `GET path` with `connection: close`; the body.
pub(crate) fn http_get(at: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(at)
        .unwrap_or_else(|e| panic!("connect to {at}: {e} ({} fds open here)", own_fds()));
    s.set_read_timeout(Some(SETTLE)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {at}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// Open descriptors of this process (the in-process Edge's).
pub(crate) fn own_fds() -> usize {
    fds("/proc/self/fd")
}

/// Waits until this process has at most `bound` descriptors open.
pub(crate) fn assert_fds_settle(bound: usize) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let now = own_fds();
        if now <= bound {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "fd growth: {now} open, bound {bound}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `future` on a fresh current-thread tokio runtime.
pub(crate) fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// The real `iop-edge` binary (production heartbeat) in this process's
/// namespace (the bed's `edge`), on fixed ports so restarted Edges are
/// found again by the nodes that dial it.
pub(crate) struct EdgeProc {
    /// The process.
    pub(crate) proc: Proc,
    /// Its config file.
    pub(crate) config: PathBuf,
    /// Its ingress.
    pub(crate) ingress: SocketAddr,
}

impl EdgeProc {
    /// Writes `yaml` into the bed's scratch dir and starts `iop-edge` on
    /// it; waits for `edge_started`.
    pub(crate) fn start(bed: &Bed, yaml: &str, ingress: SocketAddr) -> Self {
        let config = bed.scratch.path().join("edge.yaml");
        std::fs::write(&config, yaml).expect("write edge.yaml");
        let mut edge = Self {
            proc: Self::spawn(&config),
            config,
            ingress,
        };
        edge.proc.wait_line("edge_started");
        edge
    }

    fn spawn(config: &PathBuf) -> Proc {
        let mut cmd = Command::new(bin("iop-edge"));
        cmd.arg("--config")
            .arg(config)
            .args(["--log-format", "json", "--workers", "2"]);
        Proc::spawn(cmd)
    }

    /// SIGKILL, then a new process on the same config.
    pub(crate) fn kill_and_restart(&mut self) {
        let old = std::mem::replace(&mut self.proc, Self::spawn(&self.config));
        drop(old);
        // The new one may have started before the old one died: the bind
        // of a fresh process is retried until it holds.
        let deadline = Instant::now() + SETTLE;
        loop {
            std::thread::sleep(Duration::from_millis(100));
            if self
                .proc
                .lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("edge_started"))
            {
                return;
            }
            if let Ok(Some(_)) = self.proc.child.try_wait() {
                self.proc = Self::spawn(&self.config);
            }
            assert!(Instant::now() < deadline, "the Edge did not restart");
        }
    }

    /// `GET /metrics`, parsed (default when the Edge does not answer).
    pub(crate) fn metrics(&self) -> Metrics {
        match TcpStream::connect(self.ingress) {
            Ok(_) => Metrics::parse(&http_get(self.ingress, "/metrics")),
            Err(_) => Metrics::default(),
        }
    }

    /// Waits until `done(metrics)` holds.
    pub(crate) fn wait(&self, what: &str, mut done: impl FnMut(&Metrics) -> bool) -> Metrics {
        let deadline = Instant::now() + SETTLE * 2;
        loop {
            let m = self.metrics();
            if done(&m) {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {m:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A node process in `nI`'s namespace dialing `edge_nodes` with token
/// `tok-I`, without waiting for it.
pub(crate) fn spawn_node(bed: &Bed, host: &str, i: usize, edge_nodes: SocketAddr) -> Proc {
    let data = bed.scratch.path().join(format!("node{i}"));
    let mut cmd = bed.command(host, "iop-node");
    cmd.args(["--edge", &edge_nodes.to_string()])
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--log-format",
            "json",
            "--admin-addr",
            "off",
            "--workers",
            "1",
        ])
        .env("IOP_NODE_TOKEN", format!("tok-{i}"));
    Proc::spawn(cmd)
}
