//! `iop-edge`: the IOP Edge.
//!
//! Serves the node socket (registration, readiness, heartbeat, generation
//! fencing) and the OpenAI ingress on every core.
//!
//! Operator signals (`docs/operations.md`): `SIGTERM`/`SIGINT` drain —
//! stop accepting, let in-flight requests finish within `--drain-grace-ms`,
//! close node links, exit 0; `SIGHUP` reloads `--config` (an invalid file
//! keeps the running config).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use edge_proxy::config::EdgeConfig;
use edge_proxy::ops::signals::{OperatorSignal, OperatorSignals};
use edge_proxy::ops::{drain_server, reload::reload_server};
use edge_proxy::runtime::driver_from_env;
use edge_proxy::server::{EdgeServer, StartOptions};

/// jemalloc, not glibc's malloc: ~11 % less CPU a small request at the same
/// memory for 10k open streams (`bench-results/profiles.md`, round 9).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The IOP Edge: the OpenAI-compatible front door that Nodes dial into.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Path to edge.yaml. Without it, the embedded default config is used
    /// (loopback only: nodes on 127.0.0.1:7070, dev token `iop-dev-token`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Worker threads, one monoio runtime each (0 = the config's `workers`,
    /// or one per core).
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Client connections a node's link core serves before connections
    /// accepted on other cores stay there (0 = every core serves what it
    /// accepts); see docs/operations.md.
    #[arg(long, default_value_t = edge_proxy::ingress::placement::DEFAULT_LINK_CORE_SLACK)]
    link_core_slack: usize,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish
    /// before the node links are closed, in ms [default: edge.yaml's
    /// `drain_grace_ms`, which defaults to 30000].
    #[arg(long)]
    drain_grace_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> anyhow::Result<()> {
    // Before any thread starts, so every thread inherits the blocked mask
    // and the signals are taken only by the loop below.
    let signals = OperatorSignals::block().context("blocking operator signals")?;
    let args = Args::parse();
    init_logging(args.log_format);
    let config = match &args.config {
        Some(path) => EdgeConfig::load(path).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => EdgeConfig::embedded_default(),
    };
    for warning in config.warnings() {
        tracing::warn!(origin = config.origin(), "{warning}");
    }
    let link_security = config.link_security().as_str();
    let driver = driver_from_env()?;
    let mut options = StartOptions::new(driver);
    options.workers = args.workers;
    options.link_core_slack = args.link_core_slack;
    let server =
        EdgeServer::start(config, options).context("starting the node socket and the ingress")?;
    tracing::info!(
        event = "edge_started",
        driver = driver.as_str(),
        workers = server.workers,
        node_socket = %server.node_addr,
        ingress = %server.ingress_addr,
        link_security,
        "edge_started"
    );
    loop {
        match signals.wait().context("waiting for operator signals")? {
            OperatorSignal::Reload => match &args.config {
                // Logs `edge_config_reloaded` or `edge_config_reload_rejected`.
                Some(path) => drop(reload_server(&server, path)),
                None => tracing::warn!(
                    event = "edge_config_reload_rejected",
                    error = "no --config file: the embedded default cannot be reloaded",
                    "edge_config_reload_rejected"
                ),
            },
            signal @ (OperatorSignal::Terminate | OperatorSignal::Interrupt) => {
                tracing::info!(signal = signal.as_str(), "operator asked to stop");
                // The flag, else the running config's (a reload may change it).
                let grace_ms = args
                    .drain_grace_ms
                    .unwrap_or_else(|| server.registry.directory().drain_grace_ms());
                drain_server(&server, grace_ms);
                // The cores run until the process ends.
                std::process::exit(0);
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Args;

    #[test]
    fn help_says_what_the_binary_is() {
        let about = Args::command().get_about().map(ToString::to_string);
        assert_eq!(
            about.as_deref(),
            Some("The IOP Edge: the OpenAI-compatible front door that Nodes dial into")
        );
    }
}
