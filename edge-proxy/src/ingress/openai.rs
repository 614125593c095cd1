//! The OpenAI request shapes the Edge reads (Chat Completions, Responses)
//! and the response shapes it writes for normalized runs.
//!
//! Requests are parsed only as far as routing and the normalized path need:
//! `model`, `stream`, `stream_options.include_usage`, and — for normalized
//! runs — the messages and the remaining parameters. A tunnelled request is
//! forwarded as the client sent it (with at most `stream_options` added).

use bytes::Bytes;
use proto::v1::{ChatMessage, RunInput, Usage};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

use super::error::ApiError;

/// What the Edge needs from a Chat Completions or Responses request.
///
/// Only the routing fields are read when the request arrives; the rest of
/// the body is checked to be JSON and skipped. The whole object is parsed
/// again, on demand ([`ParsedRequest::object`]), only where it is needed:
/// a normalized run's input, or a tunnelled request that gets
/// `stream_options` added. A long stream so keeps its body's bytes (which
/// it holds anyway) and no tree of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    /// The model group asked for.
    pub model: String,
    /// Whether the client wants SSE.
    pub stream: bool,
    /// `stream_options.include_usage` (Chat Completions only).
    pub include_usage: bool,
    /// The request body as the client sent it (a JSON object).
    pub body: Bytes,
}

impl ParsedRequest {
    /// The request as a JSON object, for the normalized path and for
    /// re-encoding a tunnelled request when the Edge adds usage.
    pub fn object(&self) -> Result<Map<String, Value>, ApiError> {
        serde_json::from_slice(&self.body).map_err(|e| not_an_object(&self.body, &e))
    }

    /// Lets go of the body once the answer is committed: no attempt
    /// follows, so a long stream keeps no copy of its prompt.
    pub fn release_body(&mut self) {
        self.body = Bytes::new();
    }
}

/// The routing fields of a request body; every other member is skipped
/// (checked as JSON, nesting limit included, and not kept). Later duplicates win, as in a JSON object
/// parsed whole.
#[derive(Default)]
struct RoutingFields {
    model: Option<Value>,
    stream: Option<Value>,
    stream_options: Option<Value>,
}

/// A member name of a request body, as far as routing cares.
enum Member {
    Model,
    Stream,
    StreamOptions,
    Other,
}

impl<'de> Deserialize<'de> for Member {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Member;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Member, E> {
                Ok(match name {
                    "model" => Member::Model,
                    "stream" => Member::Stream,
                    "stream_options" => Member::StreamOptions,
                    _ => Member::Other,
                })
            }
        }
        deserializer.deserialize_identifier(Name)
    }
}

impl<'de> Deserialize<'de> for RoutingFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = RoutingFields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RoutingFields, A::Error> {
                let mut fields = RoutingFields::default();
                while let Some(member) = map.next_key::<Member>()? {
                    match member {
                        Member::Model => fields.model = Some(map.next_value()?),
                        Member::Stream => fields.stream = Some(map.next_value()?),
                        Member::StreamOptions => fields.stream_options = Some(map.next_value()?),
                        Member::Other => {
                            map.next_value::<Skipped>()?;
                        }
                    }
                }
                Ok(fields)
            }
        }
        deserializer.deserialize_map(Object)
    }
}

/// A JSON value read and dropped. Unlike `IgnoredAny` it goes through
/// `deserialize_any`, so serde_json's nesting limit (128) holds for the
/// members routing skips as it does for a parsed tree: a hostile body
/// nested 100,000 deep is refused here, not forwarded.
struct Skipped;

impl<'de> Deserialize<'de> for Skipped {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Skipped;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Skipped, E> {
                Ok(Skipped)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Skipped, E> {
                Ok(Skipped)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Skipped, E> {
                Ok(Skipped)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Skipped, E> {
                Ok(Skipped)
            }
            fn visit_str<E>(self, _: &str) -> Result<Skipped, E> {
                Ok(Skipped)
            }
            fn visit_unit<E>(self) -> Result<Skipped, E> {
                Ok(Skipped)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skipped, A::Error> {
                while seq.next_element::<Skipped>()?.is_some() {}
                Ok(Skipped)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skipped, A::Error> {
                while map.next_key::<Skipped>()?.is_some() {
                    map.next_value::<Skipped>()?;
                }
                Ok(Skipped)
            }
        }
        deserializer.deserialize_any(Any)
    }
}

/// The 400 for a body that did not parse as a JSON object: `invalid_json`
/// when it is not JSON at all, `invalid_request` when it is other JSON.
fn not_an_object(body: &[u8], error: &serde_json::Error) -> ApiError {
    if serde_json::from_slice::<Skipped>(body).is_ok() {
        ApiError::bad_request("invalid_request", "the request body must be a JSON object")
    } else {
        ApiError::bad_request(
            "invalid_json",
            format!("the request body is not valid JSON: {error}"),
        )
    }
}

/// Parses the common fields of a request body.
/// Takes the body: the parsed request holds it from here on.
pub fn parse(body: Bytes) -> Result<ParsedRequest, ApiError> {
    let fields: RoutingFields =
        serde_json::from_slice(&body).map_err(|e| not_an_object(&body, &e))?;
    let model = match fields.model {
        Some(Value::String(model)) if !model.is_empty() => model,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_model",
                "`model` must be a non-empty string",
            ));
        }
        None => {
            return Err(ApiError::bad_request(
                "missing_model",
                "`model` is required",
            ));
        }
    };
    let stream = match fields.stream {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_stream",
                "`stream` must be a boolean",
            ));
        }
    };
    let include_usage = fields
        .stream_options
        .as_ref()
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(ParsedRequest {
        model,
        stream,
        include_usage,
        body,
    })
}

/// The text of a message `content`: a string, null, or an array of parts
/// whose text parts are joined.
fn content_text(content: Option<Value>, text_types: &[&str]) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                match part.get("text").and_then(Value::as_str) {
                    Some(t) if text_types.contains(&kind) => text.push_str(t),
                    _ => {
                        return Err(ApiError::bad_request(
                            "unsupported_content",
                            format!(
                                "content part type {kind:?} is not supported by this model's provider"
                            ),
                        ));
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(ApiError::bad_request(
            "invalid_content",
            "message `content` must be a string or an array of parts",
        )),
    }
}

fn message(role: String, content: String, extra: Map<String, Value>) -> ChatMessage {
    ChatMessage {
        role,
        content,
        extra_json: if extra.is_empty() {
            Default::default()
        } else {
            Value::Object(extra).to_string().into()
        },
    }
}

/// The normalized input of a Chat Completions request. The parsed body is
/// taken apart, not copied: a message's text moves into the run as it is
/// (a long prompt is not cloned on its way to the link).
pub fn chat_input(request: &ParsedRequest) -> Result<RunInput, ApiError> {
    let mut object = request.object()?;
    let messages = match object.remove("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => messages,
        _ => {
            return Err(ApiError::bad_request(
                "missing_messages",
                "`messages` must be a non-empty array",
            ));
        }
    };
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let Value::Object(mut fields) = m else {
            return Err(ApiError::bad_request(
                "invalid_message",
                "each message must be an object",
            ));
        };
        let Some(Value::String(role)) = fields.remove("role") else {
            return Err(ApiError::bad_request(
                "invalid_message",
                "each message needs a string `role`",
            ));
        };
        let content = content_text(fields.remove("content"), &["text"])?;
        // What is left of the message is its extra fields.
        out.push(message(role, content, fields));
    }
    for routing in ["model", "stream", "stream_options"] {
        object.remove(routing);
    }
    Ok(RunInput {
        messages: out,
        parameters_json: Value::Object(object).to_string().into(),
    })
}

/// The normalized input of a Responses request: `instructions` as a system
/// message, then `input` (a string, or message items); taken apart as in
/// [`chat_input`].
pub fn responses_input(request: &ParsedRequest) -> Result<RunInput, ApiError> {
    let mut object = request.object()?;
    let mut messages = Vec::new();
    if let Some(Value::String(instructions)) = object.remove("instructions") {
        messages.push(message("system".to_owned(), instructions, Map::new()));
    }
    match object.remove("input") {
        Some(Value::String(text)) => messages.push(message("user".to_owned(), text, Map::new())),
        Some(Value::Array(items)) => {
            for item in items {
                let mut item = match item {
                    Value::Object(item) => item,
                    _ => Map::new(),
                };
                let Some(Value::String(role)) = item.remove("role") else {
                    return Err(ApiError::bad_request(
                        "invalid_input",
                        "only message items with a `role` are supported in `input`",
                    ));
                };
                let content = content_text(item.remove("content"), &["input_text", "output_text"])?;
                messages.push(message(role, content, Map::new()));
            }
        }
        _ => {
            return Err(ApiError::bad_request(
                "missing_input",
                "`input` must be a string or an array of messages",
            ));
        }
    }
    let mut params = Map::new();
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_tokens"),
    ] {
        if let Some(v) = object.remove(from) {
            params.insert(to.to_owned(), v);
        }
    }
    Ok(RunInput {
        messages,
        parameters_json: Value::Object(params).to_string().into(),
    })
}

/// Usage in the Chat Completions shape; breakdowns only when reported (F18).
pub fn chat_usage(usage: &Usage) -> Value {
    let mut out = json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    });
    if let Some(reasoning) = usage.reasoning_tokens {
        out["completion_tokens_details"] = json!({ "reasoning_tokens": reasoning });
    }
    if let Some(cached) = usage.cached_input_tokens {
        out["prompt_tokens_details"] = json!({ "cached_tokens": cached });
    }
    out
}

/// Usage in the Responses shape.
pub fn responses_usage(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "input_tokens_details": { "cached_tokens": usage.cached_input_tokens.unwrap_or(0) },
        "output_tokens_details": { "reasoning_tokens": usage.reasoning_tokens.unwrap_or(0) },
    })
}

/// One SSE event with a JSON payload: `data: …\n\n`, or with an event name.
pub fn sse(event: Option<&str>, data: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    if let Some(name) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_requests_become_normalized_input() {
        let body = br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},
            "temperature":0.5,"messages":[{"role":"system","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}],"name":"bob"}]}"#;
        let request = parse(Bytes::from_static(body)).unwrap();
        assert_eq!(request.model, "m");
        assert!(request.stream && request.include_usage);
        let input = chat_input(&request).unwrap();
        assert_eq!(input.messages.len(), 2);
        assert_eq!(input.messages[1].content, "hi there");
        assert_eq!(&input.messages[1].extra_json[..], br#"{"name":"bob"}"#);
        assert_eq!(&input.parameters_json[..], br#"{"temperature":0.5}"#);
    }

    #[test]
    fn bad_requests_are_typed_400s() {
        for (body, code) in [
            (&b"{nope"[..], "invalid_json"),
            (b"[1]", "invalid_request"),
            (b"{}", "missing_model"),
            (br#"{"model":7}"#, "invalid_model"),
            (br#"{"model":"m","stream":"yes"}"#, "invalid_stream"),
        ] {
            let error = parse(Bytes::from_static(body)).unwrap_err();
            assert_eq!((error.status, error.code), (400, code), "{body:?}");
        }
        let no_messages = parse(Bytes::from_static(br#"{"model":"m","messages":[]}"#)).unwrap();
        assert_eq!(
            chat_input(&no_messages).unwrap_err().code,
            "missing_messages"
        );
        let image = parse(Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}"#,
        ))
        .unwrap();
        assert_eq!(chat_input(&image).unwrap_err().code, "unsupported_content");
    }

    #[test]
    fn routing_reads_its_fields_like_a_whole_object_and_keeps_none_of_the_rest() {
        // Later duplicates win; other members of any shape are skipped.
        let body = Bytes::from_static(
            br#"{"model":"a","messages":[{"role":"user","content":"x\u00e9"}],"stream":false,
                "tools":[{"deep":[[{"x":null}]]}],"model":"b","stream":true,
                "stream_options":{"include_usage":true,"other":1}}"#,
        );
        let request = parse(body.clone()).unwrap();
        assert_eq!(request.model, "b");
        assert!(request.stream && request.include_usage);
        assert_eq!(request.body, body, "the body is the client's bytes");
        let object = request.object().unwrap();
        assert_eq!(object["model"], "b");
        assert_eq!(object["messages"][0]["content"], "xé");
        // An escaped member name is still the member; null is not a model.
        for (body, code) in [
            (&br#"{"mod\u0065l":null}"#[..], "invalid_model"),
            (br#"{"model":"m","stream":null,"stream_options":7}"#, ""),
            (br#"{"model":"m"} trailing"#, "invalid_json"),
            (br#""just a string""#, "invalid_request"),
            (b"", "invalid_json"),
        ] {
            match parse(Bytes::from_static(body)) {
                Ok(request) => {
                    assert_eq!(code, "", "{body:?}");
                    assert!(!request.stream && !request.include_usage);
                }
                Err(error) => assert_eq!((error.status, error.code), (400, code), "{body:?}"),
            }
        }
        // Skipped members keep serde_json's nesting limit (128).
        let deep = format!(
            r#"{{"model":"m","x":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let error = parse(Bytes::from(deep)).unwrap_err();
        assert_eq!((error.status, error.code), (400, "invalid_json"));
    }

    #[test]
    fn a_committed_request_lets_go_of_its_body_and_keeps_its_routing() {
        let body = Bytes::from(br#"{"model":"m","stream":true,"messages":[]}"#.to_vec());
        let mut request = parse(body.clone()).unwrap();
        assert!(!body.is_unique());
        request.release_body();
        assert!(body.is_unique(), "the parsed request still holds the body");
        assert_eq!((request.model.as_str(), request.stream), ("m", true));
    }

    #[test]
    fn responses_requests_become_normalized_input() {
        let request = parse(Bytes::from_static(
            br#"{"model":"m","instructions":"sys","input":"hello","max_output_tokens":9}"#,
        ))
        .unwrap();
        let input = responses_input(&request).unwrap();
        assert_eq!(input.messages.len(), 2);
        assert_eq!(input.messages[0].role, "system");
        assert_eq!(input.messages[1].content, "hello");
        assert_eq!(&input.parameters_json[..], br#"{"max_tokens":9}"#);
    }

    #[test]
    fn usage_breakdowns_appear_only_when_reported() {
        let plain = chat_usage(&Usage {
            input_tokens: 3,
            output_tokens: 4,
            ..Usage::default()
        });
        assert_eq!(plain["total_tokens"], 7);
        assert!(plain.get("completion_tokens_details").is_none());
        let detailed = chat_usage(&Usage {
            reasoning_tokens: Some(2),
            cached_input_tokens: Some(1),
            ..Usage::default()
        });
        assert_eq!(detailed["completion_tokens_details"]["reasoning_tokens"], 2);
        assert_eq!(detailed["prompt_tokens_details"]["cached_tokens"], 1);
    }
}
