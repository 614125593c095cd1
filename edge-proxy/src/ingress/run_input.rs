//! A normalized request's input (Chat Completions or Responses), read from
//! its body in one pass straight into the run's messages.
//!
//! A message's text goes to the run as a slice of the client's body when
//! the JSON string has no escapes (serde_json then hands out the body's own
//! bytes), and as the unescaped copy serde_json makes otherwise. Nothing
//! else of a message is kept twice: no `serde_json::Value` tree of the
//! whole body is built first, which had copied every text into it, then
//! copied it again into the run.
//!
//! A chat request of the common shapes (messages of a `role`, a string,
//! `null` or text-part `content`, and any other members, such as an
//! agent's `tool_calls`) is made from what routing's pass noted of it
//! ([`quick`]: the same input, its texts as the client escaped them, read
//! once); any other body is read here by serde.
//!
//! The body was checked whole by routing ([`super::parse`]: JSON, UTF-8,
//! nesting limit), so the only errors here are the request's shape, each a
//! typed 400: `missing_messages`, `invalid_message`, `missing_input`,
//! `invalid_input`, `invalid_content`, `unsupported_content`.

use std::fmt;

use bytes::Bytes;
use proto::v1::{ChatMessage, RunInput};
use serde::de::{
    Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::{Map, Value};

use super::{ParsedRequest, read_json};
use crate::ingress::error::ApiError;

/// The normalized input of a Chat Completions request: its messages, and
/// every member but the messages and routing's as the run's parameters.
/// Made from routing's spans without serde when the body has the common
/// shape (`quick`), read by serde otherwise.
pub fn chat_input(request: &ParsedRequest) -> Result<RunInput, ApiError> {
    let spans = request.input_spans.as_deref();
    match spans.and_then(|spans| quick::chat_input(&request.body, spans)) {
        Some(input) => Ok(input),
        None => chat_input_by_serde(request),
    }
}

/// [`chat_input`] read by serde: every shape, and every error.
fn chat_input_by_serde(request: &ParsedRequest) -> Result<RunInput, ApiError> {
    let body = read(request, Api::Chat)?;
    let messages = match body.messages {
        Some(Messages::List(messages)) if !messages.is_empty() => messages,
        _ => {
            return Err(ApiError::bad_request(
                "missing_messages",
                "`messages` must be a non-empty array",
            ));
        }
    };
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let MessageIn::Object {
            role,
            content,
            extra,
        } = m
        else {
            return Err(ApiError::bad_request(
                "invalid_message",
                "each message must be an object",
            ));
        };
        let Some(Value::String(role)) = role else {
            return Err(ApiError::bad_request(
                "invalid_message",
                "each message needs a string `role`",
            ));
        };
        let content = text_of(&request.body, content, &["text"])?;
        out.push(message(role, content, extra_json(extra)));
    }
    Ok(RunInput {
        messages: out,
        parameters_json: Value::Object(body.parameters).to_string().into(),
        escaped_content: false,
        parameters_index: Vec::new(),
    })
}

/// The normalized input of a Responses request: `instructions` (a string)
/// as a system message, then `input` (a string, or message items, whose
/// other members are dropped); `temperature`, `top_p` and
/// `max_output_tokens` (as `max_tokens`) as the parameters.
/// Made from routing's spans without serde when `input` is a string or
/// message items with string (or `null`) texts (`quick`), read by serde
/// otherwise.
pub fn responses_input(request: &ParsedRequest) -> Result<RunInput, ApiError> {
    let spans = request.input_spans.as_deref();
    match spans.and_then(|spans| quick::responses_input(&request.body, spans)) {
        Some(input) => Ok(input),
        None => responses_input_by_serde(request),
    }
}

/// [`responses_input`] read by serde: every shape, and every error.
fn responses_input_by_serde(request: &ParsedRequest) -> Result<RunInput, ApiError> {
    let body = read(request, Api::Responses)?;
    let mut messages: Vec<ChatMessage> = Vec::new();
    if let Some(text @ (Text::Borrowed(_) | Text::Owned(_))) = body.instructions {
        let text = text_of(&request.body, text, &[])?;
        messages.push(message(Bytes::from_static(b"system"), text, Bytes::new()));
    }
    match body.messages {
        Some(Messages::Text(text)) => {
            let text = text_of(&request.body, text, &[])?;
            messages.push(message(Bytes::from_static(b"user"), text, Bytes::new()));
        }
        Some(Messages::List(items)) => {
            for item in items {
                let MessageIn::Object {
                    role: Some(Value::String(role)),
                    content,
                    ..
                } = item
                else {
                    return Err(ApiError::bad_request(
                        "invalid_input",
                        "only message items with a `role` are supported in `input`",
                    ));
                };
                let content = text_of(&request.body, content, &["input_text", "output_text"])?;
                messages.push(message(role, content, Bytes::new()));
            }
        }
        _ => {
            return Err(ApiError::bad_request(
                "missing_input",
                "`input` must be a string or an array of messages",
            ));
        }
    }
    Ok(RunInput {
        messages,
        parameters_json: Value::Object(body.parameters).to_string().into(),
        escaped_content: false,
        parameters_index: Vec::new(),
    })
}

/// The Responses members kept as parameters, and their names in the run.
const RESPONSES_PARAMETERS: [(&str, &str); 3] = [
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("max_output_tokens", "max_tokens"),
];

/// Reads `request`'s body as `api`'s request.
fn read(request: &ParsedRequest, api: Api) -> Result<RunBody<'_>, ApiError> {
    read_json(&request.body, api)
}

/// A message's text: a string as it is, `null` or absent as empty, an array
/// of parts of `part_types` joined.
fn text_of(body: &Bytes, text: Text<'_>, part_types: &[&str]) -> Result<Bytes, ApiError> {
    Ok(match text {
        Text::Borrowed(text) => share_or_copy(body, text),
        Text::Owned(text) => Bytes::from(text),
        Text::Null => Bytes::new(),
        Text::Parts(parts) => Bytes::from(parts_text(parts, part_types)?),
        Text::Invalid => return Err(invalid_content()),
    })
}

/// The text of a `content` array: its parts of `part_types` joined; a part
/// of another type is a 400.
fn parts_text(parts: Vec<Value>, part_types: &[&str]) -> Result<String, ApiError> {
    let mut text = String::new();
    for part in parts {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        match part.get("text").and_then(Value::as_str) {
            Some(t) if part_types.contains(&kind) => text.push_str(t),
            _ => {
                return Err(ApiError::bad_request(
                    "unsupported_content",
                    format!("content part type {kind:?} is not supported by this model's provider"),
                ));
            }
        }
    }
    Ok(text)
}

/// The 400 for a message `content` of another type.
fn invalid_content() -> ApiError {
    ApiError::bad_request(
        "invalid_content",
        "message `content` must be a string or an array of parts",
    )
}

/// A run's message; `extra_json` its extras (members other than `role`
/// and `content`) as a JSON object, empty when there are none.
fn message(role: impl Into<Bytes>, content: Bytes, extra_json: Bytes) -> ChatMessage {
    ChatMessage {
        role: role.into(),
        content,
        extra_json,
    }
}

/// A message's extras as the run's `extra_json`: empty when there are none.
fn extra_json(extra: Map<String, Value>) -> Bytes {
    if extra.is_empty() {
        Bytes::new()
    } else {
        Value::Object(extra).to_string().into()
    }
}

/// `text` as a slice of `body` when it is one (what serde_json borrows from
/// the body it reads), a copy otherwise.
fn share_or_copy(body: &Bytes, text: &str) -> Bytes {
    framing::shared_bytes::slice_within(body, text.as_bytes())
        .unwrap_or_else(|| Bytes::copy_from_slice(text.as_bytes()))
}

/// Which request a body is.
#[derive(Clone, Copy)]
enum Api {
    Chat,
    Responses,
}

/// The body's members as the run needs them. Later duplicates win, as in a
/// JSON object parsed whole.
struct RunBody<'a> {
    /// Chat's `messages`, or Responses' `input`.
    messages: Option<Messages<'a>>,
    /// Responses' `instructions`.
    instructions: Option<Text<'a>>,
    parameters: Map<String, Value>,
}

/// Chat's `messages` or Responses' `input`.
enum Messages<'a> {
    List(Vec<MessageIn<'a>>),
    /// A string (Responses' `input` may be one).
    Text(Text<'a>),
    /// Any other value.
    Other,
}

/// One element of `messages`.
enum MessageIn<'a> {
    /// `role`, `content`, and the rest as the message's extras.
    Object {
        role: Option<Value>,
        content: Text<'a>,
        extra: Map<String, Value>,
    },
    /// Not an object.
    Other,
}

/// A message's `content`.
enum Text<'a> {
    /// A string without escapes: the body's own bytes.
    Borrowed(&'a str),
    /// A string with escapes, unescaped.
    Owned(String),
    /// Absent or `null`.
    Null,
    /// An array of parts.
    Parts(Vec<Value>),
    /// Any other value.
    Invalid,
}

/// The members routing reads, which are not the run's parameters.
const ROUTING: [&str; 3] = ["model", "stream", "stream_options"];

/// `visit_*` methods that answer `$other` for the JSON values a visitor
/// does not expect: the scalars always, and strings, arrays or objects as
/// listed (arrays and objects skipped whole).
macro_rules! other_values {
    ($other:expr; $($kind:ident),*) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($other)
        }
        $(other_values!(@ $kind $other);)*
    };
    (@ unit $other:expr) => {
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($other)
        }
    };
    (@ str $other:expr) => {
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($other)
        }
    };
    (@ seq $other:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($other)
        }
    };
    (@ map $other:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_key::<IgnoredAny>()?.is_some() {
                map.next_value::<IgnoredAny>()?;
            }
            Ok($other)
        }
    };
}

impl<'de> DeserializeSeed<'de> for Api {
    type Value = RunBody<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        struct Body(Api);
        impl<'de> Visitor<'de> for Body {
            type Value = RunBody<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut body = RunBody {
                    messages: None,
                    instructions: None,
                    parameters: Map::new(),
                };
                while let Some(name) = map.next_key::<String>()? {
                    match (self.0, name.as_str()) {
                        (Api::Chat, "messages") | (Api::Responses, "input") => {
                            body.messages = Some(map.next_value()?);
                        }
                        (Api::Responses, "instructions") => {
                            body.instructions = Some(map.next_value()?);
                        }
                        (Api::Chat, member) if ROUTING.contains(&member) => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        (Api::Chat, _) => {
                            body.parameters.insert(name, map.next_value()?);
                        }
                        (Api::Responses, member) => {
                            match RESPONSES_PARAMETERS
                                .iter()
                                .find(|(from, _)| *from == member)
                            {
                                Some((_, to)) => {
                                    body.parameters.insert((*to).to_owned(), map.next_value()?);
                                }
                                None => {
                                    map.next_value::<IgnoredAny>()?;
                                }
                            }
                        }
                    }
                }
                Ok(body)
            }
        }
        deserializer.deserialize_map(Body(self))
    }
}

impl<'de> Deserialize<'de> for Messages<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Messages<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                collect(seq).map(Messages::List)
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Messages::Text(Text::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Messages::Text(Text::Owned(text.to_owned())))
            }
            other_values!(Messages::Other; unit, map);
        }
        deserializer.deserialize_any(List)
    }
}

impl<'de> Deserialize<'de> for MessageIn<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Message;
        impl<'de> Visitor<'de> for Message {
            type Value = MessageIn<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut role, mut content, mut extra) = (None, Text::Null, Map::new());
                while let Some(name) = map.next_key::<String>()? {
                    match name.as_str() {
                        "role" => role = Some(map.next_value()?),
                        "content" => content = map.next_value()?,
                        _ => {
                            extra.insert(name, map.next_value()?);
                        }
                    }
                }
                Ok(MessageIn::Object {
                    role,
                    content,
                    extra,
                })
            }
            other_values!(MessageIn::Other; unit, str, seq);
        }
        deserializer.deserialize_any(Message)
    }
}

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Content;
        impl<'de> Visitor<'de> for Content {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Text::Borrowed(text))
            }
            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Text::Owned(text.to_owned()))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Text::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                collect(seq).map(Text::Parts)
            }
            other_values!(Text::Invalid; map);
        }
        deserializer.deserialize_any(Content)
    }
}

/// An array's elements, each read as `T`.
fn collect<'de, A: SeqAccess<'de>, T: Deserialize<'de>>(mut seq: A) -> Result<Vec<T>, A::Error> {
    let mut out = Vec::new();
    while let Some(element) = seq.next_element()? {
        out.push(element);
    }
    Ok(out)
}

#[path = "run_input_quick.rs"]
mod quick;
pub(super) use quick::{InputGather, InputSpans};

#[cfg(test)]
#[path = "run_input_tests.rs"]
mod tests;
