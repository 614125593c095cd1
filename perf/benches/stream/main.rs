//! Streaming through IOP next to the direct path, in one run (criterion).
//!
//! ```sh
//! cargo bench -p perf --bench stream                       # io_uring where allowed
//! IOP_IO_DRIVER=epoll cargo bench -p perf --bench stream   # the epoll driver
//! cargo bench -p perf --bench stream -- s2/                # one group
//! ```
//!
//! Everything runs in this process over loopback (see [`stack`]): the mock
//! provider (1 thread) → the Node (1 core, the code `iop-node --workers 1`
//! runs) → the Edge (1 worker) → a blocking HTTP/1.1 client on the bench
//! thread ([`client`]). Each group also reads the same stream straight
//! from the mock (`direct`), so IOP's ratio comes from one run.
//!
//! - **`s1/`** — large-chunk streaming: one response of 4,096 SSE events of
//!   64 KiB (256 MiB) per iteration; throughput in bytes/s. Paths: `direct`,
//!   `tunnel` (the raw provider tunnel, F16) and `tunnel-mtls` (the same
//!   through a second Edge and Node whose link is under mTLS, F28).
//! - **`s2/`** — token-sized streaming: one response of 100,000 events of
//!   ~128 B per iteration (the mock coalesces them into ≤ 32 KiB writes);
//!   throughput in events/s. Paths: `direct`, `tunnel`, `normalized-ollama`
//!   (Ollama NDJSON parsed by the Node, OpenAI SSE written by the Edge) and
//!   `run-openai` (a normalized run of the `openai_compat` adapter submitted
//!   to the Edge's dispatcher, as the ingress does: the Node parses every
//!   SSE chunk; events are the run's `Delta`s).
//! - **`s2-gap`** (printed, not a criterion figure) — added inter-chunk
//!   latency: one stream of 20,000 ~128 B events paced by the mock at
//!   `IOP_BENCH_GAP_US` (default 20 µs, 50k events/s); each event's
//!   lateness against its schedule, p50 / p99 / p99.9, direct and through
//!   the tunnel, and the difference. Paced on the mock's 1 ms timer, at
//!   ~4 % of peak: see `s2-load` for the issue's figure.
//! - **`s2-load`** (printed) — added one-way latency at half of peak
//!   load: the tunnel's peak events/s, then background streams through the
//!   tunnel at about half of it, and a probe stream whose events carry the
//!   mock's send stamp (`stamp` knob, `CLOCK_MONOTONIC`), read direct and
//!   through the tunnel, with no load, under the background, and under
//!   half of what paced streams can reach (the paced capacity); p50 / p99
//!   / p99.9 / max of arrival − stamp and the added (tunnel − direct)
//!   percentiles (see [`load`]).
//!
//! - **`cpu`** (printed) — on-CPU nanoseconds of the client, the mock, the
//!   Edge and the Node per MiB (S1) or per event (S2), from each thread's
//!   `schedstat`: steadier than wall time on a shared box (see [`cpu`]).
//! - **`idle`** (printed) — memory per idle stream: 2,000 streams
//!   (`IOP_BENCH_IDLE_STREAMS`) quiet after their first event, direct and
//!   through IOP; this process's RSS growth, and the difference (the Edge's
//!   and the Node's share; see [`idle`]).
//! - **`cancel`** (printed) — cancellation latency: a client closes a
//!   paced stream after its first event; the time until the mock's socket
//!   sees its connection closed, p50 / p99 / max, direct, through the
//!   tunnel (`mock-chat`) and a normalized run (`mock-ollama`); see
//!   [`cancel`].
//!
//! The bench allocates with jemalloc, as `iop-edge` and `iop-node` do, so
//! the Edge's and the Node's figures here are those of the product's
//! allocator (the in-process mock and client use it too).
//!
//! Under `cargo test` (criterion's test mode, also `cargo bench -- --test`)
//! every workload shrinks to a few events and each path runs once, so CI
//! only checks that the benches work.

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use framing::io_driver::{IO_DRIVER_ENV, IoDriver};

mod cancel;
mod client;
mod cpu;
mod idle;
mod load;
/// The test PKI of the managed-mode tests (certificates made by `rcgen`
/// for the run), for the mTLS link's paths.
#[allow(dead_code)] // the tests' other helpers
#[path = "../../tests/managed/pki.rs"]
mod pki;
mod stack;

use client::Client;
use stack::{Link, Scenario, Stack, run_deltas};

/// The product binaries' allocator (`bench-results/profiles.md`, round 9):
/// with glibc's malloc here the in-process Edge and Node would spend on
/// allocation what they do not spend in production.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Workload sizes: full under `cargo bench`, tiny in test mode.
struct Sizes {
    s1_events: u64,
    s2_events: u64,
    gap_events: u64,
    gap_delay_us: u64,
    idle_streams: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        let gap_delay_us = std::env::var("IOP_BENCH_GAP_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20);
        if quick {
            Self {
                s1_events: 4,
                s2_events: 50,
                gap_events: 20,
                gap_delay_us,
                idle_streams: 8,
            }
        } else {
            Self {
                s1_events: 4096,
                s2_events: 100_000,
                gap_events: 20_000,
                gap_delay_us,
                idle_streams: std::env::var("IOP_BENCH_IDLE_STREAMS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(2000),
            }
        }
    }

    fn scenarios(&self) -> Vec<Scenario> {
        let knobs = |tokens: u64, bytes: u64, delay: Option<u64>| {
            let mut knobs = vec![
                ("tokens", tokens.to_string()),
                ("event-bytes", bytes.to_string()),
            ];
            if let Some(us) = delay {
                knobs.push(("delay-us", us.to_string()));
            }
            knobs
        };
        vec![
            Scenario {
                model: "s1",
                kind: "openai_compat",
                knobs: knobs(self.s1_events, 64 * 1024, None),
            },
            Scenario {
                model: "s2",
                kind: "openai_compat",
                knobs: knobs(self.s2_events, 128, None),
            },
            Scenario {
                model: "s2-ollama",
                kind: "ollama",
                knobs: knobs(self.s2_events, 128, None),
            },
            Scenario {
                model: "s2-gap",
                kind: "openai_compat",
                knobs: knobs(self.gap_events, 128, Some(self.gap_delay_us)),
            },
            // Quiet after the role chunk: one token every 2 minutes.
            Scenario {
                model: "idle",
                kind: "openai_compat",
                knobs: vec![("tokens", "2".into()), ("delay-ms", "120000".into())],
            },
        ]
    }
}

/// Criterion's test mode: `cargo test` runs bench targets without
/// `--bench`; `cargo bench -- --test` passes both.
fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test")
}

/// Whether a group or printed report runs: yes unless the command line
/// names filters (words that are not options or numbers) and none of them
/// is part of `name` or has `name` in it.
fn report_wanted(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && a.parse::<f64>().is_err())
        .collect();
    filters.is_empty()
        || filters.iter().any(|f| {
            let f = f.trim_end_matches('/');
            name.contains(f) || f.contains(name)
        })
}

/// One path a stream can take.
#[derive(Clone, Copy)]
enum Path {
    /// Client → mock provider.
    Direct,
    /// Client → Edge ingress → Node → provider.
    Iop,
}

impl Path {
    /// The extra header lines and the model name a request for `scenario`
    /// takes on this path: the mock reads the scenario's knobs from
    /// headers; the Edge knows them by the model group.
    fn request_for(self, scenario: &Scenario) -> (String, &str) {
        match self {
            Path::Direct => (scenario.header_lines(), "m"),
            Path::Iop => (String::new(), scenario.model),
        }
    }
}

/// The `q` quantile of sorted samples (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// p50 / p99 / p99.9 / max of sorted samples (zeros when empty).
fn percentiles(sorted: &[f64]) -> [f64; 4] {
    if sorted.is_empty() {
        return [0.0; 4];
    }
    [0.5, 0.99, 0.999, 1.0].map(|q| quantile(sorted, q))
}

/// Streams `scenario` once over `client`; (body bytes, events).
fn stream_once(client: &mut Client, path: Path, scenario: &Scenario) -> (u64, u64) {
    let (headers, model) = path.request_for(scenario);
    let streamed = client
        .stream("/v1/chat/completions", &headers, model, |_, _| {})
        .unwrap_or_else(|e| panic!("{} stream failed: {e}", scenario.model));
    (streamed.bytes, streamed.events)
}

fn main() {
    let quick = quick();
    let sizes = Sizes::new(quick);
    let driver = IoDriver::resolve(
        std::env::var(IO_DRIVER_ENV).ok().as_deref(),
        monoio::utils::detect_uring(),
    )
    .expect("IOP_IO_DRIVER is uring, epoll or unset");
    let mut scenarios = sizes.scenarios();
    scenarios.extend(cancel::scenarios());
    let load_sizes = load::LoadSizes::new(quick);
    let load_at = scenarios.len();
    scenarios.extend(load_sizes.scenarios());
    let stack = Stack::start(driver, &scenarios);
    eprintln!(
        "stream bench: driver {}, mock {}, edge {}",
        stack.driver.as_str(),
        stack.mock_addr(),
        stack.ingress()
    );
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    // The same stack with its link under mTLS (F28), for the paths that
    // show what encrypting the link costs: `s1/tunnel-mtls` and `cpu`.
    let mtls = (report_wanted("s1") || report_wanted("cpu"))
        .then(|| Stack::start_with(driver, &scenarios, Link::Mtls));
    if report_wanted("s1") {
        s1(&mut criterion, &stack, mtls.as_ref(), &scenarios[0]);
    }
    if report_wanted("s2") {
        s2(&mut criterion, &stack, &scenarios[1], &scenarios[2]);
    }
    if report_wanted("cpu") {
        cpu_report(&stack, mtls.as_ref(), &scenarios, quick);
    }
    if report_wanted("s2-gap") {
        s2_gap(&stack, &scenarios[3], &sizes);
    }
    if report_wanted("idle") {
        idle::idle_streams(&stack, &scenarios[4], sizes.idle_streams);
    }
    if report_wanted("cancel") {
        let n = cancel::samples(quick);
        cancel::cancel_report(&stack, &scenarios[5], &scenarios[6], n);
    }
    if report_wanted("s2-load") {
        load::load_report(&stack, &scenarios[1], &scenarios[load_at..], load_sizes);
    }
    criterion.final_summary();
}

fn s1(c: &mut Criterion, stack: &Stack, mtls: Option<&Stack>, scenario: &Scenario) {
    let driver = stack.driver.as_str();
    let mut paths = vec![
        ("direct", Client::connect(stack.mock_addr()), Path::Direct),
        ("tunnel", Client::connect(stack.ingress()), Path::Iop),
    ];
    if let Some(mtls) = mtls {
        paths.push(("tunnel-mtls", Client::connect(mtls.ingress()), Path::Iop));
    }
    // Measure the bytes once per path, so the throughput is exact.
    let mut paths: Vec<_> = paths
        .into_iter()
        .map(|(name, mut client, path)| {
            let (bytes, _) = stream_once(&mut client, path, scenario);
            (name, client, path, bytes)
        })
        .collect();
    let mut group = c.benchmark_group("s1");
    group.sampling_mode(SamplingMode::Flat);
    for (name, client, path, bytes) in &mut paths {
        let (name, path, bytes) = (*name, *path, *bytes);
        group.throughput(Throughput::Bytes(bytes));
        group.bench_function(BenchmarkId::new(name, driver), |b| {
            b.iter(|| stream_once(client, path, scenario));
        });
    }
    group.finish();
}

fn s2(c: &mut Criterion, stack: &Stack, openai: &Scenario, ollama: &Scenario) {
    let driver = stack.driver.as_str();
    let mut direct = Client::connect(stack.mock_addr());
    let mut iop = Client::connect(stack.ingress());
    let mut group = c.benchmark_group("s2");
    group.sampling_mode(SamplingMode::Flat);
    for (name, client, path, scenario) in [
        ("direct", &mut direct, Path::Direct, openai),
        ("tunnel", &mut iop, Path::Iop, openai),
    ] {
        let (_, events) = stream_once(client, path, scenario);
        group.throughput(Throughput::Elements(events));
        group.bench_function(BenchmarkId::new(name, driver), |b| {
            b.iter(|| stream_once(client, path, scenario));
        });
    }
    let (_, events) = stream_once(&mut iop, Path::Iop, ollama);
    group.throughput(Throughput::Elements(events));
    group.bench_function(BenchmarkId::new("normalized-ollama", driver), |b| {
        b.iter(|| stream_once(&mut iop, Path::Iop, ollama));
    });
    // A normalized openai run: events are the run's text deltas.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dispatcher = &stack.edge.dispatcher;
    let deltas = runtime.block_on(run_deltas(dispatcher, openai.model));
    group.throughput(Throughput::Elements(deltas));
    group.bench_function(BenchmarkId::new("run-openai", driver), |b| {
        b.iter(|| runtime.block_on(run_deltas(dispatcher, openai.model)));
    });
    group.finish();
}

/// CPU time of each part of the stack per MiB (S1) or per event (S2); the
/// `-mtls` lines through `mtls`, the stack whose link is under mTLS.
fn cpu_report(stack: &Stack, mtls: Option<&Stack>, scenarios: &[Scenario], quick: bool) {
    let rounds = |n: u64| if quick { 1 } else { n };
    println!(
        "cpu/{}: on-CPU time of each part per unit moved (schedstat)",
        stack.driver.as_str()
    );
    let mut clients = [
        Some(Client::connect(stack.mock_addr())),
        Some(Client::connect(stack.ingress())),
        mtls.map(|mtls| Client::connect(mtls.ingress())),
    ];
    for (label, at, scenario, n, mib) in [
        ("s1 direct", 0, &scenarios[0], 2, true),
        ("s1 tunnel", 1, &scenarios[0], 2, true),
        ("s1 tunnel-mtls", 2, &scenarios[0], 2, true),
        ("s2 direct", 0, &scenarios[1], 5, false),
        ("s2 tunnel", 1, &scenarios[1], 5, false),
        ("s2 tunnel-mtls", 2, &scenarios[1], 5, false),
        ("s2 normalized-ollama", 1, &scenarios[2], 1, false),
    ] {
        let Some(client) = clients[at].as_mut() else {
            continue;
        };
        let path = if at == 0 { Path::Direct } else { Path::Iop };
        let unit = if mib { "MiB" } else { "event" };
        cpu::per_unit(label, unit, || {
            let mut moved = 0;
            for _ in 0..rounds(n) {
                let (bytes, events) = stream_once(client, path, scenario);
                moved += if mib { bytes >> 20 } else { events };
            }
            moved
        });
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    cpu::per_unit("s2 run-openai", "delta", || {
        (0..rounds(5))
            .map(|_| runtime.block_on(run_deltas(&stack.edge.dispatcher, scenarios[1].model)))
            .sum()
    });
}

/// Each content event's lateness against the mock's schedule, for one
/// paced stream on each path; prints the percentiles.
fn s2_gap(stack: &Stack, scenario: &Scenario, sizes: &Sizes) {
    let delay = Duration::from_micros(sizes.gap_delay_us);
    let mut rows = Vec::new();
    for (name, addr, path) in [
        ("direct", stack.mock_addr(), Path::Direct),
        ("tunnel", stack.ingress(), Path::Iop),
    ] {
        let mut client = Client::connect(addr);
        // One unmeasured stream warms the connections and the pools.
        stream_once(&mut client, path, scenario);
        let (headers, model) = path.request_for(scenario);
        let mut arrivals: Vec<Instant> = Vec::with_capacity(sizes.gap_events as usize + 8);
        client
            .stream("/v1/chat/completions", &headers, model, |n, at| {
                arrivals.extend(std::iter::repeat_n(at, n as usize));
            })
            .expect("paced stream");
        rows.push((name, lateness(&arrivals, sizes.gap_events, delay)));
    }
    println!(
        "s2-gap/{}: {} events paced at {} µs ({:.0} events/s); lateness against the schedule, µs",
        stack.driver.as_str(),
        sizes.gap_events,
        sizes.gap_delay_us,
        1e6 / sizes.gap_delay_us.max(1) as f64
    );
    for (name, late) in &rows {
        println!(
            "  {name:<8} p50 {:>8.1}  p99 {:>8.1}  p99.9 {:>8.1}  max {:>8.1}",
            late[0], late[1], late[2], late[3]
        );
    }
    if let [(_, direct), (_, tunnel)] = rows.as_slice() {
        println!(
            "  added    p50 {:>8.1}  p99 {:>8.1}  p99.9 {:>8.1}",
            tunnel[0] - direct[0],
            tunnel[1] - direct[1],
            tunnel[2] - direct[2]
        );
    }
}

/// p50 / p99 / p99.9 / max lateness in µs of the content events: event `i`
/// (the role chunk is event 0, content events are 1..=tokens) is due at
/// `t0 + i × delay`, with `t0` chosen so the least late event is on time.
fn lateness(arrivals: &[Instant], tokens: u64, delay: Duration) -> [f64; 4] {
    let content = &arrivals[1..arrivals.len().min(tokens as usize + 1)];
    let Some(&first) = content.first() else {
        return [0.0; 4];
    };
    let offsets: Vec<f64> = content
        .iter()
        .enumerate()
        .map(|(i, at)| {
            let due = delay.as_secs_f64() * i as f64;
            at.duration_since(first).as_secs_f64() - due
        })
        .collect();
    let min = offsets.iter().copied().fold(f64::INFINITY, f64::min);
    let mut late: Vec<f64> = offsets.iter().map(|o| (o - min) * 1e6).collect();
    late.sort_by(f64::total_cmp);
    percentiles(&late)
}
