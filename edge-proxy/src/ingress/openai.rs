//! The OpenAI request shapes the Edge reads (Chat Completions, Responses)
//! and the response shapes it writes for normalized runs.
//!
//! Requests are parsed only as far as routing and the normalized path need:
//! `model`, `stream`, `stream_options.include_usage`, and — for normalized
//! runs — the messages and the remaining parameters. A tunnelled request is
//! forwarded as the client sent it (with at most `stream_options` added).

use proto::v1::{ChatMessage, RunInput, Usage};
use serde_json::{Map, Value, json};

use super::error::ApiError;

/// What the Edge needs from a Chat Completions or Responses request.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    /// The model group asked for.
    pub model: String,
    /// Whether the client wants SSE.
    pub stream: bool,
    /// `stream_options.include_usage` (Chat Completions only).
    pub include_usage: bool,
    /// The request as a JSON object, for the normalized path and for
    /// re-encoding a tunnelled request when the Edge adds usage.
    pub object: Map<String, Value>,
}

fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request(
            "invalid_request",
            "the request body must be a JSON object",
        )),
        Err(e) => Err(ApiError::bad_request(
            "invalid_json",
            format!("the request body is not valid JSON: {e}"),
        )),
    }
}

/// Parses the common fields of a request body.
pub fn parse(body: &[u8]) -> Result<ParsedRequest, ApiError> {
    let object = object(body)?;
    let model = match object.get("model") {
        Some(Value::String(model)) if !model.is_empty() => model.clone(),
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
    let stream = match object.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_stream",
                "`stream` must be a boolean",
            ));
        }
    };
    let include_usage = object
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(ParsedRequest {
        model,
        stream,
        include_usage,
        object,
    })
}

/// The text of a message `content`: a string, null, or an array of parts
/// whose text parts are joined.
fn content_text(content: Option<&Value>, text_types: &[&str]) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
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

fn message(role: &str, content: String, extra: Map<String, Value>) -> ChatMessage {
    ChatMessage {
        role: role.to_owned(),
        content,
        extra_json: if extra.is_empty() {
            Default::default()
        } else {
            Value::Object(extra).to_string().into()
        },
    }
}

/// The normalized input of a Chat Completions request.
pub fn chat_input(request: &ParsedRequest) -> Result<RunInput, ApiError> {
    let Some(Value::Array(messages)) = request.object.get("messages") else {
        return Err(ApiError::bad_request(
            "missing_messages",
            "`messages` must be a non-empty array",
        ));
    };
    if messages.is_empty() {
        return Err(ApiError::bad_request(
            "missing_messages",
            "`messages` must be a non-empty array",
        ));
    }
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let Value::Object(fields) = m else {
            return Err(ApiError::bad_request(
                "invalid_message",
                "each message must be an object",
            ));
        };
        let Some(role) = fields.get("role").and_then(Value::as_str) else {
            return Err(ApiError::bad_request(
                "invalid_message",
                "each message needs a string `role`",
            ));
        };
        let content = content_text(fields.get("content"), &["text"])?;
        let extra = fields
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "role" | "content"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.push(message(role, content, extra));
    }
    let params: Map<String, Value> = request
        .object
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "model" | "messages" | "stream" | "stream_options"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(RunInput {
        messages: out,
        parameters_json: Value::Object(params).to_string().into(),
    })
}

/// The normalized input of a Responses request: `instructions` as a system
/// message, then `input` (a string, or message items).
pub fn responses_input(request: &ParsedRequest) -> Result<RunInput, ApiError> {
    let mut messages = Vec::new();
    if let Some(instructions) = request.object.get("instructions").and_then(Value::as_str) {
        messages.push(message("system", instructions.to_owned(), Map::new()));
    }
    match request.object.get("input") {
        Some(Value::String(text)) => messages.push(message("user", text.clone(), Map::new())),
        Some(Value::Array(items)) => {
            for item in items {
                let role = item.get("role").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_input",
                        "only message items with a `role` are supported in `input`",
                    )
                })?;
                let content = content_text(item.get("content"), &["input_text", "output_text"])?;
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
        if let Some(v) = request.object.get(from) {
            params.insert(to.to_owned(), v.clone());
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
        let request = parse(body).unwrap();
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
            let error = parse(body).unwrap_err();
            assert_eq!((error.status, error.code), (400, code), "{body:?}");
        }
        let no_messages = parse(br#"{"model":"m","messages":[]}"#).unwrap();
        assert_eq!(
            chat_input(&no_messages).unwrap_err().code,
            "missing_messages"
        );
        let image = parse(
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}"#,
        )
        .unwrap();
        assert_eq!(chat_input(&image).unwrap_err().code, "unsupported_content");
    }

    #[test]
    fn responses_requests_become_normalized_input() {
        let request =
            parse(br#"{"model":"m","instructions":"sys","input":"hello","max_output_tokens":9}"#)
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
