//! The OpenAI request shapes the Edge reads (Chat Completions, Responses)
//! and the response shapes it writes for normalized runs.
//!
//! Requests are parsed only as far as routing and the normalized path need:
//! `model`, `stream`, `stream_options.include_usage`, and — for normalized
//! runs — the messages and the remaining parameters. A tunnelled request is
//! forwarded as the client sent it (with at most `stream_options` added).

use std::marker::PhantomData;

use bytes::Bytes;
use proto::v1::Usage;
use serde::Serialize;
use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::json_out::{JsonOut, sse_event};

#[path = "run_input.rs"]
mod run_input;
use run_input::{InputGather, InputSpans};
pub use run_input::{chat_input, responses_input};

/// What the Edge needs from a Chat Completions or Responses request.
///
/// Only the routing fields are read when the request arrives; the rest of
/// the body is checked to be JSON and skipped. A normalized run's input is
/// read from the body in a second, typed pass ([`chat_input`],
/// [`responses_input`]); a tree of the whole object ([`ParsedRequest::object`])
/// only for a tunnelled stream that has its own `stream_options`. A long
/// stream so keeps its body's bytes (which it holds anyway) and no tree of
/// it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    /// The model group asked for.
    pub model: String,
    /// Whether the client wants SSE.
    pub stream: bool,
    /// `stream_options.include_usage` (Chat Completions only).
    pub include_usage: bool,
    /// Whether the body has a `stream_options` member, of any value.
    pub has_stream_options: bool,
    /// The request body as the client sent it (a JSON object).
    pub body: Bytes,
    /// Where a run's input lies in `body` (a chat's messages of the common
    /// shape, or a Responses request's members), as routing found it
    /// ([`run_input`]'s quick reader). Boxed: a stream holds its request
    /// for its whole life, and most are tunnelled.
    pub(crate) input_spans: Option<Box<InputSpans>>,
}

impl ParsedRequest {
    /// The request as a JSON object, for re-encoding a tunnelled request
    /// whose own `stream_options` the Edge sets `include_usage` in.
    pub fn object(&self) -> Result<Map<String, Value>, ApiError> {
        read_json(&self.body, PhantomData)
    }

    /// The body with `stream_options.include_usage` set, for a tunnelled
    /// stream whose client did not ask for usage.
    ///
    /// Without a `stream_options` member (what clients send unless they ask
    /// for usage themselves) the member is added before the object's closing
    /// brace, and the client's bytes are otherwise kept as they are: a long
    /// prompt is copied once, not parsed into a tree and escaped again (a
    /// megabyte of prompt cost ~2 ms that way). With one (say
    /// `{"include_usage":false}`) the object is parsed and re-encoded with
    /// the flag set.
    pub fn body_asking_usage(&self) -> Result<Bytes, ApiError> {
        if !self.has_stream_options
            && let Some(body) = with_last_member(&self.body, USAGE_MEMBER)
        {
            return Ok(body);
        }
        let mut object = self.object()?;
        match object.entry("stream_options").or_insert(Value::Null) {
            Value::Object(options) => {
                options.insert("include_usage".into(), Value::Bool(true));
            }
            // `null`, or a value the provider would refuse anyway.
            other => *other = json!({"include_usage": true}),
        }
        Ok(Bytes::from(Value::Object(object).to_string()))
    }

    /// Lets go of the body once the answer is committed: no attempt
    /// follows, so a long stream keeps no copy of its prompt.
    pub fn release_body(&mut self) {
        self.body = Bytes::new();
        self.input_spans = None;
    }
}

/// The member [`ParsedRequest::body_asking_usage`] adds.
const USAGE_MEMBER: &[u8] = br#""stream_options":{"include_usage":true}"#;

/// JSON's whitespace (RFC 8259): what may surround a value.
fn is_json_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// `object` (the bytes of one JSON object, surrounding whitespace allowed)
/// with `member` (`"name":value`) added as its last member, or `None` when
/// `object` does not end with `}`.
fn with_last_member(object: &[u8], member: &[u8]) -> Option<Bytes> {
    let close = object.iter().rposition(|&b| !is_json_space(b))?;
    if object[close] != b'}' {
        return None;
    }
    // A value never ends with `{`: only an empty object has it before `}`.
    let empty = object[..close].iter().rev().find(|&&b| !is_json_space(b)) == Some(&b'{');
    let mut out = Vec::with_capacity(object.len() + member.len() + 1);
    out.extend_from_slice(&object[..close]);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(member);
    out.extend_from_slice(&object[close..]);
    Some(Bytes::from(out))
}

/// The routing fields of a request body; every other member is skipped
/// (checked as JSON, nesting limit included, and not kept). Later
/// duplicates win, as in a JSON object parsed whole.
#[derive(Debug, Default, PartialEq)]
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

/// [`RoutingFields`] read by [`framing::json_quick`]'s cursor: the skipped
/// members' strings 64 bytes a step instead of serde's ~2.4 instructions a
/// byte (a long prompt's whole length: 78 % of the Edge's instructions on a
/// tunnelled 100 KB prompt). Each routing field's own value, a few bytes,
/// is still read by serde. The other members go to an [`InputGather`],
/// which notes where a run's input lies, so a normalized run does not read
/// a long prompt a second time. `None` when the cursor declines the body
/// (see its docs: a lone `\u` surrogate, an exponent, an escaped key, nesting
/// past its bound, anything that is not JSON); [`read_json`] then reads
/// it, so the fields and every error are serde's (a property test holds the
/// two to the same fields).
fn quick_read(text: &str) -> Option<(RoutingFields, Option<InputSpans>)> {
    use framing::json_quick::{Cursor, MAX_SKIP_DEPTH};
    let mut fields = RoutingFields {
        model: None,
        stream: None,
        stream_options: None,
    };
    let mut gather = InputGather::new(text);
    let mut cursor = Cursor::spaced(text);
    cursor.object(|key, cursor| {
        let field = match key {
            "model" => &mut fields.model,
            "stream" => &mut fields.stream,
            "stream_options" => &mut fields.stream_options,
            "messages" => return gather.messages(cursor),
            "input" => return gather.input(key, cursor),
            _ => {
                let start = cursor.position();
                cursor.skip_any(MAX_SKIP_DEPTH - 1)?;
                gather.parameter(key, start..cursor.position());
                return Some(());
            }
        };
        *field = Some(routing_value(cursor)?);
        Some(())
    })?;
    if !cursor.only_whitespace_left() {
        return None;
    }
    Some((fields, gather.finish()))
}

/// A routing member's value as serde reads it: a string, `true`, `false`
/// or `null` straight from the cursor (serde had cost a small request's
/// Edge ~300 instructions for its `model` and `stream`); anything else (a
/// number, an object such as `stream_options`, a string with a `\u`
/// escape, which the cursor's read declines) skipped and its text read by
/// serde. `None` when the cursor or serde declines.
fn routing_value(cursor: &mut framing::json_quick::Cursor<'_, true>) -> Option<Value> {
    use framing::json_quick::{MAX_SKIP_DEPTH, Scalar};
    if let Some(b'"' | b't' | b'f' | b'n') = cursor.peek() {
        let mut read = cursor.clone();
        let value = read.scalar().and_then(|scalar| match scalar {
            Scalar::Flag(flag) => Some(Value::Bool(flag)),
            Scalar::Null => Some(Value::Null),
            text => text.text().map(|text| Value::String(text.into_owned())),
        });
        if value.is_some() {
            *cursor = read;
            return value;
        }
    }
    serde_json::from_str(cursor.skip_any_text(MAX_SKIP_DEPTH - 1)?).ok()
}

/// Reads a request body, one JSON value with nothing but whitespace after
/// it, with `seed`; the 400 of [`not_an_object`] when it does not read. A
/// UTF-8 body is checked once and read as a `str`: read as bytes,
/// serde_json checks each string it meets on its own, which cost more than
/// the check of the whole body on a small request (by `simdutf8`: core's
/// check runs a byte or a word at a time, a long prompt's whole length). A
/// body that is not UTF-8 is read as bytes, so the error says where it went
/// wrong.
#[inline]
pub(super) fn read_json<'de, S: DeserializeSeed<'de>>(
    body: &'de [u8],
    seed: S,
) -> Result<S::Value, ApiError> {
    read_json_checked(body, simdutf8::basic::from_utf8(body).ok(), seed)
}

/// [`read_json`] of a body whose UTF-8 check is done: `text` is the body
/// as a `str` when it is UTF-8.
fn read_json_checked<'de, S: DeserializeSeed<'de>>(
    body: &'de [u8],
    text: Option<&'de str>,
    seed: S,
) -> Result<S::Value, ApiError> {
    fn read_all<'de, R: serde_json::de::Read<'de>, S: DeserializeSeed<'de>>(
        read: R,
        seed: S,
    ) -> Result<S::Value, serde_json::Error> {
        let mut reader = serde_json::Deserializer::new(read);
        let value = seed.deserialize(&mut reader)?;
        reader.end()?;
        Ok(value)
    }
    match text {
        Some(text) => read_all(serde_json::de::StrRead::new(text), seed),
        None => read_all(serde_json::de::SliceRead::new(body), seed),
    }
    .map_err(|e| not_an_object(body, &e))
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
    // Checked as UTF-8 once, for the quick reader and serde alike.
    let text = simdutf8::basic::from_utf8(&body).ok();
    let (fields, input_spans) = match text.and_then(quick_read) {
        Some((fields, spans)) => (fields, spans.map(Box::new)),
        None => (read_json_checked(&body, text, PhantomData)?, None),
    };
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
        has_stream_options: fields.stream_options.is_some(),
        body,
        input_spans,
    })
}

/// Usage in the Chat Completions shape; breakdowns only when reported (F18).
/// Its members are declared in sorted order, the order a `Value` object
/// writes them in, so it serializes byte for byte as [`chat_usage`]'s
/// value; serialized directly it builds no tree.
#[derive(Debug, Serialize)]
pub struct ChatUsage {
    completion_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_tokens_details: Option<ReasoningTokens>,
    prompt_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<CachedTokens>,
    total_tokens: u64,
}

/// `completion_tokens_details`.
#[derive(Debug, Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

/// `prompt_tokens_details`.
#[derive(Debug, Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

impl ChatUsage {
    /// `usage` in this shape.
    pub fn of(usage: &Usage) -> Self {
        Self {
            completion_tokens: usage.output_tokens,
            completion_tokens_details: usage
                .reasoning_tokens
                .map(|reasoning_tokens| ReasoningTokens { reasoning_tokens }),
            prompt_tokens: usage.input_tokens,
            prompt_tokens_details: usage
                .cached_input_tokens
                .map(|cached_tokens| CachedTokens { cached_tokens }),
            total_tokens: usage.input_tokens.saturating_add(usage.output_tokens),
        }
    }
}

impl ChatUsage {
    /// Writes this usage as serde writes it (`usage_writers_are_serdes`).
    pub(crate) fn write(&self, json: &mut JsonOut<'_>) {
        json.raw("{\"completion_tokens\":")
            .num(self.completion_tokens);
        if let Some(details) = &self.completion_tokens_details {
            json.raw(",\"completion_tokens_details\":{\"reasoning_tokens\":")
                .num(details.reasoning_tokens)
                .raw("}");
        }
        json.raw(",\"prompt_tokens\":").num(self.prompt_tokens);
        if let Some(details) = &self.prompt_tokens_details {
            json.raw(",\"prompt_tokens_details\":{\"cached_tokens\":")
                .num(details.cached_tokens)
                .raw("}");
        }
        json.raw(",\"total_tokens\":")
            .num(self.total_tokens)
            .raw("}");
    }
}

/// [`ChatUsage`] as a JSON value, for an event built as one.
pub fn chat_usage(usage: &Usage) -> Value {
    serde_json::to_value(ChatUsage::of(usage)).unwrap_or_default()
}

/// Usage in the Responses shape: both breakdowns always, zero when not
/// reported. Members in sorted order, as [`ChatUsage`]'s.
#[derive(Debug, Serialize)]
pub struct ResponsesUsage {
    input_tokens: u64,
    input_tokens_details: CachedTokens,
    output_tokens: u64,
    output_tokens_details: ReasoningTokens,
    total_tokens: u64,
}

impl ResponsesUsage {
    /// `usage` in this shape.
    pub fn of(usage: &Usage) -> Self {
        Self {
            input_tokens: usage.input_tokens,
            input_tokens_details: CachedTokens {
                cached_tokens: usage.cached_input_tokens.unwrap_or(0),
            },
            output_tokens: usage.output_tokens,
            output_tokens_details: ReasoningTokens {
                reasoning_tokens: usage.reasoning_tokens.unwrap_or(0),
            },
            total_tokens: usage.input_tokens.saturating_add(usage.output_tokens),
        }
    }
}

impl ResponsesUsage {
    /// Writes this usage as serde writes it (`usage_writers_are_serdes`).
    pub(crate) fn write(&self, json: &mut JsonOut<'_>) {
        json.raw("{\"input_tokens\":")
            .num(self.input_tokens)
            .raw(",\"input_tokens_details\":{\"cached_tokens\":")
            .num(self.input_tokens_details.cached_tokens)
            .raw("},\"output_tokens\":")
            .num(self.output_tokens)
            .raw(",\"output_tokens_details\":{\"reasoning_tokens\":")
            .num(self.output_tokens_details.reasoning_tokens)
            .raw("},\"total_tokens\":")
            .num(self.total_tokens)
            .raw("}");
    }
}

/// One SSE event with a JSON payload: `data: …\n\n`, or with an event name.
pub fn sse(event: Option<&str>, data: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_sse(&mut out, event, data);
    out
}

/// [`sse`] of any serializable payload, written after `out` (a typed
/// payload serializes straight into the answer's buffer, no `Value` tree
/// and no string of it first).
pub fn write_sse(out: &mut Vec<u8>, event: Option<&str>, data: &impl Serialize) {
    sse_event(out, event, |json| {
        // Into a Vec, serializing fails only for a map with keys that are
        // not strings, which no payload here has.
        let _ = serde_json::to_writer(&mut *json.0, data);
    });
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
