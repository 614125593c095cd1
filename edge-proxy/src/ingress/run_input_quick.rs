//! A Chat Completions request's input found in the routing pass, without
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
//! Routing reads the whole body anyway (`super::super::quick_read`), so it
//! hands each member to a [`ChatGather`], which notes where the messages'
//! roles and texts and the other members lie ([`ChatSpans`]); the run's
//! input is made from those ([`chat_input`]) without a second pass over a
//! long prompt, which had cost as much as routing's own pass.
//!
//! Anything else is **declined** (no spans, or `None`) to the serde reader,
//! whose reading and errors are then the request's: content parts, a
//! message's other members (`name`, `tool_calls`, …), a `role` that is not a
//! plain string, no messages, and whatever [`Cursor`] declines. What this
//! reader reads it reads as serde does (a property test holds the two to
//! the same input): the routing members are left out, every other member is
//! a parameter whose value serde reads from its bytes, and a later
//! duplicate wins.

use std::ops::Range;

use bytes::Bytes;
use framing::json_quick::{Cursor, MAX_SKIP_DEPTH, Scalar};
use proto::v1::{ChatMessage, RunInput};
use serde_json::{Map, Value};

/// Where a chat body's run input lies, as byte ranges of the body: each
/// message's role and text, and every member but routing's and the
/// messages (the run's parameters), in the body's order.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ChatSpans {
    messages: Vec<MessageSpans>,
    parameters: Vec<(Range<usize>, Range<usize>)>,
}

/// Where one message's members lie.
#[derive(Debug, Clone, PartialEq)]
struct MessageSpans {
    /// The role string's raw body (between its quotes).
    role: Range<usize>,
    /// Whether the role has escapes.
    role_escaped: bool,
    /// The text's raw body, escapes as written; empty for `null`.
    content: Range<usize>,
}

/// Notes a chat body's [`ChatSpans`] member by member while routing reads
/// its top-level object.
pub(crate) struct ChatGather<'a> {
    text: &'a str,
    spans: ChatSpans,
    /// A `messages` member was not of the common shape: the input is
    /// serde's.
    declined: bool,
}

impl<'a> ChatGather<'a> {
    /// A gatherer for the body `text`, which routing's cursor reads.
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            spans: ChatSpans::default(),
            declined: false,
        }
    }

    /// Reads a `messages` value at `cursor`: its spans when it has the
    /// common shape, else skipped as any value is (routing still takes the
    /// body; the input is then serde's). `None` when the cursor declines
    /// the value.
    pub(crate) fn messages(&mut self, cursor: &mut Cursor<'a, true>) -> Option<()> {
        let mut trial = cursor.clone();
        match read_messages(&mut trial) {
            Some(messages) => {
                *cursor = trial;
                self.spans.messages = messages;
                Some(())
            }
            None => {
                self.declined = true;
                cursor.skip_any(MAX_SKIP_DEPTH - 1)
            }
        }
    }

    /// Notes a member that is neither routing's nor the messages: `key` a
    /// slice of the body, `value` the range it was skipped over.
    pub(crate) fn parameter(&mut self, key: &'a str, value: Range<usize>) {
        let start = key.as_ptr() as usize - self.text.as_ptr() as usize;
        self.spans
            .parameters
            .push((start..start + key.len(), value));
    }

    /// The spans, when the body has the common shape: messages, none of
    /// them declined.
    pub(crate) fn finish(self) -> Option<ChatSpans> {
        (!self.declined && !self.spans.messages.is_empty()).then_some(self.spans)
    }
}

/// The run input of the Chat Completions `body` whose spans routing found;
/// `None` when one does not read (which routing's cursor has ruled out),
/// for the serde reader to answer.
pub(super) fn chat_input(body: &Bytes, spans: &ChatSpans) -> Option<RunInput> {
    let text = |range: &Range<usize>| std::str::from_utf8(body.get(range.clone())?).ok();
    let mut parameters = Map::new();
    for (key, value) in &spans.parameters {
        let value = serde_json::from_slice(body.get(value.clone())?).ok()?;
        parameters.insert(text(key)?.to_owned(), value);
    }
    let messages = spans
        .messages
        .iter()
        .map(|message| {
            let raw = text(&message.role)?;
            let escaped = message.role_escaped;
            Some(ChatMessage {
                role: Scalar::Text { raw, escaped }.text()?.into_owned(),
                content: body.slice(message.content.clone()),
                extra_json: Bytes::new(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(RunInput {
        messages,
        parameters_json: Value::Object(parameters).to_string().into(),
        escaped_content: true,
    })
}

/// The spans of the `messages` array at `cursor`.
fn read_messages(cursor: &mut Cursor<'_, true>) -> Option<Vec<MessageSpans>> {
    let mut messages = Vec::new();
    cursor.array(|cursor| {
        let (mut role, mut content) = (None, 0..0);
        cursor.object(|key, cursor| {
            match key {
                "role" => {
                    let start = cursor.position() + 1;
                    let Scalar::Text { escaped, .. } = cursor.scalar()? else {
                        return None;
                    };
                    role = Some((start..cursor.position() - 1, escaped));
                }
                "content" => content = read_content(cursor)?,
                _ => return None,
            }
            Some(())
        })?;
        let (role, role_escaped) = role?;
        messages.push(MessageSpans {
            role,
            role_escaped,
            content,
        });
        Some(())
    })?;
    Some(messages)
}

/// A message's `content` at `cursor`: a string's raw body; empty for
/// `null`.
fn read_content(cursor: &mut Cursor<'_, true>) -> Option<Range<usize>> {
    if cursor.peek()? != b'"' {
        let at = cursor.position();
        return cursor.scalar()?.is_null().then_some(at..at);
    }
    let start = cursor.position() + 1;
    cursor.raw_string()?;
    Some(start..cursor.position() - 1)
}
