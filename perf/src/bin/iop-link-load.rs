//! `iop-link-load`: simulates many idle nodes against a running Edge and
//! measures what they cost it (memory per node, CPU per heartbeat).
//!
//! ```sh
//! iop-link-load gen-config --nodes 10000 --nodes-addr 127.0.0.1:17070 --out edge.yaml
//! iop-edge --config edge.yaml --workers 2 &
//! iop-link-load run --edge 127.0.0.1:17070 --nodes 10000 --edge-pid $! --json out.json
//! iop-link-load heap --nodes 2000     # the Edge's live heap per node, by allocation size
//! ```
//!
//! See `perf::link_load` and `hack/bench-link-idle.sh`.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand, ValueEnum};
use edge_proxy::config::EdgeConfig;
use edge_proxy::server::{EdgeServer, StartOptions};
use framing::io_driver::IoDriver;
use perf::link_load::heap::{CountingAlloc, HeapHistogram};
use perf::link_load::{ClientConfig, FleetConfig, RunConfig, procfs, render_edge_yaml, run};

/// Counts live allocations per size class for `heap`; two relaxed atomic
/// adds per allocation otherwise.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Simulated idle nodes for the Edge's node socket.
#[derive(Debug, Parser)]
#[command(name = "iop-link-load", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write an edge.yaml with one record per simulated node.
    GenConfig(GenConfigArgs),
    /// Connect the simulated nodes, hold them idle and report.
    Run(RunArgs),
    /// Run the Edge in this process and break its live heap per node down by
    /// allocation size (the fleet runs as a child `run`).
    Heap(HeapArgs),
}

#[derive(Debug, clap::Args)]
struct HeapArgs {
    /// Number of simulated nodes.
    #[arg(long, default_value_t = 2_000)]
    nodes: usize,
    /// The in-process Edge's I/O driver.
    #[arg(long, value_enum, default_value_t = Driver::Epoll)]
    edge_driver: Driver,
    /// The in-process Edge's workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Size of the one tunnel body frame every node sends after idling
    /// (0 = skip).
    #[arg(long, default_value_t = 60_000)]
    warm_bytes: usize,
}

#[derive(Debug, clap::Args)]
struct GenConfigArgs {
    /// Number of node records.
    #[arg(long, default_value_t = 10_000)]
    nodes: usize,
    /// Where to write the file.
    #[arg(long)]
    out: PathBuf,
    /// `listen.nodes` of the Edge.
    #[arg(long, default_value = "127.0.0.1:17070")]
    nodes_addr: SocketAddr,
    /// `listen.ingress` of the Edge.
    #[arg(long, default_value = "127.0.0.1:0")]
    ingress_addr: SocketAddr,
    /// Write plaintext `token:` instead of `token_blake3:` (the Edge then
    /// logs one warning per node at start).
    #[arg(long)]
    plaintext_tokens: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Driver {
    Epoll,
    Uring,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The Edge's node socket.
    #[arg(long, default_value = "127.0.0.1:17070")]
    edge: SocketAddr,
    /// Number of simulated nodes.
    #[arg(long, default_value_t = 10_000)]
    nodes: usize,
    /// Index of the first node (`load-node-<first>`).
    #[arg(long, default_value_t = 0)]
    first: usize,
    /// Client runtime threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Most handshakes in flight at once.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// The clients' I/O driver.
    #[arg(long, value_enum, default_value_t = Driver::Epoll)]
    driver: Driver,
    /// Sample this Edge process from /proc (memory, CPU).
    #[arg(long)]
    edge_pid: Option<u32>,
    /// Label for the report (e.g. the Edge's driver).
    #[arg(long, default_value = "")]
    label: String,
    /// Seconds of idle Edge (no node) measured before connecting.
    #[arg(long, default_value_t = 3.0)]
    baseline_secs: f64,
    /// Seconds after the last ready before the idle windows open.
    #[arg(long, default_value_t = 1.0)]
    settle_secs: f64,
    /// The Edge's heartbeat interval, seconds.
    #[arg(long, default_value_t = 30.0)]
    heartbeat_secs: f64,
    /// Length of the steady idle window, seconds (default: two intervals).
    #[arg(long)]
    steady_secs: Option<f64>,
    /// After the steady window, make every node send one tunnel body frame
    /// of this many bytes and measure the Edge's RSS again (0 = skip).
    #[arg(long, default_value_t = 0)]
    warm_bytes: usize,
    /// Seconds to wait after the warm frames before sampling.
    #[arg(long, default_value_t = 3.0)]
    warm_hold_secs: f64,
    /// Seconds to wait for every node to be ready or failed.
    #[arg(long, default_value_t = 120.0)]
    connect_deadline_secs: f64,
    /// Per-node connect and handshake deadline, seconds.
    #[arg(long, default_value_t = 30.0)]
    handshake_timeout_secs: f64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("iop-link-load: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::GenConfig(args) => gen_config(&args).map(|()| ExitCode::SUCCESS),
        Command::Run(args) => run_fleet(&args),
        Command::Heap(args) => heap(&args).map(|()| ExitCode::SUCCESS),
    }
}

fn io_driver(driver: Driver) -> IoDriver {
    match driver {
        Driver::Epoll => IoDriver::Epoll,
        Driver::Uring => IoDriver::Uring,
    }
}

fn check_open_files(sockets: usize) -> anyhow::Result<()> {
    // One socket per node, plus a few for runtimes and /proc reads.
    if let Some(limit) = procfs::open_files_limit() {
        let needed = sockets as u64 + 64;
        if limit < needed {
            bail!("open files limit is {limit}, {needed} needed: raise it (ulimit -n {needed})");
        }
    }
    Ok(())
}

fn heap(args: &HeapArgs) -> anyhow::Result<()> {
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    check_open_files(args.nodes)?;
    let yaml = render_edge_yaml(&FleetConfig::new(args.nodes, "127.0.0.1:0".parse()?));
    let config =
        EdgeConfig::from_yaml_str(&yaml, "heap.yaml").map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut options = StartOptions::new(io_driver(args.edge_driver));
    options.workers = args.workers;
    let server = EdgeServer::start(config, options).context("starting the in-process edge")?;
    std::thread::sleep(Duration::from_millis(300));
    let before = HeapHistogram::now();

    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["run", "--edge", &server.node_addr.to_string()])
        .args([
            "--nodes",
            &args.nodes.to_string(),
            "--warm-bytes",
            &args.warm_bytes.to_string(),
        ])
        .args([
            "--baseline-secs",
            "0",
            "--steady-secs",
            "2",
            "--heartbeat-secs",
            "1000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the fleet")?;
    let stderr = child.stderr.take().context("fleet stderr")?;
    let (mut idle, mut warm) = (None, None);
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        eprintln!("fleet: {line}");
        if line.starts_with("phase=steady closed") {
            idle = Some(HeapHistogram::now());
        } else if line.starts_with("phase=warmed") {
            std::thread::sleep(Duration::from_millis(500));
            warm = Some(HeapHistogram::now());
        }
    }
    let status = child.wait()?;
    let idle = idle.with_context(|| format!("the fleet never went idle ({status})"))?;
    print_heap("idle, ready nodes", &idle, &before, args.nodes);
    if let Some(warm) = warm {
        let title = format!("after one {} B tunnel frame per node", args.warm_bytes);
        print_heap(&title, &warm, &before, args.nodes);
    }
    Ok(())
}

fn print_heap(title: &str, now: &HeapHistogram, before: &HeapHistogram, nodes: usize) {
    println!("Edge live heap per node, {title} ({nodes} nodes):");
    println!("| allocation size (bytes) | allocations per node | bytes per node |");
    println!("|---|---|---|");
    for class in now.per_node(before, nodes) {
        println!(
            "| {} – {} | {:.2} | {:.0} |",
            class.min_size,
            class.max_size - 1,
            class.allocs_per_node,
            class.bytes_per_node
        );
    }
    let total = (now.total_bytes() - before.total_bytes()) as f64 / nodes.max(1) as f64;
    println!("| total | | {total:.0} |\n");
}

fn gen_config(args: &GenConfigArgs) -> anyhow::Result<()> {
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let mut fleet = FleetConfig::new(args.nodes, args.nodes_addr);
    fleet.ingress_addr = args.ingress_addr;
    fleet.plaintext_tokens = args.plaintext_tokens;
    let yaml = render_edge_yaml(&fleet);
    // Check it the way the Edge will load it.
    let origin = args.out.display().to_string();
    EdgeConfig::from_yaml_str(&yaml, &origin).map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::write(&args.out, yaml).with_context(|| format!("writing {origin}"))?;
    eprintln!(
        "wrote {origin}: {} nodes, node socket {}",
        args.nodes, args.nodes_addr
    );
    Ok(())
}

fn secs(value: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value).with_context(|| format!("{flag}: not a duration in seconds"))
}

fn run_fleet(args: &RunArgs) -> anyhow::Result<ExitCode> {
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    check_open_files(args.nodes)?;
    let mut client = ClientConfig::new(args.edge, args.nodes);
    client.first = args.first;
    client.threads = args.threads.max(1);
    client.concurrency = args.concurrency.max(1);
    client.handshake_timeout = secs(args.handshake_timeout_secs, "--handshake-timeout-secs")?;
    client.driver = io_driver(args.driver);
    client.warm_bytes = args.warm_bytes;
    let mut config = RunConfig::new(client);
    config.edge_pid = args.edge_pid;
    config.label = args.label.clone();
    config.baseline = secs(args.baseline_secs, "--baseline-secs")?;
    config.settle = secs(args.settle_secs, "--settle-secs")?;
    config.heartbeat_interval = secs(args.heartbeat_secs, "--heartbeat-secs")?;
    config.steady = match args.steady_secs {
        Some(s) => secs(s, "--steady-secs")?,
        None => config.heartbeat_interval * 2,
    };
    config.warm_hold = secs(args.warm_hold_secs, "--warm-hold-secs")?;
    config.connect_deadline = secs(args.connect_deadline_secs, "--connect-deadline-secs")?;

    let report = run(&config).context("running the fleet")?;
    print!("{}", report.summary());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    let all_ready = report.connect.ready == args.nodes as u64;
    let all_stayed = report.idle.closed_by_edge == 0 && report.idle.io_errors == 0;
    Ok(if all_ready && all_stayed {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "iop-link-load: not every node connected and stayed connected (see the errors above)"
        );
        ExitCode::FAILURE
    })
}
