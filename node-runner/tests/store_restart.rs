//! The run store across restarts, at its retention bound, and through the
//! store thread.

use std::path::Path;
use std::sync::Arc;

use node_runner::store::{
    RunInfo, RunRecord, RunStatus, RunStore, StoreConfig, StoreUpdate, StoreWriter, Transition,
    WriterConfig,
};

fn info(i: u64) -> RunInfo {
    RunInfo {
        run_id: format!("run-{i:05}"),
        adapter: "openai_compat".into(),
        target: "gpt-x".into(),
        session_id: Some(format!("sess-{}", i % 4)),
        background: i.is_multiple_of(3),
        created_at_ms: 1_700_000_000_000 + i,
    }
}

fn open(dir: &Path, max_records: u64) -> RunStore {
    let config = StoreConfig {
        max_records,
        ..StoreConfig::default()
    };
    RunStore::open(dir, config).unwrap()
}

fn ids(records: &[RunRecord]) -> Vec<String> {
    records.iter().map(|r| r.run_id.clone()).collect()
}

#[test]
fn records_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let written: Vec<RunRecord> = (0..50).map(|i| RunRecord::new(&info(i))).collect();
    {
        let store = open(dir.path(), 1_000);
        store.upsert_all(&written[..25]).unwrap();
        for r in &written[25..] {
            store.upsert(r).unwrap();
        }
    }
    let store = open(dir.path(), 1_000);
    assert_eq!(store.verify().unwrap(), 50);
    for r in &written {
        assert_eq!(store.get(&r.run_id).unwrap().as_ref(), Some(r));
    }
    let newest: Vec<RunRecord> = written.iter().rev().take(10).cloned().collect();
    assert_eq!(store.recent(10).unwrap(), newest);
    // An update keeps the run's place in the order, also after a restart.
    let mut first = written[0].clone();
    first.apply(&Transition::Completed { at_ms: 9 });
    store.upsert(&first).unwrap();
    drop(store);
    let store = open(dir.path(), 1_000);
    assert_eq!(store.recent(usize::MAX).unwrap().last(), Some(&first));
}

#[test]
fn retention_at_the_bound_and_one_past() {
    const BOUND: u64 = 8;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BOUND);
    let records: Vec<RunRecord> = (0..=BOUND).map(|i| RunRecord::new(&info(i))).collect();
    store.upsert_all(&records[..BOUND as usize]).unwrap();
    assert_eq!(
        store.count().unwrap(),
        BOUND,
        "at the bound nothing is pruned"
    );
    assert!(store.get("run-00000").unwrap().is_some());
    store.upsert(&records[BOUND as usize]).unwrap();
    assert_eq!(store.count().unwrap(), BOUND, "one past prunes exactly one");
    assert_eq!(store.get("run-00000").unwrap(), None, "the oldest goes");
    assert_eq!(store.verify().unwrap(), BOUND);
    let expected: Vec<String> = (1..=BOUND).rev().map(|i| info(i).run_id).collect();
    assert_eq!(ids(&store.recent(usize::MAX).unwrap()), expected);
    // A batch far past the bound keeps only the newest BOUND.
    let batch: Vec<RunRecord> = (100..130).map(|i| RunRecord::new(&info(i))).collect();
    store.upsert_all(&batch).unwrap();
    let expected: Vec<String> = (122..130).rev().map(|i| info(i).run_id).collect();
    assert_eq!(ids(&store.recent(usize::MAX).unwrap()), expected);
    // A lower bound on reopen applies at the next write.
    drop(store);
    let store = open(dir.path(), 2);
    assert_eq!(store.count().unwrap(), BOUND);
    store.upsert(&RunRecord::new(&info(200))).unwrap();
    assert_eq!(ids(&store.recent(9).unwrap()), ["run-00200", "run-00129"]);
}

#[test]
fn the_store_thread_records_a_run_life_and_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let writer = StoreWriter::spawn(open(dir.path(), 1_000), WriterConfig::default()).unwrap();
    let handle = writer.handle();
    let runs: Vec<Arc<RunInfo>> = (0..100).map(|i| Arc::new(info(i))).collect();
    for run in &runs {
        let send = |transition| {
            assert!(handle.record(StoreUpdate {
                run: Arc::clone(run),
                transition,
            }));
        };
        send(Transition::Queued);
        send(Transition::Started {
            at_ms: run.created_at_ms + 1,
        });
        if run.created_at_ms % 2 == 0 {
            send(Transition::Completed {
                at_ms: run.created_at_ms + 2,
            });
        }
    }
    // Drop without an explicit flush: shutdown writes what is queued.
    drop(writer);
    let stats = handle.stats();
    assert_eq!(
        (stats.written, stats.dropped_full, stats.write_errors),
        (250, 0, 0)
    );
    let store = open(dir.path(), 1_000);
    assert_eq!(store.verify().unwrap(), 100);
    for run in &runs {
        let r = store.get(&run.run_id).unwrap().unwrap();
        let done = run.created_at_ms % 2 == 0;
        let status = if done {
            RunStatus::Completed
        } else {
            RunStatus::Running
        };
        assert_eq!(r.status, status, "{r:?}");
        assert_eq!(r.started_at_ms, Some(run.created_at_ms + 1));
        assert_eq!(r.finished_at_ms, done.then_some(run.created_at_ms + 2));
    }
}
