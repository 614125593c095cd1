//! Crash test: a child process (this test binary, re-run with an env flag)
//! writes batches of records and is SIGKILLed mid-stream, several times over
//! the same store. After each kill the store must reopen consistent, hold
//! every batch the child reported committed, and hold whole batches only: a
//! prefix of what was written, never a torn batch.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use node_runner::store::{RunInfo, RunRecord, RunStatus, RunStore, StoreConfig, Transition};

const CHILD_ENV: &str = "IOP_STORE_CRASH_CHILD_DIR";
const BATCH: u64 = 200;
/// Commits the parent waits to see before each kill.
const COMMITS_BEFORE_KILL: u64 = 5;
const ROUNDS: usize = 3;

fn config() -> StoreConfig {
    StoreConfig {
        max_records: 10_000_000,
        ..StoreConfig::default()
    }
}

/// Record `i` is fully determined by `i`, so the parent can check contents.
fn record(i: u64) -> RunRecord {
    let mut r = RunRecord::new(&RunInfo {
        run_id: format!("run-{i:08}"),
        adapter: "vllm".into(),
        target: "m".repeat((i % 50) as usize + 1),
        session_id: i.is_multiple_of(2).then(|| format!("s-{i}")),
        background: i.is_multiple_of(3),
        created_at_ms: i,
    });
    r.apply(&Transition::Failed {
        at_ms: i + 1,
        error: format!("error {i}"),
    });
    r
}

/// The child: append batches forever, printing after each commit.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // Not the child: nothing to do.
    };
    let store = RunStore::open(Path::new(&dir), config()).unwrap();
    let mut next = store.count().unwrap();
    loop {
        let batch: Vec<RunRecord> = (next..next + BATCH).map(record).collect();
        store.upsert_all(&batch).unwrap();
        next += BATCH;
        println!("committed {next}");
    }
}

#[test]
fn a_killed_writer_leaves_a_consistent_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let mut acknowledged = 0;
    for round in 0..ROUNDS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Keep the pipe open until after the kill, so the child dies from
        // SIGKILL while writing, not from a closed stdout.
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("committed ") {
                acknowledged = n.parse().unwrap();
                seen += 1;
                if seen == COMMITS_BEFORE_KILL {
                    break;
                }
            }
        }
        assert_eq!(
            seen, COMMITS_BEFORE_KILL,
            "round {round}: child ended early"
        );
        // Child::kill is SIGKILL on Unix: no destructor, no clean close.
        child.kill().unwrap();
        child.wait().unwrap();
        drop(lines);

        let store = RunStore::open(dir.path(), config()).unwrap();
        let count = store.verify().unwrap();
        assert!(
            count >= acknowledged,
            "round {round}: lost commits: {count} < {acknowledged}"
        );
        assert_eq!(
            count % BATCH,
            0,
            "round {round}: a torn batch: {count} records"
        );
        let all = store.recent(usize::MAX).unwrap();
        for (k, r) in all.iter().rev().enumerate() {
            assert_eq!(r, &record(k as u64), "round {round}: record {k}");
            assert_eq!(r.status, RunStatus::Failed);
        }
    }
}
