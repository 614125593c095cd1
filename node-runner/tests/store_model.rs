//! The run store against a model (sled-style): random sequences of upserts,
//! batches, prunes and reopens, compared after every step with a `BTreeMap`
//! that orders runs by when they were first written.

use std::collections::BTreeMap;
use std::path::Path;

use node_runner::store::{RunRecord, RunStatus, RunStore, StoreConfig};
use proptest::prelude::*;

/// Run ids are drawn from a small pool so that updates hit existing runs.
const ID_POOL: u8 = 12;

#[derive(Debug, Clone)]
enum Op {
    Upsert(Vec<RunRecord>),
    Prune(u64),
    Reopen,
}

fn record(id: u8, status: RunStatus, created: u64, error: Option<String>) -> RunRecord {
    RunRecord {
        run_id: format!("run-{id}"),
        adapter: "ollama".into(),
        target: format!("model-{}", created % 3),
        session_id: id.is_multiple_of(3).then(|| format!("s-{id}")),
        background: id.is_multiple_of(2),
        status,
        created_at_ms: created,
        started_at_ms: status.ne(&RunStatus::Queued).then_some(created + 1),
        finished_at_ms: status.is_terminal().then_some(created + 2),
        error,
    }
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let one = (
        0..ID_POOL,
        prop::sample::select(RunStatus::ALL.to_vec()),
        0u64..1_000_000,
        prop::option::of("[a-z ]{0,12}"),
    )
        .prop_map(|(id, status, created, error)| record(id, status, created, error));
    prop_oneof![
        6 => prop::collection::vec(one, 1..6).prop_map(Op::Upsert),
        1 => (0u64..6).prop_map(Op::Prune),
        1 => Just(Op::Reopen),
    ]
}

/// Runs in first-write order: key = the model's own ever-increasing counter.
#[derive(Debug, Default)]
struct Model {
    by_order: BTreeMap<u64, RunRecord>,
    next: u64,
}

impl Model {
    fn upsert(&mut self, r: &RunRecord) {
        let existing = self
            .by_order
            .iter()
            .find(|(_, old)| old.run_id == r.run_id)
            .map(|(k, _)| *k);
        let key = existing.unwrap_or_else(|| {
            self.next += 1;
            self.next
        });
        self.by_order.insert(key, r.clone());
    }

    fn prune(&mut self, keep: u64) {
        while self.by_order.len() as u64 > keep {
            self.by_order.pop_first();
        }
    }

    fn get(&self, run_id: &str) -> Option<&RunRecord> {
        self.by_order.values().find(|r| r.run_id == run_id)
    }
}

fn open(dir: &Path, max_records: u64) -> RunStore {
    let config = StoreConfig {
        max_records,
        ..StoreConfig::default()
    };
    RunStore::open(dir, config).unwrap()
}

fn check(store: &RunStore, model: &Model) -> Result<(), TestCaseError> {
    let newest_first: Vec<RunRecord> = model.by_order.values().rev().cloned().collect();
    prop_assert_eq!(store.count().unwrap(), newest_first.len() as u64);
    prop_assert_eq!(store.verify().unwrap(), newest_first.len() as u64);
    prop_assert_eq!(&store.recent(usize::MAX).unwrap(), &newest_first);
    for limit in [0, 1, 3] {
        let expected: Vec<_> = newest_first.iter().take(limit).cloned().collect();
        prop_assert_eq!(store.recent(limit).unwrap(), expected);
    }
    for id in 0..=ID_POOL {
        let run_id = format!("run-{id}");
        prop_assert_eq!(store.get(&run_id).unwrap(), model.get(&run_id).cloned());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn store_matches_model(
        max_records in 1u64..10,
        ops in prop::collection::vec(op_strategy(), 1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), max_records);
        let mut model = Model::default();
        for op in &ops {
            match op {
                Op::Upsert(records) => {
                    if records.len() == 1 {
                        store.upsert(&records[0]).unwrap();
                    } else {
                        store.upsert_all(records).unwrap();
                    }
                    records.iter().for_each(|r| model.upsert(r));
                    model.prune(max_records);
                }
                Op::Prune(keep) => {
                    let before = model.by_order.len() as u64;
                    model.prune(*keep);
                    let pruned = store.prune(*keep).unwrap();
                    prop_assert_eq!(pruned, before - model.by_order.len() as u64);
                }
                Op::Reopen => {
                    drop(store);
                    store = open(dir.path(), max_records);
                }
            }
            check(&store, &model)?;
        }
    }
}
