//! The lease authority's state on disk (F29): what an Edge restart must not
//! forget.
//!
//! In `leases.state_dir` (mode 0700 when created):
//! - `lease-signing.key`: the Ed25519 signing key, 32 raw bytes, mode 0600,
//!   created once (unless `leases.signing_key_path` names another file);
//! - `lease-state.json`: the pinned node keys, the revocations (with the
//!   time each was made) and the disabled providers, mode 0600, replaced
//!   atomically (written to a temporary file, synced, renamed) on every
//!   change.
//!
//! Neither file holds a provider credential.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use proto::v1::{LeaseRevocation, LeaseRevocationKind};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// File name of the signing key in the state dir.
pub const SIGNING_KEY_FILE: &str = "lease-signing.key";
/// File name of the pins, revocations and disabled providers.
pub const STATE_FILE: &str = "lease-state.json";

/// What is kept across restarts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Persisted {
    /// Pinned node lease keys by node id.
    pub pinned: HashMap<String, [u8; 32]>,
    /// Revocations with the time each was made (ms since the Unix epoch).
    pub revocations: Vec<(u64, LeaseRevocation)>,
    /// Disabled provider ids.
    pub disabled: HashSet<String>,
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    pinned: Vec<(String, String)>,
    revocations: Vec<(u64, i32, String)>,
    disabled: Vec<String>,
}

/// The state directory of one Edge.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Opens (creating it, mode 0700, if missing) the directory `dir`.
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(Self { dir })
    }

    /// The signing key kept here, created (from `fresh`) on first use.
    ///
    /// # Errors
    /// The file cannot be read or written, or is not 32 bytes.
    pub fn signing_key(&self, fresh: impl FnOnce() -> [u8; 32]) -> io::Result<[u8; 32]> {
        let path = self.dir.join(SIGNING_KEY_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => read_key(&path, &Zeroizing::new(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let key = Zeroizing::new(fresh());
                write_atomically(&path, key.as_slice())?;
                Ok(*key)
            }
            Err(e) => Err(e),
        }
    }

    /// The state kept here; empty when there is none yet.
    ///
    /// # Errors
    /// The file cannot be read or is not a state file (an Edge refuses to
    /// start rather than forget revocations).
    pub fn load(&self) -> io::Result<Persisted> {
        let path = self.dir.join(STATE_FILE);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Persisted::default()),
            Err(e) => return Err(e),
        };
        let bad = |what: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {what}", path.display()),
            )
        };
        let disk: OnDisk = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        let mut pinned = HashMap::new();
        for (node, key) in disk.pinned {
            let key = decode_hex(&key).ok_or_else(|| bad(format!("node {node:?}: bad key")))?;
            pinned.insert(node, key);
        }
        let mut revocations = Vec::new();
        for (at, kind, value) in disk.revocations {
            let kind = LeaseRevocationKind::try_from(kind)
                .map_err(|_| bad(format!("unknown revocation kind {kind}")))?;
            let mut revocation = LeaseRevocation {
                value,
                ..LeaseRevocation::default()
            };
            revocation.set_kind(kind);
            revocations.push((at, revocation));
        }
        Ok(Persisted {
            pinned,
            revocations,
            disabled: disk.disabled.into_iter().collect(),
        })
    }

    /// Replaces the kept state with `state`, atomically.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&self, state: &Persisted) -> io::Result<()> {
        let mut pinned: Vec<_> = state
            .pinned
            .iter()
            .map(|(node, key)| (node.clone(), encode_hex(key)))
            .collect();
        pinned.sort();
        let mut disabled: Vec<_> = state.disabled.iter().cloned().collect();
        disabled.sort();
        let disk = OnDisk {
            pinned,
            revocations: state
                .revocations
                .iter()
                .map(|(at, r)| (*at, r.kind, r.value.clone()))
                .collect(),
            disabled,
        };
        let text = serde_json::to_vec_pretty(&disk).map_err(io::Error::other)?;
        write_atomically(&self.dir.join(STATE_FILE), &text)
    }
}

fn read_key(path: &Path, bytes: &[u8]) -> io::Result<[u8; 32]> {
    <[u8; 32]>::try_from(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: a lease signing key is 32 raw bytes", path.display()),
        )
    })
}

/// Writes `bytes` to `path` (mode 0600) through a synced temporary file
/// renamed over it, then syncs the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("iop-lease-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn state_round_trips_with_owner_only_files() {
        let path = dir("round-trip");
        let store = StateDir::open(&path).unwrap();
        assert_eq!(store.load().unwrap(), Persisted::default());
        let mut revocation = LeaseRevocation {
            value: "team-a".into(),
            ..LeaseRevocation::default()
        };
        revocation.set_kind(LeaseRevocationKind::Principal);
        let state = Persisted {
            pinned: HashMap::from([("node-a".to_owned(), [7u8; 32])]),
            revocations: vec![(42, revocation)],
            disabled: HashSet::from(["remote".to_owned()]),
        };
        store.save(&state).unwrap();
        assert_eq!(StateDir::open(&path).unwrap().load().unwrap(), state);
        let key = store.signing_key(|| [9u8; 32]).unwrap();
        assert_eq!(key, [9u8; 32]);
        assert_eq!(
            store.signing_key(|| [1u8; 32]).unwrap(),
            key,
            "created once"
        );
        for file in [STATE_FILE, SIGNING_KEY_FILE] {
            let mode = std::fs::metadata(path.join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{file}");
        }
        let _ = std::fs::remove_dir_all(&path);
    }

    #[test]
    fn a_broken_state_file_is_an_error_not_an_empty_state() {
        let path = dir("broken");
        let store = StateDir::open(&path).unwrap();
        std::fs::write(path.join(STATE_FILE), b"{not json").unwrap();
        assert_eq!(store.load().unwrap_err().kind(), io::ErrorKind::InvalidData);
        std::fs::write(path.join(SIGNING_KEY_FILE), b"short").unwrap();
        assert!(store.signing_key(|| [0; 32]).is_err());
        let _ = std::fs::remove_dir_all(&path);
    }
}
