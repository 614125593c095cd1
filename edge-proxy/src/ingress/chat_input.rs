//! A Chat Completions request's normalized input, read from its body in one
//! pass straight into the run's messages.
//!
//! A message's text goes to the run as a slice of the client's body when
//! the JSON string has no escapes (serde_json then hands out the body's own
//! bytes), and as the unescaped copy serde_json makes otherwise. Nothing
//! else of a message is kept twice: no `serde_json::Value` tree of the
//! whole body is built first, which had copied every text into it, then
//! copied it again into the run.
//!
//! The body was checked whole by routing ([`super::parse`]: JSON, UTF-8,
//! nesting limit), so the only errors here are the request's shape, each a
//! typed 400 as before: `missing_messages`, `invalid_message`,
//! `invalid_content`, `unsupported_content`.

use std::fmt;

use bytes::Bytes;
use proto::v1::RunInput;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{ParsedRequest, content_text, invalid_content, message, not_an_object};
use crate::ingress::error::ApiError;

/// The normalized input of a Chat Completions request: its messages, and
/// every member but the messages and routing's as the run's parameters.
pub fn chat_input(request: &ParsedRequest) -> Result<RunInput, ApiError> {
    let body: ChatBody<'_> =
        serde_json::from_slice(&request.body).map_err(|e| not_an_object(&request.body, &e))?;
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
        let content = match content {
            Text::Borrowed(text) => share_or_copy(&request.body, text),
            Text::Owned(text) => Bytes::from(text),
            Text::Null => Bytes::new(),
            Text::Parts(parts) => Bytes::from(content_text(Some(Value::Array(parts)), &["text"])?),
            Text::Invalid => return Err(invalid_content()),
        };
        out.push(message(role, content, extra));
    }
    Ok(RunInput {
        messages: out,
        parameters_json: Value::Object(body.parameters).to_string().into(),
    })
}

/// `text` as a slice of `body` when it is one (what serde_json borrows from
/// the body it reads), a copy otherwise.
fn share_or_copy(body: &Bytes, text: &str) -> Bytes {
    let range = body.as_ptr_range();
    let text_range = text.as_bytes().as_ptr_range();
    if range.start <= text_range.start && text_range.end <= range.end {
        body.slice_ref(text.as_bytes())
    } else {
        Bytes::copy_from_slice(text.as_bytes())
    }
}

/// The body's members as the run needs them. Later duplicates win, as in a
/// JSON object parsed whole.
struct ChatBody<'a> {
    messages: Option<Messages<'a>>,
    parameters: Map<String, Value>,
}

/// The `messages` member.
enum Messages<'a> {
    List(Vec<MessageIn<'a>>),
    /// Not an array.
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

impl<'de> Deserialize<'de> for ChatBody<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Body;
        impl<'de> Visitor<'de> for Body {
            type Value = ChatBody<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut body = ChatBody {
                    messages: None,
                    parameters: Map::new(),
                };
                while let Some(name) = map.next_key::<String>()? {
                    if name == "messages" {
                        body.messages = Some(map.next_value()?);
                    } else if ROUTING.contains(&name.as_str()) {
                        map.next_value::<IgnoredAny>()?;
                    } else {
                        body.parameters.insert(name, map.next_value()?);
                    }
                }
                Ok(body)
            }
        }
        deserializer.deserialize_map(Body)
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
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut messages = Vec::new();
                while let Some(message) = seq.next_element()? {
                    messages.push(message);
                }
                Ok(Messages::List(messages))
            }
            other_values!(Messages::Other; unit, str, map);
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
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut parts = Vec::new();
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(Text::Parts(parts))
            }
            other_values!(Text::Invalid; map);
        }
        deserializer.deserialize_any(Content)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::ingress::openai::parse;

    fn input(body: &str) -> Result<RunInput, ApiError> {
        chat_input(&parse(Bytes::from(body.to_owned())).expect("routing"))
    }

    #[test]
    fn a_text_without_escapes_is_a_slice_of_the_clients_body() {
        let prompt = "p".repeat(100_000);
        let body = Bytes::from(format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{prompt}"}}]}}"#
        ));
        let input = chat_input(&parse(body.clone()).unwrap()).unwrap();
        let text = &input.messages[0].content;
        assert_eq!(text, prompt.as_str());
        assert!(
            body.as_ptr_range().contains(&text.as_ptr()),
            "the text was copied"
        );
    }

    #[test]
    fn a_text_with_escapes_is_unescaped() {
        let input =
            input(r#"{"model":"m","messages":[{"role":"user","content":"a\n\"q\" \u00e9"}]}"#);
        assert_eq!(input.unwrap().messages[0].content, "a\n\"q\" é");
    }

    #[test]
    fn shapes_a_run_cannot_take_are_typed_400s() {
        for (messages, code) in [
            ("7", "missing_messages"),
            ("null", "missing_messages"),
            (r#""hi""#, "missing_messages"),
            (r#"{"role":"user"}"#, "missing_messages"),
            ("[]", "missing_messages"),
            ("[1]", "invalid_message"),
            ("[null]", "invalid_message"),
            (r#"["hi"]"#, "invalid_message"),
            ("[[{}]]", "invalid_message"),
            (r#"[{"content":"x"}]"#, "invalid_message"),
            (r#"[{"role":1,"content":"x"}]"#, "invalid_message"),
            (r#"[{"role":"user","content":1}]"#, "invalid_content"),
            (r#"[{"role":"user","content":true}]"#, "invalid_content"),
            (
                r#"[{"role":"user","content":{"text":"x"}}]"#,
                "invalid_content",
            ),
            (
                r#"[{"role":"user","content":[{"type":"image_url"}]}]"#,
                "unsupported_content",
            ),
        ] {
            let error = input(&format!(r#"{{"model":"m","messages":{messages}}}"#)).unwrap_err();
            assert_eq!((error.status, error.code), (400, code), "{messages}");
        }
        let missing = input(r#"{"model":"m"}"#).unwrap_err();
        assert_eq!(missing.code, "missing_messages");
    }

    #[test]
    fn later_duplicates_win_and_routing_members_are_not_parameters() {
        let input = input(
            r#"{"temperature":1,"messages":[{"role":"a","content":"x"}],"model":"m",
                "temperature":2,"stream":false,"stream_options":null,
                "messages":[{"role":"user","content":"y","content":"z","name":"n","name":"o"}]}"#,
        )
        .unwrap();
        assert_eq!(input.messages.len(), 1);
        let message = &input.messages[0];
        assert_eq!(
            (message.role.as_str(), &message.content[..]),
            ("user", &b"z"[..])
        );
        assert_eq!(&message.extra_json[..], br#"{"name":"o"}"#);
        assert_eq!(&input.parameters_json[..], br#"{"temperature":2}"#);
    }

    /// What a body's messages and parameters are, read from a whole tree:
    /// the reading this module replaced, kept as the oracle.
    fn from_tree(body: &Value) -> (Vec<(String, String, String)>, String) {
        let mut object = body.as_object().unwrap().clone();
        let messages = object.remove("messages").unwrap();
        let messages = messages.as_array().unwrap().iter().map(|m| {
            let mut fields = m.as_object().unwrap().clone();
            let role = fields.remove("role").unwrap().as_str().unwrap().to_owned();
            let content = match fields.remove("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(text)) => text,
                Some(Value::Array(parts)) => {
                    parts.iter().map(|p| p["text"].as_str().unwrap()).collect()
                }
                Some(other) => panic!("{other}"),
            };
            let extra = if fields.is_empty() {
                String::new()
            } else {
                Value::Object(fields).to_string()
            };
            (role, content, extra)
        });
        let messages = messages.collect();
        for routing in ROUTING {
            object.remove(routing);
        }
        (messages, Value::Object(object).to_string())
    }

    fn content() -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            any::<String>().prop_map(|t| Some(json!(t))),
            "[a-z \\n\"\\\\]{0,20}".prop_map(|t| Some(json!(t))),
            Just(None),
            Just(Some(Value::Null)),
            prop::collection::vec(any::<String>(), 0..3).prop_map(|parts| {
                Some(Value::Array(
                    parts
                        .into_iter()
                        .map(|t| json!({"type": "text", "text": t}))
                        .collect(),
                ))
            }),
        ]
    }

    proptest! {
        /// Any messages (texts of any characters, escaped or not, null,
        /// absent, in parts; extras or none) and parameters come out as a
        /// parsed tree of the same body gives them.
        #[test]
        fn the_input_is_what_a_whole_tree_gives(
            messages in prop::collection::vec(
                ("[a-z]{1,8}", content(), prop::option::of(any::<String>())), 1..4),
            temperature in prop::option::of(0u32..3),
        ) {
            let messages: Vec<Value> = messages.into_iter().map(|(role, content, name)| {
                let mut m = json!({"role": role});
                if let Some(content) = content { m["content"] = content; }
                if let Some(name) = name { m["name"] = json!(name); }
                m
            }).collect();
            let mut body = json!({"model": "m", "stream": true, "messages": messages});
            if let Some(t) = temperature { body["temperature"] = json!(t); }
            let got = input(&body.to_string()).unwrap();
            let got_messages: Vec<_> = got.messages.iter().map(|m| (
                m.role.clone(),
                String::from_utf8(m.content.to_vec()).unwrap(),
                String::from_utf8(m.extra_json.to_vec()).unwrap(),
            )).collect();
            let (messages, parameters) = from_tree(&body);
            prop_assert_eq!(got_messages, messages);
            prop_assert_eq!(String::from_utf8(got.parameters_json.to_vec()).unwrap(), parameters);
        }
    }
}
