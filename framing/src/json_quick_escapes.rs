//! A JSON string's escapes: which a cursor takes, how long each is, and
//! the text a checked string's escapes stand for.

/// What the escape letter `letter` stands for (`\u` is not taken).
pub(super) fn escaped(letter: u8) -> Option<char> {
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

/// The length of the escape that `after` (the bytes after a backslash)
/// begins: 2 for one letter (those of [`escaped`], matched here without its
/// jump table), 6 for `\u` and four hex digits that are not a surrogate,
/// [`PAIR_LEN`] for a high surrogate's `\u` escape followed by a low
/// surrogate's (an emoji from a client that escapes every character past
/// ASCII, as Python's `json.dumps` does by default); `None` for anything
/// else, a lone or a reversed surrogate included (an error in serde).
#[inline]
pub(super) fn escape_len(after: &[u8]) -> Option<usize> {
    match *after.first()? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(2),
        b'u' => unicode_escape_len(after),
        _ => None,
    }
}

/// The length of a surrogate pair's two `\u` escapes.
pub(super) const PAIR_LEN: usize = 12;

/// [`escape_len`] for a string that is read: a letter escape only.
#[inline]
pub(super) fn letter_escape_len(after: &[u8]) -> Option<usize> {
    escaped(*after.first()?).map(|_| 2)
}

/// [`escape_len`] of the `\u` escape `after` begins (at its `u`).
fn unicode_escape_len(after: &[u8]) -> Option<usize> {
    unicode_escape(after).map(|(_, len)| len)
}

/// The character the `\u` escape `after` begins (at its `u`) stands for,
/// and the escape's length: 6, or [`PAIR_LEN`] for a high surrogate's
/// escape followed by a low surrogate's; `None` for a lone or reversed
/// surrogate.
fn unicode_escape(after: &[u8]) -> Option<(char, usize)> {
    let unit = code_unit(after)?;
    if let Some(c) = char::from_u32(u32::from(unit)) {
        return Some((c, 6));
    }
    let low = match after.get(5..)? {
        [b'\\', b'u', ..] => code_unit(&after[6..])?,
        _ => return None,
    };
    let pair = char::decode_utf16([unit, low]).next()?.ok()?;
    Some((pair, PAIR_LEN))
}

/// The UTF-16 code unit of the `\u` escape `after` begins (at its `u`):
/// its four hex digits (a match a digit: `from_str_radix` on a checked
/// `str` cost ~180 instructions an escape, most of a prompt's whose
/// emoji a client escaped).
fn code_unit(after: &[u8]) -> Option<u16> {
    after.get(1..5)?.iter().try_fold(0u16, |unit, &digit| {
        let value = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            b'A'..=b'F' => digit - b'A' + 10,
            _ => return None,
        };
        Some(unit << 4 | u16::from(value))
    })
}

/// The text of a string's raw body (between its quotes) whose escapes a
/// cursor checked, read ([`Scalar::text`](super::Scalar::text)) or skipped
/// ([`Cursor::raw_string`](super::Cursor::raw_string)): letter escapes, `\u`
/// escapes other than surrogates, and surrogate pairs. `None` for any other
/// escape, which no cursor takes.
///
/// Not on a long prompt's path: the Edge sends a prompt escaped as the
/// client wrote it (`RunInput.escaped_content`) and unescapes it only for
/// a Node that does not take it so.
pub fn unescape(raw: &str) -> Option<String> {
    let mut text = String::with_capacity(raw.len());
    let mut from = 0;
    for at in memchr::memchr_iter(b'\\', raw.as_bytes()) {
        // The second backslash of an escaped one, already taken.
        if at < from {
            continue;
        }
        text.push_str(raw.get(from..at)?);
        let letter = *raw.as_bytes().get(at + 1)?;
        from = at + 2;
        match escaped(letter) {
            Some(c) => text.push(c),
            None if letter == b'u' => {
                let (c, len) = unicode_escape(&raw.as_bytes()[at + 1..])?;
                text.push(c);
                from = at + len;
            }
            None => return None,
        }
    }
    text.push_str(raw.get(from..)?);
    Some(text)
}
