//! A Chat Completions request's input in one pass over its bytes, without
//! serde, for the common shape: messages of a string `role` and a string
//! (or `null`) `content` and nothing else.
//!
//! serde reads a message's text by copying each run between its escapes
//! into a scratch buffer, then the visitor copies it out: ~11 instructions
//! a byte of k6's prose prompt, three quarters of the normalized Edge's
//! instructions on a 100 KB prompt (`hack/instructions.sh`, issue 8), and
//! the Node then escaped it again into the provider's JSON. Here a text is
//! skipped by [`Cursor::raw_string`] (64 bytes a step, its escapes
//! checked) and goes to the run as it is, escapes and all, a slice of the
//! body ([`RunInput::escaped_content`]); the link makes it plain only for a
//! Node that does not take it so (`framing::frame::unescape_content`).
//!
//! Anything else is **declined** (`None`) to the serde reader, whose
//! reading and errors are then the request's: content parts, a message's
//! other members (`name`, `tool_calls`, …), a `role` that is not a plain
//! string, no messages, and whatever [`Cursor`] declines. What this reader
//! reads it reads as serde does (a property test holds the two to the same
//! input): the routing members are left out, every other member is a
//! parameter whose value serde reads from its bytes, and a later duplicate
//! wins.

use bytes::Bytes;
use framing::json_quick::{Cursor, MAX_SKIP_DEPTH};
use proto::v1::{ChatMessage, RunInput};
use serde_json::{Map, Value};

use super::ROUTING;

/// The run input of a Chat Completions `body`; `None` when this reader
/// declines it (a body that is not UTF-8 too).
pub(super) fn chat_input(body: &Bytes) -> Option<RunInput> {
    let text = simdutf8::basic::from_utf8(body).ok()?;
    let mut messages = None;
    let mut parameters = Map::new();
    let mut cursor = Cursor::spaced(text);
    cursor.object(|key, cursor| {
        if key == "messages" {
            messages = Some(read_messages(body, cursor)?);
            return Some(());
        }
        let value = cursor.skip_any_text(MAX_SKIP_DEPTH - 1)?;
        if !ROUTING.contains(&key) {
            parameters.insert(key.to_owned(), serde_json::from_str(value).ok()?);
        }
        Some(())
    })?;
    if !cursor.only_whitespace_left() {
        return None;
    }
    Some(RunInput {
        messages: messages.filter(|m: &Vec<ChatMessage>| !m.is_empty())?,
        parameters_json: Value::Object(parameters).to_string().into(),
        escaped_content: true,
    })
}

/// The `messages` array at `cursor`.
fn read_messages(body: &Bytes, cursor: &mut Cursor<'_, true>) -> Option<Vec<ChatMessage>> {
    let mut messages = Vec::new();
    cursor.array(|cursor| {
        let (mut role, mut content) = (None, Bytes::new());
        cursor.object(|key, cursor| {
            match key {
                "role" => role = Some(cursor.scalar()?.text()?.into_owned()),
                "content" => content = read_content(body, cursor)?,
                _ => return None,
            }
            Some(())
        })?;
        messages.push(ChatMessage {
            role: role?,
            content,
            extra_json: Bytes::new(),
        });
        Some(())
    })?;
    Some(messages)
}

/// A message's `content` at `cursor`: a string's body, escapes as the
/// client wrote them, as a slice of `body`; empty for `null`.
fn read_content(body: &Bytes, cursor: &mut Cursor<'_, true>) -> Option<Bytes> {
    if cursor.peek()? != b'"' {
        return cursor.scalar()?.is_null().then(Bytes::new);
    }
    Some(body.slice_ref(cursor.raw_string()?.as_bytes()))
}
