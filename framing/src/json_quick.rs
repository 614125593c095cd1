//! A cursor over JSON, for the few documents IOP reads on every request
//! without serde: the Node's Ollama `/api/chat` lines and a tunnelled
//! answer's `usage`, the Edge's routing fields of a request body.
//!
//! serde_json sets up a visitor and a string scan for every key and value
//! (~3,000 instructions an Ollama line, ~7,500 a small chat completion's
//! body), and scans a string ~2.4 instructions a byte (78 % of the Edge's
//! instructions routing a 100 KB prompt; issue 8, `hack/instructions.sh`).
//! This cursor reads in one pass over the bytes (a long string it skips
//! 64 bytes a step, `json_quick_blocks.rs`, and an array or object by a
//! structural walk of 64-byte blocks, `json_quick_walk.rs`; a long string
//! it reads by `memchr2`), and
//! **declines** (`None`) on anything it does not take; its
//! callers then read the document through serde, so what a quick reader
//! reads is always what serde reads (each caller's property tests hold it
//! to that), and every error is still serde's.
//!
//! Declined everywhere: a control character in a string, an escape in a
//! key, nesting deeper than [`MAX_SKIP_DEPTH`], and anything that is not
//! valid JSON. Whitespace between tokens is declined too, unless the cursor
//! is [`Cursor::spaced`]. A value *read* ([`Cursor::scalar`]) is declined if
//! it is a string with a `\u` escape (serde pairs surrogates; this reader
//! does not unescape them) or a number that is not a plain non-negative
//! integer within `u64`. A value *skipped* ([`Cursor::skip_any`],
//! [`Cursor::skip_value`]) may also hold `\u` escapes (a surrogate only as
//! the first or second half of a pair), and negative or fractional
//! numbers of up to [`MAX_SKIPPED_NUMBER`] bytes without an exponent (so
//! that no number serde would find out of range is taken).

use std::borrow::Cow;

use escapes::letter_escape_len;
pub use escapes::unescape;

#[path = "json_quick_blocks.rs"]
mod blocks;
#[path = "json_quick_escapes.rs"]
mod escapes;
#[path = "json_quick_skip.rs"]
mod skip;
#[path = "json_quick_walk.rs"]
mod walk;

/// A plain JSON value. A string is its raw text between the quotes, with
/// its escapes checked; it is unescaped only when it is read
/// ([`Scalar::text`]), not when it is skipped.
#[derive(Debug, Clone, Copy)]
pub enum Scalar<'a> {
    /// A string.
    Text {
        /// Its bytes between the quotes, escapes as written.
        raw: &'a str,
        /// Whether it has escapes.
        escaped: bool,
    },
    /// `true` or `false`.
    Flag(bool),
    /// A non-negative integer within `u64`.
    Count(u64),
    /// `null`.
    Null,
}

impl<'a> Scalar<'a> {
    /// The text of a string (unescaped); `None` for any other value.
    pub fn text(self) -> Option<Cow<'a, str>> {
        match self {
            Scalar::Text {
                raw,
                escaped: false,
            } => Some(Cow::Borrowed(raw)),
            Scalar::Text { raw, escaped: true } => unescape(raw).map(Cow::Owned),
            _ => None,
        }
    }

    /// The value of a boolean; `None` for any other value.
    pub fn flag(self) -> Option<bool> {
        match self {
            Scalar::Flag(flag) => Some(flag),
            _ => None,
        }
    }

    /// Whether it is `null`.
    pub fn is_null(self) -> bool {
        matches!(self, Scalar::Null)
    }

    /// The value of a count; `None` for any other value.
    pub fn count(self) -> Option<u64> {
        match self {
            Scalar::Count(n) => Some(n),
            _ => None,
        }
    }
}

/// What [`Cursor::skip_any`] and the token walk it falls back on each give
/// from `at` (their answers and where they leave the cursor), for the fuzz
/// entry point [`crate::fuzzing::json_skip`].
pub(crate) fn skip_both<const SPACED: bool>(
    text: &str,
    at: usize,
    depth: usize,
) -> [(Option<()>, usize); 2] {
    let mut walked = Cursor::<SPACED> { text, at };
    let mut tokens = walked.clone();
    [
        (walked.skip_any(depth), walked.at),
        (tokens.skip_any_by_tokens(depth), tokens.at),
    ]
}

/// How deep [`Cursor::skip_any`] goes before it declines (serde_json's own
/// limit is 128).
pub const MAX_SKIP_DEPTH: usize = 32;

/// The longest number [`Cursor::skip_any`] takes, in bytes.
pub const MAX_SKIPPED_NUMBER: usize = 24;

/// An object's `members` (key, value) with each key once, as a JSON object
/// parsed whole reads them: a later duplicate's value wins, in the place
/// of the key's first. Linear for a few members; by a hash map (std's
/// randomly keyed SipHash: the keys are a client's) past [`FEW_MEMBERS`],
/// so a body of a million members costs a million lookups, not a million
/// squared comparisons.
pub fn last_wins<K: AsRef<str>, V>(members: Vec<(K, V)>) -> Vec<(K, V)> {
    let mut kept: Vec<(K, V)> = Vec::with_capacity(members.len());
    if members.len() <= FEW_MEMBERS {
        for (key, value) in members {
            match kept.iter_mut().find(|(k, _)| k.as_ref() == key.as_ref()) {
                Some(slot) => slot.1 = value,
                None => kept.push((key, value)),
            }
        }
        return kept;
    }
    let mut at = std::collections::HashMap::<String, usize>::with_capacity(members.len());
    for (key, value) in members {
        match at.get(key.as_ref()) {
            Some(&i) => kept[i].1 = value,
            None => {
                at.insert(key.as_ref().to_owned(), kept.len());
                kept.push((key, value));
            }
        }
    }
    kept
}

/// Members [`last_wins`] compares pairwise before it takes a hash map.
pub const FEW_MEMBERS: usize = 16;

/// The bytes that end a plain string's run: its closing quote, an escape,
/// a control character (one table load a byte, not three comparisons).
static STRING_STOP: [bool; 256] = {
    let mut stop = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        stop[byte] = true;
        byte += 1;
    }
    stop[b'"' as usize] = true;
    stop[b'\\' as usize] = true;
    stop
};

/// The length of `bytes`' leading run of plain string bytes; `None` when
/// nothing ends it (no closing quote).
///
/// Through [`first_stop`] for the first [`SHORT_RUN`] bytes (nearly every
/// value ends there; a vector scan's set-up cost more on those), then
/// [`long_run_of_plain`]. The bound costs
/// a small request's Node ~1–2 % more instructions (`hack/instructions.sh`),
/// so keys, always short in practice, take [`key_run`].
#[inline(always)]
fn run_of_plain(bytes: &[u8]) -> Option<usize> {
    run_within(bytes, SHORT_RUN)
}

/// The length of `bytes`' leading run of plain string bytes:
/// [`first_stop`] over its first `head` bytes, then [`long_run_of_plain`].
#[inline(always)]
fn run_within(bytes: &[u8], head: usize) -> Option<usize> {
    let head = &bytes[..bytes.len().min(head)];
    if let Some(at) = first_stop(head) {
        return Some(at);
    }
    if head.len() == bytes.len() {
        return None;
    }
    long_run_of_plain(bytes, head.len())
}

/// [`run_of_plain`] for a key: [`first_stop`] alone, however long the key.
#[inline(always)]
fn key_run(bytes: &[u8]) -> Option<usize> {
    first_stop(bytes)
}

/// The first of `bytes` in [`STRING_STOP`]: eight at a time
/// ([`word_stop`]) while eight are left, then through the table. A byte at
/// a time, a small chat's ~150 bytes of keys had cost the Node's usage
/// read ~700 instructions (`bench-results/profiles.md`, round 38).
#[inline(always)]
fn first_stop(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(stop) = word_stop(bytes, at) {
        if stop.is_some() {
            return stop;
        }
        at += 8;
    }
    let tail = bytes[at..]
        .iter()
        .position(|&b| STRING_STOP[usize::from(b)]);
    tail.map(|end| at + end)
}

/// Plain bytes scanned one at a time before [`long_run_of_plain`] takes
/// over.
const SHORT_RUN: usize = 48;

/// [`run_of_plain`] past its first bytes: the next quote or backslash by
/// `memchr2`, then one branch-free pass for a control byte before it. A
/// 64 KiB token text had cost ~3 instructions a byte through the table:
/// 43 % of the Node's CPU relaying a normalized stream of 64 KiB events.
/// `None` when no quote or backslash follows (the string is declined
/// either way). Out of line, so [`run_of_plain`] stays small enough to
/// inline into [`Cursor::string`].
#[inline(never)]
fn long_run_of_plain(bytes: &[u8], from: usize) -> Option<usize> {
    let end = from + memchr::memchr2(b'"', b'\\', &bytes[from..])?;
    let run = &bytes[from..end];
    if run.iter().fold(false, |control, &b| control | (b < 0x20)) {
        return run.iter().position(|&b| b < 0x20).map(|at| from + at);
    }
    Some(end)
}

/// Plain bytes a skipped string's run takes eight at a time before
/// [`long_run_of_plain`] takes over.
const WORD_RUN: usize = 64;

/// [`run_of_plain`] for a string skipped, not read: a client's prompt,
/// whose text has an escape (a newline, a quote) every few dozen bytes. The
/// table's byte at a time cost ~6 instructions a byte there; eight bytes a
/// step cost ~2 (the stop bytes of a word found by the zero-byte trick),
/// and a run past [`WORD_RUN`] goes to `memchr2`. (For the Node's short
/// read strings this was the slower way: `profiles.md`, round 22.)
#[inline]
fn skipped_run(bytes: &[u8]) -> Option<usize> {
    run_within(bytes, WORD_RUN)
}

/// Bytes of a skipped string [`short_plain_end`] looks at.
const SHORT_SKIPPED: usize = 32;

/// The index of the closing quote of a string whose body `bytes` begins,
/// when it comes within the first [`SHORT_SKIPPED`] bytes with nothing but
/// plain bytes before it (a role, a model's name, a timestamp), found
/// eight bytes a step; `None` for anything else. A block of
/// [`blocks::skip`] costs ~150 instructions however short the string.
#[inline]
fn short_plain_end(bytes: &[u8]) -> Option<usize> {
    for at in (0..SHORT_SKIPPED).step_by(8) {
        if let Some(end) = word_stop(bytes, at)? {
            return (bytes[end] == b'"').then_some(end);
        }
    }
    None
}

/// The first byte that may end a string's run among the eight at `at`
/// (`Some(None)`: none of them); `None` when fewer than eight are left.
#[inline(always)]
fn word_stop(bytes: &[u8], at: usize) -> Option<Option<usize>> {
    let word: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
    let stops = stop_bytes(u64::from_le_bytes(word));
    // The lowest flagged byte is exact: a false flag only ever follows a
    // true one (a borrow runs upwards).
    Some((stops != 0).then(|| at + stops.trailing_zeros() as usize / 8))
}

/// The high bit of each byte of `word` that may end a string's run (a
/// quote, a backslash, a control byte), exact for the lowest one.
#[inline(always)]
fn stop_bytes(word: u64) -> u64 {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    below(quote, 1) | below(backslash, 1) | below(word, 0x20)
}

/// A position in a document; every reader returns `None` for what it
/// declines.
///
/// `SPACED`: whether whitespace between tokens is taken (a constant, so a
/// compact cursor's reads carry no check for it). A clone reads on from
/// the same position (a reader that tries a shape goes back on a decline).
#[derive(Debug, Clone)]
pub struct Cursor<'a, const SPACED: bool = false> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `text` that declines whitespace between
    /// tokens (compact JSON: provider lines and bodies).
    #[inline]
    pub fn new(text: &'a str) -> Self {
        Self { text, at: 0 }
    }
}

impl<'a> Cursor<'a, true> {
    /// A cursor at the start of `text` that takes whitespace between tokens
    /// (a client's body, e.g. Python's `json.dumps` with its `", "`), and
    /// before the first.
    pub fn spaced(text: &'a str) -> Self {
        let mut cursor = Self { text, at: 0 };
        cursor.space();
        cursor
    }
}

impl<'a, const SPACED: bool> Cursor<'a, SPACED> {
    /// Whether the whole document has been read.
    #[inline]
    pub fn at_end(&self) -> bool {
        self.at == self.text.len()
    }

    /// Where the cursor is, in bytes from the start.
    #[inline]
    pub fn position(&self) -> usize {
        self.at
    }

    /// Skips whitespace, when the cursor is [`spaced`](Cursor::spaced).
    #[inline(always)]
    fn space(&mut self) {
        if SPACED {
            let bytes = self.text.as_bytes();
            while matches!(bytes.get(self.at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
                self.at += 1;
            }
        }
    }

    /// Whether only JSON whitespace is left (what serde allows after a
    /// document).
    pub fn only_whitespace_left(&self) -> bool {
        self.text.as_bytes()[self.at..]
            .iter()
            .all(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
    }

    /// The next byte, not taken.
    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Takes `byte` if it comes next.
    #[inline]
    pub fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    #[inline]
    fn eat_word(&mut self, word: &str) -> Option<()> {
        let rest = self.text.as_bytes().get(self.at..)?;
        rest.starts_with(word.as_bytes())
            .then(|| self.at += word.len())
    }

    /// `{`, then `"key":value` members joined by `,`, then `}`; `member`
    /// reads each value (the cursor at its first byte). A key with an
    /// escape is declined. The whitespace after the `}` is the caller's.
    pub fn object(
        &mut self,
        mut member: impl FnMut(&'a str, &mut Self) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        self.space();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let (key, false) = self.string(key_run)? else {
                return None;
            };
            self.space();
            self.eat(b':')?;
            self.space();
            member(key, self)?;
            if !self.next_or_end(b'}')? {
                return Some(());
            }
        }
    }

    /// After a member or an element: `,` (true: another follows) or `end`
    /// (false: the object or array is done), whitespace around taken when
    /// spaced.
    #[inline(always)]
    fn next_or_end(&mut self, end: u8) -> Option<bool> {
        self.space();
        let next = self.peek()?;
        self.at += 1;
        if next == b',' {
            self.space();
            Some(true)
        } else {
            (next == end).then_some(false)
        }
    }

    /// A string's raw body (between its quotes) and whether it has
    /// escapes, for one that is read. Declined: a `\u` escape (serde pairs
    /// surrogates; this reader does not), an unknown escape, a control
    /// character, no closing quote.
    #[inline(always)]
    fn string(&mut self, run: impl Fn(&[u8]) -> Option<usize>) -> Option<(&'a str, bool)> {
        self.string_with(run, letter_escape_len)
    }

    /// A string's raw body and whether it has escapes: `run` finds each run
    /// of plain bytes, `escape` the length of each escape after its
    /// backslash (`None` declines it).
    #[inline(always)]
    fn string_with<R, E>(&mut self, run: R, escape: E) -> Option<(&'a str, bool)>
    where
        R: Fn(&[u8]) -> Option<usize>,
        E: Fn(&[u8]) -> Option<usize>,
    {
        self.eat(b'"')?;
        let start = self.at;
        let end = start + run(&self.text.as_bytes()[start..])?;
        if self.text.as_bytes()[end] != b'"' {
            return self.escaped_string(start, end, run, escape);
        }
        self.at = end + 1;
        Some((&self.text[start..end], false))
    }

    /// The rest of a string begun at `start` whose run of plain bytes
    /// stopped at `at` on something other than its closing quote. Out of
    /// line: most strings have no escape.
    #[inline(never)]
    fn escaped_string<R, E>(
        &mut self,
        start: usize,
        mut at: usize,
        run: R,
        escape: E,
    ) -> Option<(&'a str, bool)>
    where
        R: Fn(&[u8]) -> Option<usize>,
        E: Fn(&[u8]) -> Option<usize>,
    {
        let bytes = self.text.as_bytes();
        loop {
            match bytes[at] {
                b'"' => {
                    self.at = at + 1;
                    return Some((&self.text[start..at], true));
                }
                b'\\' => at += escape(bytes.get(at + 1..)?)?,
                _ => return None,
            }
            at += run(bytes.get(at..)?)?;
        }
    }

    /// A plain value: a string, `true`, `false`, `null` or a count.
    #[inline]
    pub fn scalar(&mut self) -> Option<Scalar<'a>> {
        match self.peek()? {
            b'"' => {
                let (raw, escaped) = self.string(run_of_plain)?;
                Some(Scalar::Text { raw, escaped })
            }
            b't' => self.eat_word("true").map(|()| Scalar::Flag(true)),
            b'f' => self.eat_word("false").map(|()| Scalar::Flag(false)),
            b'n' => self.eat_word("null").map(|()| Scalar::Null),
            b'0'..=b'9' => self.count().map(Scalar::Count),
            _ => None,
        }
    }

    /// Skips a scalar or an object of scalars (one level: nothing here
    /// recurses); declines arrays and deeper objects. See
    /// [`skip_any`](Self::skip_any) for any value.
    pub fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(|_, cursor| cursor.skip_scalar()),
            _ => self.skip_scalar(),
        }
    }

    /// Skips a scalar: a string as [`skip_any`](Self::skip_any) does (an
    /// Ollama line's skipped `created_at` is ~27 bytes, which cost ~200
    /// instructions scanned a byte at a time: a small normalized request's
    /// Node is ~3.5 % lighter this way).
    #[inline]
    fn skip_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            _ => self.scalar().map(drop),
        }
    }

    /// `[`, then values joined by `,`, then `]`; `element` reads each.
    pub fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.space();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            element(self)?;
            if !self.next_or_end(b']')? {
                return Some(());
            }
        }
    }

    /// A non-negative integer in `u64`, without leading zeros (JSON has
    /// none), followed by no fraction or exponent.
    fn count(&mut self) -> Option<u64> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut n = 0u64;
        while let Some(digit) = bytes.get(self.at).filter(|b| b.is_ascii_digit()) {
            n = n.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
            self.at += 1;
        }
        let leading_zero = bytes[start] == b'0' && self.at - start > 1;
        let fraction = matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        (!leading_zero && !fraction).then_some(n)
    }
}

#[cfg(test)]
#[path = "json_quick_tests.rs"]
mod tests;
