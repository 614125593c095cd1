//! Unit tests: the record encoding and transitions, the writer's queue, the
//! listing format. The store against a model, restarts and crashes are in
//! `node-runner/tests/store_*.rs`.

use std::sync::Arc;
use std::sync::mpsc;

use proptest::prelude::*;

use super::record::{FORMAT_V1, MAX_ERROR_LEN, MAX_ID_LEN, bounded_text};
use super::*;

fn info(id: &str) -> RunInfo {
    RunInfo {
        run_id: id.into(),
        adapter: "ollama".into(),
        target: "llama3".into(),
        session_id: None,
        background: false,
        created_at_ms: 1_000,
    }
}

fn update(id: &str, transition: Transition) -> StoreUpdate {
    StoreUpdate {
        run: Arc::new(info(id)),
        transition,
    }
}

/// The encoded length of what follows a record's run id.
fn record_texts_after_run_id(record: &RunRecord) -> usize {
    [Some(&record.adapter), Some(&record.target)]
        .into_iter()
        .chain([record.session_id.as_ref(), record.error.as_ref()])
        .flatten()
        .map(|text| 2 + text.len())
        .sum()
}

fn status_strategy() -> impl Strategy<Value = RunStatus> {
    prop::sample::select(RunStatus::ALL.to_vec())
}

fn record_strategy() -> impl Strategy<Value = RunRecord> {
    (
        ("[a-z0-9-]{1,40}", "\\PC{0,20}", "\\PC{0,20}"),
        (
            prop::option::of("\\PC{0,20}"),
            any::<bool>(),
            status_strategy(),
        ),
        (any::<u64>(), any::<Option<u64>>(), any::<Option<u64>>()),
        prop::option::of("\\PC{0,60}"),
    )
        .prop_map(
            |((run_id, adapter, target), (session_id, background, status), t, error)| RunRecord {
                run_id,
                adapter,
                target,
                session_id,
                background,
                status,
                created_at_ms: t.0,
                started_at_ms: t.1,
                finished_at_ms: t.2,
                error,
            },
        )
}

proptest! {
    #[test]
    fn encoding_round_trips(record in record_strategy()) {
        let bytes = record.encode().unwrap();
        prop_assert_eq!(bytes[0], FORMAT_V1);
        prop_assert_eq!(RunRecord::decode(&bytes).unwrap(), record);
    }

    #[test]
    fn every_strict_prefix_is_refused(record in record_strategy()) {
        let bytes = record.encode().unwrap();
        for cut in 0..bytes.len() {
            prop_assert!(RunRecord::decode(&bytes[..cut]).is_err(), "prefix {cut} decoded");
        }
    }

    /// Pruning's read of the run id alone agrees with the whole decode, and
    /// refuses a value cut before the run id ends.
    #[test]
    fn the_run_id_reads_in_place_as_decoded(record in record_strategy()) {
        let bytes = record.encode().unwrap();
        prop_assert_eq!(RunRecord::decode_run_id(&bytes).unwrap(), record.run_id.as_str());
        let id_end = bytes.len() - record_texts_after_run_id(&record);
        for cut in 0..id_end {
            prop_assert!(RunRecord::decode_run_id(&bytes[..cut]).is_err(), "prefix {cut} read");
        }
        prop_assert_eq!(RunRecord::decode_run_id(&bytes[..id_end]).unwrap(), record.run_id.as_str());
    }

    #[test]
    fn bounded_text_is_bounded_and_printable(
        text in "\\PC*|[\\x00-\\x1f]*|[ -~]{0,40}|[\\x00-\\x7f]{0,40}",
        max in 0usize..40,
    ) {
        let out = bounded_text(&text, max);
        prop_assert!(out.len() <= max);
        prop_assert!(!out.chars().any(char::is_control));
        // Printable text that fits is kept as it is.
        if text.len() <= max && !text.chars().any(char::is_control) {
            prop_assert_eq!(out, text);
        }
    }
}

proptest! {
    // Every case starts a writer and syncs at each flush.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The writer's batches against a model: updates of a pool of runs
    /// (one run id too long to keep, one empty), flushed at random points,
    /// give the records the model's transitions give, in first-seen order,
    /// and an index that names each record once.
    #[test]
    fn the_writer_merges_steps_as_a_model_does(
        steps in prop::collection::vec((0usize..6, 0u8..6, any::<bool>()), 1..40),
    ) {
        let (dir, store) = temp_store(1_000);
        let writer = StoreWriter::spawn(store, WriterConfig::default()).unwrap();
        let ids: Vec<String> = (0..4)
            .map(|i| format!("run-{i}"))
            .chain([String::new(), "x".repeat(MAX_ID_LEN + 1)])
            .collect();
        let mut model: Vec<RunRecord> = Vec::new();
        let mut invalid = 0;
        for (at, &(id, step, flush)) in steps.iter().enumerate() {
            let at_ms = at as u64;
            let transition = match step {
                0 => Transition::Queued,
                1 => Transition::Started { at_ms },
                2 => Transition::Completed { at_ms },
                3 => Transition::Failed { at_ms, error: format!("e{at}") },
                4 => Transition::Cancelled { at_ms },
                _ => Transition::Rejected { at_ms, error: "no".repeat(400) },
            };
            let run = info(&ids[id]);
            if id >= 4 {
                invalid += 1;
            } else {
                let i = match model.iter().position(|r| r.run_id == run.run_id) {
                    Some(i) => i,
                    None => {
                        model.push(RunRecord::new(&run));
                        model.len() - 1
                    }
                };
                model[i].apply(&transition);
            }
            let update = StoreUpdate { run: Arc::new(run), transition };
            prop_assert!(writer.record(update));
            if flush {
                writer.flush().unwrap();
            }
        }
        writer.flush().unwrap();
        let stats = writer.stats();
        prop_assert_eq!((stats.invalid, stats.write_errors), (invalid, 0));
        drop(writer);
        let store = RunStore::open(dir.path(), StoreConfig::default()).unwrap();
        prop_assert_eq!(store.verify().unwrap(), model.len() as u64);
        model.reverse();
        prop_assert_eq!(store.recent(100).unwrap(), model);
    }
}

#[test]
fn decode_refuses_unknown_formats_and_trailing_bytes() {
    let mut bytes = RunRecord::new(&info("r1")).encode().unwrap();
    assert_eq!(RunRecord::decode(&[]), Err(RecordError::Empty));
    bytes.push(0);
    assert_eq!(
        RunRecord::decode(&bytes),
        Err(RecordError::TrailingBytes(1))
    );
    bytes.pop();
    bytes[0] = 2;
    assert_eq!(
        RunRecord::decode(&bytes),
        Err(RecordError::UnknownFormat(2))
    );
    bytes[0] = FORMAT_V1;
    bytes[1] = 6;
    assert_eq!(RunRecord::decode(&bytes), Err(RecordError::BadStatus(6)));
    bytes[1] = 0;
    bytes[2] = 0x20;
    assert_eq!(RunRecord::decode(&bytes), Err(RecordError::BadFlags(0x20)));
}

#[test]
fn field_bounds_hold_at_the_bound_and_refuse_one_past() {
    let mut record = RunRecord::new(&info(&"r".repeat(MAX_ID_LEN)));
    record.error = Some("e".repeat(MAX_ERROR_LEN));
    assert!(record.encode().is_ok());
    record.run_id.push('r');
    assert_eq!(
        record.encode(),
        Err(RecordError::TooLong("run_id", MAX_ID_LEN + 1))
    );
    record.run_id.pop();
    record.error = Some("e".repeat(MAX_ERROR_LEN + 1));
    assert_eq!(
        record.encode(),
        Err(RecordError::TooLong("error", MAX_ERROR_LEN + 1))
    );
    // Transitions and `RunRecord::new` bound the free text themselves.
    let mut long = info("r2");
    long.adapter = "a".repeat(MAX_ID_LEN + 1);
    let mut record = RunRecord::new(&long);
    assert_eq!(record.adapter.len(), MAX_ID_LEN);
    record.apply(&Transition::Failed {
        at_ms: 5,
        error: "x\n".repeat(MAX_ERROR_LEN),
    });
    let error = record.error.clone().unwrap();
    assert_eq!(error.len(), MAX_ERROR_LEN);
    assert!(!error.contains('\n'));
    assert!(record.encode().is_ok());
}

#[test]
fn the_first_terminal_wins() {
    let mut record = RunRecord::new(&info("r1"));
    assert_eq!(record.status, RunStatus::Queued);
    assert!(record.apply(&Transition::Started { at_ms: 2 }));
    assert_eq!(
        (record.status, record.started_at_ms),
        (RunStatus::Running, Some(2))
    );
    assert!(record.apply(&Transition::Cancelled { at_ms: 3 }));
    let after_terminal = record.clone();
    assert!(!record.apply(&Transition::Completed { at_ms: 4 }));
    assert!(!record.apply(&Transition::Started { at_ms: 5 }));
    assert_eq!(record, after_terminal);
    assert_eq!(record.status, RunStatus::Cancelled);
    assert_eq!(record.finished_at_ms, Some(3));
}

fn temp_store(max_records: u64) -> (tempfile::TempDir, RunStore) {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        max_records,
        ..StoreConfig::default()
    };
    let store = RunStore::open(dir.path(), config).unwrap();
    (dir, store)
}

#[test]
fn writer_batches_merges_and_flushes() {
    let (_dir, store) = temp_store(100);
    let writer = StoreWriter::spawn(store, WriterConfig::default()).unwrap();
    let handle = writer.handle();
    let run = Arc::new(info("r1"));
    let step = |transition| StoreUpdate {
        run: Arc::clone(&run),
        transition,
    };
    assert!(handle.record(step(Transition::Queued)));
    assert!(handle.record(step(Transition::Started { at_ms: 10 })));
    assert!(handle.record(step(Transition::Failed {
        at_ms: 20,
        error: "provider said 500".into(),
    })));
    // A late step after the terminal does not move it.
    assert!(handle.record(step(Transition::Completed { at_ms: 30 })));
    // A run whose Queued was lost is still created by a later step.
    assert!(handle.record(update("r2", Transition::Started { at_ms: 11 })));
    handle.flush().unwrap();
    let stats = writer.stats();
    assert_eq!((stats.queued, stats.written, stats.write_errors), (5, 5, 0));
    drop(writer);
    let dir = _dir;
    let store = RunStore::open(dir.path(), StoreConfig::default()).unwrap();
    let r1 = store.get("r1").unwrap().unwrap();
    assert_eq!(r1.status, RunStatus::Failed);
    assert_eq!((r1.started_at_ms, r1.finished_at_ms), (Some(10), Some(20)));
    assert_eq!(r1.error.as_deref(), Some("provider said 500"));
    assert_eq!(store.get("r2").unwrap().unwrap().status, RunStatus::Running);
    let ids: Vec<_> = store
        .recent(10)
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(ids, ["r2", "r1"]);
}

#[test]
fn a_full_queue_drops_and_counts_without_blocking() {
    let (_dir, store) = temp_store(100);
    let (open_gate, gate) = mpsc::channel();
    let config = WriterConfig {
        queue_capacity: 4,
        max_batch: 2,
        ..WriterConfig::default()
    };
    let writer = StoreWriter::spawn_gated(store, config, Some(gate)).unwrap();
    // The thread is held at the gate, so the queue fills deterministically:
    // if `record` blocked on a full queue this test would hang here.
    let accepted: Vec<bool> = (0..7)
        .map(|i| writer.record(update(&format!("r{i}"), Transition::Queued)))
        .collect();
    assert_eq!(accepted, [true, true, true, true, false, false, false]);
    let stats = writer.stats();
    assert_eq!((stats.queued, stats.dropped_full), (4, 3));
    assert_eq!(stats.waiting(), 4);
    open_gate.send(()).unwrap();
    writer.flush().unwrap();
    let stats = writer.stats();
    assert_eq!(stats.written, 4);
    assert_eq!(stats.waiting(), 0);
    // What the admin port lists: the drops are visible to an operator.
    let mut text = String::new();
    stats.render(&mut text);
    assert!(text.contains("iop_node_run_store_updates_total{outcome=\"written\"} 4\n"));
    assert!(text.contains("iop_node_run_store_updates_total{outcome=\"dropped_full\"} 3\n"));
    assert!(text.contains("iop_node_run_store_waiting 0\n"));
    assert!(
        stats.batches >= 2,
        "max_batch 2 splits 4 updates: {stats:?}"
    );
    let handle = writer.handle();
    drop(writer);
    // After shutdown, updates are counted as dropped, and flush says why.
    assert!(!handle.record(update("late", Transition::Queued)));
    assert_eq!(handle.stats().dropped_closed, 1);
    assert!(matches!(handle.flush(), Err(StoreError::WriterClosed)));
}

#[test]
fn an_empty_run_id_is_refused_as_invalid_not_by_lmdb() {
    let record = RunRecord::new(&info(""));
    assert_eq!(record.validate(), Err(RecordError::EmptyRunId));
    let (_dir, store) = temp_store(100);
    assert!(matches!(
        store.upsert(&record),
        Err(StoreError::InvalidRecord { .. })
    ));
}

#[test]
fn the_writer_skips_invalid_records_and_keeps_the_rest_of_the_batch() {
    let (dir, store) = temp_store(100);
    let writer = StoreWriter::spawn(store, WriterConfig::default()).unwrap();
    writer.record(update("ok-1", Transition::Queued));
    writer.record(update(&"x".repeat(MAX_ID_LEN + 1), Transition::Queued));
    writer.record(update("ok-2", Transition::Queued));
    writer.flush().unwrap();
    let stats = writer.stats();
    assert_eq!(
        (stats.written, stats.invalid, stats.write_errors),
        (2, 1, 0)
    );
    drop(writer);
    let store = RunStore::open(dir.path(), StoreConfig::default()).unwrap();
    assert_eq!(store.count().unwrap(), 2);
}

#[test]
fn utc_formatting() {
    assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(format_utc_ms(951_782_400_001), "2000-02-29T00:00:00.001Z");
    assert_eq!(format_utc_ms(1_796_000_561_123), "2026-11-30T01:02:41.123Z");
}

fn listed() -> Vec<RunRecord> {
    let mut done = RunRecord::new(&RunInfo {
        session_id: Some("s-9".into()),
        background: true,
        ..info("run-b")
    });
    done.apply(&Transition::Started { at_ms: 1_500 });
    done.apply(&Transition::Failed {
        at_ms: 2_750,
        error: "boom".into(),
    });
    vec![done, RunRecord::new(&info("run-a"))]
}

#[test]
fn table_format() {
    let expected = "\
CREATED                   RUN_ID  STATUS  ADAPTER  TARGET  SESSION  BG   DURATION  ERROR
1970-01-01T00:00:01.000Z  run-b   failed  ollama   llama3  s-9      yes  1250ms    boom
1970-01-01T00:00:01.000Z  run-a   queued  ollama   llama3  -        no   -         -
";
    assert_eq!(format_table(&listed()), expected);
    assert!(format_table(&[]).ends_with("ERROR\n(no runs)\n"));
    let hostile = RunRecord::new(&info("a\x1b[2Jb\nc"));
    let table = format_table(&[hostile]);
    assert_eq!(table.lines().count(), 2, "{table}");
    assert!(table.contains("a [2Jb c"), "{table}");
}

#[test]
fn json_lines_format() {
    let out = format_json_lines(&listed());
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["run_id"], "run-b");
    assert_eq!(lines[0]["status"], "failed");
    assert_eq!(lines[0]["session_id"], "s-9");
    assert_eq!(lines[0]["finished_at_ms"], 2_750);
    assert_eq!(lines[1]["session_id"], serde_json::Value::Null);
    assert_eq!(lines[1]["background"], false);
}

#[test]
fn errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = RunStore::open_existing(dir.path(), StoreConfig::default()).unwrap_err();
    let expected = dir.path().join(STORE_DIR_NAME);
    assert!(matches!(&missing, StoreError::NotFound { path } if *path == expected));
    assert!(
        missing
            .to_string()
            .contains(&expected.display().to_string())
    );
    // A file where the data dir should be: creating the store dir fails.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let err = RunStore::open(&file, StoreConfig::default()).unwrap_err();
    assert!(matches!(err, StoreError::CreateDir { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
    // Opening the same environment twice in one process is a typed open error.
    let _store = RunStore::open(dir.path(), StoreConfig::default()).unwrap();
    let err = RunStore::open(dir.path(), StoreConfig::default()).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&expected.display().to_string()),
        "{err}"
    );
}

#[test]
fn updates_arriving_inside_the_commit_interval_share_one_transaction() {
    let (_dir, store) = temp_store(1000);
    let config = WriterConfig {
        commit_interval: std::time::Duration::from_secs(5),
        ..WriterConfig::default()
    };
    let writer = StoreWriter::spawn(store, config).unwrap();
    // A run's start and end after an idle spell: the first update is held
    // for the interval (or until a flush), so both share one transaction.
    writer.record(update("first", Transition::Started { at_ms: 1 }));
    writer.record(update("first", Transition::Completed { at_ms: 2 }));
    writer.flush().unwrap();
    assert_eq!((writer.stats().batches, writer.stats().written), (1, 2));
    // The next ones arrive well inside the interval: the thread holds them
    // until the interval is over (or a flush comes), then writes them all in
    // one transaction instead of one sync each.
    for i in 0..100 {
        assert!(writer.record(update(&format!("r{i}"), Transition::Queued)));
    }
    writer.flush().unwrap();
    let stats = writer.stats();
    assert_eq!(stats.written, 102);
    assert!(
        stats.batches <= 3,
        "100 updates inside one interval are at most a couple of commits: {stats:?}"
    );
}

#[test]
fn a_flush_whose_wake_up_the_queue_absorbed_is_still_answered() {
    // The store thread parks inside the channel's blocking `recv` too (here
    // the gate's): a flush's unpark that lands there wakes that wait, which
    // parks again, and the token is gone. The thread then takes the update
    // and, with nothing to wake it, would park for the whole interval with
    // the flush already queued behind it.
    let (_dir, store) = temp_store(1000);
    let (open_gate, gate) = mpsc::channel();
    let config = WriterConfig {
        commit_interval: std::time::Duration::from_secs(3600),
        ..WriterConfig::default()
    };
    let writer = StoreWriter::spawn_gated(store, config, Some(gate)).unwrap();
    assert!(writer.record(update("r1", Transition::Queued)));
    // Time for the thread to reach the gate's wait, where the unpark is
    // absorbed; the assertion below holds whatever the timing.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let ack = writer.handle().request_flush().unwrap();
    open_gate.send(()).unwrap();
    // Bounded so that a lost wake-up fails the test instead of hanging it.
    ack.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the flush is answered without waiting out the commit interval");
    assert_eq!(writer.stats().written, 1);
}

#[test]
fn a_backlog_past_a_full_batch_is_written_without_waiting_an_interval() {
    let (_dir, store) = temp_store(1000);
    let config = WriterConfig {
        max_batch: 10,
        // Were a backlog held for the interval, the flush below would hang.
        commit_interval: std::time::Duration::from_secs(3600),
        ..WriterConfig::default()
    };
    let writer = StoreWriter::spawn(store, config).unwrap();
    for i in 0..25 {
        assert!(writer.record(update(&format!("r{i}"), Transition::Queued)));
    }
    writer.flush().unwrap();
    let stats = writer.stats();
    assert_eq!(stats.written, 25);
    assert!(stats.batches >= 3, "at most 10 a batch: {stats:?}");
}
