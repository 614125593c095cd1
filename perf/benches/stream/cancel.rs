//! Cancellation latency (printed, not a criterion figure): from a client
//! closing its socket mid-stream to the mock provider's socket seeing its
//! own connection closed (issue 8 target: p99 ≤ 2 ms through IOP).
//!
//! Each sample opens a streaming chat completion paced at one token every
//! [`TOKEN_DELAY_MS`] (`IOP_BENCH_CANCEL_TOKEN_MS` overrides it; a close
//! is then a close, never the stream's end, and a latency that tracks the
//! pace would show a cancel waiting for the provider's next token),
//! reads its first event, takes `t0` and closes the socket. The mock
//! reports the cut stream with the instant its socket saw the close (a
//! read of 0 bytes, or `ECONNRESET`/`EPIPE`; see
//! [`perf::mock_provider::StreamCut`]); the sample is that instant − `t0`,
//! both from this process's monotonic clock. Paths:
//!
//! - `direct` — client → mock (`/v1/chat/completions`): the kernel's and
//!   the mock's own share, the baseline of `tunnel`;
//! - `direct-ol` — client → mock on the Ollama wire (`/api/chat`, NDJSON),
//!   the baseline of `normalized`: its first event comes one token delay
//!   after the request (no role chunk), as through IOP;
//! - `tunnel` — client → Edge → Node → mock over the raw tunnel (F16,
//!   provider `mock-chat`): the Edge sees the close, cancels the stream on
//!   the link, the Node drops the provider connection;
//! - `normalized` — the same for a normalized run of an Ollama provider
//!   (`mock-ollama`, F17): the Edge drops the run stream, which cancels the
//!   run on the Node.
//! - `run-drop` — the normalized run without the ingress: submitted to the
//!   Edge's dispatcher (as the ingress does), its first delta read, then
//!   the run stream dropped; tells the ingress's share from the
//!   dispatcher's, the link's and the Node's.
//!
//! Samples run one at a time on an otherwise idle stack. Under `cargo
//! test` each path takes [`QUICK_SAMPLES`].

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use perf::mock_provider::StreamCut;
use proto::v1::RunEventKind;

use super::stack::{Scenario, Stack, bench_run};

/// The mock's pace: one token every this many milliseconds.
const TOKEN_DELAY_MS: u64 = 20;

/// [`TOKEN_DELAY_MS`], or `IOP_BENCH_CANCEL_TOKEN_MS`.
fn token_delay_ms() -> u64 {
    std::env::var("IOP_BENCH_CANCEL_TOKEN_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(TOKEN_DELAY_MS)
}
/// Samples a path under `cargo bench` (`IOP_BENCH_CANCEL_SAMPLES` overrides).
const SAMPLES: usize = 300;
/// Samples a path in criterion's test mode.
const QUICK_SAMPLES: usize = 2;
/// How long a sample waits for the mock to report the cut.
const CUT_WAIT: Duration = Duration::from_secs(5);

/// The two providers the report streams through IOP: `mock-chat` (raw
/// tunnel) and `mock-ollama` (normalized run), both paced.
pub(crate) fn scenarios() -> Vec<Scenario> {
    let knobs = || {
        vec![
            ("tokens", "1000000".to_owned()),
            ("delay-ms", token_delay_ms().to_string()),
        ]
    };
    vec![
        Scenario {
            model: "mock-chat",
            kind: "openai_compat",
            knobs: knobs(),
        },
        Scenario {
            model: "mock-ollama",
            kind: "ollama",
            knobs: knobs(),
        },
    ]
}

/// Samples a path: `quick` (test mode) takes [`QUICK_SAMPLES`].
pub(crate) fn samples(quick: bool) -> usize {
    if quick {
        return QUICK_SAMPLES;
    }
    std::env::var("IOP_BENCH_CANCEL_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SAMPLES)
}

/// Measures every path `n` times and prints p50 / p99 / max in µs.
/// `chat` and `ollama` are the two [`scenarios`].
pub(crate) fn cancel_report(stack: &Stack, chat: &Scenario, ollama: &Scenario, n: usize) {
    let cuts = stack.mock.stats().watch_cuts();
    let paths = [
        (
            "direct",
            stack.mock_addr(),
            request(CHAT, &chat.header_lines(), "m"),
            SSE_EVENT,
        ),
        (
            "tunnel",
            stack.ingress(),
            request(CHAT, "", chat.model),
            SSE_EVENT,
        ),
        (
            "direct-ol",
            stack.mock_addr(),
            request("/api/chat", &ollama.header_lines(), "m"),
            NDJSON_LINE,
        ),
        (
            "normalized",
            stack.ingress(),
            request(CHAT, "", ollama.model),
            SSE_EVENT,
        ),
    ];
    println!(
        "cancel/{}: client close -> the mock provider's socket sees its connection closed; \
         {n} samples a path, one token every {} ms, µs",
        stack.driver.as_str(),
        token_delay_ms()
    );
    for (name, addr, request, first) in paths {
        // One unmeasured sample warms the connections and the pools.
        let _ = sample(addr, &request, first, &cuts);
        let mut latencies = Vec::with_capacity(n);
        let mut failures = Vec::new();
        for _ in 0..n {
            match sample(addr, &request, first, &cuts) {
                Ok(latency) => latencies.push(latency.as_secs_f64() * 1e6),
                Err(e) => failures.push(e),
            }
        }
        print_row(name, &mut latencies);
        if let Some(first) = failures.first() {
            println!(
                "  {name:<10} {} samples failed; first: {first}",
                failures.len()
            );
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let _ = runtime.block_on(run_sample(stack, ollama.model, &cuts));
    let mut latencies = Vec::with_capacity(n);
    let mut failures = Vec::new();
    for _ in 0..n {
        match runtime.block_on(run_sample(stack, ollama.model, &cuts)) {
            Ok(latency) => latencies.push(latency.as_secs_f64() * 1e6),
            Err(e) => failures.push(e),
        }
    }
    print_row("run-drop", &mut latencies);
    if let Some(first) = failures.first() {
        println!(
            "  run-drop   {} samples failed; first: {first}",
            failures.len()
        );
    }
}

/// One `run-drop` sample: a normalized run of provider `model` submitted
/// to the Edge's dispatcher; after its first delta the stream is dropped
/// (which cancels the run on the Node).
async fn run_sample(
    stack: &Stack,
    model: &str,
    cuts: &Receiver<StreamCut>,
) -> Result<Duration, String> {
    while cuts.try_recv().is_ok() {}
    let run = bench_run(model, "hi", "bench-cancel");
    let mut stream = stack
        .edge
        .dispatcher
        .submit_run(run)
        .await
        .map_err(|e| format!("submit: {e:?}"))?;
    loop {
        match stream.next().await {
            Some(event) if event.kind() == RunEventKind::Delta => break,
            Some(_) => {}
            None => return Err("the run ended before its first delta".into()),
        }
    }
    let dropped = Instant::now();
    drop(stream);
    let cut = cuts
        .recv_timeout(CUT_WAIT)
        .map_err(|_| format!("the mock saw no cut within {CUT_WAIT:?}"))?;
    Ok(cut
        .closed_at
        .unwrap_or(cut.dropped_at)
        .saturating_duration_since(dropped))
}

/// The OpenAI chat route (the Edge's, and the mock's direct one).
const CHAT: &str = "/v1/chat/completions";
/// What the first event of an SSE body contains.
const SSE_EVENT: &[u8] = b"data: ";
/// What the first line of an Ollama NDJSON stream contains.
const NDJSON_LINE: &[u8] = b"\"done\":false";

/// The raw request of one paced streaming chat to `path`.
fn request(path: &str, headers: &str, model: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    format!(
        "POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n\
         accept: text/event-stream\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One sample: open a stream, read until `first` (its first event),
/// close, and wait for the mock's report; the time from the close to the
/// mock's socket seeing it.
fn sample(
    addr: SocketAddr,
    request: &[u8],
    first: &[u8],
    cuts: &Receiver<StreamCut>,
) -> Result<Duration, String> {
    // A cut left over from an earlier (failed) sample is not this one's.
    while cuts.try_recv().is_ok() {}
    let mut socket = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    socket.set_nodelay(true).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    socket
        .write_all(request)
        .map_err(|e| format!("request: {e}"))?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(first.len()).any(|w| w == first) {
        match socket.read(&mut buf) {
            Ok(0) => {
                let head = String::from_utf8_lossy(&seen).into_owned();
                return Err(format!("closed before the first event: {head}"));
            }
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the first event: {e}")),
        }
    }
    let closed = Instant::now();
    drop(socket);
    let cut = cuts
        .recv_timeout(CUT_WAIT)
        .map_err(|_| format!("the mock saw no cut within {CUT_WAIT:?}"))?;
    let seen_at = cut.closed_at.unwrap_or(cut.dropped_at);
    Ok(seen_at.saturating_duration_since(closed))
}

fn print_row(name: &str, latencies: &mut [f64]) {
    if latencies.is_empty() {
        println!("  {name:<10} no samples");
        return;
    }
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| crate::quantile(latencies, q);
    let over = |us: f64| latencies.iter().filter(|&&l| l > us).count();
    println!(
        "  {name:<10} p50 {:>8.1}  p90 {:>8.1}  p99 {:>8.1}  max {:>8.1}  \
         > 2 ms: {}  > 5 ms: {}",
        pick(0.5),
        pick(0.9),
        pick(0.99),
        pick(1.0),
        over(TARGET_US),
        over(5_000.0)
    );
}

/// Issue 8's target for the p99, in µs.
const TARGET_US: f64 = 2_000.0;
