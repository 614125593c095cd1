//! The in-process stack the streaming benches drive: the mock provider (one
//! thread), the Edge (in-process, its monoio workers) and the Node (its
//! link core on a thread of this process, the same code `iop-node` runs),
//! all on loopback.
//!
//! Each scenario is one provider of the Node whose configured `headers`
//! carry the mock's `x-mock-*` knobs, in a model group of the scenario's
//! name, so a client picks the scenario with `"model"`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use edge_proxy::config::EdgeConfig;
use edge_proxy::dispatch::{Dispatcher, SubmitRun};
use edge_proxy::server::{EdgeServer, StartOptions};
use framing::frame::DEFAULT_MAX_FRAME_LEN;
use framing::io_driver::IoDriver;
use framing::link::HeartbeatConfig;
use framing::timer::ClockSource;
use node_runner::link::session::NodeSessionConfig;
use node_runner::link::supervisor::supervise_cores;
use node_runner::link::{LinkClientConfig, LinkTls, link_tls};
use node_runner::provider_http::ProviderClientConfig;
use node_runner::runs::{Cores, RunnerConfig, serve_core};
use perf::mock_provider::{MockConfig, MockThreads, serve_threads};
use proto::v1::{ChatMessage, RunEventKind, RunInput};

use crate::pki::{self, Ca, EDGE_NAME, TRUST_DOMAIN};

pub(crate) const NODE_ID: &str = "node-a";
const NODE_TOKEN: &str = "bench-token";

/// One streaming workload: the mock's knobs and the model group (and
/// provider id) that serves it through IOP.
#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    /// Model group name = provider id.
    pub(crate) model: &'static str,
    /// `openai_compat` (raw tunnel over HTTP) or `ollama` (normalized).
    pub(crate) kind: &'static str,
    /// `(knob, value)` pairs, sent as `x-mock-<knob>` headers.
    pub(crate) knobs: Vec<(&'static str, String)>,
}

impl Scenario {
    /// The knobs as HTTP header lines (`x-mock-k: v\r\n`…), for the direct
    /// path.
    pub(crate) fn header_lines(&self) -> String {
        self.knobs
            .iter()
            .map(|(knob, value)| format!("x-mock-{knob}: {value}\r\n"))
            .collect()
    }

    fn yaml(&self, mock: SocketAddr) -> String {
        let headers: Vec<String> = self
            .knobs
            .iter()
            .map(|(knob, value)| format!("x-mock-{knob}: \"{value}\""))
            .collect();
        format!(
            "      - id: {model}\n        kind: {kind}\n        base_url: http://{mock}\n        \
             targets: [m]\n        max_concurrency: 4096\n        headers: {{{headers}}}\n",
            model = self.model,
            kind = self.kind,
            headers = headers.join(", "),
        )
    }
}

/// The mock provider, the Edge and the Node, running.
pub(crate) struct Stack {
    /// The mock provider (dropping it stops it).
    pub(crate) mock: MockThreads,
    /// The Edge.
    pub(crate) edge: EdgeServer,
    /// The I/O driver of the Edge and the Node.
    pub(crate) driver: IoDriver,
    /// The link's certificates (mTLS stacks only), kept while the stack runs.
    _pki: Option<tempfile::TempDir>,
}

/// How the Node's link to the Edge is carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    /// Plain TCP (the default config).
    Plain,
    /// mTLS (F28): TLS 1.3, certificates from a CA made for the run.
    Mtls,
}

impl Stack {
    /// Starts everything and waits until the Node is ready on the Edge.
    pub(crate) fn start(driver: IoDriver, scenarios: &[Scenario]) -> Self {
        Self::start_with(driver, scenarios, Link::Plain)
    }

    /// [`start`](Self::start) with the link carried as `link` says.
    pub(crate) fn start_with(driver: IoDriver, scenarios: &[Scenario], link: Link) -> Self {
        let mock = serve_threads("127.0.0.1:0".parse().unwrap(), MockConfig::default(), 1)
            .expect("mock provider starts");
        let mut yaml = edge_yaml(mock.local_addr(), scenarios);
        let (pki, node_tls) = match link {
            Link::Plain => (None, None),
            Link::Mtls => {
                let dir = tempfile::tempdir().expect("a directory for the link's certificates");
                let ca = Ca::new("iop bench CA");
                let ca_pem = ca.write(dir.path(), "ca.pem");
                yaml.push_str(&pki::edge_tls_yaml(&ca.edge(dir.path()), &ca_pem));
                let node = ca.node(dir.path(), TRUST_DOMAIN, NODE_ID);
                let tls = link_tls(&ca_pem, &node.cert, &node.key, EDGE_NAME)
                    .expect("the node's link certificates load");
                (Some(dir), Some(tls))
            }
        };
        let config = EdgeConfig::from_yaml_str(&yaml, "bench.yaml").expect("valid bench config");
        let mut options = StartOptions::new(driver);
        options.workers = 1;
        let edge = EdgeServer::start(config, options).expect("edge starts");
        start_node(edge.node_addr, driver, node_tls);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !edge
            .registry
            .ready_nodes()
            .iter()
            .any(|(id, _, _)| id == NODE_ID)
        {
            assert!(Instant::now() < deadline, "the node never got ready");
            std::thread::sleep(Duration::from_millis(5));
        }
        Self {
            mock,
            edge,
            driver,
            _pki: pki,
        }
    }

    /// The Edge's client address.
    pub(crate) fn ingress(&self) -> SocketAddr {
        self.edge.ingress_addr
    }

    /// The mock provider's address (the direct path).
    pub(crate) fn mock_addr(&self) -> SocketAddr {
        self.mock.local_addr()
    }
}

fn edge_yaml(mock: SocketAddr, scenarios: &[Scenario]) -> String {
    let providers: String = scenarios.iter().map(|s| s.yaml(mock)).collect();
    let groups: String = scenarios
        .iter()
        .map(|s| {
            format!(
                "  - name: {0}\n    target: m\n    providers: [{0}]\n",
                s.model
            )
        })
        .collect();
    format!(
        "listen:\n  ingress: 127.0.0.1:0\n  nodes: 127.0.0.1:0\nnodes:\n  - id: {NODE_ID}\n    \
         token: {NODE_TOKEN}\n    providers:\n{providers}model_groups:\n{groups}\
         queue:\n  max_waiting: 4096\n  timeout_ms: 60000\n"
    )
}

/// The Node, in this process: one core that runs the link and serves the
/// work (what `iop-node --workers 1` runs), on its own thread, its link
/// under `tls` when given. It records no runs (no run store) and lives
/// until the process exits.
fn start_node(edge: SocketAddr, driver: IoDriver, tls: Option<LinkTls>) {
    let config = LinkClientConfig {
        tls,
        edge,
        session: NodeSessionConfig {
            token: NODE_TOKEN.into(),
            instance_id: "bench-node".into(),
            max_frame_len: u32::try_from(DEFAULT_MAX_FRAME_LEN).unwrap_or(u32::MAX),
            handshake_timeout_ms: 10_000,
            heartbeat: HeartbeatConfig::default(),
        },
        tick_ms: 100,
        clock: ClockSource::Coarse,
        runner: RunnerConfig {
            store: None,
            provider: ProviderClientConfig::default(),
            leases: None,
        },
    };
    std::thread::Builder::new()
        .name("iop-node-0".into())
        .spawn(move || {
            let serve = async move {
                let (cores, mut inboxes) = Cores::new(1);
                let core0 = monoio::spawn(serve_core(inboxes.remove(0), config.runner.clone()));
                supervise_cores(&config, &cores, None, |_| {}).await;
                drop(cores);
                core0.await;
            };
            node_runner::runtime::block_on(driver, serve).expect("node runtime");
        })
        .expect("node thread");
}

/// A normalized run of provider `model` on the bench's node: one user
/// message `content`, in session `session_id`.
pub(crate) fn bench_run(model: &str, content: &str, session_id: &str) -> SubmitRun {
    SubmitRun {
        adapter: model.into(),
        target: "m".into(),
        input: RunInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: content.to_owned().into(),
                ..ChatMessage::default()
            }],
            ..RunInput::default()
        },
        node: Some(NODE_ID.into()),
        session_id: session_id.into(),
        ..SubmitRun::default()
    }
}

/// One normalized run of provider `model` submitted to the Edge's
/// dispatcher (what an ingress handler does): the number of its
/// `Delta` events. Panics unless it completes.
pub(crate) async fn run_deltas(dispatcher: &Dispatcher<EdgeConfig>, model: &str) -> u64 {
    let run = bench_run(model, "hello", "bench");
    let mut stream = dispatcher.submit_run(run).await.expect("run submitted");
    let mut deltas = 0;
    let mut last = None;
    while let Some(event) = stream.next().await {
        if event.kind() == RunEventKind::Delta {
            deltas += 1;
        }
        last = Some(event.kind());
    }
    assert_eq!(last, Some(RunEventKind::Complete), "the run completes");
    deltas
}
