//! CPU time per event of each part of the stack (printed, not a criterion
//! figure).
//!
//! On a shared 2-core box wall-clock throughput moves with whatever else
//! runs; the CPU time each thread spends per event does much less. Every
//! thread's on-CPU nanoseconds come from `/proc/self/task/*/schedstat`,
//! grouped by thread name: `iop-node-*` (the Node), `iop-edge-*` (the
//! Edge), `mock-provider-*` (the mock) and the rest (the client).

use std::collections::BTreeMap;

/// Each live thread of this process: its name, and its `schedstat`'s
/// on-CPU and run-queue-wait nanoseconds.
fn threads() -> Vec<(String, u64, u64)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .map(|task| {
            let path = task.path();
            let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
            let mut fields = stat.split_whitespace().map(|f| f.parse().unwrap_or(0));
            let (on_cpu, waited) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
            (name.trim().to_owned(), on_cpu, waited)
        })
        .collect()
}

/// On-CPU nanoseconds so far, by part of the stack.
pub(crate) fn by_part() -> BTreeMap<&'static str, u64> {
    let mut parts = BTreeMap::new();
    for (name, on_cpu, _) in threads() {
        *parts.entry(part(&name)).or_insert(0) += on_cpu;
    }
    parts
}

/// Nanoseconds this process's live threads have waited on a run queue.
pub(crate) fn run_queue_wait_ns() -> u64 {
    threads().into_iter().map(|(_, _, waited)| waited).sum()
}

fn part(thread: &str) -> &'static str {
    if thread.starts_with("iop-node") {
        "node"
    } else if thread.starts_with("iop-edge") {
        "edge"
    } else if thread.starts_with("mock-provider") {
        "mock"
    } else {
        "client"
    }
}

/// Runs `work` (which returns how many units it moved) and prints the CPU
/// nanoseconds per unit of each part.
pub(crate) fn per_unit(label: &str, unit: &str, work: impl FnOnce() -> u64) {
    let before = by_part();
    let units = work().max(1);
    let after = by_part();
    let mut line = format!("  {label:<28}");
    for name in ["client", "mock", "edge", "node"] {
        let spent = after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
        line.push_str(&format!(" {name} {:>8.1}", spent as f64 / units as f64));
    }
    println!("{line}   ns/{unit}");
}
