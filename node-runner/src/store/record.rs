//! What the run store keeps for one run, and its on-disk encoding.
//!
//! A [`RunRecord`] is built from a [`RunInfo`] (the facts known when the run
//! is admitted) and moved forward by [`Transition`]s (started, completed,
//! failed, …). [`RunRecord::apply`] is a pure function: the store thread
//! merges updates with it, and tests check it without a store.
//!
//! # Encoding (format 1)
//!
//! Every value starts with a format byte so that a later version can read old
//! records (and refuse, with a typed error, formats it does not know):
//!
//! ```text
//! u8  format = 1
//! u8  status (0 queued, 1 running, 2 completed, 3 failed, 4 cancelled, 5 rejected)
//! u8  flags  (bit 0 background, 1 session_id, 2 started_at, 3 finished_at, 4 error)
//! u64 created_at_ms                      (little endian, as are all integers)
//! u64 started_at_ms                      (if flag 2)
//! u64 finished_at_ms                     (if flag 3)
//! str run_id, str adapter, str target    (str = u16 byte length + UTF-8)
//! str session_id                         (if flag 1)
//! str error                              (if flag 4)
//! ```
//!
//! Nothing may follow the last field. Field lengths are bounded
//! ([`MAX_ID_LEN`], [`MAX_ERROR_LEN`]), so a record is at most about 1.6 KiB.

use std::fmt;

/// The current on-disk format byte.
pub const FORMAT_V1: u8 = 1;

/// Longest run id, adapter, target or session id, in bytes. A run id is also
/// an LMDB key, and LMDB keys are at most 511 bytes.
pub const MAX_ID_LEN: usize = 256;

/// Longest stored error text, in bytes. Longer text is cut at a character
/// boundary by [`bounded_text`].
pub const MAX_ERROR_LEN: usize = 512;

const FLAG_BACKGROUND: u8 = 1;
const FLAG_SESSION: u8 = 1 << 1;
const FLAG_STARTED: u8 = 1 << 2;
const FLAG_FINISHED: u8 = 1 << 3;
const FLAG_ERROR: u8 = 1 << 4;
const KNOWN_FLAGS: u8 = FLAG_BACKGROUND | FLAG_SESSION | FLAG_STARTED | FLAG_FINISHED | FLAG_ERROR;

/// Where a run is in its life (F9–F12). The discriminants are the on-disk
/// codes and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunStatus {
    /// Admitted, not yet started by its adapter.
    Queued = 0,
    /// The adapter is executing it.
    Running = 1,
    /// Ended with a `complete` terminal.
    Completed = 2,
    /// Ended with an `error` terminal (including a synthesized one, F11).
    Failed = 3,
    /// Cancelled (F12).
    Cancelled = 4,
    /// Refused at admission (over capacity, unknown adapter…), never started.
    Rejected = 5,
}

impl RunStatus {
    /// Every status, in code order.
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Rejected,
    ];

    /// Whether the run has ended (exactly one terminal per run, F10).
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }

    /// The lower-case name used in listings and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Rejected => "rejected",
        }
    }

    fn from_code(code: u8) -> Option<RunStatus> {
        RunStatus::ALL.get(usize::from(code)).copied()
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The facts about a run known when it is admitted. Shared (behind an `Arc`)
/// by every update for that run, so an update is cheap to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The run id (at most [`MAX_ID_LEN`] bytes, else the record is refused).
    pub run_id: String,
    /// The adapter instance name.
    pub adapter: String,
    /// The target (model) name.
    pub target: String,
    /// The session id, if the run belongs to one.
    pub session_id: Option<String>,
    /// Whether the run was submitted as a background run.
    pub background: bool,
    /// When the Node received the run, in ms since the Unix epoch.
    pub created_at_ms: u64,
}

/// One step in a run's life, as the run manager reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Admitted and waiting.
    Queued,
    /// The adapter started executing it.
    Started {
        /// When, in ms since the Unix epoch.
        at_ms: u64,
    },
    /// Ended with `complete`.
    Completed {
        /// When, in ms since the Unix epoch.
        at_ms: u64,
    },
    /// Ended with `error`.
    Failed {
        /// When, in ms since the Unix epoch.
        at_ms: u64,
        /// Short, safe text (bounded when applied).
        error: String,
    },
    /// Cancelled.
    Cancelled {
        /// When, in ms since the Unix epoch.
        at_ms: u64,
    },
    /// Refused at admission.
    Rejected {
        /// When, in ms since the Unix epoch.
        at_ms: u64,
        /// Short, safe text (bounded when applied).
        error: String,
    },
}

/// One run as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// The run id (the store's lookup key).
    pub run_id: String,
    /// The adapter instance name.
    pub adapter: String,
    /// The target (model) name.
    pub target: String,
    /// The session id, if any.
    pub session_id: Option<String>,
    /// Whether it was a background run.
    pub background: bool,
    /// Where the run is.
    pub status: RunStatus,
    /// When the Node received it (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// When its adapter started it.
    pub started_at_ms: Option<u64>,
    /// When it reached its terminal.
    pub finished_at_ms: Option<u64>,
    /// Why it failed or was rejected: short text, at most [`MAX_ERROR_LEN`] bytes.
    pub error: Option<String>,
}

/// Why a stored value could not be read or a record could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// The value is empty.
    Empty,
    /// The format byte is one this version does not know.
    UnknownFormat(u8),
    /// The value ends before its last field.
    Truncated,
    /// Bytes follow the last field.
    TrailingBytes(usize),
    /// The status code is not a [`RunStatus`].
    BadStatus(u8),
    /// Flag bits this format does not define are set.
    BadFlags(u8),
    /// A text field is not UTF-8.
    BadUtf8,
    /// A field is longer than its bound (field name, length in bytes).
    TooLong(&'static str, usize),
    /// The run id is empty (the store's index cannot key a record by it).
    EmptyRunId,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Empty => f.write_str("empty record"),
            RecordError::UnknownFormat(v) => write!(f, "unknown record format {v}"),
            RecordError::Truncated => f.write_str("truncated record"),
            RecordError::TrailingBytes(n) => write!(f, "{n} bytes after the record"),
            RecordError::BadStatus(s) => write!(f, "unknown status code {s}"),
            RecordError::BadFlags(b) => write!(f, "unknown flag bits {b:#04x}"),
            RecordError::BadUtf8 => f.write_str("text field is not UTF-8"),
            RecordError::TooLong(field, n) => write!(f, "{field} is {n} bytes, over its bound"),
            RecordError::EmptyRunId => f.write_str("the run id is empty"),
        }
    }
}

impl std::error::Error for RecordError {}

/// `text` made short and safe to print: control characters become spaces and
/// it is cut (at a character boundary) to at most `max` bytes.
pub fn bounded_text(text: &str, max: usize) -> String {
    // The usual id: short, printable ASCII, kept as it is. (Char by char
    // it was ~600 instructions a run on the store's thread.)
    if text.len() <= max && text.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

impl RunRecord {
    /// A new `Queued` record for `info`. Adapter, target and session id are
    /// bounded with [`bounded_text`]; the run id is kept as is (an over-long
    /// one is refused by [`RunRecord::validate`], never silently merged).
    pub fn new(info: &RunInfo) -> RunRecord {
        RunRecord {
            run_id: info.run_id.clone(),
            adapter: bounded_text(&info.adapter, MAX_ID_LEN),
            target: bounded_text(&info.target, MAX_ID_LEN),
            session_id: info
                .session_id
                .as_deref()
                .map(|s| bounded_text(s, MAX_ID_LEN)),
            background: info.background,
            status: RunStatus::Queued,
            created_at_ms: info.created_at_ms,
            started_at_ms: None,
            finished_at_ms: None,
            error: None,
        }
    }

    /// Moves the record forward. The first terminal wins: once the status is
    /// terminal, later transitions are ignored, so a record never leaves its
    /// terminal. Returns whether anything changed.
    pub fn apply(&mut self, transition: &Transition) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        let (status, at_ms, error) = match transition {
            Transition::Queued => return false,
            Transition::Started { at_ms } => {
                self.status = RunStatus::Running;
                self.started_at_ms = Some(*at_ms);
                return true;
            }
            Transition::Completed { at_ms } => (RunStatus::Completed, *at_ms, None),
            Transition::Failed { at_ms, error } => (RunStatus::Failed, *at_ms, Some(error)),
            Transition::Cancelled { at_ms } => (RunStatus::Cancelled, *at_ms, None),
            Transition::Rejected { at_ms, error } => (RunStatus::Rejected, *at_ms, Some(error)),
        };
        self.status = status;
        self.finished_at_ms = Some(at_ms);
        self.error = error.map(|e| bounded_text(e, MAX_ERROR_LEN));
        true
    }

    /// Checks every field against its bound, and that the run id, the
    /// store's key, is not empty.
    pub fn validate(&self) -> Result<(), RecordError> {
        check_run_id(&self.run_id)?;
        let ids = [
            ("adapter", Some(&self.adapter)),
            ("target", Some(&self.target)),
            ("session_id", self.session_id.as_ref()),
        ];
        for (name, value) in ids {
            if let Some(v) = value.filter(|v| v.len() > MAX_ID_LEN) {
                return Err(RecordError::TooLong(name, v.len()));
            }
        }
        match &self.error {
            Some(e) if e.len() > MAX_ERROR_LEN => Err(RecordError::TooLong("error", e.len())),
            _ => Ok(()),
        }
    }

    /// Encodes the record in the current format ([`FORMAT_V1`]).
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        self.validate()?;
        let mut flags = 0;
        let mut set = |on: bool, bit: u8| {
            if on {
                flags |= bit;
            }
        };
        set(self.background, FLAG_BACKGROUND);
        set(self.session_id.is_some(), FLAG_SESSION);
        set(self.started_at_ms.is_some(), FLAG_STARTED);
        set(self.finished_at_ms.is_some(), FLAG_FINISHED);
        set(self.error.is_some(), FLAG_ERROR);
        let mut out = Vec::with_capacity(64 + self.run_id.len() + self.adapter.len());
        out.extend_from_slice(&[FORMAT_V1, self.status as u8, flags]);
        out.extend_from_slice(&self.created_at_ms.to_le_bytes());
        for t in [self.started_at_ms, self.finished_at_ms]
            .into_iter()
            .flatten()
        {
            out.extend_from_slice(&t.to_le_bytes());
        }
        let texts = [Some(&self.run_id), Some(&self.adapter), Some(&self.target)];
        let optional = [self.session_id.as_ref(), self.error.as_ref()];
        for text in texts.into_iter().chain(optional).flatten() {
            // validate() bounds every field far below u16::MAX.
            let len =
                u16::try_from(text.len()).map_err(|_| RecordError::TooLong("text", text.len()))?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(text.as_bytes());
        }
        Ok(out)
    }

    /// Decodes a value written by [`RunRecord::encode`] (any known format).
    pub fn decode(bytes: &[u8]) -> Result<RunRecord, RecordError> {
        let (head, mut r) = Head::read(bytes)?;
        let Head {
            status,
            flags,
            created_at_ms,
            started_at_ms,
            finished_at_ms,
        } = head;
        let has = |bit: u8| flags & bit != 0;
        let run_id = r.text()?;
        let adapter = r.text()?;
        let target = r.text()?;
        let session_id = if has(FLAG_SESSION) {
            Some(r.text()?)
        } else {
            None
        };
        let error = if has(FLAG_ERROR) {
            Some(r.text()?)
        } else {
            None
        };
        if !r.0.is_empty() {
            return Err(RecordError::TrailingBytes(r.0.len()));
        }
        let record = RunRecord {
            run_id,
            adapter,
            target,
            session_id,
            background: has(FLAG_BACKGROUND),
            status,
            created_at_ms,
            started_at_ms,
            finished_at_ms,
            error,
        };
        record.validate()?;
        Ok(record)
    }

    /// The run id of a value written by [`RunRecord::encode`], read in place
    /// (no allocation, the other fields not read): what pruning needs of
    /// each record it drops.
    pub fn decode_run_id(bytes: &[u8]) -> Result<&str, RecordError> {
        let (_, mut r) = Head::read(bytes)?;
        let run_id = r.str()?;
        check_run_id(run_id)?;
        Ok(run_id)
    }
}

/// A run id a record may have: not empty (LMDB cannot key by it), at most
/// [`MAX_ID_LEN`] bytes.
fn check_run_id(run_id: &str) -> Result<(), RecordError> {
    match run_id.len() {
        0 => Err(RecordError::EmptyRunId),
        n if n > MAX_ID_LEN => Err(RecordError::TooLong("run_id", n)),
        _ => Ok(()),
    }
}

/// An encoded record's fixed part, before its texts.
struct Head {
    status: RunStatus,
    flags: u8,
    created_at_ms: u64,
    started_at_ms: Option<u64>,
    finished_at_ms: Option<u64>,
}

impl Head {
    /// The head of `bytes`, and a reader at the first text.
    fn read(bytes: &[u8]) -> Result<(Head, Reader<'_>), RecordError> {
        let (&format, rest) = bytes.split_first().ok_or(RecordError::Empty)?;
        if format != FORMAT_V1 {
            return Err(RecordError::UnknownFormat(format));
        }
        let mut r = Reader(rest);
        let code = r.u8()?;
        let status = RunStatus::from_code(code).ok_or(RecordError::BadStatus(code))?;
        let flags = r.u8()?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(RecordError::BadFlags(flags & !KNOWN_FLAGS));
        }
        let created_at_ms = r.u64()?;
        let mut time = |bit: u8| {
            if flags & bit != 0 {
                r.u64().map(Some)
            } else {
                Ok(None)
            }
        };
        let started_at_ms = time(FLAG_STARTED)?;
        let finished_at_ms = time(FLAG_FINISHED)?;
        let head = Head {
            status,
            flags,
            created_at_ms,
            started_at_ms,
            finished_at_ms,
        };
        Ok((head, r))
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if self.0.len() < n {
            return Err(RecordError::Truncated);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, RecordError> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn text(&mut self) -> Result<String, RecordError> {
        self.str().map(str::to_owned)
    }

    fn str(&mut self) -> Result<&'a str, RecordError> {
        let mut b = [0; 2];
        b.copy_from_slice(self.take(2)?);
        let len = usize::from(u16::from_le_bytes(b));
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| RecordError::BadUtf8)
    }
}
