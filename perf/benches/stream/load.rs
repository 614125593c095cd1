//! `s2-load` (printed): added one-way latency of token-sized events at half
//! of the tunnel's peak load — issue 8's "added p99 inter-chunk latency
//! ≤ 100 µs at half of peak load", measured as it says.
//!
//! 1. **Peak**: one unpaced stream of the `s2` scenario (100,000 ~128 B
//!    events) through the tunnel, best of three: events/s.
//! 2. **Background at half of peak**: `T` threads, each its own [`Client`]
//!    looping paced streams through the tunnel (the mock's `delay-us` knob,
//!    `D` µs per event), with `T × 1e6 / D` the closest to peak / 2 that the
//!    registered delays allow ([`BACKGROUND`]; the Edge does not forward a
//!    client's `x-mock-*` headers, so each delay is its own provider). The
//!    mock paces on tokio's 1 ms timer, so each stream sends the events due
//!    in 1 ms bursts (on a fixed schedule: the average rate is exact). The
//!    rate achieved is counted (events read by the background clients ÷
//!    time) over each probe's window and printed.
//! 3. **Probe**: one stream of stamped events (the mock's `stamp` knob; one
//!    every `IOP_BENCH_LOAD_PROBE_US`, default 1,000 µs;
//!    `IOP_BENCH_LOAD_PROBE_EVENTS`, default 5,000), read direct from the
//!    mock and through the tunnel. Each event's one-way latency is
//!    `CLOCK_MONOTONIC` at the client's read − the mock's send stamp, so
//!    neither the pacing timer nor the schedule enters it. The first
//!    [`WARM_EVENTS`] events of each probe are not counted.
//!
//! Also printed: the **paced capacity**, events/s through the tunnel when
//! [`MAX_STREAMS`] paced streams ask for more than it can relay (paced
//! events are one HTTP chunk each; the unpaced peak's are coalesced), and
//! a `SHORT of plan` flag when the background fell below 90 % of its plan
//! (the stack is saturated: the figures are not at the planned load).
//! `IOP_BENCH_LOAD_FRACTION` (default 0.5) sets the background's share of
//! the peak.
//!
//! 4. **Half of the paced capacity**: the probe again, under background
//!    streams planned at `IOP_BENCH_LOAD_FRACTION` of the paced capacity
//!    (below) rather than of the unpaced peak. Paced streams are what a
//!    model server's token streams look like, and on two shared cores their
//!    capacity is a fraction of the coalesced peak, so step 2's plan
//!    saturates the stack there; this step is the latency at half of the
//!    load that paced streams can reach.
//!
//! The probe runs with no background load first, then under each
//! background (direct and tunnel see the same background, always through
//! the tunnel).
//! Printed: p50 / p99 / p99.9 / max per path and the added (tunnel − direct)
//! percentiles, for both; under each probe, what its window saw: the
//! background's rate, the cores each part used, how long this process's
//! threads waited on a run queue (contention, from other processes too on a
//! shared box) and the load average.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::cpu;
use crate::stack::{Scenario, Stack};
use crate::{Path, percentiles, stream_once};

/// Registered background pacings: (µs per event of one stream, model).
const BACKGROUND: [(u64, &str); 12] = [
    (2, "s2-load-bg-2"),
    (3, "s2-load-bg-3"),
    (4, "s2-load-bg-4"),
    (5, "s2-load-bg-5"),
    (6, "s2-load-bg-6"),
    (7, "s2-load-bg-7"),
    (8, "s2-load-bg-8"),
    (10, "s2-load-bg-10"),
    (12, "s2-load-bg-12"),
    (14, "s2-load-bg-14"),
    (16, "s2-load-bg-16"),
    (20, "s2-load-bg-20"),
];

/// The most background streams (threads).
const MAX_STREAMS: u64 = 8;

/// Probe events at the start of each probe stream that are not counted.
pub(crate) const WARM_EVENTS: usize = 10;

/// The probe scenario's model.
const PROBE: &str = "s2-load-probe";

/// How long one background stream lasts before its thread starts the next.
const BACKGROUND_STREAM: Duration = Duration::from_millis(500);

/// Workload sizes of `s2-load`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadSizes {
    quick: bool,
    probe_events: u64,
    probe_delay_us: u64,
    peak_rounds: usize,
    /// The background's share of the peak (`IOP_BENCH_LOAD_FRACTION`).
    fraction: f64,
    /// How long the paced-capacity check runs.
    capacity_window: Duration,
}

impl LoadSizes {
    /// Full under `cargo bench`, tiny in test mode.
    pub(crate) fn new(quick: bool) -> Self {
        let env = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        if quick {
            Self {
                quick,
                probe_events: 40,
                probe_delay_us: 100,
                peak_rounds: 1,
                fraction: 0.5,
                capacity_window: Duration::from_millis(20),
            }
        } else {
            Self {
                quick,
                probe_events: env("IOP_BENCH_LOAD_PROBE_EVENTS", 5000),
                probe_delay_us: env("IOP_BENCH_LOAD_PROBE_US", 1000).max(1),
                peak_rounds: 3,
                fraction: std::env::var("IOP_BENCH_LOAD_FRACTION")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .filter(|f: &f64| *f > 0.0)
                    .unwrap_or(0.5),
                capacity_window: Duration::from_secs(1),
            }
        }
    }

    /// The probe scenario, then one background scenario per pacing.
    pub(crate) fn scenarios(&self) -> Vec<Scenario> {
        let mut scenarios = vec![Scenario {
            model: PROBE,
            kind: "openai_compat",
            knobs: vec![
                ("tokens", self.probe_events.to_string()),
                ("event-bytes", "128".into()),
                ("delay-us", self.probe_delay_us.to_string()),
                ("stamp", "1".into()),
            ],
        }];
        for (delay_us, model) in BACKGROUND {
            let tokens = if self.quick {
                20
            } else {
                BACKGROUND_STREAM.as_micros() as u64 / delay_us
            };
            scenarios.push(Scenario {
                model,
                kind: "openai_compat",
                knobs: vec![
                    ("tokens", tokens.to_string()),
                    ("event-bytes", "128".into()),
                    ("delay-us", delay_us.to_string()),
                ],
            });
        }
        scenarios
    }
}

/// The background closest to `target` events/s: (streams, index into
/// [`BACKGROUND`]); on a tie, more streams.
fn pick_background(target: f64) -> (u64, usize) {
    let mut best = (1, BACKGROUND.len() - 1, f64::INFINITY);
    for streams in 1..=MAX_STREAMS {
        for (i, (delay_us, _)) in BACKGROUND.iter().enumerate() {
            let rate = streams as f64 * 1e6 / *delay_us as f64;
            let miss = (rate - target).abs();
            if miss <= best.2 {
                best = (streams, i, miss);
            }
        }
    }
    (best.0, best.1)
}

/// A background load: how many streams of which registered pacing, and
/// the events/s they add up to.
struct Plan {
    streams: u64,
    /// Index into [`BACKGROUND`].
    pacing: usize,
    planned: f64,
}

impl Plan {
    /// The registered background closest to `target` events/s (the
    /// slowest single stream in test mode).
    fn near(target: f64, quick: bool) -> Self {
        let (streams, pacing) = if quick {
            (1, BACKGROUND.len() - 1)
        } else {
            pick_background(target)
        };
        Self {
            streams,
            pacing,
            planned: streams as f64 * 1e6 / BACKGROUND[pacing].0 as f64,
        }
    }

    /// What the plan runs, for the report (`share`: its fraction of what).
    fn describe(&self, share: &str) -> String {
        format!(
            "  background: {} stream(s) × 1 event / {} µs through the tunnel = {:.0} events/s \
             planned ({share})",
            self.streams, BACKGROUND[self.pacing].0, self.planned
        )
    }
}

/// Background streams through the tunnel, each on its own thread and
/// connection, until stopped.
struct Background {
    stop: Arc<AtomicBool>,
    events: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Background {
    fn start(stack: &Stack, scenario: &Scenario, streams: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let events = Arc::new(AtomicU64::new(0));
        let threads = (0..streams)
            .map(|i| {
                let (stop, events) = (stop.clone(), events.clone());
                let scenario = scenario.clone();
                let mut client = Client::connect(stack.ingress());
                std::thread::Builder::new()
                    .name(format!("s2-load-bg-{i}"))
                    .spawn(move || {
                        while !stop.load(Relaxed) {
                            client
                                .stream("/v1/chat/completions", "", scenario.model, |n, _| {
                                    events.fetch_add(n, Relaxed);
                                })
                                .unwrap_or_else(|e| panic!("background stream failed: {e}"));
                        }
                    })
                    .expect("background thread")
            })
            .collect();
        Self {
            stop,
            events,
            threads,
        }
    }

    fn events(&self) -> u64 {
        self.events.load(Relaxed)
    }

    /// Stops the threads after their current stream and waits for them.
    fn stop(self) {
        self.stop.store(true, Relaxed);
        for thread in self.threads {
            thread.join().expect("a background thread panicked");
        }
    }
}

/// One probe stream of `events` stamped events on `path`: the latencies
/// in µs (warm-up dropped, sorted) and the body bytes per event. Panics
/// unless every content event carried a stamp (the tunnel keeps them).
fn probe(client: &mut Client, path: Path, scenario: &Scenario, events: u64) -> (Vec<f64>, f64) {
    let (headers, model) = path.request_for(scenario);
    let mut latencies = Vec::new();
    let streamed = client
        .stream_stamped("/v1/chat/completions", &headers, model, |ns| {
            latencies.push(ns as f64 / 1e3);
        })
        .unwrap_or_else(|e| panic!("probe stream failed: {e}"));
    assert_eq!(
        latencies.len() as u64,
        events,
        "every content event of the probe carries a send stamp"
    );
    let warm = WARM_EVENTS.min(latencies.len() / 4);
    let mut counted = latencies.split_off(warm);
    counted.sort_by(f64::total_cmp);
    let per_event = streamed.bytes as f64 / streamed.events.max(1) as f64;
    (counted, per_event)
}

/// The tunnel's peak events/s: the best of `rounds` unpaced streams of
/// `scenario` (after one unmeasured).
fn peak(stack: &Stack, scenario: &Scenario, rounds: usize) -> f64 {
    let mut client = Client::connect(stack.ingress());
    stream_once(&mut client, Path::Iop, scenario);
    (0..rounds)
        .map(|_| {
            let started = Instant::now();
            let (_, events) = stream_once(&mut client, Path::Iop, scenario);
            events as f64 / started.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// Events/s the background clients get through the tunnel when
/// [`MAX_STREAMS`] streams of `fastest` (the shortest pacing) ask for more
/// than the stack can relay, over `window`: the capacity for paced
/// streams, whose events go out one HTTP chunk each (unpaced ones are
/// coalesced into 32 KiB writes by the mock).
fn paced_capacity(stack: &Stack, fastest: &Scenario, window: Duration) -> f64 {
    let bg = Background::start(stack, fastest, MAX_STREAMS);
    std::thread::sleep(window / 5);
    let (events0, started) = (bg.events(), Instant::now());
    std::thread::sleep(window);
    let rate = (bg.events() - events0) as f64 / started.elapsed().as_secs_f64();
    bg.stop();
    rate
}

/// What a probe's window started from: the background's events and the
/// CPU and run-queue time of this process's threads.
struct Window {
    started: Instant,
    events: u64,
    cpu: BTreeMap<&'static str, u64>,
    waited: u64,
}

impl Window {
    fn open(bg: Option<&Background>) -> Self {
        Self {
            started: Instant::now(),
            events: bg.map_or(0, Background::events),
            cpu: cpu::by_part(),
            waited: cpu::run_queue_wait_ns(),
        }
    }

    /// What the window saw: the background's rate (flagged when short of
    /// `planned` events/s), the cores each part used, the run-queue wait of
    /// this process's threads (how much they were kept off a CPU by each
    /// other and by the rest of the machine) and the load average.
    fn close(self, bg: Option<&Background>, planned: f64, peak: f64) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let mut line = match bg {
            Some(bg) => {
                let rate = (bg.events() - self.events) as f64 / secs;
                let short = if rate < 0.9 * planned {
                    " SHORT of plan: saturated"
                } else {
                    ""
                };
                format!(
                    "background {rate:.0} events/s = {:.2}× peak{short};",
                    rate / peak
                )
            }
            None => "no background;".to_owned(),
        };
        let cpu = cpu::by_part();
        line.push_str(" cores used:");
        for part in ["mock", "edge", "node", "client"] {
            let spent = cpu.get(part).unwrap_or(&0) - self.cpu.get(part).unwrap_or(&0);
            line.push_str(&format!(" {part} {:.2}", spent as f64 / 1e9 / secs));
        }
        let waited = cpu::run_queue_wait_ns().saturating_sub(self.waited);
        line.push_str(&format!(
            "; run-queue wait {:.2} thread-s/s; loadavg {}",
            waited as f64 / 1e9 / secs,
            load_average()
        ));
        line
    }
}

/// The 1-minute load average, as `/proc/loadavg` prints it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Runs the report; `unpaced` is the `s2` scenario, `load` what
/// [`LoadSizes::scenarios`] made.
pub(crate) fn load_report(stack: &Stack, unpaced: &Scenario, load: &[Scenario], sizes: LoadSizes) {
    let driver = stack.driver.as_str();
    let peak = peak(stack, unpaced, sizes.peak_rounds);
    let half_peak = Plan::near(peak * sizes.fraction, sizes.quick);
    let probe_scenario = &load[0];
    println!(
        "s2-load/{driver}: one-way latency of stamped ~128 B events (client read − mock send, \
         CLOCK_MONOTONIC), µs"
    );
    println!(
        "  peak: {peak:.0} events/s through the tunnel (unpaced s2 stream, best of {})",
        sizes.peak_rounds
    );
    println!(
        "{}",
        half_peak.describe(&format!(
            "{:.2}× peak; 1 ms bursts",
            half_peak.planned / peak
        ))
    );
    let capacity = paced_capacity(stack, &load[1], sizes.capacity_window);
    println!(
        "  paced capacity: {capacity:.0} events/s ({:.2}× peak) through the tunnel when {MAX_STREAMS} \
         paced streams ask for {:.0}",
        capacity / peak,
        MAX_STREAMS as f64 * 1e6 / BACKGROUND[0].0 as f64
    );
    let mut direct = Client::connect(stack.mock_addr());
    let mut tunnel = Client::connect(stack.ingress());
    let mut run = |label: &str, bg: Option<&Background>, planned: f64| {
        let mut rows = Vec::new();
        for (name, client, path) in [
            ("direct", &mut direct, Path::Direct),
            ("tunnel", &mut tunnel, Path::Iop),
        ] {
            let window = Window::open(bg);
            let (latencies, per_event) = probe(client, path, probe_scenario, sizes.probe_events);
            let p = percentiles(&latencies);
            println!(
                "  {label:<10} {name:<7} p50 {:>8.1}  p99 {:>8.1}  p99.9 {:>8.1}  max {:>8.1}  \
                 n {} of {per_event:.0} B",
                p[0],
                p[1],
                p[2],
                p[3],
                latencies.len()
            );
            println!("{:>20}{}", "", window.close(bg, planned, peak));
            rows.push(p);
        }
        if let [direct, tunnel] = rows.as_slice() {
            println!(
                "  {label:<10} added   p50 {:>8.1}  p99 {:>8.1}  p99.9 {:>8.1}",
                tunnel[0] - direct[0],
                tunnel[1] - direct[1],
                tunnel[2] - direct[2]
            );
        }
    };
    println!(
        "  probe: {} events, 1 every {} µs; the first {WARM_EVENTS} of each not counted",
        sizes.probe_events, sizes.probe_delay_us
    );
    let settle = Duration::from_millis(if sizes.quick { 10 } else { 200 });
    run("no load", None, 0.0);
    let mut under = |label: &str, plan: &Plan| {
        let bg = Background::start(stack, &load[1 + plan.pacing], plan.streams);
        // Let the background streams get going before the probe starts.
        std::thread::sleep(settle);
        run(label, Some(&bg), plan.planned);
        bg.stop();
    };
    under("half load", &half_peak);
    let half_paced = Plan::near(capacity * sizes.fraction, sizes.quick);
    println!(
        "{}",
        half_paced.describe(&format!(
            "{:.2}× paced capacity, {:.2}× peak",
            half_paced.planned / capacity.max(1.0),
            half_paced.planned / peak
        ))
    );
    under("half paced", &half_paced);
}
