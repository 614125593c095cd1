//! A compact OpenAI response or chunk's `usage`, read without serde.
//!
//! vLLM, llama.cpp and Ollama write their JSON compact:
//! `{"id":"…","object":"chat.completion","created":1,"model":"m","choices":[…],"usage":{"prompt_tokens":3,…}}`.
//! serde_json, even typed and skipping what it does not keep, spent ~7,500
//! instructions on a small chat's ~430-byte body, ~14 % of the Node's
//! instructions for a small tunnelled request (issue 8,
//! `hack/instructions.sh`). [`read`] walks such a document once with
//! [`framing::json_quick`]'s cursor and declines — the document then goes
//! through serde, [`super::usage::observe_with_serde`] — on anything the
//! cursor declines (whitespace between tokens, a lone surrogate's `\u` escape,
//! a number with an exponent, a count that is not a plain integer, nesting
//! past its bound, invalid JSON) and on every
//! case where serde's typed reading is not the obvious one: a top level
//! that is not an object, a `usage` (or a details object inside it) that is
//! neither an object nor `null`, and a known key given twice (serde refuses
//! the document). So what it reads is what serde reads; a property test
//! holds it to that.

use super::usage::{Counts, Observed};
use framing::json_quick::{Cursor, MAX_SKIP_DEPTH};

/// Nesting the members' values may have below a known key's object.
const INNER_DEPTH: usize = MAX_SKIP_DEPTH - 2;

/// `Some(what the document says)` when `json` is a compact object this
/// reader takes; `None` when it declines (see the module docs).
pub(super) fn read(json: &str) -> Option<Option<Observed>> {
    let mut cursor = Cursor::new(json);
    // The outer `Option`s are "key seen" (a second one is declined).
    let mut usage: Option<Option<Counts>> = None;
    let mut choices: Option<bool> = None;
    cursor.object(|key, cursor| {
        match key {
            "usage" if usage.is_none() => usage = Some(usage_object(cursor)?),
            "choices" if choices.is_none() => choices = Some(choices_non_empty(cursor)?),
            "usage" | "choices" => return None,
            _ => cursor.skip_any(MAX_SKIP_DEPTH - 1)?,
        }
        Some(())
    })?;
    if !cursor.only_whitespace_left() {
        return None;
    }
    Some(
        usage
            .flatten()
            .map(|counts| counts.observed(choices.unwrap_or(false))),
    )
}

/// A `usage` value: `null` (no usage) or an object of counts.
fn usage_object(cursor: &mut Cursor<'_>) -> Option<Option<Counts>> {
    let mut seen = [false; 4];
    let mut counts = Counts::default();
    let object = nullable_object(cursor, |key, cursor| match key {
        "prompt_tokens" => once(&mut seen[0], || {
            counts.prompt = count(cursor)?;
            Some(())
        }),
        "completion_tokens" => once(&mut seen[1], || {
            counts.completion = count(cursor)?;
            Some(())
        }),
        "completion_tokens_details" => once(&mut seen[2], || {
            counts.reasoning = details(cursor, "reasoning_tokens")?;
            Some(())
        }),
        "prompt_tokens_details" => once(&mut seen[3], || {
            counts.cached = details(cursor, "cached_tokens")?;
            Some(())
        }),
        _ => cursor.skip_any(INNER_DEPTH),
    })?;
    Some(object.then_some(counts))
}

/// A details object's one count named `name`; `null` or an object without
/// it reads as none.
fn details(cursor: &mut Cursor<'_>, name: &str) -> Option<Option<u64>> {
    let mut seen = false;
    let mut value = None;
    nullable_object(cursor, |key, cursor| {
        if key != name {
            return cursor.skip_any(INNER_DEPTH - 1);
        }
        once(&mut seen, || {
            value = count(cursor)?;
            Some(())
        })
    })?;
    Some(value)
}

/// `null` (false) or an object read by `member` (true); anything else is
/// declined (serde would read an array as the struct's fields in order,
/// and refuse a scalar).
fn nullable_object<'a>(
    cursor: &mut Cursor<'a>,
    member: impl FnMut(&'a str, &mut Cursor<'a>) -> Option<()>,
) -> Option<bool> {
    match cursor.peek()? {
        b'{' => cursor.object(member).map(|()| true),
        _ => cursor.scalar()?.is_null().then_some(false),
    }
}

/// Runs `read` the first time a key is met; a second time is declined
/// (serde refuses a known field given twice).
fn once(seen: &mut bool, read: impl FnOnce() -> Option<()>) -> Option<()> {
    if std::mem::replace(seen, true) {
        return None;
    }
    read()
}

/// A token count: an unsigned integer; any other value reads as none.
fn count(cursor: &mut Cursor<'_>) -> Option<Option<u64>> {
    match cursor.peek()? {
        b'{' | b'[' => cursor.skip_any(INNER_DEPTH - 1).map(|()| None),
        _ => Some(cursor.scalar()?.count()),
    }
}

/// Whether `choices` holds anything: an empty array and `null` do not;
/// any other value does.
fn choices_non_empty(cursor: &mut Cursor<'_>) -> Option<bool> {
    if cursor.peek()? != b'[' {
        let null = cursor.peek()? == b'n';
        cursor.skip_any(MAX_SKIP_DEPTH - 1)?;
        return Some(!null);
    }
    let mut non_empty = false;
    cursor.array(|cursor| {
        non_empty = true;
        cursor.skip_any(MAX_SKIP_DEPTH - 2)
    })?;
    Some(non_empty)
}

#[cfg(test)]
#[path = "usage_quick_tests.rs"]
mod tests;
