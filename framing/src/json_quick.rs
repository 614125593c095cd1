//! A cursor over compact JSON, for the few documents the Node reads on
//! every request without serde: an Ollama `/api/chat` line
//! (`adapter::ollama`'s quick reader) and a tunnelled answer's `usage`
//! (`tunnel::usage`).
//!
//! serde_json sets up a visitor and a string scan for every key and value
//! (~3,000 instructions an Ollama line, ~7,500 a small chat completion's
//! body: issue 8, `hack/instructions.sh`). This cursor reads compact JSON in
//! one pass over its bytes, and **declines** (`None`) on anything it does
//! not take: whitespace between tokens, a `\u` escape or a control
//! character in a string, an escape in a key, a number that is not a plain
//! non-negative integer within `u64`, nesting deeper than
//! [`MAX_SKIP_DEPTH`], and anything that is not valid JSON. Its callers
//! then read the document through serde, so what a quick reader reads is
//! always what serde reads (each caller's property tests hold it to that),
//! and every error is still serde's.

use std::borrow::Cow;

/// A plain JSON value. A string is its raw text between the quotes, with
/// its escapes checked; it is unescaped only when it is read
/// ([`Scalar::text`]), not when it is skipped.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scalar<'a> {
    Text { raw: &'a str, escaped: bool },
    Flag(bool),
    Count(u64),
    Null,
}

impl<'a> Scalar<'a> {
    /// The text of a string (unescaped); `None` for any other value.
    pub(crate) fn text(self) -> Option<Cow<'a, str>> {
        match self {
            Scalar::Text {
                raw,
                escaped: false,
            } => Some(Cow::Borrowed(raw)),
            Scalar::Text { raw, escaped: true } => Some(Cow::Owned(unescape(raw))),
            _ => None,
        }
    }

    /// The value of a boolean; `None` for any other value.
    pub(crate) fn flag(self) -> Option<bool> {
        match self {
            Scalar::Flag(flag) => Some(flag),
            _ => None,
        }
    }

    /// Whether it is `null`.
    pub(crate) fn is_null(self) -> bool {
        matches!(self, Scalar::Null)
    }

    /// The value of a count; `None` for any other value.
    pub(crate) fn count(self) -> Option<u64> {
        match self {
            Scalar::Count(n) => Some(n),
            _ => None,
        }
    }
}

/// How deep [`Cursor::skip_any`] goes before it declines (serde_json's own
/// limit is 128).
pub(crate) const MAX_SKIP_DEPTH: usize = 32;

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
/// A byte at a time through [`STRING_STOP`] for the first
/// [`SHORT_RUN`] bytes (nearly every value ends there; a vector scan's
/// set-up cost more on those), then [`long_run_of_plain`]. The bound costs
/// a small request's Node ~1–2 % more instructions (`hack/instructions.sh`),
/// so keys, always short in practice, take [`key_run`].
#[inline(always)]
fn run_of_plain(bytes: &[u8]) -> Option<usize> {
    let head = &bytes[..bytes.len().min(SHORT_RUN)];
    for (at, &b) in head.iter().enumerate() {
        if STRING_STOP[usize::from(b)] {
            return Some(at);
        }
    }
    if head.len() == bytes.len() {
        return None;
    }
    long_run_of_plain(bytes, head.len())
}

/// [`run_of_plain`] for a key: the table alone, however long the key.
#[inline(always)]
fn key_run(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| STRING_STOP[usize::from(b)])
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

/// What the escape letter `letter` stands for (`\u` is not taken).
fn escaped(letter: u8) -> Option<char> {
    Some(match letter {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'n' => '\n',
        b't' => '\t',
        b'r' => '\r',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        _ => return None,
    })
}

/// The text of a string's raw body whose escapes [`Cursor::string`]
/// checked.
fn unescape(raw: &str) -> String {
    let mut text = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('\\') {
        text.push_str(&rest[..at]);
        // Checked: a backslash is followed by an ASCII escape letter.
        text.extend(rest.as_bytes().get(at + 1).copied().and_then(escaped));
        rest = rest.get(at + 2..).unwrap_or_default();
    }
    text.push_str(rest);
    text
}

/// A position in a document; every reader returns `None` for what it
/// declines.
pub(crate) struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `text`.
    pub(crate) fn new(text: &'a str) -> Self {
        Self { text, at: 0 }
    }

    /// Whether the whole document has been read.
    pub(crate) fn at_end(&self) -> bool {
        self.at == self.text.len()
    }

    /// Whether only JSON whitespace is left (what serde allows after a
    /// document).
    pub(crate) fn only_whitespace_left(&self) -> bool {
        self.text.as_bytes()[self.at..]
            .iter()
            .all(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
    }

    /// The next byte, not taken.
    pub(crate) fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Takes `byte` if it comes next.
    pub(crate) fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn eat_word(&mut self, word: &str) -> Option<()> {
        let rest = self.text.as_bytes().get(self.at..)?;
        rest.starts_with(word.as_bytes())
            .then(|| self.at += word.len())
    }

    /// `{`, then `"key":value` members joined by `,`, then `}`; `member`
    /// reads each value. A key with an escape is declined.
    pub(crate) fn object(
        &mut self,
        mut member: impl FnMut(&'a str, &mut Self) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let (key, false) = self.string(key_run)? else {
                return None;
            };
            self.eat(b':')?;
            member(key, self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string's raw body (between its quotes) and whether it has
    /// escapes. Declined: a `\u` escape (serde pairs surrogates; this
    /// reader does not), an unknown escape, a control character, no closing
    /// quote.
    #[inline(always)]
    fn string(&mut self, run: fn(&[u8]) -> Option<usize>) -> Option<(&'a str, bool)> {
        self.eat(b'"')?;
        let start = self.at;
        let end = start + run(&self.text.as_bytes()[start..])?;
        if self.text.as_bytes()[end] != b'"' {
            return self.escaped_string(start, end);
        }
        self.at = end + 1;
        Some((&self.text[start..end], false))
    }

    /// The rest of a string begun at `start` whose run of plain bytes
    /// stopped at `at` on something other than its closing quote.
    #[cold]
    fn escaped_string(&mut self, start: usize, mut at: usize) -> Option<(&'a str, bool)> {
        let bytes = self.text.as_bytes();
        loop {
            match bytes[at] {
                b'"' => {
                    self.at = at + 1;
                    return Some((&self.text[start..at], true));
                }
                b'\\' => {
                    escaped(*bytes.get(at + 1)?)?;
                    at += 2;
                }
                _ => return None,
            }
            at += run_of_plain(bytes.get(at..)?)?;
        }
    }

    /// A plain value: a string, `true`, `false`, `null` or a count.
    pub(crate) fn scalar(&mut self) -> Option<Scalar<'a>> {
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
    pub(crate) fn skip_value(&mut self) -> Option<()> {
        if self.peek()? == b'{' {
            return self.object(|_, cursor| cursor.scalar().map(drop));
        }
        self.scalar().map(drop)
    }

    /// Skips any value this reader takes: a scalar, or an array or object of
    /// them nested up to `depth` levels ([`MAX_SKIP_DEPTH`] from the top).
    pub(crate) fn skip_any(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => {
                let inner = depth.checked_sub(1)?;
                self.object(|_, cursor| cursor.skip_any(inner))
            }
            b'[' => {
                let inner = depth.checked_sub(1)?;
                self.array(|cursor| cursor.skip_any(inner))
            }
            _ => self.scalar().map(drop),
        }
    }

    /// `[`, then values joined by `,`, then `]`; `element` reads each.
    pub(crate) fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            element(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
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
