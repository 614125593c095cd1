//! The measurement: connect a fleet, let it idle through two heartbeat
//! periods, optionally warm it, and sample the Edge (and this process) from
//! `/proc` at the phase boundaries.
//!
//! ```text
//!  baseline ─▶ connect ───────▶ settle ─▶ quiet ─────────▶ burst ─────────▶ … ─▶ end of steady ─▶ warm
//!  (0 nodes)   (all register)    (1 s)    (no ping due)   (1st ping of      (2 heartbeat periods
//!                                                          every node)       after settle)
//! ```
//!
//! The Edge pings each node one heartbeat interval after registering it, so
//! with registrations spread over `[first, last]` the first pings fall in
//! `[first + interval, last + interval]` (plus the Edge's tick):
//! - **quiet** `[ready + settle, first + interval − 0.5 s]`: the cost of idle
//!   connections with no heartbeat due (timer-wheel ticks only);
//! - **burst** `[first + interval − 0.5 s, last + interval + 1.5 s]`: exactly
//!   one ping per node; the per-heartbeat cost is the burst's CPU time minus
//!   the quiet rate over its length, divided by the pings counted;
//! - **steady** `[ready + settle, ready + settle + 2 × interval]`: two pings
//!   per node, the long-run idle average (what an operator sees).
//!
//! The windows need the whole fleet to register within about one interval
//! minus the settle time; otherwise quiet and burst are skipped and only
//! steady is reported.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::client::{ClientConfig, Fleet};
use super::procfs::{self, Pid, ProcSample, SystemCpu};

/// What [`run`] does beyond starting the fleet.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The simulated fleet.
    pub client: ClientConfig,
    /// The Edge process to sample (none: client-side numbers only).
    pub edge_pid: Option<u32>,
    /// Free-form label copied into the report (e.g. the Edge's I/O driver).
    pub label: String,
    /// Idle Edge (no node) measured for this long before connecting.
    pub baseline: Duration,
    /// Give up on nodes that are neither ready nor failed after this.
    pub connect_deadline: Duration,
    /// Pause after the last node is ready before the idle windows open.
    pub settle: Duration,
    /// The Edge's heartbeat interval (30 s in production).
    pub heartbeat_interval: Duration,
    /// Length of the steady window (default two heartbeat intervals).
    pub steady: Duration,
    /// Wait after the warm frames are written before sampling.
    pub warm_hold: Duration,
    /// Print progress lines to stderr.
    pub progress: bool,
}

impl RunConfig {
    /// Defaults around `client`: 3 s baseline, 1 s settle, 30 s heartbeat,
    /// 60 s steady window, 3 s warm hold.
    pub fn new(client: ClientConfig) -> Self {
        Self {
            client,
            edge_pid: None,
            label: String::new(),
            baseline: Duration::from_secs(3),
            connect_deadline: Duration::from_secs(120),
            settle: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(30),
            steady: Duration::from_secs(60),
            warm_hold: Duration::from_secs(3),
            progress: true,
        }
    }
}

/// Everything one run measured. Sizes in KiB or bytes, times in ms, µs or s
/// as the field name says; CPU in percent of one core.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`RunConfig::label`].
    pub label: String,
    /// Nodes asked for.
    pub nodes: usize,
    /// The clients' I/O driver.
    pub client_driver: String,
    /// Connect + register + ready of the whole fleet.
    pub connect: ConnectReport,
    /// Heartbeats and connection health after ready, client side.
    pub idle: IdleReport,
    /// The Edge, when its pid was given.
    pub edge: Option<EdgeReport>,
    /// This load tool.
    pub tool: ToolReport,
    /// The whole machine.
    pub system: SystemReport,
    /// Failures by reason.
    pub errors: BTreeMap<String, u64>,
}

/// The connect phase.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectReport {
    /// Nodes that became ready.
    pub ready: u64,
    /// Nodes that failed (see [`Report::errors`]).
    pub failed: u64,
    /// Registrations refused by the Edge.
    pub rejected: u64,
    /// From the first connect to the last ready, ms.
    pub elapsed_ms: f64,
    /// Ready nodes per second over `elapsed_ms`.
    pub nodes_per_sec: f64,
    /// Per-node handshake (connect → NodeReadyResponse) percentiles, µs.
    pub handshake_us: Percentiles,
    /// From the first to the last accepted registration, ms.
    pub registration_spread_ms: f64,
}

/// Percentiles of a sample, µs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: u32,
    /// 90th percentile.
    pub p90: u32,
    /// 99th percentile.
    pub p99: u32,
    /// 99.9th percentile.
    pub p999: u32,
    /// Largest.
    pub max: u32,
}

impl Percentiles {
    fn of(mut values: Vec<u32>) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_unstable();
        let at = |q: f64| {
            let rank = ((values.len() as f64) * q).ceil() as usize;
            values[rank.clamp(1, values.len()) - 1]
        };
        Self {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: values[values.len() - 1],
        }
    }
}

/// After ready, client side.
#[derive(Debug, Clone, Serialize)]
pub struct IdleReport {
    /// Pings received (and pongs queued) over the whole run.
    pub pings: u64,
    /// Pongs queued.
    pub pongs: u64,
    /// Pings received inside the steady window.
    pub pings_in_steady: u64,
    /// Ready connections the Edge closed.
    pub closed_by_edge: u64,
    /// Ready connections that failed.
    pub io_errors: u64,
    /// Frames other than pings received after ready.
    pub unexpected: u64,
    /// Warm frames written.
    pub warm_sent: u64,
}

/// The Edge process.
#[derive(Debug, Clone, Serialize)]
pub struct EdgeReport {
    /// Before any node connected: VmRSS, KiB.
    pub rss_before_kib: u64,
    /// When the last node was ready.
    pub rss_ready_kib: u64,
    /// At the end of the steady window (after two heartbeats per node).
    pub rss_idle_kib: u64,
    /// After the warm frames (0 when not warmed).
    pub rss_warm_kib: u64,
    /// VmHWM at the end.
    pub hwm_kib: u64,
    /// VmData before any node connected, KiB (private virtual memory).
    pub data_before_kib: u64,
    /// VmData at the end of the steady window.
    pub data_idle_kib: u64,
    /// VmData after the warm frames (0 when not warmed).
    pub data_warm_kib: u64,
    /// (rss_idle − rss_before) / ready nodes, bytes.
    pub rss_per_node_bytes: f64,
    /// (data_idle − data_before) / ready nodes, bytes: what the Edge reserved
    /// per node, touched or not.
    pub data_per_node_bytes: f64,
    /// (rss_warm − rss_before) / ready nodes, bytes (0 when not warmed).
    pub warm_rss_per_node_bytes: f64,
    /// CPU with no node connected, % of one core.
    pub cpu_empty_pct: f64,
    /// Wakeups per second with no node connected (all threads).
    pub wakeups_empty_per_sec: f64,
    /// CPU time of the connect phase, ms.
    pub connect_cpu_ms: f64,
    /// connect_cpu_ms / ready nodes, µs.
    pub connect_cpu_us_per_node: f64,
    /// The quiet window (no ping due), when the fleet registered fast enough.
    pub quiet: Option<Window>,
    /// The burst window (one ping per node).
    pub burst: Option<Window>,
    /// Burst CPU minus the quiet rate over its length, per ping, µs.
    pub cpu_us_per_heartbeat: Option<f64>,
    /// Burst wakeups minus the quiet rate over its length, per ping.
    pub wakeups_per_heartbeat: Option<f64>,
    /// The steady window (two heartbeat periods).
    pub steady: Window,
    /// The thread count at the end.
    pub threads: usize,
}

/// CPU use of one process over one window.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// Length, s.
    pub secs: f64,
    /// CPU time, ms.
    pub cpu_ms: f64,
    /// cpu_ms over secs, % of one core.
    pub cpu_pct: f64,
    /// Pings the fleet received inside the window.
    pub pings: u64,
    /// Voluntary context switches (thread sleeps, i.e. wakeups) inside the window.
    pub wakeups: u64,
}

/// The load tool itself.
#[derive(Debug, Clone, Serialize)]
pub struct ToolReport {
    /// VmRSS before the fleet started, KiB.
    pub rss_before_kib: u64,
    /// VmRSS when the last node was ready, KiB.
    pub rss_ready_kib: u64,
    /// VmRSS at the end of the steady window, KiB.
    pub rss_idle_kib: u64,
    /// (rss_idle − rss_before) / ready nodes, bytes.
    pub rss_per_node_bytes: f64,
    /// CPU time of the connect phase, ms.
    pub connect_cpu_ms: f64,
    /// CPU over the steady window, % of one core.
    pub steady_cpu_pct: f64,
}

/// Machine-wide numbers.
#[derive(Debug, Clone, Serialize)]
pub struct SystemReport {
    /// Every process and the kernel over the steady window, % of one core.
    pub steady_busy_pct: f64,
    /// Kernel memory of TCP sockets (all of them, both ends of every
    /// loopback connection) when the fleet was ready, KiB.
    pub tcp_mem_ready_kib: Option<u64>,
    /// The same before the fleet connected, KiB.
    pub tcp_mem_before_kib: Option<u64>,
    /// Kernel slab memory (socket, file, inode objects of both ends, plus
    /// whatever else the machine did meanwhile) before the fleet connected, KiB.
    pub slab_before_kib: Option<u64>,
    /// The same when the fleet was ready, KiB.
    pub slab_ready_kib: Option<u64>,
}

/// Samples taken at one instant.
struct Snapshot {
    edge: Option<ProcSample>,
    tool: ProcSample,
    system: Option<SystemCpu>,
    pings: u64,
}

fn snapshot(edge_pid: Option<u32>, fleet: Option<&Fleet>) -> std::io::Result<Snapshot> {
    let edge = match edge_pid {
        Some(pid) => Some(procfs::sample(Pid::Other(pid))?),
        None => None,
    };
    Ok(Snapshot {
        edge,
        tool: procfs::sample(Pid::Current)?,
        system: procfs::system_cpu().ok(),
        pings: fleet.map_or(0, |f| f.counters().pings.load(Relaxed)),
    })
}

fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn per_node_bytes(after_kib: u64, before_kib: u64, nodes: u64) -> f64 {
    if nodes == 0 {
        return 0.0;
    }
    (after_kib as f64 - before_kib as f64) * 1024.0 / nodes as f64
}

fn window(a: &Snapshot, b: &Snapshot) -> Option<Window> {
    let (ea, eb) = (a.edge.as_ref()?, b.edge.as_ref()?);
    let cpu = procfs::cpu_between(ea, eb);
    Some(Window {
        secs: eb.at.saturating_duration_since(ea.at).as_secs_f64(),
        cpu_ms: ms(cpu),
        cpu_pct: procfs::cpu_pct_between(ea, eb),
        pings: b.pings.saturating_sub(a.pings),
        wakeups: eb.voluntary_switches.saturating_sub(ea.voluntary_switches),
    })
}

/// Runs the whole measurement (see the module docs). Fails only when the
/// fleet's threads or `/proc` cannot be used; refused or broken node
/// connections are counted in the report.
pub fn run(config: &RunConfig) -> std::io::Result<Report> {
    let say = |line: String| {
        if config.progress {
            eprintln!("{line}");
        }
    };
    let tcp_mem_before = procfs::tcp_socket_mem_kib();
    let slab_before = procfs::slab_kib();
    let s_base0 = snapshot(config.edge_pid, None)?;
    if config.edge_pid.is_some() && !config.baseline.is_zero() {
        std::thread::sleep(config.baseline);
    }
    let s_base1 = snapshot(config.edge_pid, None)?;

    say(format!(
        "phase=connect nodes={} edge={} threads={} concurrency={}",
        config.client.nodes, config.client.edge, config.client.threads, config.client.concurrency
    ));
    let fleet = Fleet::start(config.client.clone())?;
    let deadline = fleet.origin() + config.connect_deadline;
    let mut next_progress = Instant::now() + Duration::from_secs(1);
    while !fleet.settled() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        if Instant::now() >= next_progress {
            next_progress += Duration::from_secs(1);
            let c = fleet.counters();
            say(format!(
                "progress ready={} failed={} connected={}",
                c.ready.load(Relaxed),
                c.failed.load(Relaxed),
                c.connected.load(Relaxed)
            ));
        }
    }
    let s_ready = snapshot(config.edge_pid, Some(&fleet))?;
    let tcp_mem_ready = procfs::tcp_socket_mem_kib();
    let slab_ready = procfs::slab_kib();
    let c = fleet.counters();
    let ready = c.ready.load(Relaxed);
    let last_ready = fleet.last_ready().unwrap_or_else(Instant::now);
    let elapsed = last_ready.saturating_duration_since(fleet.origin());
    say(format!(
        "phase=ready ready={ready} failed={} elapsed_ms={:.0}",
        c.failed.load(Relaxed),
        ms(elapsed)
    ));

    // Idle windows, anchored on the registration times.
    let open = s_ready.tool.at.max(last_ready) + config.settle;
    let interval = config.heartbeat_interval;
    let first_reg = fleet.first_registered();
    let last_reg = fleet.last_registered();
    let (quiet_end, burst_end) = match (first_reg, last_reg) {
        (Some(first), Some(last)) => {
            let quiet_end = first + interval - Duration::from_millis(500);
            let burst_end = last + interval + Duration::from_millis(1500);
            let fits =
                quiet_end > open + Duration::from_secs(2) && burst_end < open + config.steady;
            if fits {
                (Some(quiet_end), Some(burst_end))
            } else {
                (None, None)
            }
        }
        _ => (None, None),
    };
    sleep_until(open);
    let s_open = snapshot(config.edge_pid, Some(&fleet))?;
    say("phase=idle window=steady opened".to_owned());
    let mut s_quiet_end = None;
    let mut s_burst_end = None;
    if let (Some(q), Some(b)) = (quiet_end, burst_end) {
        sleep_until(q);
        s_quiet_end = Some(snapshot(config.edge_pid, Some(&fleet))?);
        say("phase=burst (first heartbeat of every node)".to_owned());
        sleep_until(b);
        s_burst_end = Some(snapshot(config.edge_pid, Some(&fleet))?);
        say("phase=idle (until the end of the steady window)".to_owned());
    }
    sleep_until(open + config.steady);
    let s_close = snapshot(config.edge_pid, Some(&fleet))?;
    say("phase=steady closed".to_owned());

    let mut s_warm = None;
    if config.client.warm_bytes > 0 {
        say(format!("phase=warm bytes={}", config.client.warm_bytes));
        fleet.warm();
        let warm_deadline = Instant::now() + Duration::from_secs(15);
        while c.warm_sent.load(Relaxed) < ready && Instant::now() < warm_deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        say(format!("phase=warmed sent={}", c.warm_sent.load(Relaxed)));
        std::thread::sleep(config.warm_hold);
        s_warm = Some(snapshot(config.edge_pid, Some(&fleet))?);
    }

    let steady = window(&s_open, &s_close);
    let quiet = s_quiet_end.as_ref().and_then(|q| window(&s_open, q));
    let burst = match (&s_quiet_end, &s_burst_end) {
        (Some(q), Some(b)) => window(q, b),
        _ => None,
    };
    // The burst's excess over the quiet rate, per ping.
    let per_heartbeat = |value: fn(&Window) -> f64| match (&quiet, &burst) {
        (Some(quiet), Some(burst)) if burst.pings > 0 => {
            let rate = value(quiet) / quiet.secs.max(f64::EPSILON);
            Some((value(burst) - rate * burst.secs) / burst.pings as f64)
        }
        _ => None,
    };
    let cpu_us_per_heartbeat = per_heartbeat(|w| w.cpu_ms * 1000.0);
    let wakeups_per_heartbeat = per_heartbeat(|w| w.wakeups as f64);
    let edge = match (
        &s_base0.edge,
        &s_base1.edge,
        &s_ready.edge,
        &s_close.edge,
        steady,
    ) {
        (Some(b0), Some(b1), Some(r), Some(end), Some(steady)) => {
            let warm = s_warm.as_ref().and_then(|w| w.edge.as_ref());
            let connect_cpu = procfs::cpu_between(b1, r);
            Some(EdgeReport {
                rss_before_kib: b1.rss_kib,
                rss_ready_kib: r.rss_kib,
                rss_idle_kib: end.rss_kib,
                rss_warm_kib: warm.map_or(0, |w| w.rss_kib),
                hwm_kib: warm.unwrap_or(end).hwm_kib,
                data_before_kib: b1.data_kib,
                data_idle_kib: end.data_kib,
                data_warm_kib: warm.map_or(0, |w| w.data_kib),
                rss_per_node_bytes: per_node_bytes(end.rss_kib, b1.rss_kib, ready),
                data_per_node_bytes: per_node_bytes(end.data_kib, b1.data_kib, ready),
                warm_rss_per_node_bytes: warm
                    .map_or(0.0, |w| per_node_bytes(w.rss_kib, b1.rss_kib, ready)),
                cpu_empty_pct: procfs::cpu_pct_between(b0, b1),
                wakeups_empty_per_sec: {
                    let secs = b1.at.saturating_duration_since(b0.at).as_secs_f64();
                    let n = b1.voluntary_switches.saturating_sub(b0.voluntary_switches);
                    if secs > 0.0 { n as f64 / secs } else { 0.0 }
                },
                connect_cpu_ms: ms(connect_cpu),
                connect_cpu_us_per_node: if ready == 0 {
                    0.0
                } else {
                    connect_cpu.as_secs_f64() * 1e6 / ready as f64
                },
                quiet,
                burst,
                cpu_us_per_heartbeat,
                wakeups_per_heartbeat,
                steady,
                threads: end.tids.len(),
            })
        }
        _ => None,
    };
    let pings_in_steady = s_close.pings.saturating_sub(s_open.pings);
    let system = SystemReport {
        steady_busy_pct: match (&s_open.system, &s_close.system) {
            (Some(a), Some(b)) => procfs::system_busy_pct(a, b),
            _ => 0.0,
        },
        tcp_mem_ready_kib: tcp_mem_ready,
        tcp_mem_before_kib: tcp_mem_before,
        slab_before_kib: slab_before,
        slab_ready_kib: slab_ready,
    };
    let tool = ToolReport {
        rss_before_kib: s_base1.tool.rss_kib,
        rss_ready_kib: s_ready.tool.rss_kib,
        rss_idle_kib: s_close.tool.rss_kib,
        rss_per_node_bytes: per_node_bytes(s_close.tool.rss_kib, s_base1.tool.rss_kib, ready),
        connect_cpu_ms: ms(procfs::cpu_between(&s_base1.tool, &s_ready.tool)),
        steady_cpu_pct: procfs::cpu_pct_between(&s_open.tool, &s_close.tool),
    };
    let report = Report {
        label: config.label.clone(),
        nodes: config.client.nodes,
        client_driver: config.client.driver.as_str().to_owned(),
        connect: ConnectReport {
            ready,
            failed: c.failed.load(Relaxed),
            rejected: c.rejected.load(Relaxed),
            elapsed_ms: ms(elapsed),
            nodes_per_sec: if elapsed.is_zero() {
                0.0
            } else {
                ready as f64 / elapsed.as_secs_f64()
            },
            handshake_us: Percentiles::of(fleet.handshake_latencies_us()),
            registration_spread_ms: match (first_reg, last_reg) {
                (Some(a), Some(b)) => ms(b.saturating_duration_since(a)),
                _ => 0.0,
            },
        },
        idle: IdleReport {
            pings: c.pings.load(Relaxed),
            pongs: c.pongs.load(Relaxed),
            pings_in_steady,
            closed_by_edge: c.closed_by_edge.load(Relaxed),
            io_errors: c.io_errors.load(Relaxed),
            unexpected: c.unexpected.load(Relaxed),
            warm_sent: c.warm_sent.load(Relaxed),
        },
        edge,
        tool,
        system,
        errors: fleet.errors(),
    };
    fleet.stop();
    Ok(report)
}

impl Report {
    /// A short human-readable summary.
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let c = &self.connect;
        let _ = writeln!(
            out,
            "[{}] {} nodes: {} ready, {} failed ({} rejected) in {:.0} ms ({:.0}/s); handshake p50 {} µs p99 {} µs max {} µs",
            self.label,
            self.nodes,
            c.ready,
            c.failed,
            c.rejected,
            c.elapsed_ms,
            c.nodes_per_sec,
            c.handshake_us.p50,
            c.handshake_us.p99,
            c.handshake_us.max
        );
        if let Some(e) = &self.edge {
            let _ = writeln!(
                out,
                "edge RSS {} → {} (ready) → {} (idle) KiB: {:.0} B/node; VmData {:.0} B/node; warm RSS {} KiB ({:.0} B/node)",
                e.rss_before_kib,
                e.rss_ready_kib,
                e.rss_idle_kib,
                e.rss_per_node_bytes,
                e.data_per_node_bytes,
                e.rss_warm_kib,
                e.warm_rss_per_node_bytes
            );
            let _ = writeln!(
                out,
                "edge CPU: empty {:.2}% ({:.0} wakeups/s), connect {:.0} ms ({:.1} µs/node), steady {:.2}% over {:.0} s ({} pings), quiet {}, per heartbeat {}",
                e.cpu_empty_pct,
                e.wakeups_empty_per_sec,
                e.connect_cpu_ms,
                e.connect_cpu_us_per_node,
                e.steady.cpu_pct,
                e.steady.secs,
                e.steady.pings,
                e.quiet
                    .as_ref()
                    .map_or("n/a".to_owned(), |q| format!("{:.2}%", q.cpu_pct)),
                self.edge_per_heartbeat()
            );
        }
        let t = &self.tool;
        let _ = writeln!(
            out,
            "tool RSS {} → {} KiB ({:.0} B/node), steady CPU {:.2}%; machine busy {:.1}% of one core; pings {} pongs {} closed {} errors {}",
            t.rss_before_kib,
            t.rss_idle_kib,
            t.rss_per_node_bytes,
            t.steady_cpu_pct,
            self.system.steady_busy_pct,
            self.idle.pings,
            self.idle.pongs,
            self.idle.closed_by_edge,
            self.idle.io_errors
        );
        for (reason, count) in &self.errors {
            let _ = writeln!(out, "  error x{count}: {reason}");
        }
        out
    }

    fn edge_per_heartbeat(&self) -> String {
        let Some(e) = &self.edge else {
            return "n/a".to_owned();
        };
        match (e.cpu_us_per_heartbeat, e.wakeups_per_heartbeat) {
            (Some(us), Some(wakeups)) => format!("{us:.1} µs and {wakeups:.2} wakeups"),
            _ => "n/a".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let p = Percentiles::of((1..=1000).collect());
        assert_eq!(
            (p.p50, p.p90, p.p99, p.p999, p.max),
            (500, 900, 990, 999, 1000)
        );
        assert_eq!(Percentiles::of(vec![7]).p999, 7);
        assert_eq!(Percentiles::of(Vec::new()).max, 0);
    }
}
