//! The one SSE state machine that both fronts drive.
//!
//! It makes every parsing decision and stores no line bytes: a front shows it
//! the bytes it has not yet consumed ([`Machine::step`]) and learns where the
//! next line ends, whether to keep or drop a partial line, and, for a complete
//! line, what it means ([`Machine::line`]). The front then only decides where
//! bytes live (borrowed from a chunk, copied to a buffer, split off a
//! `BytesMut`).
//!
//! Invariants kept here, for every front:
//! - a line is never longer than `max_line_len` (checked before the front
//!   stores any of it), the data never longer than `max_data_len`;
//! - after an error every call returns that error again (sticky);
//! - the event type and last event ID are at most `max_line_len` bytes each.

use memchr::{memchr, memchr2};

use super::{SseConfig, SseError};

/// The UTF-8 byte order mark, dropped once at the start of a stream.
const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// Bytes of a line's start kept to decide whether the line matters: the
/// longest field name that matters (`event`, `retry`) plus its colon.
const HEAD: usize = 6;

/// Field names the parser acts on; every other field is ignored.
const FIELDS: [&[u8]; 4] = [b"data", b"event", b"id", b"retry"];

/// What the front does with the input it showed to [`Machine::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Drop the first `n` input bytes: framing, not line content (the LF of a
    /// CRLF split across inputs, or the BOM).
    Drop(usize),
    /// A line the front must interpret with [`Machine::line`]: the kept
    /// partial line followed by `input[..end]`. Consume `input[..next]`.
    Line {
        /// End of the line's content in the input.
        end: usize,
        /// End of the line ending in the input.
        next: usize,
    },
    /// An ignored line ended: drop the kept partial line (if any) and consume
    /// `input[..next]`; nothing to interpret.
    SkipLine {
        /// End of the line ending in the input.
        next: usize,
    },
    /// No line ending: keep the whole input as part of the partial line.
    Keep,
    /// No line ending and the line is ignored: drop the kept partial line and
    /// the whole input.
    Skip,
}

/// What a complete line means for the front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing to do (the machine stored any `event`/`id`/`retry` itself).
    None,
    /// Append `line[start..]` to the event data, after a `\n` unless `first`.
    /// The data limit is already checked.
    Data {
        /// Where the value starts in the line.
        start: usize,
        /// Whether this is the event's first data line.
        first: bool,
    },
    /// Report `line[start..]` as a comment.
    Comment {
        /// Where the comment text starts in the line.
        start: usize,
    },
    /// Report the event (type and id from the machine, data from the front),
    /// then call [`Machine::dispatched`].
    Dispatch,
}

/// Where the stream is with respect to its optional leading BOM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bom {
    /// At stream start, this many BOM bytes already matched and dropped.
    Pending(u8),
    /// Past the stream start.
    Done,
}

/// The SSE parsing state shared by [`super::SseObserver`] and
/// [`super::SseDecoder`].
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    cfg: SseConfig,
    bom: Bom,
    /// The last line ended with a CR that was the last byte of its input.
    after_cr: bool,
    /// Bytes of the current partial line seen so far (kept or skipped).
    line_len: usize,
    /// The current partial line is an ignored field: its bytes are not kept.
    line_skip: bool,
    /// The first `min(line_len, HEAD)` bytes of the current partial line.
    head: [u8; HEAD],
    event: Vec<u8>,
    id: Vec<u8>,
    retry: Option<u64>,
    /// Length of the event data so far, `\n` separators included.
    data_len: usize,
    /// A `data` line was seen since the last dispatch.
    has_data: bool,
    failed: Option<SseError>,
}

impl Machine {
    pub(crate) fn new(cfg: SseConfig) -> Self {
        Self {
            cfg,
            bom: Bom::Pending(0),
            after_cr: false,
            line_len: 0,
            line_skip: false,
            head: [0; HEAD],
            event: Vec::new(),
            id: Vec::new(),
            retry: None,
            data_len: 0,
            has_data: false,
            failed: None,
        }
    }

    pub(crate) fn config(&self) -> &SseConfig {
        &self.cfg
    }

    /// Looks at input the front has not consumed yet (after any kept partial
    /// line) and says what to do with it. `input` must not be empty.
    pub(crate) fn step(&mut self, input: &[u8]) -> Result<Step, SseError> {
        debug_assert!(!input.is_empty(), "step on empty input");
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if self.after_cr {
            self.after_cr = false;
            if input.first() == Some(&b'\n') {
                return Ok(Step::Drop(1));
            }
        }
        if let Bom::Pending(seen) = self.bom {
            let want = &BOM[usize::from(seen)..];
            let n = want.len().min(input.len());
            if input[..n] == want[..n] {
                self.bom = if n == want.len() {
                    Bom::Done
                } else {
                    // n < want.len() <= 3, so this fits a u8.
                    Bom::Pending(seen + n as u8)
                };
                return Ok(Step::Drop(n));
            }
            self.bom = Bom::Done;
            if seen > 0 {
                // The bytes dropped as a BOM prefix were the start of the
                // first line after all. That line begins with 0xEF, which
                // starts no field name that matters: the whole line is an
                // ignored field, so the dropped bytes are only counted.
                self.line_len = usize::from(seen);
                self.line_skip = true;
            }
        }
        match memchr2(b'\n', b'\r', input) {
            Some(end) => {
                self.check_line(self.line_len.saturating_add(end))?;
                let next = if input[end] == b'\n' {
                    end + 1
                } else {
                    match input.get(end + 1) {
                        Some(b'\n') => end + 2,
                        Some(_) => end + 1,
                        None => {
                            self.after_cr = true;
                            end + 1
                        }
                    }
                };
                let skip = self.line_skip;
                self.line_len = 0;
                self.line_skip = false;
                Ok(if skip {
                    Step::SkipLine { next }
                } else {
                    Step::Line { end, next }
                })
            }
            None => {
                let len = self.line_len.saturating_add(input.len());
                self.check_line(len)?;
                if !self.line_skip {
                    let have = self.line_len.min(HEAD);
                    let take = (HEAD - have).min(input.len());
                    self.head[have..have + take].copy_from_slice(&input[..take]);
                    self.line_skip = self.ignored(&self.head[..have + take]);
                }
                self.line_len = len;
                Ok(if self.line_skip {
                    Step::Skip
                } else {
                    Step::Keep
                })
            }
        }
    }

    /// Interprets one complete line (line ending excluded).
    pub(crate) fn line(&mut self, line: &[u8]) -> Result<Action, SseError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if line.is_empty() {
            if self.has_data {
                return Ok(Action::Dispatch);
            }
            self.event.clear();
            return Ok(Action::None);
        }
        let (name, mut start) = match memchr(b':', line) {
            Some(colon) => (&line[..colon], colon + 1),
            None => (line, line.len()),
        };
        if line.get(start) == Some(&b' ') {
            start += 1;
        }
        let value = &line[start..];
        match name {
            b"" if self.cfg.comments => return Ok(Action::Comment { start }),
            b"data" => {
                let len = self
                    .data_len
                    .saturating_add(usize::from(self.has_data))
                    .saturating_add(value.len());
                if len > self.cfg.max_data_len {
                    return Err(self.fail(SseError::DataTooLarge {
                        limit: self.cfg.max_data_len,
                    }));
                }
                let first = !self.has_data;
                self.has_data = true;
                self.data_len = len;
                return Ok(Action::Data { start, first });
            }
            b"event" => {
                self.event.clear();
                self.event.extend_from_slice(value);
            }
            // An id with NUL is ignored, as if the line were not there.
            b"id" if memchr(0, value).is_none() => {
                self.id.clear();
                self.id.extend_from_slice(value);
            }
            b"retry" => self.retry = parse_retry(value).or(self.retry),
            _ => {}
        }
        Ok(Action::None)
    }

    /// Resets the event after the front reported it.
    pub(crate) fn dispatched(&mut self) {
        self.event.clear();
        self.has_data = false;
        self.data_len = 0;
    }

    /// The event type of the event being built; `None` when empty.
    pub(crate) fn event_type(&self) -> Option<&[u8]> {
        non_empty(&self.event)
    }

    /// The last event ID; `None` when empty.
    pub(crate) fn last_id(&self) -> Option<&[u8]> {
        non_empty(&self.id)
    }

    /// The last valid `retry` value, in milliseconds.
    pub(crate) fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// Whether a partial line or an undispatched event is pending.
    pub(crate) fn is_mid_event(&self) -> bool {
        self.line_len > 0 || self.has_data
    }

    /// End of stream: drops the partial line and the pending event (the last
    /// event ID and retry stay). Returns what [`Machine::is_mid_event`] said.
    pub(crate) fn discard(&mut self) -> bool {
        let pending = self.is_mid_event();
        self.line_len = 0;
        self.line_skip = false;
        self.after_cr = false;
        self.dispatched();
        pending
    }

    fn check_line(&mut self, len: usize) -> Result<(), SseError> {
        if len > self.cfg.max_line_len {
            return Err(self.fail(SseError::LineTooLong {
                limit: self.cfg.max_line_len,
            }));
        }
        Ok(())
    }

    fn fail(&mut self, err: SseError) -> SseError {
        self.failed = Some(err.clone());
        err
    }

    /// Whether a line starting with `head` (1..=HEAD bytes) can be dropped
    /// unread: an unobserved comment, or a field name that matters to no one.
    fn ignored(&self, head: &[u8]) -> bool {
        match memchr(b':', head) {
            Some(0) => !self.cfg.comments,
            Some(colon) => !FIELDS.contains(&&head[..colon]),
            None => !FIELDS.iter().any(|field| field.starts_with(head)),
        }
    }
}

fn non_empty(v: &[u8]) -> Option<&[u8]> {
    (!v.is_empty()).then_some(v)
}

/// `retry` values are ASCII digits only; overflowing values are ignored.
fn parse_retry(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        Machine::new(SseConfig::new().with_max_line_len(8).with_max_data_len(8))
    }

    #[test]
    fn cr_at_input_end_then_lf_is_one_line_ending() {
        let mut m = machine();
        assert_eq!(m.step(b"ab\r").unwrap(), Step::Line { end: 2, next: 3 });
        assert_eq!(m.step(b"\ncd\n").unwrap(), Step::Drop(1));
        assert_eq!(m.step(b"cd\n").unwrap(), Step::Line { end: 2, next: 3 });
    }

    #[test]
    fn cr_then_other_byte_is_a_line_ending_alone() {
        let mut m = machine();
        assert_eq!(m.step(b"a\rb\n").unwrap(), Step::Line { end: 1, next: 2 });
        assert_eq!(m.step(b"\r").unwrap(), Step::Line { end: 0, next: 1 });
        assert_eq!(m.step(b"\r").unwrap(), Step::Line { end: 0, next: 1 });
    }

    #[test]
    fn bom_split_across_inputs_is_dropped() {
        let mut m = machine();
        assert_eq!(m.step(b"\xEF").unwrap(), Step::Drop(1));
        assert_eq!(m.step(b"\xBB\xBFdata").unwrap(), Step::Drop(2));
        assert_eq!(m.step(b"data").unwrap(), Step::Keep);
    }

    #[test]
    fn partial_bom_turns_first_line_into_ignored_field() {
        let mut m = machine();
        assert_eq!(m.step(b"\xEF\xBB").unwrap(), Step::Drop(2));
        assert_eq!(m.step(b"data:\n").unwrap(), Step::SkipLine { next: 6 });
        // The dropped bytes count toward the line limit.
        let mut m = machine();
        assert_eq!(m.step(b"\xEF\xBB").unwrap(), Step::Drop(2));
        assert!(m.step(b"1234567").is_err());
    }

    #[test]
    fn bom_only_at_stream_start() {
        let mut m = machine();
        assert_eq!(m.step(b"\n").unwrap(), Step::Line { end: 0, next: 1 });
        assert_eq!(m.step(BOM).unwrap(), Step::Skip);
    }

    #[test]
    fn keep_or_skip_by_field_name_prefix() {
        for (input, want) in [
            (&b"da"[..], Step::Keep),
            (b"data", Step::Keep),
            (b"data:", Step::Keep),
            (b"dat:", Step::Skip),
            (b"data ", Step::Skip),
            (b"retry:", Step::Keep),
            (b"retryx", Step::Skip),
            (b"i", Step::Keep),
            (b"x", Step::Skip),
            (b": ping", Step::Skip),
        ] {
            let mut m = machine();
            assert_eq!(m.step(input).unwrap(), want, "{input:?}");
        }
        let mut m = Machine::new(SseConfig::new().with_comments(true));
        assert_eq!(m.step(b":").unwrap(), Step::Keep);
    }

    #[test]
    fn head_is_tracked_across_inputs() {
        let mut m = machine();
        assert_eq!(m.step(b"e").unwrap(), Step::Keep);
        assert_eq!(m.step(b"ve").unwrap(), Step::Keep);
        assert_eq!(m.step(b"nx").unwrap(), Step::Skip);
        assert_eq!(m.step(b"\n").unwrap(), Step::SkipLine { next: 1 });
        assert_eq!(m.step(b"e").unwrap(), Step::Keep);
    }

    #[test]
    fn line_limit_at_bound_and_one_past() {
        let mut m = machine();
        assert_eq!(m.step(b"data:123").unwrap(), Step::Keep);
        assert_eq!(m.step(b"\n").unwrap(), Step::Line { end: 0, next: 1 });
        let mut m = machine();
        assert_eq!(
            m.step(b"data:1234").unwrap_err(),
            SseError::LineTooLong { limit: 8 }
        );
        // Sticky.
        assert_eq!(
            m.step(b"\n").unwrap_err(),
            SseError::LineTooLong { limit: 8 }
        );
        assert_eq!(m.line(b"").unwrap_err(), SseError::LineTooLong { limit: 8 });
    }

    #[test]
    fn data_limit_counts_separators() {
        let mut m = machine();
        assert_eq!(
            m.line(b"data:123").unwrap(),
            Action::Data {
                start: 5,
                first: true
            }
        );
        assert_eq!(
            m.line(b"data:1234").unwrap(),
            Action::Data {
                start: 5,
                first: false
            }
        );
        assert_eq!(
            m.line(b"data").unwrap_err(),
            SseError::DataTooLarge { limit: 8 }
        );
    }

    #[test]
    fn retry_values() {
        assert_eq!(parse_retry(b"1000"), Some(1000));
        assert_eq!(parse_retry(b"0"), Some(0));
        assert_eq!(parse_retry(b""), None);
        assert_eq!(parse_retry(b" 1"), None);
        assert_eq!(parse_retry(b"1a"), None);
        assert_eq!(parse_retry(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_retry(b"18446744073709551616"), None);
    }

    #[test]
    fn blank_line_without_data_resets_event_type() {
        let mut m = machine();
        assert_eq!(m.line(b"event:x").unwrap(), Action::None);
        assert_eq!(m.event_type(), Some(&b"x"[..]));
        assert_eq!(m.line(b"").unwrap(), Action::None);
        assert_eq!(m.event_type(), None);
    }
}
