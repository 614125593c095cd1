//! `iop-mock-provider`: a fast OpenAI/Ollama-compatible model server stand-in.
//!
//! See `perf/README.md` and `iop-mock-provider --help` for routes and knobs.

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use perf::mock_provider::{Knobs, MockConfig, MockTls, bind, serve_threads};

const AFTER_HELP: &str = "\
Every knob flag sets a default. A request overrides it with a header
`x-mock-<knob>: V` or a query parameter `?<knob>=V` (the query wins), e.g.
  curl -N localhost:8000/v1/chat/completions?tokens=5&delay-ms=20 \\
       -H 'x-mock-reasoning-tokens: 3' -d '{\"model\":\"m\",\"messages\":[],\"stream\":true}'
`stall-after`, `abort-after` and `status` take `none` to unset a default.

Routes: POST /v1/chat/completions, POST /v1/responses, GET /v1/models,
GET /health, POST /api/chat, GET /api/tags, POST /api/show, GET /api/ps,
POST /api/pull (`tokens` progress lines), GET /mock/stats,
POST /mock/health?status=up|down, POST /mock/reset.

Determinism: a content token is \"tok \", a reasoning token \"hmm \";
prompt_tokens = ceil(bytes of message text / 4).";

/// Command line of the mock provider.
#[derive(Debug, Parser)]
#[command(
    name = "iop-mock-provider",
    version,
    about = "A fast OpenAI/Ollama-compatible mock model server for IOP tests and benchmarks",
    after_help = AFTER_HELP
)]
struct Cli {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// Worker threads (default: number of cores). Each runs its own
    /// current-thread tokio runtime and SO_REUSEPORT listener.
    #[arg(long)]
    workers: Option<usize>,
    /// Use one work-stealing tokio runtime with --workers threads instead of
    /// thread-per-core (for comparison; slower on small requests).
    #[arg(long)]
    work_stealing: bool,
    /// Model names listed by /v1/models, /api/tags and /api/ps (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "mock-model")]
    models: Vec<String>,
    /// Start with /health answering 503 (toggle with POST /mock/health).
    #[arg(long)]
    unhealthy: bool,
    /// Serve https:// with this PEM certificate chain (leaf first; needs
    /// --tls-key), for a Node's TLS to its provider.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,

    /// [knob tokens] Content tokens to generate.
    #[arg(long, default_value_t = Knobs::default().tokens)]
    tokens: u32,
    /// [knob reasoning-tokens] Reasoning tokens, streamed before the content
    /// (`delta.reasoning_content`, Ollama `message.thinking`).
    #[arg(long, default_value_t = 0)]
    reasoning_tokens: u32,
    /// [knob cached-tokens] Reported cached prompt tokens (capped at prompt_tokens).
    #[arg(long, default_value_t = 0)]
    cached_tokens: u32,
    /// [knob chunk-size] Tokens per SSE event / NDJSON line.
    #[arg(long, default_value_t = 1)]
    chunk_size: u32,
    /// [knob event-bytes] Pad every token event to about N bytes (0 = off, max 1 MiB).
    #[arg(long, default_value_t = 0)]
    event_bytes: usize,
    /// [knob delay-ms] Delay per generated token, in milliseconds.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// [knob delay-us] Delay per generated token, in microseconds (overrides --delay-ms).
    #[arg(long)]
    delay_us: Option<u64>,
    /// [knob prefill-ms] Delay before the first body byte of a stream (headers
    /// go out at once), or before a non-streaming response.
    #[arg(long, default_value_t = 0)]
    prefill_ms: u64,
    /// [knob headers-delay-ms] Delay before the response headers.
    #[arg(long, default_value_t = 0)]
    headers_delay_ms: u64,
    /// [knob stall-after] After N tokens stop sending but keep the connection
    /// open until the client leaves.
    #[arg(long)]
    stall_after: Option<u32>,
    /// [knob abort-after] After N tokens drop the connection without the
    /// terminating chunk.
    #[arg(long)]
    abort_after: Option<u32>,
    /// [knob status] Answer every generation with this HTTP status and an
    /// OpenAI (or Ollama) error body, e.g. 429, 500.
    #[arg(long)]
    status: Option<u16>,
    /// [knob stamp] Put into every streamed chat token event the
    /// CLOCK_MONOTONIC nanoseconds at which it was produced (the choice's
    /// `mock_sent_ns`), for one-way latency measurements.
    #[arg(long)]
    stamp: bool,
}

impl Cli {
    fn knobs(&self) -> anyhow::Result<Knobs> {
        let mut k = Knobs::default();
        let opt = |v: Option<String>| v.unwrap_or_else(|| "none".to_owned());
        let pairs = [
            ("tokens", self.tokens.to_string()),
            ("reasoning-tokens", self.reasoning_tokens.to_string()),
            ("cached-tokens", self.cached_tokens.to_string()),
            ("chunk-size", self.chunk_size.to_string()),
            ("event-bytes", self.event_bytes.to_string()),
            ("delay-ms", self.delay_ms.to_string()),
            ("prefill-ms", self.prefill_ms.to_string()),
            ("headers-delay-ms", self.headers_delay_ms.to_string()),
            ("stall-after", opt(self.stall_after.map(|v| v.to_string()))),
            ("abort-after", opt(self.abort_after.map(|v| v.to_string()))),
            ("status", opt(self.status.map(|v| v.to_string()))),
            ("stamp", u8::from(self.stamp).to_string()),
        ];
        for (name, value) in pairs {
            k.set(name, &value)?;
        }
        if let Some(us) = self.delay_us {
            k.set("delay-us", &us.to_string())?;
        }
        Ok(k)
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let tls = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => Some(MockTls::from_pem_files(cert, key)?),
        _ => None,
    };
    let config = MockConfig {
        knobs: cli.knobs()?,
        models: cli.models.clone(),
        unhealthy: cli.unhealthy,
        tls,
    };
    let workers = cli
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    if !cli.work_stealing {
        let server = serve_threads(cli.listen, config, workers)
            .with_context(|| format!("binding {}", cli.listen))?;
        // One line on stdout so scripts can wait for readiness and read the port.
        println!("iop-mock-provider listening on {}", server.local_addr());
        server.join();
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    rt.block_on(async {
        let server = bind(cli.listen, config)
            .await
            .with_context(|| format!("binding {}", cli.listen))?;
        println!("iop-mock-provider listening on {}", server.local_addr());
        std::future::pending::<()>().await;
        Ok(())
    })
}
