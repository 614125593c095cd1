//! A chat request body for a provider: the adapter's top-level fields and
//! the run's messages under `"messages"`, serialized straight from the run.
//!
//! Each message is its `extra_json` object's fields, then `role` and
//! `content` (which win over extra fields of the same name). The text of a
//! message is escaped into the body once and never copied into a JSON tree
//! first: a 1 MB prompt had cost the Node a clone of its text into a
//! `serde_json::Value`, fresh pages for it, and the serialization on top.

use proto::v1::{ChatMessage, ExecutionFailure, RunInput};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use super::json_object;

/// `fields` with the run's messages as `"messages"` (a `messages` among
/// `fields` is replaced), as JSON bytes. An `extra_json` that is not a
/// JSON object is the client's error.
pub(super) fn with_messages(
    mut fields: Map<String, Value>,
    input: &RunInput,
) -> Result<Vec<u8>, ExecutionFailure> {
    fields.remove("messages");
    let extras = input
        .messages
        .iter()
        .map(|m| json_object(&m.extra_json, "message extra_json"))
        .collect::<Result<Vec<_>, _>>()?;
    let body = Body {
        fields: &fields,
        messages: Messages {
            messages: &input.messages,
            extras: &extras,
        },
    };
    // Sized for the texts up front: a body grown by doubling had copied a
    // long prompt over again at each step. Writing into a Vec cannot fail.
    let mut out = Vec::with_capacity(estimated_len(input));
    Ok(serde_json::to_writer(&mut out, &body)
        .map(|()| out)
        .unwrap_or_default())
}

/// About the body's length: every message's parts and the parameters,
/// with room for keys, quotes and a few escapes.
fn estimated_len(input: &RunInput) -> usize {
    let messages: usize = input
        .messages
        .iter()
        .map(|m| m.role.len() + m.content.len() + m.extra_json.len() + 64)
        .sum();
    messages + input.parameters_json.len() + 256
}

struct Body<'a> {
    fields: &'a Map<String, Value>,
    messages: Messages<'a>,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len() + 1))?;
        for (key, value) in self.fields {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("messages", &self.messages)?;
        map.end()
    }
}

/// The run's messages, each with its parsed `extra_json` object.
struct Messages<'a> {
    messages: &'a [ChatMessage],
    extras: &'a [Map<String, Value>],
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.messages.len()))?;
        for (message, extra) in self.messages.iter().zip(self.extras) {
            seq.serialize_element(&Message { message, extra })?;
        }
        seq.end()
    }
}

struct Message<'a> {
    message: &'a ChatMessage,
    extra: &'a Map<String, Value>,
}

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let extra = self
            .extra
            .iter()
            .filter(|(key, _)| !matches!(key.as_str(), "role" | "content"));
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in extra {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("role", &self.message.role)?;
        map.serialize_entry("content", &self.message.content)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(role: &str, content: &str, extra: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            extra_json: extra.as_bytes().to_vec().into(),
        }
    }

    #[test]
    fn the_body_is_the_fields_and_each_message_with_its_extras() {
        let input = RunInput {
            messages: vec![
                message("system", "be \"brief\"\n", ""),
                message(
                    "user",
                    "hi",
                    r#"{"name":"ann","role":"ignored","images":["x"]}"#,
                ),
            ],
            ..RunInput::default()
        };
        let mut fields = Map::new();
        fields.insert("model".into(), json!("m"));
        fields.insert("stream".into(), json!(true));
        fields.insert("messages".into(), json!("replaced"));
        let body: Value = serde_json::from_slice(&with_messages(fields, &input).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "stream": true,
                "messages": [
                    {"role": "system", "content": "be \"brief\"\n"},
                    {"name": "ann", "images": ["x"], "role": "user", "content": "hi"},
                ],
            })
        );
    }

    #[test]
    fn an_extra_that_is_not_an_object_is_the_clients_error() {
        let input = RunInput {
            messages: vec![message("user", "hi", "[1]")],
            ..RunInput::default()
        };
        let error = with_messages(Map::new(), &input).unwrap_err();
        assert!(error.message.contains("message extra_json"), "{error:?}");
    }
}
