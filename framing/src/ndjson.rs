//! Newline-delimited JSON (Ollama streams): a line splitter.
//!
//! # Contract
//! - A line ends at `\n`; a `\r` just before it is stripped too (`\r\n`). A
//!   lone `\r` elsewhere is content.
//! - Empty lines (nothing, or only `\r`, before the `\n`) are skipped.
//! - Lines are not parsed or validated as JSON: that is the caller's job.
//! - At end of stream, a final line without `\n` is returned (a trailing `\r`
//!   stripped) unless empty.
//!
//! # Fronts
//! Two thin fronts over one private line core, so both split identically:
//!
//! | type | input | output | holds between calls |
//! |------|-------|--------|---------------------|
//! | [`NdjsonDecoder`] | `&mut BytesMut` (tokio-util `Decoder` shape) | each line split off as `Bytes` (zero copy) | an offset into the caller's buffer |
//! | [`NdjsonObserver`] | `&[u8]` chunks, by reference | each line as `&[u8]` via a callback, borrowed from the chunk when it lies in one | a copy of the partial line spanning chunks |
//!
//! # Limits
//! [`NdjsonDecoder::with_max_line_len`] (default [`DEFAULT_MAX_LINE_LEN`])
//! bounds a line's length, `\n` / `\r\n` excluded. A line of exactly the
//! limit is accepted; one byte more is [`NdjsonError::LineTooLong`], reported
//! as soon as more than the limit is buffered without a `\n` (one extra byte
//! is allowed when it is a `\r` that may start a `\r\n`), so a partial line
//! never grows past the limit by more than the last read. Errors are sticky.

use bytes::{Buf, Bytes, BytesMut};
use memchr::memchr;

/// Default maximum line length: 4 MiB. Ollama's final `/api/generate` line
/// carries the whole `context` token array, so lines can be large.
pub const DEFAULT_MAX_LINE_LEN: usize = 4 * 1024 * 1024;

/// Errors of the NDJSON codec.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NdjsonError {
    /// A line (line ending excluded) was longer than the configured limit.
    #[error("NDJSON line longer than {limit} bytes")]
    LineTooLong {
        /// The configured maximum line length.
        limit: usize,
    },
}

/// What a front does with the input it showed to [`Lines::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A line: the held partial line + `input[..end]`, of which the first
    /// `len` bytes are content. Consume `input[..next]`.
    Line { end: usize, next: usize, len: usize },
    /// An empty line: drop the held partial line and `input[..next]`.
    Empty { next: usize },
    /// No `\n`: hold the whole input as part of the partial line.
    Partial,
}

/// The line core shared by both fronts: finds `\n`, strips `\r`, enforces
/// the limit. Stores no bytes, only how many are held.
#[derive(Debug, Clone)]
struct Lines {
    max: usize,
    /// Bytes of the partial line held by the front.
    held: usize,
    /// The held partial line ends with `\r`.
    held_cr: bool,
    failed: Option<NdjsonError>,
}

impl Lines {
    fn new(max: usize) -> Self {
        Self {
            max,
            held: 0,
            held_cr: false,
            failed: None,
        }
    }

    /// `input` is what follows the held partial line; must not be empty.
    fn step(&mut self, input: &[u8]) -> Result<Step, NdjsonError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let found = memchr(b'\n', input);
        let (total, cr) = match found {
            Some(end) => (
                self.held.saturating_add(end),
                match end.checked_sub(1) {
                    Some(last) => input[last] == b'\r',
                    None => self.held_cr,
                },
            ),
            None => (
                self.held.saturating_add(input.len()),
                input.last() == Some(&b'\r'),
            ),
        };
        let len = total - usize::from(cr);
        if len > self.max {
            let err = NdjsonError::LineTooLong { limit: self.max };
            self.failed = Some(err.clone());
            return Err(err);
        }
        let Some(end) = found else {
            self.held = total;
            self.held_cr = cr;
            return Ok(Step::Partial);
        };
        self.held = 0;
        self.held_cr = false;
        let next = end + 1;
        Ok(if len == 0 {
            Step::Empty { next }
        } else {
            Step::Line { end, next, len }
        })
    }

    /// End of stream: the content length of the held partial line, if any
    /// is left after stripping a trailing `\r`. Forgets the partial line.
    fn eof(&mut self) -> Result<Option<usize>, NdjsonError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let len = self.held - usize::from(self.held_cr);
        self.held = 0;
        self.held_cr = false;
        Ok((len > 0).then_some(len))
    }
}

/// Splits NDJSON lines off a `BytesMut`, each as a zero-copy `Bytes`.
///
/// Pass the same buffer to every call and only append to it in between.
///
/// ```
/// use bytes::BytesMut;
/// use framing::ndjson::NdjsonDecoder;
///
/// let mut dec = NdjsonDecoder::new();
/// let mut buf = BytesMut::from(&b"{\"a\":1}\r\n\n{\"done\":tr"[..]);
/// assert_eq!(&dec.decode(&mut buf).unwrap().unwrap()[..], b"{\"a\":1}");
/// assert_eq!(dec.decode(&mut buf).unwrap(), None);
/// buf.extend_from_slice(b"ue}");
/// assert_eq!(&dec.decode_eof(&mut buf).unwrap().unwrap()[..], b"{\"done\":true}");
/// ```
#[derive(Debug, Clone)]
pub struct NdjsonDecoder {
    lines: Lines,
}

impl NdjsonDecoder {
    /// A decoder with [`DEFAULT_MAX_LINE_LEN`].
    pub fn new() -> Self {
        Self::with_max_line_len(DEFAULT_MAX_LINE_LEN)
    }

    /// A decoder accepting lines of at most `max` bytes (line ending excluded).
    pub fn with_max_line_len(max: usize) -> Self {
        Self {
            lines: Lines::new(max),
        }
    }

    /// The maximum line length.
    pub fn max_line_len(&self) -> usize {
        self.lines.max
    }

    /// The next non-empty line, without its line ending, split off `buf`;
    /// `Ok(None)` means more bytes are needed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, NdjsonError> {
        debug_assert!(
            self.lines.held <= buf.len(),
            "buffer shrank under the decoder"
        );
        loop {
            let held = self.lines.held;
            let Some(input) = buf.get(held..).filter(|rest| !rest.is_empty()) else {
                return Ok(None);
            };
            match self.lines.step(input)? {
                Step::Partial => return Ok(None),
                Step::Empty { next } => buf.advance(held + next),
                Step::Line { next, len, .. } => {
                    let mut line = buf.split_to(held + next);
                    line.truncate(len);
                    return Ok(Some(line.freeze()));
                }
            }
        }
    }

    /// [`NdjsonDecoder::decode`] at end of stream: once no complete line is
    /// left, returns the unterminated final line, if not empty, and empties
    /// `buf`.
    pub fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, NdjsonError> {
        if let Some(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        let held = self.lines.held;
        let last = self.lines.eof()?.map(|len| {
            let mut line = buf.split_to(held);
            line.truncate(len);
            line.freeze()
        });
        buf.clear();
        Ok(last)
    }
}

impl Default for NdjsonDecoder {
    fn default() -> Self {
        Self::new()
    }
}

/// Splits NDJSON lines out of chunks seen by reference (the relay forwards
/// the chunks untouched). A line inside one chunk is borrowed from it; only a
/// line spanning chunks is copied (at most the limit), into a reused buffer
/// (grown without a `realloc` while it is small: [`crate::room`]).
#[derive(Debug, Clone)]
pub struct NdjsonObserver {
    lines: Lines,
    partial: Vec<u8>,
}

impl NdjsonObserver {
    /// An observer with [`DEFAULT_MAX_LINE_LEN`].
    pub fn new() -> Self {
        Self::with_max_line_len(DEFAULT_MAX_LINE_LEN)
    }

    /// An observer accepting lines of at most `max` bytes (line ending
    /// excluded).
    pub fn with_max_line_len(max: usize) -> Self {
        Self {
            lines: Lines::new(max),
            partial: Vec::new(),
        }
    }

    /// Bytes of the partial line copied aside (never more than the limit + 1).
    pub fn buffered(&self) -> usize {
        self.partial.len()
    }

    /// Feeds the next chunk, calling `on_line` for each non-empty line it
    /// completes, in order, without its line ending.
    pub fn feed<F>(&mut self, chunk: &[u8], mut on_line: F) -> Result<(), NdjsonError>
    where
        F: FnMut(&[u8]),
    {
        let mut pos = 0;
        while let Some(input) = chunk.get(pos..).filter(|rest| !rest.is_empty()) {
            match self.lines.step(input)? {
                Step::Partial => {
                    crate::room::reserve_vec(&mut self.partial, input.len());
                    self.partial.extend_from_slice(input);
                    return Ok(());
                }
                Step::Empty { next } => {
                    self.partial.clear();
                    pos += next;
                }
                Step::Line { end, next, len } => {
                    if self.partial.is_empty() {
                        on_line(&input[..len]);
                    } else {
                        crate::room::reserve_vec(&mut self.partial, end);
                        self.partial.extend_from_slice(&input[..end]);
                        on_line(&self.partial[..len]);
                        self.partial.clear();
                    }
                    pos += next;
                }
            }
        }
        Ok(())
    }

    /// End of stream: calls `on_line` with the unterminated final line, if
    /// not empty, and forgets it.
    pub fn finish<F>(&mut self, mut on_line: F) -> Result<(), NdjsonError>
    where
        F: FnMut(&[u8]),
    {
        if let Some(len) = self.lines.eof()? {
            on_line(&self.partial[..len]);
        }
        self.partial.clear();
        Ok(())
    }
}

impl Default for NdjsonObserver {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(dec: &mut NdjsonDecoder, buf: &mut BytesMut) -> Vec<Bytes> {
        let mut out = Vec::new();
        while let Some(line) = dec.decode(buf).unwrap() {
            out.push(line);
        }
        out
    }

    #[test]
    fn splits_strips_and_skips() {
        let mut dec = NdjsonDecoder::new();
        let mut buf = BytesMut::from(&b"a\n\r\n\nb\r\nc\rd\n\r"[..]);
        assert_eq!(decode_all(&mut dec, &mut buf), ["a", "b", "c\rd"]);
        assert_eq!(&buf[..], b"\r");
        assert_eq!(dec.decode_eof(&mut buf).unwrap(), None);
        assert!(buf.is_empty());
    }

    #[test]
    fn lines_are_slices_of_the_buffer() {
        let mut buf = BytesMut::from(&b"{\"x\":1}\n"[..]);
        let base = buf.as_ptr();
        let line = NdjsonDecoder::new().decode(&mut buf).unwrap().unwrap();
        assert_eq!(line.as_ptr(), base);
    }

    #[test]
    fn crlf_split_across_reads() {
        let mut dec = NdjsonDecoder::new();
        let mut buf = BytesMut::from(&b"ab\r"[..]);
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"\n");
        assert_eq!(dec.decode(&mut buf).unwrap().unwrap(), "ab");
    }

    #[test]
    fn limit_at_bound_and_one_past() {
        // Exactly the limit, with either ending, arriving in pieces.
        let mut dec = NdjsonDecoder::with_max_line_len(4);
        let mut buf = BytesMut::from(&b"abcd"[..]);
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"\r");
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"\nwxyz\n");
        assert_eq!(decode_all(&mut dec, &mut buf), ["abcd", "wxyz"]);
        // One past: reported before any newline arrives.
        let mut dec = NdjsonDecoder::with_max_line_len(4);
        let mut buf = BytesMut::from(&b"abcde"[..]);
        let err = NdjsonError::LineTooLong { limit: 4 };
        assert_eq!(dec.decode(&mut buf), Err(err.clone()));
        assert_eq!(dec.decode(&mut buf), Err(err.clone()), "sticky");
        let mut dec = NdjsonDecoder::with_max_line_len(4);
        let mut buf = BytesMut::from(&b"abcd\rx"[..]);
        assert_eq!(dec.decode(&mut buf), Err(err.clone()));
        let mut dec = NdjsonDecoder::with_max_line_len(4);
        let mut buf = BytesMut::from(&b"abcde\n"[..]);
        assert_eq!(dec.decode(&mut buf), Err(err));
    }

    #[test]
    fn eof_returns_unterminated_line() {
        let mut dec = NdjsonDecoder::new();
        let mut buf = BytesMut::from(&b"a\nlast\r"[..]);
        assert_eq!(dec.decode_eof(&mut buf).unwrap().unwrap(), "a");
        assert_eq!(dec.decode_eof(&mut buf).unwrap().unwrap(), "last");
        assert_eq!(dec.decode_eof(&mut buf).unwrap(), None);
    }

    #[test]
    fn observer_borrows_lines_within_a_chunk() {
        let chunk = b"{\"a\":1}\n{\"b\"";
        let mut obs = NdjsonObserver::new();
        let mut seen = Vec::new();
        obs.feed(chunk, |line| seen.push(line.as_ptr_range()))
            .unwrap();
        assert_eq!(seen, [chunk[..7].as_ptr_range()]);
        assert_eq!(obs.buffered(), 4);
        let mut lines = Vec::new();
        obs.feed(b":2}\r", |line| lines.push(line.to_vec()))
            .unwrap();
        obs.feed(b"\n", |line| lines.push(line.to_vec())).unwrap();
        obs.feed(b"tail", |line| lines.push(line.to_vec())).unwrap();
        obs.finish(|line| lines.push(line.to_vec())).unwrap();
        assert_eq!(lines, [&b"{\"b\":2}"[..], b"tail"]);
        assert_eq!(obs.buffered(), 0);
    }

    #[test]
    fn observer_limit_is_sticky_and_bounded() {
        let mut obs = NdjsonObserver::with_max_line_len(3);
        obs.feed(b"ab", |_| {}).unwrap();
        let err = obs.feed(b"cd", |_| {}).unwrap_err();
        assert_eq!(err, NdjsonError::LineTooLong { limit: 3 });
        assert_eq!(obs.feed(b"\n", |_| {}), Err(err.clone()));
        assert_eq!(obs.finish(|_| {}), Err(err));
        assert!(obs.buffered() <= 3);
    }
}
