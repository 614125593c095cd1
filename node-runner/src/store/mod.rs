//! The Node's run store (F15): local bookkeeping of every run in LMDB.
//!
//! The Node records every run — run id, adapter, target, session id,
//! background flag, status, created/started/finished timestamps and a short
//! error — so an operator can see what it ran (`iop-node runs`). It is local
//! bookkeeping, not a global audit API: nothing here is sent to the Edge.
//!
//! - [`record`]: [`RunRecord`], [`RunStatus`], the [`Transition`]s that move
//!   a record forward, and the versioned on-disk encoding.
//! - [`lmdb`]: [`RunStore`], the records in an LMDB environment in the data
//!   dir (via `heed`), newest-first listing, retention bound, crash safety.
//! - [`writer`]: [`StoreWriter`], which keeps LMDB off the event path: a
//!   non-blocking, bounded queue to a dedicated store thread that writes
//!   everything queued in one transaction, dropping (and counting) updates
//!   rather than ever blocking a stream.
//! - [`priority`]: [`StorePriority`], the store thread's scheduling policy
//!   (`SCHED_IDLE` by default: the event path always comes first).
//! - [`metrics`]: the writer's counters as Prometheus text (kept and dropped
//!   updates, commits), listed by the admin port.
//! - [`format_table`] and [`format_json_lines`]: the `iop-node runs` output.
//!
//! # Invariants
//! - A record never leaves its first terminal status ([`RunRecord::apply`]).
//! - At most [`StoreConfig::max_records`] records are kept after any write.
//! - A write batch is all or nothing, also across a crash.
//! - LMDB is only touched on the store thread (and by readers such as the
//!   CLI), never on a monoio core.

pub mod lmdb;
pub mod metrics;
pub mod priority;
pub mod record;
pub mod replay;
pub mod writer;

#[cfg(test)]
mod tests;

use std::fmt::{self, Write as _};
use std::path::PathBuf;

pub use lmdb::{Batch, Place, RunStore, STORE_DIR_NAME, StoreConfig};
pub use priority::StorePriority;
pub use record::{RecordError, RunInfo, RunRecord, RunStatus, Transition};
pub use replay::{REPLAY_DIR_NAME, ReplayError, ReplayStore};
pub use writer::{StoreHandle, StoreUpdate, StoreWriter, WriterConfig, WriterStats};

/// Errors of the run store. Those about the environment name its path.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The store directory could not be created.
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The LMDB environment could not be opened.
    Open {
        /// The environment directory.
        path: PathBuf,
        /// heed's error.
        source: heed::Error,
    },
    /// There is no store at this path (readers do not create one).
    NotFound {
        /// The environment directory that was expected.
        path: PathBuf,
    },
    /// An LMDB operation failed.
    Lmdb {
        /// The environment directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// heed's error.
        source: heed::Error,
    },
    /// A stored value or the run-id index is inconsistent.
    Corrupt {
        /// The environment directory.
        path: PathBuf,
        /// Sequence number of the offending record (0 if none in particular).
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// A record could not be written (a field over its bound).
    InvalidRecord {
        /// The run id (at most its first 64 characters).
        run_id: String,
        /// Which bound.
        reason: RecordError,
    },
    /// The store thread has stopped.
    WriterClosed,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::CreateDir { path, source } => {
                write!(f, "creating the run store dir {}: {source}", path.display())
            }
            StoreError::Open { path, source } => {
                write!(f, "opening the run store at {}: {source}", path.display())
            }
            StoreError::NotFound { path } => {
                write!(f, "no run store at {}", path.display())
            }
            StoreError::Lmdb { path, op, source } => {
                write!(f, "run store at {}: {op}: {source}", path.display())
            }
            StoreError::Corrupt { path, seq, reason } => {
                write!(
                    f,
                    "run store at {} is corrupt (record {seq}): {reason}",
                    path.display()
                )
            }
            StoreError::InvalidRecord { run_id, reason } => {
                write!(f, "run {run_id:?} cannot be stored: {reason}")
            }
            StoreError::WriterClosed => f.write_str("the run store thread has stopped"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::CreateDir { source, .. } => Some(source),
            StoreError::Open { source, .. } | StoreError::Lmdb { source, .. } => Some(source),
            StoreError::InvalidRecord { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// Last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z); later
/// readings are shown as that rather than panicking `humantime`.
const LAST_RFC3339_MS: u64 = 253_402_300_799_999;

/// Formats ms since the Unix epoch as UTC `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_utc_ms(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.min(LAST_RFC3339_MS));
    humantime::format_rfc3339_millis(at).to_string()
}

fn duration_text(r: &RunRecord) -> String {
    match r.finished_at_ms {
        Some(end) => format!(
            "{}ms",
            end.saturating_sub(r.started_at_ms.unwrap_or(r.created_at_ms))
        ),
        None => "-".to_owned(),
    }
}

/// The `iop-node runs` table: a header and one line per record, in the order
/// given (the store lists newest first). Columns are padded to the widest
/// cell; control characters in run ids print as spaces; an empty list prints
/// a header and `(no runs)`.
pub fn format_table(records: &[RunRecord]) -> String {
    const HEADER: [&str; 9] = [
        "CREATED", "RUN_ID", "STATUS", "ADAPTER", "TARGET", "SESSION", "BG", "DURATION", "ERROR",
    ];
    let rows: Vec<[String; 9]> = records
        .iter()
        .map(|r| {
            [
                format_utc_ms(r.created_at_ms),
                // Run ids come from the Edge unsanitized: no control
                // characters reach the operator's terminal.
                record::bounded_text(&r.run_id, record::MAX_ID_LEN),
                r.status.to_string(),
                r.adapter.clone(),
                r.target.clone(),
                r.session_id.clone().unwrap_or_else(|| "-".into()),
                if r.background { "yes" } else { "no" }.into(),
                duration_text(r),
                r.error.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let _ = write!(text, "{cell:<width$}", width = widths[i]);
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut HEADER.iter().copied());
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
    if records.is_empty() {
        out.push_str("(no runs)\n");
    }
    out
}

/// The `iop-node runs --json` output: one JSON object per line (JSON Lines),
/// in the order given. Absent optional fields are `null`.
pub fn format_json_lines(records: &[RunRecord]) -> String {
    let mut out = String::new();
    for r in records {
        let value = serde_json::json!({
            "run_id": r.run_id,
            "adapter": r.adapter,
            "target": r.target,
            "session_id": r.session_id,
            "background": r.background,
            "status": r.status.as_str(),
            "created_at_ms": r.created_at_ms,
            "started_at_ms": r.started_at_ms,
            "finished_at_ms": r.finished_at_ms,
            "error": r.error,
        });
        out.push_str(&value.to_string());
        out.push('\n');
    }
    out
}
