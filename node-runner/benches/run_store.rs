//! The run store's cost a run (F15) on a full store, through the writer as
//! the run manager uses it. Results: `bench-results/run-store.md`.
//!
//! `cargo bench -p node-runner --bench run_store`
//!
//! The store is filled to its retention bound first (100,000 records, the
//! default), so every batch also prunes, as on a Node that has run for a
//! while. An iteration records [`RUNS`] new runs as a tunnel does — a
//! `Started` and a terminal update each, run ids as the Edge makes them —
//! and flushes: one or a few transactions, each with its data sync
//! (`full_store_small_batches`: [`SMALL_BATCH`] runs, so the commits' own
//! cost shows). The
//! figure is wall-clock time a run, sync included, so compare builds in
//! one sitting. At the end it prints the store thread's own CPU time a
//! run (user and system, from `/proc`), over every run the bench recorded:
//! the figure a loaded Node pays, which waiting on the sync is not.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use node_runner::store::{
    RunInfo, RunRecord, RunStore, StoreConfig, StoreUpdate, StoreWriter, Transition, WriterConfig,
};

/// Runs an iteration records.
const RUNS: u64 = 512;
/// Runs an iteration records in `full_store_small_batches`: a Node at a
/// few hundred requests a second, whose commits each carry a handful.
const SMALL_BATCH: u64 = 8;
/// Records the store keeps (the default bound).
const KEEP: u64 = 100_000;
/// The first run's count: seven digits, as every run the bench makes has
/// (so ids in count order are in key order, as on a Node that has served
/// a while: the Edge's counts are not padded, and its early ones, of fewer
/// digits, are scattered among the later ones).
const FIRST: u64 = 1_000_000;

/// A run as the Edge names it (`run-<start ms, hex>-<count>`).
fn info(n: u64) -> Arc<RunInfo> {
    Arc::new(RunInfo {
        run_id: format!("run-19aeb2c7f3a-{n}"),
        adapter: "mock".into(),
        target: "mock-chat".into(),
        session_id: None,
        background: false,
        created_at_ms: 1_765_000_000_000 + n,
    })
}

/// A store at its bound, in a fresh directory.
fn full_store(dir: &std::path::Path) -> RunStore {
    let store = RunStore::open(
        dir,
        StoreConfig {
            max_records: KEEP,
            ..StoreConfig::default()
        },
    )
    .expect("open the store");
    let mut n = FIRST;
    while n < FIRST + KEEP {
        let records: Vec<RunRecord> = (n..n + 10_000)
            .map(|k| {
                let mut record = RunRecord::new(&info(k));
                record.apply(&Transition::Completed { at_ms: 1 });
                record
            })
            .collect();
        store.upsert_all(&records).expect("fill the store");
        n += 10_000;
    }
    store
}

/// CPU time (user + system) of this process's `iop-run-store` thread.
fn store_thread_cpu() -> Option<Duration> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let comm = std::fs::read_to_string(path.join("comm")).ok()?;
        if comm.trim_end() != "iop-run-store" {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).ok()?;
        // Fields after the command's closing parenthesis; utime and stime
        // are the 14th and 15th fields of the line.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // Clock ticks of USER_HZ, 100 a second on every Linux ABI.
        return Some(Duration::from_millis(ticks * 10));
    }
    None
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let writer =
        StoreWriter::spawn(full_store(dir.path()), WriterConfig::default()).expect("spawn");
    let mut next = FIRST + KEEP;
    let mut group = c.benchmark_group("run_store");
    for (name, runs) in [
        ("full_store_tunnel_runs", RUNS),
        ("full_store_small_batches", SMALL_BATCH),
    ] {
        let first = next;
        let cpu_before = store_thread_cpu();
        group.throughput(Throughput::Elements(runs));
        group.bench_function(name, |b| {
            b.iter(|| {
                for n in next..next + runs {
                    let run = info(n);
                    writer.record(StoreUpdate {
                        run: Arc::clone(&run),
                        transition: Transition::Started { at_ms: 2 },
                    });
                    writer.record(StoreUpdate {
                        run,
                        transition: Transition::Completed { at_ms: 3 },
                    });
                }
                next += runs;
                writer.flush().expect("flush");
            });
        });
        let recorded = next - first;
        // `/proc` counts in 10 ms ticks: a test-mode run (one iteration)
        // is too short to say anything.
        if let (Some(before), Some(after), true) =
            (cpu_before, store_thread_cpu(), recorded >= 10_000)
        {
            println!(
                "run_store/{name}: the store thread's CPU: {:.2} µs a run ({recorded} runs)",
                (after - before).as_secs_f64() * 1e6 / recorded as f64
            );
        }
    }
    group.finish();
    let stats = writer.stats();
    assert_eq!(
        stats.dropped_full + stats.failed + stats.invalid,
        0,
        "{stats:?}"
    );
    black_box(stats);
}

criterion_group!(benches, bench);
criterion_main!(benches);
