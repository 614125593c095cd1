//! The lease replay set (F29): every credential lease id opened, kept in
//! LMDB until the lease expires, so a restart does not reopen the window.
//!
//! Its own environment (`leases.lmdb` in the data dir), separate from the
//! run store: one write transaction per opened lease, checked and inserted
//! together. Commits are not fsynced (`NO_SYNC`, see `open_env`): they
//! survive a Node restart, and leases lost to a host crash are stale anyway
//! (their generation is gone).

use std::fs;
use std::path::Path;

use heed::types::Bytes as RawBytes;
use heed::{Database, Env, EnvOpenOptions, WithoutTls};

/// Why the replay set failed; the lease is then refused (fail closed).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The directory could not be created.
    #[error("creating the lease replay dir: {0}")]
    CreateDir(#[from] std::io::Error),
    /// LMDB failed.
    #[error("lease replay store: {0}")]
    Lmdb(#[from] heed::Error),
}

/// Name of the replay set's LMDB environment directory in the data dir.
pub const REPLAY_DIR_NAME: &str = "leases.lmdb";

/// Map size of the replay environment (64 MiB: ~1M live lease ids).
const MAP_SIZE: usize = 64 * 1024 * 1024;

/// Expired ids are purged at most once per this many inserts.
const PURGE_EVERY: u64 = 1024;

/// Lease ids seen, with their expiry (ms since the Unix epoch).
#[derive(Debug)]
pub struct ReplayStore {
    env: Env<WithoutTls>,
    seen: Database<RawBytes, RawBytes>,
    inserts: std::sync::atomic::AtomicU64,
}

/// The crate's second `unsafe`, as in `lmdb.rs`: heed marks opening an
/// environment `unsafe` because the map is undefined behaviour if the file is
/// changed by anything but LMDB while mapped.
#[allow(unsafe_code)]
fn open_env(path: &Path) -> heed::Result<Env<WithoutTls>> {
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options.map_size(MAP_SIZE).max_dbs(1);
    // SAFETY: `NO_SYNC` is heed-`unsafe` because a *system* crash may lose
    // the last commits or leave the file unusable. Commits still reach the
    // kernel, so a Node process restart keeps every id. After a host crash
    // the Node registers with a new generation, and every lease of the old
    // one is refused as stale, so lost ids reopen no window; an unusable
    // file makes the Node refuse to start (fail closed). An fsync per lease
    // would instead block the core ~2 ms per leased request.
    unsafe {
        options.flags(heed::EnvFlags::NO_SYNC);
    }
    // SAFETY: the environment is a directory of its own inside the Node's
    // data dir, written only through LMDB by this process (heed refuses a
    // second open of the same path), with default locking, on a local
    // filesystem as the data dir is documented to be.
    unsafe { options.open(path) }
}

impl ReplayStore {
    /// Opens (creating if needed) the replay set in `data_dir`.
    ///
    /// # Errors
    /// The directory cannot be created or LMDB cannot open it.
    pub fn open(data_dir: &Path) -> Result<Self, ReplayError> {
        let path = data_dir.join(REPLAY_DIR_NAME);
        fs::create_dir_all(&path)?;
        let env = open_env(&path)?;
        let mut wtxn = env.write_txn()?;
        let seen = env.create_database(&mut wtxn, Some("seen"))?;
        wtxn.commit()?;
        Ok(Self {
            env,
            seen,
            inserts: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Records `lease_id` as opened until `expires_ms`. `Ok(false)` when it
    /// was already recorded and has not expired by `now_ms`: a replay.
    ///
    /// # Errors
    /// LMDB failed; the caller fails closed.
    pub fn first_open(
        &self,
        lease_id: &[u8],
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<bool, ReplayError> {
        let mut wtxn = self.env.write_txn()?;
        if let Some(stored) = self.seen.get(&wtxn, lease_id)? {
            let until = <[u8; 8]>::try_from(stored).map_or(u64::MAX, u64::from_be_bytes);
            if until > now_ms {
                return Ok(false);
            }
        }
        self.seen
            .put(&mut wtxn, lease_id, &expires_ms.to_be_bytes())?;
        let n = self
            .inserts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n.is_multiple_of(PURGE_EVERY) {
            self.purge(&mut wtxn, now_ms)?;
        }
        wtxn.commit()?;
        Ok(true)
    }

    /// Ids recorded now, expired or not (tests, operators).
    ///
    /// # Errors
    /// LMDB failed.
    pub fn len(&self) -> Result<u64, ReplayError> {
        let rtxn = self.env.read_txn()?;
        Ok(self.seen.len(&rtxn)?)
    }

    /// Whether nothing is recorded.
    ///
    /// # Errors
    /// LMDB failed.
    pub fn is_empty(&self) -> Result<bool, ReplayError> {
        Ok(self.len()? == 0)
    }

    fn purge(&self, wtxn: &mut heed::RwTxn<'_>, now_ms: u64) -> heed::Result<()> {
        let mut iter = self.seen.iter_mut(wtxn)?;
        while let Some(entry) = iter.next() {
            let (_, until) = entry?;
            let until = <[u8; 8]>::try_from(until).map_or(u64::MAX, u64::from_be_bytes);
            if until <= now_ms {
                // SAFETY: no reference into the database is held across the
                // deletion: `until` was copied into a u64 above.
                #[allow(unsafe_code)]
                unsafe {
                    iter.del_current()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_id_opens_once_until_it_expires_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = ReplayStore::open(dir.path()).unwrap();
            assert!(store.first_open(b"id-1", 2_000, 1_000).unwrap());
            assert!(!store.first_open(b"id-1", 2_000, 1_500).unwrap());
            assert!(store.first_open(b"id-2", 2_000, 1_500).unwrap());
        }
        // A restart does not reopen the window.
        let store = ReplayStore::open(dir.path()).unwrap();
        assert!(!store.first_open(b"id-1", 2_000, 1_900).unwrap());
        // After expiry the id is free again (the lease itself is then
        // refused as expired before the replay check).
        assert!(store.first_open(b"id-1", 5_000, 2_000).unwrap());
        // That insert was the reopened store's first: it purged the expired
        // `id-2`.
        assert_eq!(store.len().unwrap(), 1);
    }

    #[test]
    fn expired_ids_are_purged() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReplayStore::open(dir.path()).unwrap();
        // The first insert purges (n = 0); expired ones go on the next purge.
        assert!(store.first_open(b"old", 10, 1).unwrap());
        for i in 0..PURGE_EVERY {
            store
                .first_open(format!("n{i}").as_bytes(), 1_000_000, 100)
                .unwrap();
        }
        assert!(!store.is_empty().unwrap());
        let len = store.len().unwrap();
        assert_eq!(len, PURGE_EVERY, "`old` was purged");
    }
}
