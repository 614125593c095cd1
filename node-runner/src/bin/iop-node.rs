//! `iop-node`: the IOP Node.
//!
//! Dials the Edge, registers with its token, applies the config the Edge
//! sends, stays linked (reconnecting with backoff) and serves runs and node
//! commands.
//!
//! Thread-per-core: `--workers N` (default: one per available core) monoio
//! runtimes, io_uring or epoll (`IOP_IO_DRIVER`). Core 0 (this thread) runs
//! the link supervisor and serves work; cores 1..N serve work (see
//! `node_runner::runs::cores`).
//!
//! `--admin-addr` (default `127.0.0.1:9100`, `off` to disable) serves
//! `GET /metrics` and `GET /healthz` (`node_runner::admin`).
//!
//! `SIGTERM`/`SIGINT` drain the node (`node_runner::drain`): the Edge is
//! told, new work is refused, in-flight runs and tunnels get
//! `--drain-grace-ms` to finish, then the link closes and the process
//! exits 0.
//!
//! `iop-node runs --data-dir DIR [--limit N] [--json]` lists the most recent
//! runs in the local run store (F15), newest first, and exits.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use framing::frame::DEFAULT_MAX_FRAME_LEN;
use framing::io_driver::{IO_DRIVER_ENV, IoDriver};
use framing::link::{HeartbeatConfig, reject_reason_name};
use framing::timer::ClockSource;
use node_runner::admin::{self, AdminAddr, AdminState, DEFAULT_ADMIN_ADDR};
use node_runner::drain::{OperatorSignal, OperatorSignals, node_drain};
use node_runner::link::session::NodeSessionConfig;
use node_runner::link::supervisor::{SupervisorExit, supervise_cores};
use node_runner::link::{LinkClientConfig, link_tls};
use node_runner::metrics::node_metrics;
use node_runner::provider_http::{ProviderClientConfig, tls_client_config};
use node_runner::runs::{Cores, RunnerConfig, serve_core};
use node_runner::runtime::{block_on, worker_count};
use node_runner::store::{
    RunStore, StoreConfig, StorePriority, StoreWriter, WriterConfig, format_json_lines,
    format_table,
};

/// jemalloc, not glibc's malloc: ~11 % less CPU a small request at the same
/// memory for 10k open streams (`bench-results/profiles.md`, round 9).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The IOP Node: runs next to model servers and serves them to the Edge.
///
/// With no subcommand it runs the node.
#[derive(Debug, Parser)]
#[command(version, subcommand_negates_reqs = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// The Edge's node socket, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:7070")]
    edge: String,
    /// The node's token (prefer the IOP_NODE_TOKEN environment variable:
    /// command lines are visible to other users).
    // Required to run the node; an `Option` only so that subcommands such as
    // `runs` need no token (`subcommand_negates_reqs`).
    #[arg(long, env = "IOP_NODE_TOKEN", hide_env_values = true, required = true)]
    token: Option<String>,
    /// Directory for the Node's local state (run store).
    #[arg(long, default_value = "./iop-node-data")]
    data_dir: PathBuf,
    /// Extra CA certificates (PEM) trusted for `https://` providers, on top
    /// of the built-in web roots (for a private provider CA).
    #[arg(long)]
    provider_ca_file: Option<PathBuf>,
    /// `SO_RCVBUF` of each provider connection, in bytes [default: the
    /// kernel's own size and autotuning]. Only for a provider that sends
    /// faster than the clients read (large answers, a fast local model):
    /// a larger buffer lets the kernel reopen the provider's window in
    /// larger steps. It turns the connection's autotuning off, and the
    /// kernel caps it at `net.core.rmem_max` (docs/operations.md).
    #[arg(long, value_parser = clap::value_parser!(u32).range(4096..=1 << 30))]
    provider_receive_buffer: Option<u32>,
    /// Managed mode (F28): the CA bundle (PEM) the Edge's certificate must
    /// chain to. With --tls-cert, --tls-key and --edge-server-name the link
    /// is mTLS; without all four it is plain TCP.
    #[arg(long, requires_all = ["tls_cert", "tls_key", "edge_server_name"])]
    tls_ca: Option<PathBuf>,
    /// This node's certificate chain (PEM, leaf first); its URI SAN
    /// `spiffe://<trust-domain>/node/<node-id>` is the node's identity.
    #[arg(long, requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, requires = "tls_ca")]
    tls_key: Option<PathBuf>,
    /// The name the Edge's certificate must be valid for (DNS or IP).
    #[arg(long, requires = "tls_ca")]
    edge_server_name: Option<String>,
    /// Worker threads, one monoio runtime each (0 = one per available
    /// core). Core 0 also runs the link to the Edge.
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// How many more runs in flight core 0 (the link's) may hold than the
    /// least loaded core and still take new work: work there crosses no
    /// core. A bulk stream (≥ 1 MiB granted in 100 ms) weighs one past
    /// this, so bulk streams spread over the cores. 0 = the least loaded
    /// core always (ties round-robin).
    #[arg(long, default_value_t = node_runner::runs::cores::DEFAULT_LINK_CORE_SLACK)]
    link_core_slack: u32,
    /// How the run store's thread is scheduled: `idle` (SCHED_IDLE: it
    /// only takes CPU no request thread wants, so its commits never delay
    /// a request; on a CPU busy for long, record updates may be dropped
    /// and counted on /metrics) or `normal`.
    #[arg(long, value_enum, default_value_t = StorePriority::Idle)]
    run_store_priority: StorePriority,
    /// How long the run store gathers record updates before it commits
    /// them, in ms (at least 1): each commit costs a data sync, so a longer
    /// gather costs less CPU a request at moderate load; what a crash or a
    /// kill loses is at most this long's updates.
    #[arg(long, default_value_t = node_runner::store::writer::DEFAULT_COMMIT_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    run_store_commit_ms: u64,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// The admin port (`GET /metrics`, `GET /healthz`): IP:PORT (port 0
    /// picks a free one) or `off` [default: 127.0.0.1:9100; if that
    /// default is taken the node starts without it and logs why].
    #[arg(long)]
    admin_addr: Option<AdminAddr>,
    /// On SIGTERM/SIGINT, how long in-flight runs and tunnels may take to
    /// finish before the link is closed, in ms.
    #[arg(long, default_value_t = node_runner::drain::DEFAULT_DRAIN_GRACE_MS)]
    drain_grace_ms: u64,
    /// Link heartbeat: time from one ping to the next, in ms. Keep the
    /// production profile (30 s ping, 45 s wait, as the Edge) unless a test
    /// or a deliberate profile needs shorter ones.
    #[arg(long, default_value_t = framing::link::HEARTBEAT_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    heartbeat_interval_ms: u64,
    /// Link heartbeat: how long a ping may stay unanswered before the link
    /// closes with `heartbeat_timeout`, in ms (at least the interval).
    #[arg(long, default_value_t = framing::link::HEARTBEAT_WAIT_MS,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    heartbeat_wait_ms: u64,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the most recent runs in the local run store, newest first.
    Runs(RunsArgs),
}

#[derive(Debug, clap::Args)]
struct RunsArgs {
    /// The Node's data dir (as given to the node).
    #[arg(long, default_value = "./iop-node-data")]
    data_dir: PathBuf,
    /// How many runs to list.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Print one JSON object per run (JSON Lines) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Exit code when the Edge refuses this node for good (unknown token).
const EXIT_REJECTED: u8 = 2;

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    if let Some(Command::Runs(runs_args)) = &args.command {
        return list_runs(runs_args);
    }
    // Before any other thread starts: every thread inherits the mask, and
    // only the signal thread takes the signals.
    let signals = OperatorSignals::block().context("blocking operator signals")?;
    init_logging(args.log_format);
    node_drain().set_grace_ms(args.drain_grace_ms);
    std::thread::Builder::new()
        .name("iop-node-signals".into())
        .spawn(move || watch_signals(&signals))
        .context("starting the signal thread")?;
    // clap enforces --token when there is no subcommand.
    let token = args.token.unwrap_or_default();
    if token.is_empty() {
        anyhow::bail!("--token (or IOP_NODE_TOKEN) must not be empty");
    }
    if args.heartbeat_wait_ms < args.heartbeat_interval_ms {
        anyhow::bail!(
            "--heartbeat-wait-ms ({}) must be at least --heartbeat-interval-ms ({})",
            args.heartbeat_wait_ms,
            args.heartbeat_interval_ms
        );
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating the data dir {}", args.data_dir.display()))?;
    let edge = resolve(&args.edge)?;
    // The run store (F15): opened before dialing, so a bad data dir fails
    // at start; written by its own thread, off the event path.
    let store = RunStore::open(&args.data_dir, StoreConfig::default())
        .with_context(|| format!("opening the run store in {}", args.data_dir.display()))?;
    let writer_config = WriterConfig {
        priority: args.run_store_priority,
        commit_interval: std::time::Duration::from_millis(args.run_store_commit_ms),
        ..WriterConfig::default()
    };
    let writer =
        StoreWriter::spawn(store, writer_config).context("starting the run store writer")?;
    let tls = tls_client_config(args.provider_ca_file.as_deref())?;
    if let Some(asked) = args.provider_receive_buffer {
        warn_if_capped(asked);
    }
    let link_tls = match (
        &args.tls_ca,
        &args.tls_cert,
        &args.tls_key,
        &args.edge_server_name,
    ) {
        (Some(ca), Some(cert), Some(key), Some(name)) => Some(link_tls(ca, cert, key, name)?),
        _ => None,
    };
    let link_security = if link_tls.is_some() {
        "mtls"
    } else {
        "plaintext"
    };
    let requested = std::env::var(IO_DRIVER_ENV).ok();
    let driver = IoDriver::resolve(requested.as_deref(), monoio::utils::detect_uring())?;
    let config = LinkClientConfig {
        edge,
        session: NodeSessionConfig {
            token,
            instance_id: format!("{:016x}", fastrand::u64(..)),
            max_frame_len: u32::try_from(DEFAULT_MAX_FRAME_LEN).unwrap_or(u32::MAX),
            handshake_timeout_ms: 10_000,
            heartbeat: HeartbeatConfig {
                interval_ms: args.heartbeat_interval_ms,
                wait_ms: args.heartbeat_wait_ms,
            },
        },
        tick_ms: 100,
        clock: ClockSource::Coarse,
        runner: RunnerConfig {
            store: Some(writer.handle()),
            provider: ProviderClientConfig {
                tls,
                receive_buffer: args.provider_receive_buffer,
                ..ProviderClientConfig::default()
            },
            // F29: the lease key (data_dir/lease.key) and replay set.
            leases: Some(std::sync::Arc::new(
                node_runner::lease::LeaseOpener::open_data_dir(&args.data_dir)
                    .context("opening the credential lease key and replay set")?,
            )),
        },
        tls: link_tls,
    };
    let admin = bind_admin(args.admin_addr)?;
    let workers = worker_count(args.workers);
    tracing::info!(
        event = "node_starting",
        driver = driver.as_str(),
        workers,
        link_core_slack = args.link_core_slack,
        edge = %edge,
        link_security,
        "node_starting"
    );
    let (cores, mut inboxes) = Cores::new(workers);
    let cores = cores.with_link_slack(args.link_core_slack);
    let core0 = inboxes.remove(0);
    // Cores 1..N: work only. Each reports whether its runtime started, so
    // a refused io_uring (ring limits) fails the start, not a later run.
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    for inbox in inboxes {
        let core = inbox.core();
        let runner = config.runner.clone();
        let started = started_tx.clone();
        std::thread::Builder::new()
            .name(format!("iop-node-{core}"))
            .spawn(move || {
                let ok = started.clone();
                let run = block_on(driver, async move {
                    let _ = ok.send(Ok(()));
                    serve_core(inbox, runner).await;
                });
                if let Err(error) = run {
                    let _ = started.send(Err(error));
                }
            })
            .with_context(|| format!("starting node core {core}"))?;
    }
    drop(started_tx);
    for _ in 1..workers {
        started_rx
            .recv()
            .context("a node core stopped while starting")?
            .context("starting a node core's runtime")?;
    }
    let runner = config.runner.clone();
    let admin_store = writer.handle();
    let exit = block_on(driver, async move {
        let core0 = monoio::spawn(serve_core(core0, runner));
        if let Some(listener) = admin {
            let state = AdminState {
                metrics: node_metrics(),
                store: Some(admin_store),
            };
            monoio::spawn(admin::serve(listener, state));
        }
        let exit = supervise_cores(&config, &cores, None, |_| {}).await;
        // Closing the inboxes stops every core; core 0's is waited for here,
        // so its run store handle is gone before the store is flushed.
        drop((cores, config));
        core0.await;
        exit
    })
    .context("starting the link core's runtime")?;
    match exit {
        SupervisorExit::PermanentRejection { reason, message } => {
            eprintln!(
                "iop-node: the edge at {edge} refused this node ({}): {message}",
                reject_reason_name(reason)
            );
            Ok(ExitCode::from(EXIT_REJECTED))
        }
        SupervisorExit::ConnectionLimit | SupervisorExit::Drained => Ok(ExitCode::SUCCESS),
    }
}

/// Takes operator signals until the process ends: `SIGTERM`/`SIGINT`
/// begin the drain (the link core carries it out); `SIGHUP` is logged (the
/// Node's config comes from the Edge).
fn watch_signals(signals: &OperatorSignals) {
    loop {
        match signals.wait() {
            Ok(OperatorSignal::Hangup) => tracing::info!(
                "SIGHUP ignored: the node's config comes from the edge (reload edge.yaml there)"
            ),
            Ok(signal) => {
                if node_drain().begin() {
                    tracing::info!(?signal, "operator asked to stop");
                }
            }
            Err(error) => {
                tracing::error!(%error, "waiting for operator signals failed");
                return;
            }
        }
    }
}

/// Binds the admin port (on the link core's runtime later) and logs the
/// bound address. An explicit address must bind; the default may be taken
/// (another node on this host), which only costs the admin port.
fn bind_admin(requested: Option<AdminAddr>) -> anyhow::Result<Option<std::net::TcpListener>> {
    let explicit = requested.is_some();
    let addr = match requested.unwrap_or(DEFAULT_ADMIN_ADDR.parse()?) {
        AdminAddr::Off => {
            tracing::info!(event = "admin_disabled", "admin_disabled");
            return Ok(None);
        }
        AdminAddr::Listen(addr) => addr,
    };
    match std::net::TcpListener::bind(addr) {
        Ok(listener) => {
            let bound = listener.local_addr()?;
            tracing::info!(event = "admin_listening", addr = %bound, "admin_listening");
            Ok(Some(listener))
        }
        Err(error) if !explicit => {
            tracing::error!(event = "admin_unavailable", addr = %addr, %error, "admin_unavailable");
            Ok(None)
        }
        Err(error) => Err(error).with_context(|| format!("binding --admin-addr {addr}")),
    }
}

/// `iop-node runs`: print recent runs from the store in `--data-dir`.
fn list_runs(args: &RunsArgs) -> anyhow::Result<ExitCode> {
    let store = RunStore::open_existing(&args.data_dir, StoreConfig::default())?;
    let records = store.recent(args.limit)?;
    let out = if args.json {
        format_json_lines(&records)
    } else {
        format_table(&records)
    };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

fn resolve(edge: &str) -> anyhow::Result<SocketAddr> {
    edge.to_socket_addrs()
        .with_context(|| format!("--edge {edge:?} is not HOST:PORT"))?
        .next()
        .with_context(|| format!("--edge {edge:?} resolves to no address"))
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("IOP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Says at start when `--provider-receive-buffer` is over what the kernel
/// grants a socket (`net.core.rmem_max`): it would be capped silently.
fn warn_if_capped(asked: u32) {
    if let Some(max) = node_runner::sockopt::receive_buffer_max()
        && u64::from(asked) > max
    {
        tracing::warn!(
            event = "provider_receive_buffer_capped",
            asked,
            rmem_max = max,
            "--provider-receive-buffer is over net.core.rmem_max: the kernel grants {max} bytes"
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Args;

    #[test]
    fn help_says_what_the_binary_is() {
        let about = Args::command().get_about().map(ToString::to_string);
        assert_eq!(
            about.as_deref(),
            Some("The IOP Node: runs next to model servers and serves them to the Edge")
        );
    }
}
