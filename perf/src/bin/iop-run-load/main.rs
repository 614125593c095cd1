//! `iop-run-load`: events per second of normalized runs through the Edge and
//! a real Node.
//!
//! One process holds the mock provider (its own threads), the Edge (its
//! monoio workers) and the submit side (one current-thread tokio runtime on
//! the main thread, calling the Edge's `Dispatcher` the way an ingress
//! handler does). The `iop-node` binary next to this one runs as a child
//! process. `--concurrency` runs are kept in flight for `--duration-s` (or
//! until `--runs` have started), each streaming `--tokens` tokens with no
//! delay, for each adapter.
//!
//! ```sh
//! cargo build --release -p perf -p node-runner --bins
//! target/release/iop-run-load --driver epoll --adapter both --duration-s 10
//! target/release/iop-run-load --json > report.json   # summary on stderr
//! ```
//!
//! CPU is split by thread name within this process (`iop-edge-*` = the Edge,
//! `mock-provider-*` = the mock, the rest = the submit side and helpers);
//! the Node's comes from `/proc/<pid>`. See `hack/bench-runs.sh`.

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use edge_proxy::config::EdgeConfig;
use edge_proxy::dispatch::{Dispatcher, SubmitRun};
use edge_proxy::server::{EdgeServer, StartOptions};
use framing::io_driver::IoDriver;
use perf::mock_provider::{MockConfig, serve_threads};
use proto::v1::{ChatMessage, RunEventKind, RunInput};

mod report;
use report::{AdapterReport, Report, Samples};

const NODE_ID: &str = "node-a";
const NODE_TOKEN: &str = "iop-run-load-token";
/// Longest wait for one event of a run before it counts as failed.
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Normalized runs through an in-process Edge and an `iop-node` process.
#[derive(Debug, Parser)]
#[command(name = "iop-run-load", version)]
struct Cli {
    /// Which adapter(s) to load, one after the other.
    #[arg(long, value_enum, default_value_t = AdapterArg::Both)]
    adapter: AdapterArg,
    /// Runs in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds of load per adapter (runs in flight at the end finish).
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Stop after this many runs per adapter instead of after `--duration-s`.
    #[arg(long)]
    runs: Option<u64>,
    /// Content tokens per run (the mock's `x-mock-tokens`).
    #[arg(long, default_value_t = 1000)]
    tokens: u64,
    /// Tokens per provider stream event (the mock's `x-mock-chunk-size`).
    #[arg(long, default_value_t = 1)]
    chunk_size: u64,
    /// The in-process Edge's worker threads.
    #[arg(long, default_value_t = 1)]
    edge_workers: usize,
    /// Pass `--workers N` to `iop-node` (its worker threads; default: the
    /// node's own default).
    #[arg(long)]
    node_workers: Option<usize>,
    /// The mock provider's threads.
    #[arg(long, default_value_t = 1)]
    mock_workers: usize,
    /// I/O driver of the Edge and of the Node (`IOP_IO_DRIVER`); `auto` =
    /// io_uring where the kernel allows it.
    #[arg(long, value_enum, default_value_t = Driver::Auto)]
    driver: Driver,
    /// Seconds of unmeasured load per adapter before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup_s: f64,
    /// The `iop-node` binary (default: next to this executable).
    #[arg(long)]
    node_bin: Option<PathBuf>,
    /// Print the report as JSON on stdout (the summary goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AdapterArg {
    Openai,
    Ollama,
    Both,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Driver {
    Auto,
    Epoll,
    Uring,
}

/// Provider id in the generated config, and its label in the report.
const ADAPTERS: [(&str, &str, AdapterArg); 2] = [
    ("oa", "openai_compat", AdapterArg::Openai),
    ("ol", "ollama", AdapterArg::Ollama),
];

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("iop-run-load: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    if cli.concurrency == 0 || cli.tokens == 0 || cli.chunk_size == 0 || cli.edge_workers == 0 {
        bail!("--concurrency, --tokens, --chunk-size and --edge-workers must be at least 1");
    }
    let duration = secs(cli.duration_s, "--duration-s")?;
    let warmup = secs(cli.warmup_s, "--warmup-s")?;
    let driver = match cli.driver {
        Driver::Epoll => IoDriver::Epoll,
        Driver::Uring if monoio::utils::detect_uring() => IoDriver::Uring,
        Driver::Uring => bail!("--driver uring: this kernel refuses io_uring"),
        Driver::Auto => IoDriver::resolve(None, monoio::utils::detect_uring())?,
    };
    let node_bin = match &cli.node_bin {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("this executable has no directory")?
            .join("iop-node"),
    };
    if !node_bin.is_file() {
        bail!(
            "{} is missing: build it with `cargo build --release -p node-runner --bins` \
             (or pass --node-bin)",
            node_bin.display()
        );
    }

    let mock = serve_threads(
        "127.0.0.1:0".parse()?,
        MockConfig::default(),
        cli.mock_workers.max(1),
    )
    .context("starting the mock provider")?;
    let yaml = edge_yaml(&cli, &mock.local_addr().to_string());
    let config = EdgeConfig::from_yaml_str(&yaml, "iop-run-load.yaml")
        .map_err(|e| anyhow::anyhow!("generated config: {e}"))?;
    let mut options = StartOptions::new(driver);
    options.workers = cli.edge_workers;
    let edge = EdgeServer::start(config, options).context("starting the in-process edge")?;
    let node = NodeProcess::start(&node_bin, &edge.node_addr.to_string(), driver, &cli)?;
    node.wait_ready(&edge)?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut report = Report {
        driver: driver.as_str(),
        edge_workers: cli.edge_workers,
        mock_workers: cli.mock_workers.max(1),
        node_workers: cli.node_workers,
        concurrency: cli.concurrency,
        tokens_per_run: cli.tokens,
        chunk_size: cli.chunk_size,
        node_pid: node.child.id(),
        adapters: Vec::new(),
    };
    for (id, kind, which) in ADAPTERS {
        if cli.adapter != AdapterArg::Both && cli.adapter != which {
            continue;
        }
        if !warmup.is_zero() {
            eprintln!("iop-run-load: [{}] {kind}: warming up", driver.as_str());
            runtime.block_on(load(&edge.dispatcher, id, cli.concurrency, warmup, None));
        }
        eprintln!("iop-run-load: [{}] {kind}: measuring", driver.as_str());
        let before = Samples::take(node.child.id())?;
        let totals = runtime.block_on(load(
            &edge.dispatcher,
            id,
            cli.concurrency,
            duration,
            cli.runs,
        ));
        let after = Samples::take(node.child.id())?;
        report
            .adapters
            .push(AdapterReport::new(kind, totals, &before, &after));
    }

    let summary = report.summary();
    if cli.json {
        eprint!("{summary}");
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{summary}");
    }
    let failed = report.adapters.iter().any(|a| a.runs_failed > 0);
    Ok(if failed {
        eprintln!(
            "iop-run-load: some runs failed (see first_error); the node's last log lines:\n{}",
            node.log_tail()
        );
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn secs(value: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value).with_context(|| format!("{flag}: not a duration in seconds"))
}

/// One node, one provider per adapter, all on the mock with zero delay.
fn edge_yaml(cli: &Cli, mock: &str) -> String {
    let mut providers = String::new();
    for (id, kind, _) in ADAPTERS {
        providers.push_str(&format!(
            "      - id: {id}\n        kind: {kind}\n        base_url: http://{mock}\n        \
             targets: [m]\n        max_concurrency: {max}\n        headers: {{x-mock-tokens: \
             \"{tokens}\", x-mock-delay-us: \"0\", x-mock-chunk-size: \"{chunk}\"}}\n",
            max = cli.concurrency.max(64),
            tokens = cli.tokens,
            chunk = cli.chunk_size,
        ));
    }
    format!(
        "listen:\n  ingress: 127.0.0.1:0\n  nodes: 127.0.0.1:0\nnodes:\n  - id: {NODE_ID}\n    \
         token: {NODE_TOKEN}\n    providers:\n{providers}"
    )
}

/// The `iop-node` child: killed on drop, its data dir removed.
struct NodeProcess {
    child: Child,
    data_dir: PathBuf,
    log_tail: Arc<Mutex<VecDeque<String>>>,
}

impl NodeProcess {
    fn start(bin: &Path, edge: &str, driver: IoDriver, cli: &Cli) -> anyhow::Result<Self> {
        let data_dir = std::env::temp_dir().join(format!("iop-run-load-{}", std::process::id()));
        let _ = fs::remove_dir_all(&data_dir);
        let mut cmd = Command::new(bin);
        if let Some(workers) = cli.node_workers {
            cmd.args(["--workers", &workers.to_string()]);
        }
        let mut child = cmd
            .args(["--edge", edge, "--log-format", "json", "--data-dir"])
            .arg(&data_dir)
            .env("IOP_NODE_TOKEN", NODE_TOKEN)
            .env("IOP_IO_DRIVER", driver.as_str())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stderr = child.stderr.take().context("node stderr")?;
        let log_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&log_tail);
        // Keep draining, so the node never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() == 20 {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        Ok(Self {
            child,
            data_dir,
            log_tail,
        })
    }

    fn wait_ready(&self, edge: &EdgeServer) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if edge
                .registry
                .ready_nodes()
                .iter()
                .any(|(id, _, _)| id == NODE_ID)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the node was not ready on the edge within 15 s; its last log lines:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl NodeProcess {
    fn log_tail(&self) -> String {
        let tail = self.log_tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.data_dir);
    }
}

/// What the runs of one phase saw.
#[derive(Debug, Default)]
struct Totals {
    elapsed: Duration,
    runs_ok: u64,
    runs_failed: u64,
    submit_errors: u64,
    events: u64,
    delta_events: u64,
    output_tokens: u64,
    first_delta_us: Vec<u64>,
    run_us: Vec<u64>,
    first_error: Option<String>,
}

impl Totals {
    fn merge(&mut self, other: Self) {
        self.runs_ok += other.runs_ok;
        self.runs_failed += other.runs_failed;
        self.submit_errors += other.submit_errors;
        self.events += other.events;
        self.delta_events += other.delta_events;
        self.output_tokens += other.output_tokens;
        self.first_delta_us.extend(other.first_delta_us);
        self.run_us.extend(other.run_us);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn fail(&mut self, error: String) {
        self.runs_failed += 1;
        self.first_error.get_or_insert(error);
    }
}

/// Keeps `concurrency` runs on `adapter` in flight until `duration` has
/// passed or `max_runs` have started; runs in flight then finish.
async fn load(
    dispatcher: &Dispatcher<EdgeConfig>,
    adapter: &str,
    concurrency: usize,
    duration: Duration,
    max_runs: Option<u64>,
) -> Totals {
    let start = Instant::now();
    let deadline = start + duration;
    let started = Arc::new(AtomicU64::new(0));
    let run = SubmitRun {
        adapter: adapter.to_owned(),
        target: "m".to_owned(),
        input: RunInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "hello".into(),
                ..ChatMessage::default()
            }],
            ..RunInput::default()
        },
        node: Some(NODE_ID.to_owned()),
        session_id: "bench".to_owned(),
        ..SubmitRun::default()
    };
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (dispatcher, run, started) = (dispatcher.clone(), run.clone(), Arc::clone(&started));
        tasks.spawn(async move {
            let mut totals = Totals::default();
            loop {
                let more = match max_runs {
                    Some(max) => started.fetch_add(1, Ordering::Relaxed) < max,
                    None => Instant::now() < deadline,
                };
                if !more {
                    return totals;
                }
                one_run(&dispatcher, run.clone(), &mut totals).await;
                if totals.submit_errors > 100 {
                    return totals;
                }
            }
        });
    }
    let mut totals = Totals::default();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(part) => totals.merge(part),
            Err(error) => totals.fail(format!("load task: {error}")),
        }
    }
    totals.elapsed = start.elapsed();
    totals
}

async fn one_run(dispatcher: &Dispatcher<EdgeConfig>, run: SubmitRun, totals: &mut Totals) {
    let t0 = Instant::now();
    let mut stream = match dispatcher.submit_run(run).await {
        Ok(stream) => stream,
        Err(error) => {
            totals.submit_errors += 1;
            totals.fail(format!("submit: {error}"));
            tokio::time::sleep(Duration::from_millis(10)).await;
            return;
        }
    };
    let mut first_delta = None;
    loop {
        let event = match tokio::time::timeout(EVENT_TIMEOUT, stream.next()).await {
            Ok(Some(event)) => event,
            Ok(None) => return totals.fail("stream ended without a terminal".into()),
            Err(_) => return totals.fail(format!("no event for {EVENT_TIMEOUT:?}")),
        };
        totals.events += 1;
        match event.kind() {
            RunEventKind::Delta | RunEventKind::ReasoningDelta => {
                totals.delta_events += 1;
                first_delta.get_or_insert_with(|| t0.elapsed());
            }
            RunEventKind::Complete => {
                totals.runs_ok += 1;
                totals.output_tokens += event.usage.map_or(0, |u| u.output_tokens);
                totals.run_us.push(micros(t0.elapsed()));
                if let Some(first) = first_delta {
                    totals.first_delta_us.push(micros(first));
                }
                return;
            }
            kind @ (RunEventKind::Error | RunEventKind::Cancelled) => {
                let failure = event.failure.unwrap_or_default();
                return totals.fail(format!(
                    "{kind:?} {:?}: {}",
                    failure.code(),
                    failure.message
                ));
            }
            _ => {}
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
