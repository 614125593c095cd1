//! Ollama's native API: `POST /api/chat`, `GET /api/tags`, `POST /api/show`,
//! `GET /api/ps`, `POST /api/pull`.
//!
//! `/api/chat` streams NDJSON unless `"stream": false`: one line per event
//! with `message.thinking` (reasoning tokens) or `message.content`, then a
//! final line with `done: true`, `done_reason`, `prompt_eval_count`,
//! `eval_count` (reasoning + content) and durations. Durations are
//! deterministic: `load_duration` 1 ms, `prompt_eval_duration` = prefill,
//! `eval_duration` = tokens × per-token delay, `total_duration` their sum.
//!
//! `/api/pull` streams Ollama's NDJSON progress unless `"stream": false`:
//! `{"status":"pulling manifest"}`, then `tokens` lines
//! `{"status":"pulling <digest prefix>","digest":…,"total":…,"completed":…}`
//! (`completed` rising to `total`; each line counts as one token for
//! `delay-*`, `stall-after` and `abort-after`), then `verifying sha256
//! digest`, `writing manifest`, `success`. `"stream": false` answers the
//! last line only. The configured models are the "registry": any other
//! model is a 404 `{"error":"pull model manifest: file does not exist"}`.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Deserialize;

use super::body::{Script, TokenRun};
use super::knobs::{Knobs, MAX_NON_STREAM_TOKENS};
use super::openai::Usage;
use super::request::{TextLen, push_json_str, push_num, rfc3339_now};
use super::respond::{Flavor, Generated, error_response, json_ok, ndjson_response};
use super::server::Ctx;
use super::text::{EventBuf, Token, pad_len};

#[derive(Debug, Deserialize)]
struct ChatRequest<'a> {
    #[serde(borrow)]
    model: Cow<'a, str>,
    #[serde(default)]
    messages: TextLen,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    options: Options,
}

#[derive(Debug, Default, Deserialize)]
struct Options {
    #[serde(default)]
    num_predict: Option<i64>,
}

const LOAD_NS: u64 = 1_000_000;

pub(crate) fn chat(ctx: &Ctx, knobs: &Knobs, body: &[u8]) -> Result<Generated, String> {
    let req: ChatRequest<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    // Ollama: num_predict < 0 means "no limit".
    let limit = req.options.num_predict.and_then(|n| u64::try_from(n).ok());
    let usage = Usage::new(knobs, req.messages, limit);
    let mut head = Vec::with_capacity(96);
    head.extend_from_slice(b"{\"model\":");
    push_json_str(&mut head, &req.model);
    head.extend_from_slice(b",\"created_at\":\"");
    head.extend_from_slice(rfc3339_now().as_bytes());
    head.extend_from_slice(b"\",\"message\":{\"role\":\"assistant\",\"content\":\"");

    let prompt_ns = knobs.prefill.as_nanos() as u64;
    let eval_ns = (knobs.token_delay.as_nanos() as u64).saturating_mul(usage.completion());
    let mut tail = Vec::with_capacity(256);
    tail.extend_from_slice(b",\"done_reason\":\"");
    tail.extend_from_slice(usage.finish_reason().as_bytes());
    tail.extend_from_slice(b"\",\"done\":true,\"total_duration\":");
    push_num(&mut tail, LOAD_NS + prompt_ns + eval_ns);
    tail.extend_from_slice(b",\"load_duration\":");
    push_num(&mut tail, LOAD_NS);
    tail.extend_from_slice(b",\"prompt_eval_count\":");
    push_num(&mut tail, usage.prompt);
    tail.extend_from_slice(b",\"prompt_eval_duration\":");
    push_num(&mut tail, prompt_ns);
    tail.extend_from_slice(b",\"eval_count\":");
    push_num(&mut tail, usage.completion());
    tail.extend_from_slice(b",\"eval_duration\":");
    push_num(&mut tail, eval_ns);
    tail.push(b'}');

    if req.stream == Some(false) {
        if usage.completion() > MAX_NON_STREAM_TOKENS {
            return Err("tokens + reasoning-tokens too large for a non-streaming response".into());
        }
        let mut e = EventBuf::default();
        e.push(Bytes::from(head))
            .push_tokens(Token::Content, usage.content);
        if usage.reasoning > 0 {
            e.push_static("\",\"thinking\":\"")
                .push_tokens(Token::Reasoning, usage.reasoning);
        }
        e.push_static("\"}").push(Bytes::from(tail));
        return Ok(Generated::full(json_ok(e.into_bytes())));
    }

    let head = Bytes::from(head);
    let mut s = Script::default();
    // `…"content":"` then for thinking: `","thinking":"`.
    let mut thinking = head.to_vec();
    thinking.extend_from_slice(b"\",\"thinking\":\"");
    for (token, count, prefix) in [
        (Token::Reasoning, usage.reasoning, Bytes::from(thinking)),
        (Token::Content, usage.content, head.clone()),
    ] {
        const MID: &str = "\"},\"done\":false}\n";
        let pad = pad_len(
            knobs.event_bytes,
            prefix.len() + MID.len(),
            knobs.chunk_size,
        );
        s.tokens(TokenRun {
            token,
            count,
            prefix,
            mid: Bytes::from_static(MID.as_bytes()),
            seq: None,
            pad,
            stamp: None,
        });
    }
    let mut last = head.to_vec();
    last.extend_from_slice(b"\"}");
    last.extend_from_slice(&tail);
    last.push(b'\n');
    s.bytes(Bytes::from(last));
    Ok(Generated::stream(ndjson_response(ctx, s, knobs)))
}

/// `name:tag` as Ollama lists it.
fn tagged(m: &str) -> String {
    if m.contains(':') {
        m.to_owned()
    } else {
        format!("{m}:latest")
    }
}

const DIGEST: &str = "6d6f636b2d6d6f64656c2d6e6f742d612d7265616c2d6469676573742d30303030";
const SIZE: u64 = 1_000_000;

fn details() -> serde_json::Value {
    serde_json::json!({
        "parent_model": "",
        "format": "gguf",
        "family": "mock",
        "families": ["mock"],
        "parameter_size": "1M",
        "quantization_level": "Q4_0",
    })
}

/// `GET /api/tags`: the configured models.
pub(crate) fn tags(ctx: &Ctx) -> hyper::Response<super::body::MockBody> {
    let models: Vec<_> = ctx
        .config
        .models
        .iter()
        .map(|m| {
            let name = tagged(m);
            serde_json::json!({
                "name": name, "model": name,
                "modified_at": "2025-01-01T00:00:00Z",
                "size": SIZE, "digest": DIGEST, "details": details(),
            })
        })
        .collect();
    json_ok(serde_json::json!({ "models": models }).to_string())
}

/// `GET /api/ps`: every configured model, as if loaded.
pub(crate) fn ps(ctx: &Ctx) -> hyper::Response<super::body::MockBody> {
    let models: Vec<_> = ctx
        .config
        .models
        .iter()
        .map(|m| {
            let name = tagged(m);
            serde_json::json!({
                "name": name, "model": name, "size": SIZE, "digest": DIGEST,
                "details": details(), "expires_at": "2099-01-01T00:00:00Z", "size_vram": SIZE,
            })
        })
        .collect();
    json_ok(serde_json::json!({ "models": models }).to_string())
}

#[derive(Debug, Deserialize)]
struct ShowRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// `POST /api/show`: facts about any model (the mock serves every name).
pub(crate) fn show(_ctx: &Ctx, body: &[u8]) -> Result<Generated, String> {
    let req: ShowRequest = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let Some(model) = req.model.or(req.name) else {
        return Err("model is required".into());
    };
    let v = serde_json::json!({
        "license": "",
        "modelfile": format!("# mock model\nFROM {}\n", tagged(&model)),
        "parameters": "",
        "template": "{{ .Prompt }}",
        "details": details(),
        "model_info": {
            "general.architecture": "mock",
            "general.parameter_count": SIZE,
            "mock.context_length": 8192,
        },
        "capabilities": ["completion", "thinking"],
        "modified_at": "2025-01-01T00:00:00Z",
    });
    Ok(Generated::full(json_ok(v.to_string())))
}

/// Most `tokens` (progress lines) one pull may ask for: they are built up front.
pub(crate) const MAX_PULL_LINES: u32 = 1 << 16;

#[derive(Debug, Deserialize)]
struct PullRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
}

/// `POST /api/pull`: progress NDJSON for a configured model, 404 otherwise.
pub(crate) fn pull(ctx: &Ctx, knobs: &Knobs, body: &[u8]) -> Result<Generated, String> {
    let req: PullRequest = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let Some(model) = req.model.or(req.name) else {
        return Err("model is required".into());
    };
    let name = tagged(&model);
    if !ctx.config.models.iter().any(|m| tagged(m) == name) {
        let status = hyper::StatusCode::NOT_FOUND;
        let msg = "pull model manifest: file does not exist";
        return Ok(Generated::full(error_response(Flavor::Ollama, status, msg)));
    }
    const SUCCESS: &[u8] = b"{\"status\":\"success\"}\n";
    if req.stream == Some(false) {
        return Ok(Generated::full(json_ok(Bytes::from_static(
            &SUCCESS[..SUCCESS.len() - 1],
        ))));
    }
    let lines = knobs.tokens;
    if lines > MAX_PULL_LINES {
        return Err(format!(
            "tokens (pull progress lines) over {MAX_PULL_LINES}"
        ));
    }
    let mut s = Script::default();
    s.bytes(Bytes::from_static(b"{\"status\":\"pulling manifest\"}\n"));
    for i in 1..=u64::from(lines) {
        let line = serde_json::json!({
            "status": format!("pulling {}", &DIGEST[..12]),
            "digest": format!("sha256:{DIGEST}"),
            "total": SIZE,
            "completed": SIZE * i / u64::from(lines),
        });
        let mut line = line.to_string().into_bytes();
        line.push(b'\n');
        s.counted(Bytes::from(line));
    }
    for last in [
        &b"{\"status\":\"verifying sha256 digest\"}\n"[..],
        b"{\"status\":\"writing manifest\"}\n",
        SUCCESS,
    ] {
        s.bytes(Bytes::from_static(last));
    }
    Ok(Generated::stream(ndjson_response(ctx, s, knobs)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tags_names() {
        assert_eq!(super::tagged("a"), "a:latest");
        assert_eq!(super::tagged("a:7b"), "a:7b");
    }
}
