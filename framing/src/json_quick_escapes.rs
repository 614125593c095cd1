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
/// jump table), 6 for `\u` and four hex digits that are not a
/// surrogate (a lone or a reversed surrogate is an error in serde, a pair
/// is left to it); `None` for anything else.
#[inline]
pub(super) fn escape_len(after: &[u8]) -> Option<usize> {
    match *after.first()? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(2),
        b'u' => unicode_escape_len(after.get(1..5)?),
        _ => None,
    }
}

/// [`escape_len`] for a string that is read: a letter escape only.
#[inline]
pub(super) fn letter_escape_len(after: &[u8]) -> Option<usize> {
    escaped(*after.first()?).map(|_| 2)
}

/// [`escape_len`] of a `\u` escape whose four digits are `hex`.
fn unicode_escape_len(hex: &[u8]) -> Option<usize> {
    if !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    // Checked: four ASCII hex digits (`from_str_radix` would take a sign).
    let unit = u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
    (!(0xD800..=0xDFFF).contains(&unit)).then_some(6)
}

/// The text of a string's raw body (between its quotes) whose escapes a
/// cursor checked, read ([`Scalar::text`](super::Scalar::text)) or skipped
/// ([`Cursor::raw_string`](super::Cursor::raw_string)): letter escapes and `\u` escapes other than
/// surrogates. `None` for any other escape, which no cursor takes.
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
                let hex = raw.get(at + 2..at + 6)?;
                text.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
                from = at + 6;
            }
            None => return None,
        }
    }
    text.push_str(raw.get(from..)?);
    Some(text)
}
