//! The common `/api/chat` line read without serde.
//!
//! Nearly every line of an Ollama stream is a compact object of plain
//! strings, booleans and counts, with one nested `message` object of the
//! same:
//! `{"model":"m","created_at":"…","message":{"role":"assistant","content":"tok"},"done":false}`.
//! serde_json spent ~3,000 instructions on such a line (a visitor call and
//! a string scan set up for every key and value; issue 8,
//! `hack/instructions.sh`). [`quick_line`] reads exactly that form in one
//! pass over its bytes and declines — `None`, the line then goes through
//! serde — on anything else: whitespace between tokens, a `\u` escape or
//! a control character in a string, an escape in a key, a number that is
//! not a plain non-negative integer within `u64`, an array, an object
//! nested more than one level, and anything that is not valid JSON. Other
//! escapes are taken, and only the texts it reads are unescaped. So what
//! it reads is always read as serde reads it (property tests hold it to
//! that, on lines made to be near misses), and every error is still
//! serde's.

use std::borrow::Cow;

use super::LineJson;

/// The fields of `line` when it is a compact object of plain values (see
/// the module docs); `None` when it is anything else.
pub(super) fn quick_line(line: &str) -> Option<LineJson<'_>> {
    let mut cursor = Cursor { text: line, at: 0 };
    let mut out = LineJson::default();
    cursor.object(|key, cursor| {
        match key {
            "error" => {
                cursor.skip_value()?;
                out.error = true;
            }
            "message" => {
                // A message that is not an object reads as none (serde's
                // `Lenient`); its fields replace the ones before.
                let (mut thinking, mut content) = (None, None);
                if cursor.peek() == Some(b'{') {
                    cursor.object(|key, cursor| {
                        let value = cursor.scalar()?;
                        match key {
                            "thinking" => thinking = value.text(),
                            "content" => content = value.text(),
                            _ => {}
                        }
                        Some(())
                    })?;
                } else {
                    cursor.scalar()?;
                }
                out.thinking = thinking;
                out.content = content;
            }
            "done" => out.done = cursor.scalar()?.flag(),
            "done_reason" => out.done_reason = cursor.scalar()?.text(),
            "prompt_eval_count" => out.prompt_eval_count = cursor.scalar()?.count(),
            "eval_count" => out.eval_count = cursor.scalar()?.count(),
            _ => cursor.skip_value()?,
        }
        Some(())
    })?;
    (cursor.at == line.len()).then_some(out)
}

/// A plain JSON value. A string is its raw text between the quotes, with
/// its escapes checked; it is unescaped only when it is read
/// ([`Scalar::text`]), not when it is skipped.
#[derive(Debug, Clone, Copy)]
enum Scalar<'a> {
    Text { raw: &'a str, escaped: bool },
    Flag(bool),
    Count(u64),
    Null,
}

impl<'a> Scalar<'a> {
    fn text(self) -> Option<Cow<'a, str>> {
        match self {
            Scalar::Text {
                raw,
                escaped: false,
            } => Some(Cow::Borrowed(raw)),
            Scalar::Text { raw, escaped: true } => Some(Cow::Owned(unescape(raw))),
            _ => None,
        }
    }

    fn flag(self) -> Option<bool> {
        match self {
            Scalar::Flag(flag) => Some(flag),
            _ => None,
        }
    }

    fn count(self) -> Option<u64> {
        match self {
            Scalar::Count(n) => Some(n),
            _ => None,
        }
    }
}

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

/// A position in a line; every reader returns `None` for what it declines.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn eat_word(&mut self, word: &str) -> Option<()> {
        let rest = self.text.as_bytes().get(self.at..)?;
        rest.starts_with(word.as_bytes())
            .then(|| self.at += word.len())
    }

    /// `{`, then `"key":value` members joined by `,`, then `}`; `member`
    /// reads each value. A key with an escape is declined.
    fn object(&mut self, mut member: impl FnMut(&'a str, &mut Self) -> Option<()>) -> Option<()> {
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
    fn scalar(&mut self) -> Option<Scalar<'a>> {
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

    /// Skips a value this reader takes: a scalar, or an object of scalars
    /// (one level: nothing here recurses).
    fn skip_value(&mut self) -> Option<()> {
        if self.peek()? == b'{' {
            return self.object(|_, cursor| cursor.scalar().map(drop));
        }
        self.scalar().map(drop)
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
