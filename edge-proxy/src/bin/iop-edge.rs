//! `iop-edge`: the IOP Edge.
//!
//! Today it serves the node socket (registration, readiness, heartbeat,
//! generation fencing); the OpenAI ingress comes with the front-door
//! milestone.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use edge_proxy::config::EdgeConfig;
use edge_proxy::runtime::driver_from_env;
use edge_proxy::server::{EdgeServer, StartOptions};

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
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> anyhow::Result<()> {
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
    server.join();
    Ok(())
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
