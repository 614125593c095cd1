//! A normalized request's input found in the routing pass, without serde,
//! for the common shapes: a Chat Completions request whose messages are a
//! string `role`, a `content` and any other members (an agent's
//! `tool_calls`, `tool_call_id`, `name`: the message's extras), and a
//! Responses request
//! whose `input` is a string or message items of a string `role` and a
//! `content` (their other members dropped, as serde drops them), its
//! `instructions` a string or `null`, or absent. A `content` is a string,
//! `null`, or text parts (`text`; a Responses item's `input_text` and
//! `output_text`), whose texts are joined.
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
//! hands each member to an [`InputGather`], which notes where the messages'
//! roles and texts and the other members lie ([`InputSpans`]); the run's
//! input is made from those ([`chat_input`], [`responses_input`]) without a
//! second pass over a long prompt, which had cost as much as routing's own
//! pass.
//!
//! Anything else is **declined** (no spans, or `None`) to the serde reader,
//! whose reading and errors are then the request's: parts of other types
//! (an image's: read through all the same, so routing's pass reads a
//! data URL once, not once more to skip it), a `role` that is not a plain
//! string, no messages, a
//! Responses item without a `role`, and whatever [`Cursor`] declines. What
//! this reader reads it reads as serde does (property tests hold the two to
//! the same input): the routing members are left out, a chat's every other
//! member is a parameter (a Responses request's `temperature`, `top_p` and
//! `max_output_tokens` only) and a chat message's every other member one of
//! its extras, and a later duplicate wins. Their values go on as the JSON
//! text the client wrote and the cursor checked, not parsed and printed
//! again ([`object_of`]): the same meaning as serde's, which the property
//! tests compare.

use std::ops::Range;

use bytes::Bytes;
use framing::json_members::write_indexed;
use framing::json_quick::{Cursor, MAX_SKIP_DEPTH, Scalar, last_wins};
use proto::v1::{ChatMessage, RunInput};

use super::{RESPONSES_PARAMETERS, message};

/// Where a body's run input lies, as byte ranges of the body: each of a
/// chat's messages' role and text, and every member but routing's and the
/// messages (a chat's parameters; a Responses request's `input`,
/// `instructions` and parameters), in the body's order.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct InputSpans {
    messages: Vec<MessageSpans>,
    /// The last `input` member's items, when it is an array of message
    /// items of a `role` and a string (or `null`) `content` (a Responses
    /// request's; their other members are dropped, as serde drops them).
    input_items: Option<Vec<MessageSpans>>,
    parameters: Vec<(Range<usize>, Range<usize>)>,
}

/// Where one message's members lie.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MessageSpans {
    /// The role string's raw body (between its quotes).
    role: Range<usize>,
    /// Whether the role has escapes.
    role_escaped: bool,
    /// Where its text lies.
    content: ContentSpans,
    /// A chat message's other members (its extras), key and value, in the
    /// body's order; none for a Responses item (serde drops them).
    extras: Vec<(Range<usize>, Range<usize>)>,
}

/// Where a message's text lies.
#[derive(Debug, Clone, PartialEq)]
enum ContentSpans {
    /// A string's raw body, escapes as written; empty for `null`.
    Text(Range<usize>),
    /// An array of text parts: each part's text's raw body, in order (the
    /// message's text is them joined).
    Parts(Vec<Range<usize>>),
}

impl ContentSpans {
    /// The text of `body` these spans give: a slice of it for a string or
    /// one part; the parts' raw bodies joined otherwise (escapes stand
    /// alone, so escaped texts joined are the joined text escaped).
    fn text(&self, body: &Bytes) -> Bytes {
        let ranges = match self {
            Self::Text(range) => std::slice::from_ref(range),
            Self::Parts(parts) => parts,
        };
        match ranges {
            [] => Bytes::new(),
            [one] => body.slice(one.clone()),
            parts => {
                let len = parts.iter().map(Range::len).sum();
                let mut joined = Vec::with_capacity(len);
                parts
                    .iter()
                    .for_each(|part| joined.extend_from_slice(&body[part.clone()]));
                joined.into()
            }
        }
    }
}

/// Notes a body's [`InputSpans`] member by member while routing reads its
/// top-level object.
pub(crate) struct InputGather<'a> {
    text: &'a str,
    spans: InputSpans,
    /// A `messages` member was not of the common shape: the input is
    /// serde's.
    declined: bool,
}

impl<'a> InputGather<'a> {
    /// A gatherer for the body `text`, which routing's cursor reads.
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            spans: InputSpans::default(),
            declined: false,
        }
    }

    /// Reads a `messages` value at `cursor`: its spans when it has the
    /// common shape, else read through or skipped as any value is (routing
    /// still takes the body; the input is then serde's). `None` when the
    /// cursor declines the value.
    pub(crate) fn messages(&mut self, cursor: &mut Cursor<'a, true>) -> Option<()> {
        match read_or_stay(cursor, self.text, MessageShape::CHAT) {
            Some(Some(messages)) => self.spans.messages = messages,
            Some(None) => self.declined = true,
            None => {
                self.declined = true;
                cursor.skip_any(MAX_SKIP_DEPTH - 1)?;
            }
        }
        Some(())
    }

    /// Reads an `input` value at `cursor` as any other member (see
    /// [`Self::parameter`]), noting its items' spans when it is an array of
    /// message items ([`InputSpans::input_items`]). `None` when the cursor
    /// declines the value.
    pub(crate) fn input(&mut self, key: &'a str, cursor: &mut Cursor<'a, true>) -> Option<()> {
        let start = cursor.position();
        let items = match cursor.peek()? {
            b'[' => read_or_stay(cursor, self.text, MessageShape::RESPONSES_ITEM),
            _ => None,
        };
        if items.is_none() {
            cursor.skip_any(MAX_SKIP_DEPTH - 1)?;
        }
        self.spans.input_items = items.flatten();
        self.parameter(key, start..cursor.position());
        Some(())
    }

    /// Notes a member that is neither routing's nor the messages: `key` a
    /// slice of the body, `value` the range it was skipped over.
    pub(crate) fn parameter(&mut self, key: &'a str, value: Range<usize>) {
        self.spans.parameters.push((span_of(self.text, key), value));
    }

    /// The spans, unless a `messages` member was of another shape.
    pub(crate) fn finish(self) -> Option<InputSpans> {
        (!self.declined).then_some(self.spans)
    }
}

/// The run input of the Chat Completions `body` whose spans routing found;
/// `None` when it has no messages, or when one does not read (which
/// routing's cursor has ruled out), for the serde reader to answer.
pub(super) fn chat_input(body: &Bytes, spans: &InputSpans) -> Option<RunInput> {
    if spans.messages.is_empty() {
        return None;
    }
    let (parameters, index) = json_object(body, &spans.parameters)?;
    let mut messages = Vec::with_capacity(spans.messages.len());
    push_messages(body, &spans.messages, &mut messages)?;
    Some(RunInput {
        messages,
        parameters_json: parameters,
        escaped_content: true,
        parameters_index: index,
    })
}

/// The run input of the Responses `body` whose spans routing found: its
/// `instructions` as a system message, then its `input` as the user's; its
/// `temperature`, `top_p` and `max_output_tokens` (as `max_tokens`) as the
/// parameters. An `input` of message items (a `role` and a string or
/// `null` `content`) gives a message each. `None`, for the serde reader,
/// when `input` is neither, or `instructions` neither a string nor `null`.
pub(super) fn responses_input(body: &Bytes, spans: &InputSpans) -> Option<RunInput> {
    let (mut input, mut instructions) = (None, None);
    let mut parameters = Vec::new();
    for (key, value) in &spans.parameters {
        match text_at(body, key)? {
            "input" => input = Some(value),
            "instructions" => instructions = Some(value),
            member => {
                if let Some((_, to)) = RESPONSES_PARAMETERS
                    .iter()
                    .find(|(from, _)| *from == member)
                {
                    parameters.push((*to, body.get(value.clone())?));
                }
            }
        }
    }
    let input = input?;
    let items = spans.input_items.as_deref();
    let mut messages = Vec::with_capacity(1 + items.map_or(1, <[_]>::len));
    if let Some(value) = instructions
        && let Some(text) = string_body(body, value)?
    {
        messages.push(message(Bytes::from_static(b"system"), text, Bytes::new()));
    }
    match items {
        Some(items) => push_messages(body, items, &mut messages)?,
        None => messages.push(message(
            Bytes::from_static(b"user"),
            string_body(body, input)??,
            Bytes::new(),
        )),
    }
    let (parameters, index) = object_of(parameters);
    Some(RunInput {
        messages,
        parameters_json: parameters,
        escaped_content: true,
        parameters_index: index,
    })
}

/// The value at `range` (a member's, no whitespace around it: the cursor
/// takes that between members): `Some` of a string's raw body (between its
/// quotes, escapes as written), `Some(None)` for `null`, `None` for any
/// other value.
fn string_body(body: &Bytes, range: &Range<usize>) -> Option<Option<Bytes>> {
    match body.get(range.clone())? {
        b"null" => Some(None),
        [b'"', .., b'"'] => Some(Some(body.slice(range.start + 1..range.end - 1))),
        _ => None,
    }
}

/// Where `inner`, a slice of `text`, lies in it.
fn span_of(text: &str, inner: &str) -> Range<usize> {
    let start = inner.as_ptr() as usize - text.as_ptr() as usize;
    start..start + inner.len()
}

/// The messages array at `cursor` (a cursor over `text`) read as `shape`,
/// the cursor past it (see [`read_messages`]); or `None`, the cursor where
/// it was (for the caller to skip the value).
pub(super) fn read_or_stay(
    cursor: &mut Cursor<'_, true>,
    text: &str,
    shape: MessageShape,
) -> Option<Option<Vec<MessageSpans>>> {
    let mut trial = cursor.clone();
    let messages = read_messages(&mut trial, text, shape)?;
    *cursor = trial;
    Some(messages)
}

/// The body's text at `range`.
fn text_at<'a>(body: &'a Bytes, range: &Range<usize>) -> Option<&'a str> {
    std::str::from_utf8(body.get(range.clone())?).ok()
}

/// The messages of `spans` after `messages`, their roles unescaped, their
/// texts slices of `body` and their extras the client's JSON text
/// ([`json_object`]), empty for a message without any; `None` when a role
/// or an extra does not read.
fn push_messages(
    body: &Bytes,
    spans: &[MessageSpans],
    messages: &mut Vec<ChatMessage>,
) -> Option<()> {
    for noted in spans {
        let raw = text_at(body, &noted.role)?;
        let escaped = noted.role_escaped;
        let extras = if noted.extras.is_empty() {
            Bytes::new()
        } else {
            json_object(body, &noted.extras)?.0
        };
        // A role without escapes (every one a client sends) is a slice of
        // the body, as the texts are.
        let role = match escaped {
            false => body.slice(noted.role.clone()),
            true => Scalar::Text { raw, escaped }.text()?.into_owned().into(),
        };
        messages.push(message(role, noted.content.text(body), extras));
    }
    Some(())
}

/// The members at `spans` (key and value) as one JSON object, as the
/// client wrote them, and its index (see [`object_of`]).
fn json_object(body: &Bytes, spans: &[(Range<usize>, Range<usize>)]) -> Option<(Bytes, Vec<u32>)> {
    let members = spans
        .iter()
        .map(|(key, value)| Some((text_at(body, key)?, body.get(value.clone())?)))
        .collect::<Option<Vec<_>>>()?;
    Some(object_of(members))
}

/// `members` (keys as the cursor read them, without escapes; values the
/// JSON text it checked) as one JSON object, a later duplicate in the
/// first's place, and the index of where each member lies in it
/// (`RunInput.parameters_index`, [`framing::json_members`]): the Node takes
/// the members by it instead of reading the object again. Not parsed and
/// printed again by serde: an agent's `tools` are ~1 KB of schema each,
/// tens of them in a coding agent's turn (24 took the normalized Edge
/// ~600k instructions a request that way, issue 8).
fn object_of(members: Vec<(&str, &[u8])>) -> (Bytes, Vec<u32>) {
    let (object, index) = write_indexed(&last_wins(members));
    (object.into(), index)
}

/// What [`read_messages`] takes of a message.
#[derive(Clone, Copy)]
pub(super) struct MessageShape {
    /// Whether members other than `role` and `content` are skipped (a
    /// Responses item's: serde drops them) or noted as the message's extras
    /// (a chat's: serde keeps them).
    skips_others: bool,
    /// The content parts' types whose texts make the message's text.
    part_types: &'static [&'static str],
}

impl MessageShape {
    pub(super) const CHAT: Self = Self {
        skips_others: false,
        part_types: &["text"],
    };
    const RESPONSES_ITEM: Self = Self {
        skips_others: true,
        part_types: &["input_text", "output_text"],
    };
}

/// The spans of the messages array at `cursor` (the top object's member;
/// a cursor over `text`). `Some(None)` when the array was read through but
/// a content is not one this reader takes (parts of another type: an
/// image's, whose data URL is then read once, not again by a skip).
fn read_messages(
    cursor: &mut Cursor<'_, true>,
    text: &str,
    shape: MessageShape,
) -> Option<Option<Vec<MessageSpans>>> {
    let mut messages = Vec::new();
    let mut taken = true;
    cursor.array(|cursor| {
        let (mut role, mut content) = (None, ContentSpans::Text(0..0));
        let mut extras = Vec::new();
        cursor.object(|key, cursor| {
            match key {
                "role" => {
                    let start = cursor.position() + 1;
                    let Scalar::Text { escaped, .. } = cursor.scalar()? else {
                        return None;
                    };
                    role = Some((start..cursor.position() - 1, escaped));
                }
                "content" => match read_content(cursor, shape.part_types)? {
                    Some(spans) => content = spans,
                    None => taken = false,
                },
                // A value inside an item inside the array.
                _ if shape.skips_others => cursor.skip_any(MAX_SKIP_DEPTH - 3)?,
                _ => {
                    let start = cursor.position();
                    cursor.skip_any(MAX_SKIP_DEPTH - 3)?;
                    extras.push((span_of(text, key), start..cursor.position()));
                }
            }
            Some(())
        })?;
        let (role, role_escaped) = role?;
        messages.push(MessageSpans {
            role,
            role_escaped,
            content,
            extras,
        });
        Some(())
    })?;
    Some(taken.then_some(messages))
}

/// A message's `content` at `cursor`: a string's raw body; empty for
/// `null`; an array's parts, each an object of a `type` of `part_types`
/// and a string `text` (other members skipped, as serde's reading of a
/// part ignores them). `Some(None)` for an array with a part of another
/// type, or without a `text`, read through: serde's to read or refuse.
fn read_content(
    cursor: &mut Cursor<'_, true>,
    part_types: &[&str],
) -> Option<Option<ContentSpans>> {
    match cursor.peek()? {
        b'"' => raw_string(cursor).map(|text| Some(ContentSpans::Text(text))),
        b'[' => {
            let mut parts = Some(Vec::new());
            cursor.array(|cursor| {
                let (mut kind, mut text) = (None, None);
                cursor.object(|key, cursor| {
                    match key {
                        "type" => kind = Some(cursor.scalar()?.text()?),
                        "text" => text = Some(raw_string(cursor)?),
                        // A value inside a part inside a message.
                        _ => cursor.skip_any(MAX_SKIP_DEPTH - 5)?,
                    }
                    Some(())
                })?;
                match (kind, text, parts.as_mut()) {
                    (Some(kind), Some(text), Some(parts))
                        if part_types.contains(&kind.as_ref()) =>
                    {
                        parts.push(text);
                    }
                    _ => parts = None,
                }
                Some(())
            })?;
            Some(parts.map(ContentSpans::Parts))
        }
        _ => {
            let at = cursor.position();
            cursor
                .scalar()?
                .is_null()
                .then_some(Some(ContentSpans::Text(at..at)))
        }
    }
}

/// The raw body of the string at `cursor`; `None` for another value.
fn raw_string(cursor: &mut Cursor<'_, true>) -> Option<Range<usize>> {
    if cursor.peek()? != b'"' {
        return None;
    }
    let start = cursor.position() + 1;
    cursor.raw_string()?;
    Some(start..cursor.position() - 1)
}
