//! `iop-node runs` end to end: the real binary on a store in a temp dir.

use std::path::Path;
use std::process::{Command, Output};

use node_runner::store::{RunInfo, RunRecord, RunStore, STORE_DIR_NAME, StoreConfig, Transition};

fn runs(data_dir: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iop-node"))
        .arg("runs")
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .env_remove("IOP_NODE_TOKEN")
        .output()
        .expect("run iop-node")
}

fn seed(data_dir: &Path, n: usize) {
    let store = RunStore::open(data_dir, StoreConfig::default()).unwrap();
    let records: Vec<RunRecord> = (0..n)
        .map(|i| {
            let mut r = RunRecord::new(&RunInfo {
                run_id: format!("run-{i}"),
                adapter: "vllm".into(),
                target: "qwen".into(),
                session_id: None,
                background: i % 2 == 0,
                created_at_ms: 1_000 * i as u64,
            });
            r.apply(&Transition::Completed {
                at_ms: 1_000 * i as u64 + 7,
            });
            r
        })
        .collect();
    store.upsert_all(&records).unwrap();
}

#[test]
fn lists_newest_first_with_a_limit_and_no_token() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), 5);
    let out = runs(dir.path(), &["--limit", "3"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[0].starts_with("CREATED"), "{stdout}");
    for (line, id) in lines[1..].iter().zip(["run-4", "run-3", "run-2"]) {
        assert!(line.contains(id) && line.contains("completed"), "{stdout}");
    }
}

#[test]
fn json_lines_output() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), 2);
    let out = runs(dir.path(), &["--json"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let ids: Vec<String> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["run_id"].to_string())
        .collect();
    assert_eq!(ids, ["\"run-1\"", "\"run-0\""]);
}

#[test]
fn a_dir_without_a_store_fails_naming_the_path_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = runs(dir.path(), &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let path = dir.path().join(STORE_DIR_NAME);
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    assert!(!path.exists());
}

/// The store's gather is bounded: 0 would commit on every update and a
/// gather past a minute would hold records longer than anyone waits.
#[test]
fn a_commit_interval_out_of_range_is_refused_at_start() {
    for ms in ["0", "60001", "soon"] {
        let out = Command::new(env!("CARGO_BIN_EXE_iop-node"))
            .args(["--run-store-commit-ms", ms, "--data-dir", "/nonexistent"])
            .env("IOP_NODE_TOKEN", "t")
            .output()
            .expect("run iop-node");
        assert_eq!(out.status.code(), Some(2), "{ms}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--run-store-commit-ms"), "{ms}: {stderr}");
    }
}
