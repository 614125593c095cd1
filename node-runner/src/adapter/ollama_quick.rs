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
//! serde — on anything else: whitespace between tokens, a `\u` escape in
//! a string it reads (or a lone surrogate's in one it skips), a control
//! character in a string, an escape in a key, a number that is
//! not a plain non-negative integer within `u64`, an array, an object
//! nested more than one level, and anything that is not valid JSON. Other
//! escapes are taken, and only the texts it reads are unescaped. So what
//! it reads is always read as serde reads it (property tests hold it to
//! that, on lines made to be near misses), and every error is still
//! serde's. The cursor is [`framing::json_quick`]'s, shared with the
//! tunnel's usage reader.

use super::LineJson;
use framing::json_quick::Cursor;

/// The fields of `line` when it is a compact object of plain values (see
/// the module docs); `None` when it is anything else.
pub(super) fn quick_line(line: &str) -> Option<LineJson<'_>> {
    let mut cursor = Cursor::new(line);
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
    cursor.at_end().then_some(out)
}
