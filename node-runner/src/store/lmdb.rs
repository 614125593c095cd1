//! [`RunStore`]: the run records in an LMDB environment, via `heed`.
//!
//! # Layout
//!
//! The environment is the directory `DATA_DIR/`[`STORE_DIR_NAME`] (LMDB's
//! `data.mdb` and `lock.mdb` inside) with two named databases:
//!
//! | database | key | value |
//! | --- | --- | --- |
//! | `runs` | sequence number, u64 big endian | [`RunRecord`], encoded ([`super::record`]) |
//! | `run_ids` | run id bytes | sequence number, u64 big endian |
//!
//! A run's sequence number is given at its first write and kept after that,
//! so `runs` in key order is the order in which runs arrived: "newest first"
//! is a reverse cursor walk, cheap whatever the run ids look like. A new
//! sequence is one past the largest in use.
//!
//! # Retention
//!
//! [`StoreConfig::max_records`] bounds the store: every write transaction
//! that leaves more records than that deletes the oldest (lowest sequence)
//! ones, with their `run_ids` entries, before it commits.
//!
//! # Crash safety
//!
//! Each [`RunStore::write`] is one LMDB write transaction, committed with a
//! durable sync: after a crash the store shows every committed transaction
//! and none of an uncommitted one (a batch is all or nothing).
//!
//! # One opener per process
//!
//! heed refuses to open the same environment twice in one process
//! ([`StoreError::Open`] with heed's "already open" error); other processes
//! (such as `iop-node runs` beside a running Node) may open it at the same time.

use std::fs;
use std::path::{Path, PathBuf};

use heed::byteorder::BigEndian;
use heed::types::{Bytes, U64};
use heed::{Database, Env, EnvOpenOptions, MdbError, PutFlags, RoTxn, RwTxn, WithoutTls};

use super::StoreError;
use super::record::RunRecord;

/// Name of the LMDB environment directory inside the data dir.
pub const STORE_DIR_NAME: &str = "runs.lmdb";

/// Default retention bound: at most this many records are kept.
pub const DEFAULT_MAX_RECORDS: u64 = 100_000;

/// Default LMDB map size: 1 GiB. The map is address space, not disk: the
/// file grows only with the pages in use. 100 000 records of the largest
/// size (~1.6 KiB) plus their index fit in well under 400 MiB, so the default
/// bound can never fill the map.
pub const DEFAULT_MAP_SIZE: usize = 1 << 30;

const RUNS_DB: &str = "runs";
const RUN_IDS_DB: &str = "run_ids";

type Seq = U64<BigEndian>;

/// How a [`RunStore`] is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Retention bound: at most this many records are kept (at least 1).
    pub max_records: u64,
    /// LMDB map size in bytes (a multiple of the page size).
    pub map_size: usize,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            max_records: DEFAULT_MAX_RECORDS,
            map_size: DEFAULT_MAP_SIZE,
        }
    }
}

/// The Node's local run records (F15). `Send + Sync`; see the module docs for
/// layout, retention and crash safety.
#[derive(Debug)]
pub struct RunStore {
    env: Env<WithoutTls>,
    runs: Database<Seq, Bytes>,
    run_ids: Database<Bytes, Seq>,
    path: PathBuf,
    max_records: u64,
}

/// Opens the LMDB environment at `path`, which must be an existing directory.
///
/// This is the crate's only `unsafe`: heed marks opening an environment
/// `unsafe` because the memory map is undefined behaviour if the file is
/// changed by anything other than LMDB while mapped.
#[allow(unsafe_code)]
fn open_env(path: &Path, map_size: usize) -> heed::Result<Env<WithoutTls>> {
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options.map_size(map_size).max_dbs(2);
    // SAFETY: the environment lives in a directory of its own inside the
    // Node's data dir, written only through LMDB (no one maps or edits
    // `data.mdb` behind its back), with LMDB's default locking on (we set
    // no `NO_LOCK`/`NO_SYNC` flags), on a local filesystem as the data dir
    // is documented to be. heed itself rejects a second open of the same path
    // in this process.
    unsafe { options.open(path) }
}

impl RunStore {
    /// Opens (creating if needed) the store in `data_dir`.
    pub fn open(data_dir: &Path, config: StoreConfig) -> Result<RunStore, StoreError> {
        let path = data_dir.join(STORE_DIR_NAME);
        fs::create_dir_all(&path).map_err(|source| StoreError::CreateDir {
            path: path.clone(),
            source,
        })?;
        let env = open_env(&path, config.map_size).map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        let lmdb = |op: &'static str| {
            let path = path.clone();
            move |source| StoreError::Lmdb { path, op, source }
        };
        let mut wtxn = env.write_txn().map_err(lmdb("begin"))?;
        let runs = env
            .create_database(&mut wtxn, Some(RUNS_DB))
            .map_err(lmdb("create runs"))?;
        let run_ids = env
            .create_database(&mut wtxn, Some(RUN_IDS_DB))
            .map_err(lmdb("create run_ids"))?;
        wtxn.commit().map_err(lmdb("commit"))?;
        Ok(RunStore {
            env,
            runs,
            run_ids,
            path,
            max_records: config.max_records.max(1),
        })
    }

    /// Opens the store in `data_dir` only if one exists there (for readers
    /// such as `iop-node runs`, which must not create one in a mistyped dir).
    pub fn open_existing(data_dir: &Path, config: StoreConfig) -> Result<RunStore, StoreError> {
        let path = data_dir.join(STORE_DIR_NAME);
        if !path.join("data.mdb").is_file() {
            return Err(StoreError::NotFound { path });
        }
        RunStore::open(data_dir, config)
    }

    /// The LMDB environment directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The retention bound in force.
    pub fn max_records(&self) -> u64 {
        self.max_records
    }

    fn err(&self, op: &'static str) -> impl FnOnce(heed::Error) -> StoreError + '_ {
        move |source| StoreError::Lmdb {
            path: self.path.clone(),
            op,
            source,
        }
    }

    fn read_txn(&self) -> Result<RoTxn<'_, WithoutTls>, StoreError> {
        self.env.read_txn().map_err(self.err("begin read"))
    }

    /// Runs `f` in one write transaction, then applies retention and commits.
    /// If `f` (or anything after it) fails, nothing of the batch is written.
    pub fn write<R>(
        &self,
        f: impl FnOnce(&mut Batch<'_>) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let txn = self.env.write_txn().map_err(self.err("begin write"))?;
        let mut batch = Batch {
            store: self,
            txn,
            next_seq: None,
        };
        let out = f(&mut batch)?;
        batch.prune_to(self.max_records)?;
        batch.txn.commit().map_err(self.err("commit"))?;
        Ok(out)
    }

    /// Inserts or replaces one record (its own transaction).
    pub fn upsert(&self, record: &RunRecord) -> Result<(), StoreError> {
        self.write(|b| b.upsert(record))
    }

    /// Inserts or replaces all of `records` in one transaction.
    pub fn upsert_all(&self, records: &[RunRecord]) -> Result<(), StoreError> {
        self.write(|b| records.iter().try_for_each(|r| b.upsert(r)))
    }

    /// Deletes the oldest records until at most `keep` remain; returns how
    /// many were deleted. (Writes prune to the retention bound by themselves.)
    pub fn prune(&self, keep: u64) -> Result<u64, StoreError> {
        self.write(|b| b.prune_to(keep))
    }

    /// The record for `run_id`, if kept.
    pub fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let rtxn = self.read_txn()?;
        get_in(self, &rtxn, run_id)
    }

    /// Up to `limit` records, newest first.
    pub fn recent(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let rtxn = self.read_txn()?;
        let iter = self.runs.rev_iter(&rtxn).map_err(self.err("iterate"))?;
        let mut out = Vec::with_capacity(limit.min(1024));
        for entry in iter.take(limit) {
            let (seq, value) = entry.map_err(self.err("iterate"))?;
            out.push(self.decode(seq, value)?);
        }
        Ok(out)
    }

    /// How many records are kept.
    pub fn count(&self) -> Result<u64, StoreError> {
        let rtxn = self.read_txn()?;
        self.runs.len(&rtxn).map_err(self.err("count"))
    }

    /// Checks the whole store: every record decodes, every record's run id
    /// points back at it, and the index has no other entries. Returns the
    /// record count.
    pub fn verify(&self) -> Result<u64, StoreError> {
        let rtxn = self.read_txn()?;
        let mut n = 0;
        for entry in self.runs.iter(&rtxn).map_err(self.err("iterate"))? {
            let (seq, value) = entry.map_err(self.err("iterate"))?;
            let record = self.decode(seq, value)?;
            let indexed = self
                .run_ids
                .get(&rtxn, record.run_id.as_bytes())
                .map_err(self.err("get"))?;
            if indexed != Some(seq) {
                return Err(self.corrupt(seq, format!("run_ids maps it to {indexed:?}")));
            }
            n += 1;
        }
        let indexed = self.run_ids.len(&rtxn).map_err(self.err("count"))?;
        if indexed != n {
            return Err(self.corrupt(0, format!("{indexed} index entries for {n} records")));
        }
        Ok(n)
    }

    fn decode(&self, seq: u64, value: &[u8]) -> Result<RunRecord, StoreError> {
        RunRecord::decode(value).map_err(|e| self.corrupt(seq, e.to_string()))
    }

    fn corrupt(&self, seq: u64, reason: String) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            seq,
            reason,
        }
    }
}

fn get_in(
    store: &RunStore,
    txn: &RoTxn<'_, WithoutTls>,
    id: &str,
) -> Result<Option<RunRecord>, StoreError> {
    let Some(seq) = store
        .run_ids
        .get(txn, id.as_bytes())
        .map_err(store.err("get"))?
    else {
        return Ok(None);
    };
    match store.runs.get(txn, &seq).map_err(store.err("get"))? {
        Some(value) => store.decode(seq, value).map(Some),
        None => Err(store.corrupt(seq, format!("run_ids has {id:?} but runs has no record"))),
    }
}

/// A run's place in the order, as [`Batch::claim`] gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A new run's sequence: its record is appended there.
    New(u64),
    /// A stored run's sequence: its record is replaced there.
    Stored(u64),
}

/// One open write transaction on a [`RunStore`] (see [`RunStore::write`]).
/// Reads see the batch's own earlier writes.
pub struct Batch<'s> {
    store: &'s RunStore,
    txn: RwTxn<'s>,
    /// [`Batch::next_seq`]'s count, once a new record needed it.
    next_seq: Option<u64>,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("path", &self.store.path)
            .finish()
    }
}

impl Batch<'_> {
    /// The record for `run_id`, as of this batch.
    pub fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        get_in(self.store, &self.txn, run_id)
    }

    /// Inserts `record`, or replaces the record with its run id (keeping that
    /// record's place in the order).
    ///
    /// A new run id is claimed in `run_ids` with `NO_OVERWRITE` and its
    /// record appended to `runs` (sequences only grow): two B-tree writes and
    /// no lookup, the common case of a short run whose steps all arrive in
    /// one batch. Only a run id already stored costs a lookup of its place.
    pub fn upsert(&mut self, record: &RunRecord) -> Result<(), StoreError> {
        let value = self.encode(record)?;
        let place = match self.claim_seq(&record.run_id)? {
            Some(new) => Place::New(new),
            None => Place::Stored(self.stored_seq(&record.run_id)?),
        };
        self.put(place, &value)
    }

    /// Claims `run_id`'s place in the order, before its record is known: a
    /// new run id is indexed at the next sequence (one B-tree write, no
    /// lookup; no record with it); a stored one is looked up, with its
    /// record. Whoever claims a new place must [`write`](Self::write) a
    /// record there, or the index would name a record that does not exist:
    /// `run_id` must be one a record may have ([`RunRecord::validate`]).
    pub fn claim(&mut self, run_id: &str) -> Result<(Place, Option<RunRecord>), StoreError> {
        match self.claim_seq(run_id)? {
            Some(new) => Ok((Place::New(new), None)),
            None => {
                let s = self.store;
                let seq = self.stored_seq(run_id)?;
                let value = s
                    .runs
                    .get(&self.txn, &seq)
                    .map_err(s.err("get"))?
                    .ok_or_else(|| {
                        s.corrupt(
                            seq,
                            format!("run_ids has {run_id:?} but runs has no record"),
                        )
                    })?;
                Ok((Place::Stored(seq), Some(s.decode(seq, value)?)))
            }
        }
    }

    /// Writes `record` at the place [`claim`](Self::claim) gave for its run id.
    pub fn write(&mut self, place: Place, record: &RunRecord) -> Result<(), StoreError> {
        let value = self.encode(record)?;
        self.put(place, &value)
    }

    fn encode(&self, record: &RunRecord) -> Result<Vec<u8>, StoreError> {
        record.encode().map_err(|e| StoreError::InvalidRecord {
            run_id: record.run_id.chars().take(64).collect(),
            reason: e,
        })
    }

    /// `Some(seq)`: `run_id` was new and is now indexed at `seq`, the next
    /// sequence; `None`: it is stored already.
    fn claim_seq(&mut self, run_id: &str) -> Result<Option<u64>, StoreError> {
        let s = self.store;
        let next = self.next_seq()?;
        match s.run_ids.put_with_flags(
            &mut self.txn,
            PutFlags::NO_OVERWRITE,
            run_id.as_bytes(),
            &next,
        ) {
            Ok(()) => {
                self.next_seq = Some(next + 1);
                Ok(Some(next))
            }
            Err(heed::Error::Mdb(MdbError::KeyExist)) => Ok(None),
            Err(source) => Err(s.err("put")(source)),
        }
    }

    /// The sequence of a stored run id.
    fn stored_seq(&self, run_id: &str) -> Result<u64, StoreError> {
        let s = self.store;
        s.run_ids
            .get(&self.txn, run_id.as_bytes())
            .map_err(s.err("get"))?
            .ok_or_else(|| s.corrupt(0, format!("run_ids lost {run_id:?}")))
    }

    /// Writes an encoded record at `place`: a new one appended (sequences
    /// only grow, so no search), a stored one replaced where it is.
    fn put(&mut self, place: Place, value: &[u8]) -> Result<(), StoreError> {
        let s = self.store;
        match place {
            Place::New(seq) => s
                .runs
                .put_with_flags(&mut self.txn, PutFlags::APPEND, &seq, value),
            Place::Stored(seq) => s.runs.put(&mut self.txn, &seq, value),
        }
        .map_err(s.err("put"))
    }

    /// The sequence a new record takes now: one past the largest in use,
    /// read once a batch and then counted.
    fn next_seq(&mut self) -> Result<u64, StoreError> {
        if let Some(next) = self.next_seq {
            return Ok(next);
        }
        let s = self.store;
        let last = s.runs.last(&self.txn).map_err(s.err("last"))?;
        let next = last.map_or(0, |(seq, _)| seq + 1);
        self.next_seq = Some(next);
        Ok(next)
    }

    /// Deletes the oldest records until at most `keep` remain.
    ///
    /// One walk from the front collects the run ids to unindex (read in
    /// place, [`RunRecord::decode_run_id`], into one buffer), then one
    /// range delete drops their records: a full store (every write of a
    /// long-running Node prunes) pays no search of `runs` and no allocation
    /// a record.
    pub fn prune_to(&mut self, keep: u64) -> Result<u64, StoreError> {
        let s = self.store;
        let count = s.runs.len(&self.txn).map_err(s.err("count"))?;
        let excess = usize::try_from(count.saturating_sub(keep)).unwrap_or(usize::MAX);
        if excess == 0 {
            return Ok(0);
        }
        // The run ids back to back, and where each ends.
        let mut ids = Vec::new();
        let mut ends = Vec::with_capacity(excess.min(1024));
        let mut last = None;
        let iter = s.runs.iter(&self.txn).map_err(s.err("iterate"))?;
        for entry in iter.take(excess) {
            let (seq, value) = entry.map_err(s.err("iterate"))?;
            let run_id =
                RunRecord::decode_run_id(value).map_err(|e| s.corrupt(seq, e.to_string()))?;
            ids.extend_from_slice(run_id.as_bytes());
            ends.push(ids.len());
            last = Some(seq);
        }
        let Some(last) = last else { return Ok(0) };
        s.runs
            .delete_range(&mut self.txn, &(..=last))
            .map_err(s.err("delete"))?;
        let mut start = 0;
        for &end in &ends {
            s.run_ids
                .delete(&mut self.txn, &ids[start..end])
                .map_err(s.err("delete"))?;
            start = end;
        }
        Ok(ends.len() as u64)
    }
}
