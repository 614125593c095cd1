//! `iop-run-load`'s measurements and report: CPU by process part, memory,
//! rates and latency percentiles.

use std::fs;

use anyhow::Context as _;
use perf::link_load::procfs::{self, Pid, ProcSample};
use serde::Serialize;

use super::Totals;

/// CPU and memory of this process (per thread group) and of the node.
pub(crate) struct Samples {
    tool: ProcSample,
    node: ProcSample,
    edge_ns: u64,
    mock_ns: u64,
}

impl Samples {
    pub(crate) fn take(node_pid: u32) -> anyhow::Result<Self> {
        let (edge_ns, mock_ns) = thread_groups_ns()?;
        Ok(Self {
            tool: procfs::sample(Pid::Current).context("sampling this process")?,
            node: procfs::sample(Pid::Other(node_pid)).context("sampling the node")?,
            edge_ns,
            mock_ns,
        })
    }
}

/// On-CPU ns of this process's `iop-edge-*` and `mock-provider-*` threads
/// (they live as long as the process, so no exited thread is missed).
fn thread_groups_ns() -> anyhow::Result<(u64, u64)> {
    let (mut edge, mut mock) = (0, 0);
    for entry in fs::read_dir("/proc/self/task")? {
        let path = entry?.path();
        let (Ok(comm), Ok(stat)) = (
            fs::read_to_string(path.join("comm")),
            fs::read_to_string(path.join("schedstat")),
        ) else {
            continue;
        };
        let ns: u64 = stat
            .split_whitespace()
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if comm.starts_with("iop-edge-") {
            edge += ns;
        } else if comm.starts_with("mock-provider") {
            mock += ns;
        }
    }
    Ok((edge, mock))
}

/// The whole run, as printed with `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) driver: &'static str,
    pub(crate) edge_workers: usize,
    pub(crate) mock_workers: usize,
    /// `--workers` given to the node (`None`: its default).
    pub(crate) node_workers: Option<usize>,
    pub(crate) concurrency: usize,
    pub(crate) tokens_per_run: u64,
    pub(crate) chunk_size: u64,
    pub(crate) node_pid: u32,
    pub(crate) adapters: Vec<AdapterReport>,
}

/// Percentiles of a sample, in µs.
#[derive(Debug, Serialize)]
pub(crate) struct Percentiles {
    p50: u64,
    p99: u64,
    max: u64,
}

impl Percentiles {
    pub(crate) fn of(mut values: Vec<u64>) -> Self {
        values.sort_unstable();
        let at = |q: f64| {
            if values.is_empty() {
                return 0;
            }
            let rank = (q * values.len() as f64).ceil() as usize;
            values[rank.clamp(1, values.len()) - 1]
        };
        Self {
            p50: at(0.50),
            p99: at(0.99),
            max: values.last().copied().unwrap_or(0),
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct AdapterReport {
    adapter: &'static str,
    elapsed_s: f64,
    runs_ok: u64,
    pub(crate) runs_failed: u64,
    submit_errors: u64,
    first_error: Option<String>,
    runs_per_s: f64,
    /// Every `RunEvent` the caller received (start, deltas, usage, terminal).
    events: u64,
    events_per_s: f64,
    delta_events: u64,
    /// `output_tokens` of the providers' usage, summed.
    tokens: u64,
    tokens_per_s: f64,
    first_delta_us: Percentiles,
    run_us: Percentiles,
    /// CPU in % of one core over the window.
    cpu_pct: CpuPct,
    /// CPU µs per event received, by process part.
    cpu_us_per_event: CpuPct,
    node_rss_kib: u64,
    node_hwm_kib: u64,
    tool_rss_kib: u64,
}

/// By process part: this whole process (Edge + mock + submit side), its
/// `iop-edge-*` threads, its `mock-provider-*` threads, its other threads
/// (the submit side on the main thread, helpers), the `iop-node` process.
#[derive(Debug, Serialize)]
pub(crate) struct CpuPct {
    tool: f64,
    edge: f64,
    mock: f64,
    driver: f64,
    node: f64,
}

impl CpuPct {
    /// `[tool, edge, mock, driver, node]` ns, each divided by `div`.
    pub(crate) fn new(ns: [f64; 5], div: f64) -> Self {
        let [tool, edge, mock, driver, node] = ns.map(|ns| (ns / div * 100.0).round() / 100.0);
        Self {
            tool,
            edge,
            mock,
            driver,
            node,
        }
    }
}

impl AdapterReport {
    pub(crate) fn new(adapter: &'static str, t: Totals, before: &Samples, after: &Samples) -> Self {
        let wall = t.elapsed.as_secs_f64().max(1e-9);
        let tool_ns = procfs::cpu_between(&before.tool, &after.tool).as_nanos() as f64;
        let edge_ns = after.edge_ns.saturating_sub(before.edge_ns) as f64;
        let mock_ns = after.mock_ns.saturating_sub(before.mock_ns) as f64;
        let ns = [
            tool_ns,
            edge_ns,
            mock_ns,
            (tool_ns - edge_ns - mock_ns).max(0.0),
            procfs::cpu_between(&before.node, &after.node).as_nanos() as f64,
        ];
        let rate = |n: u64, digits: f64| (n as f64 / wall * digits).round() / digits;
        Self {
            adapter,
            elapsed_s: (wall * 1000.0).round() / 1000.0,
            runs_ok: t.runs_ok,
            runs_failed: t.runs_failed,
            submit_errors: t.submit_errors,
            first_error: t.first_error,
            runs_per_s: rate(t.runs_ok, 10.0),
            events: t.events,
            events_per_s: rate(t.events, 1.0),
            delta_events: t.delta_events,
            tokens: t.output_tokens,
            tokens_per_s: rate(t.output_tokens, 1.0),
            first_delta_us: Percentiles::of(t.first_delta_us),
            run_us: Percentiles::of(t.run_us),
            cpu_pct: CpuPct::new(ns, wall * 1e7),
            cpu_us_per_event: CpuPct::new(ns, t.events.max(1) as f64 * 1e3),
            node_rss_kib: after.node.rss_kib,
            node_hwm_kib: after.node.hwm_kib,
            tool_rss_kib: after.tool.rss_kib,
        }
    }
}

impl Report {
    pub(crate) fn summary(&self) -> String {
        let r = self;
        let node = r.node_workers.map_or("default".into(), |n| n.to_string());
        let mut out = format!(
            "iop-run-load: driver {}, workers: edge {}, node {node}, mock {}; concurrency {}, \
             {} tokens/run in chunks of {}\n",
            r.driver, r.edge_workers, r.mock_workers, r.concurrency, r.tokens_per_run, r.chunk_size
        );
        for a in &self.adapters {
            let ms = |p: &Percentiles| (p.p50 as f64 / 1e3, p.p99 as f64 / 1e3);
            let ((f50, f99), (r50, r99)) = (ms(&a.first_delta_us), ms(&a.run_us));
            let (cpu, per) = (&a.cpu_pct, &a.cpu_us_per_event);
            out.push_str(&format!(
                "  {}: {} runs ok, {} failed in {:.2} s\n    \
                 {:.1} runs/s, {:.0} events/s, {:.0} tokens/s\n    \
                 first delta p50 {f50:.2} ms p99 {f99:.2} ms; \
                 run p50 {r50:.2} ms p99 {r99:.2} ms\n    \
                 CPU % of one core: node {:.1}, edge {:.1}, mock {:.1}, submit side {:.1} \
                 (this process {:.1})\n    \
                 CPU µs per event: node {:.2}, edge {:.2}\n    \
                 node RSS {} KiB (peak {} KiB), this process {} KiB\n",
                a.adapter,
                a.runs_ok,
                a.runs_failed,
                a.elapsed_s,
                a.runs_per_s,
                a.events_per_s,
                a.tokens_per_s,
                cpu.node,
                cpu.edge,
                cpu.mock,
                cpu.driver,
                cpu.tool,
                per.node,
                per.edge,
                a.node_rss_kib,
                a.node_hwm_kib,
                a.tool_rss_kib,
            ));
            if let Some(error) = &a.first_error {
                out.push_str(&format!("    first error: {error}\n"));
            }
        }
        out
    }
}
