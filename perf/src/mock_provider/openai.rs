//! `POST /v1/chat/completions` in the OpenAI / vLLM shape.
//!
//! Stream: a role chunk, `reasoning-tokens` chunks with
//! `delta.reasoning_content`, `tokens` chunks with `delta.content`, a chunk
//! with `finish_reason`, then (with `stream_options.include_usage`) a usage
//! chunk with `choices: []`, then `data: [DONE]`. Usage follows vLLM:
//! `completion_tokens` includes the reasoning tokens, reported again under
//! `completion_tokens_details.reasoning_tokens`. With the `stamp` knob every
//! token chunk's choice also carries `mock_sent_ns` (see [`super::stamp`]).

use std::borrow::Cow;

use bytes::Bytes;
use serde::Deserialize;

use super::body::{Script, TokenRun};
use super::knobs::Knobs;
use super::request::{TextLen, push_json_str, push_num, unix_now};
use super::respond::{Generated, json_ok, sse_response};
use super::server::Ctx;
use super::stamp::STAMP_MAX_DIGITS;
use super::text::{EventBuf, Token, pad_len};

/// The fields of a chat completion request the mock looks at.
#[derive(Debug, Deserialize)]
struct ChatRequest<'a> {
    #[serde(borrow)]
    model: Cow<'a, str>,
    messages: TextLen,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// Token counts of one generation, shared by every API shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    pub(crate) prompt: u64,
    pub(crate) cached: u64,
    pub(crate) reasoning: u64,
    pub(crate) content: u64,
    /// Whether the content was cut by the request's output-token limit.
    pub(crate) length_limited: bool,
}

impl Usage {
    pub(crate) fn new(knobs: &Knobs, prompt: TextLen, limit: Option<u64>) -> Self {
        let prompt = prompt.tokens();
        let wanted = u64::from(knobs.tokens);
        let content = limit.map_or(wanted, |l| l.min(wanted));
        Self {
            prompt,
            cached: u64::from(knobs.cached_tokens).min(prompt),
            reasoning: u64::from(knobs.reasoning_tokens),
            content,
            length_limited: content < wanted,
        }
    }

    pub(crate) fn completion(&self) -> u64 {
        self.reasoning + self.content
    }

    pub(crate) fn finish_reason(&self) -> &'static str {
        if self.length_limited {
            "length"
        } else {
            "stop"
        }
    }

    /// `"usage":{…}` in the chat completions shape.
    fn push_chat(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"\"usage\":{\"prompt_tokens\":");
        push_num(out, self.prompt);
        out.extend_from_slice(b",\"total_tokens\":");
        push_num(out, self.prompt + self.completion());
        out.extend_from_slice(b",\"completion_tokens\":");
        push_num(out, self.completion());
        out.extend_from_slice(b",\"prompt_tokens_details\":{\"cached_tokens\":");
        push_num(out, self.cached);
        out.extend_from_slice(b"},\"completion_tokens_details\":{\"reasoning_tokens\":");
        push_num(out, self.reasoning);
        out.extend_from_slice(b"}}");
    }
}

const CHUNK_TAIL: &str = "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
/// [`CHUNK_TAIL`] up to the send stamp (`stamp` knob), and what follows it.
const STAMPED_TAIL: &str = "\"},\"logprobs\":null,\"finish_reason\":null,\"mock_sent_ns\":";
const STAMP_END: &str = "}]}\n\n";

pub(crate) fn chat_completions(ctx: &Ctx, knobs: &Knobs, body: &[u8]) -> Result<Generated, String> {
    let req: ChatRequest<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let limit = req.max_completion_tokens.or(req.max_tokens);
    let usage = Usage::new(knobs, req.messages, limit);
    let id = ctx.next_id();
    let created = unix_now();

    if !req.stream {
        if usage.completion() > super::knobs::MAX_NON_STREAM_TOKENS {
            return Err("tokens + reasoning-tokens too large for a non-streaming response".into());
        }
        let mut out = Vec::with_capacity(320 + 4 * usage.completion() as usize);
        out.extend_from_slice(b"{\"id\":\"chatcmpl-mock-");
        push_num(&mut out, id);
        out.extend_from_slice(b"\",\"object\":\"chat.completion\",\"created\":");
        push_num(&mut out, created);
        out.extend_from_slice(b",\"model\":");
        push_json_str(&mut out, &req.model);
        out.extend_from_slice(
            b",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"",
        );
        let mut text = EventBuf::default();
        text.push_tokens(Token::Content, usage.content);
        out.extend_from_slice(&text.into_bytes());
        out.push(b'"');
        if usage.reasoning > 0 {
            out.extend_from_slice(b",\"reasoning_content\":\"");
            let mut r = EventBuf::default();
            r.push_tokens(Token::Reasoning, usage.reasoning);
            out.extend_from_slice(&r.into_bytes());
            out.push(b'"');
        }
        out.extend_from_slice(b"},\"logprobs\":null,\"finish_reason\":\"");
        out.extend_from_slice(usage.finish_reason().as_bytes());
        out.extend_from_slice(b"\"}],");
        usage.push_chat(&mut out);
        out.push(b'}');
        return Ok(Generated::full(json_ok(out)));
    }

    // `data: {"id":…,"model":…,"choices":[` shared by every chunk.
    let mut head = Vec::with_capacity(160);
    head.extend_from_slice(b"data: {\"id\":\"chatcmpl-mock-");
    push_num(&mut head, id);
    head.extend_from_slice(b"\",\"object\":\"chat.completion.chunk\",\"created\":");
    push_num(&mut head, created);
    head.extend_from_slice(b",\"model\":");
    push_json_str(&mut head, &req.model);
    head.extend_from_slice(b",\"choices\":[");

    let with = |tail: &[u8]| {
        let mut v = Vec::with_capacity(head.len() + tail.len());
        v.extend_from_slice(&head);
        v.extend_from_slice(tail);
        Bytes::from(v)
    };
    let mut script = Script::default();
    script.bytes(with(
        b"{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
    ));
    for (token, count, field) in [
        (
            Token::Reasoning,
            usage.reasoning,
            &b"{\"index\":0,\"delta\":{\"reasoning_content\":\""[..],
        ),
        (
            Token::Content,
            usage.content,
            &b"{\"index\":0,\"delta\":{\"content\":\""[..],
        ),
    ] {
        let prefix = with(field);
        let (mid, stamp, tail_len) = if knobs.stamp {
            let end = Bytes::from_static(STAMP_END.as_bytes());
            let len = STAMPED_TAIL.len() + STAMP_MAX_DIGITS + STAMP_END.len();
            (STAMPED_TAIL, Some(end), len)
        } else {
            (CHUNK_TAIL, None, CHUNK_TAIL.len())
        };
        let pad = pad_len(knobs.event_bytes, prefix.len() + tail_len, knobs.chunk_size);
        script.tokens(TokenRun {
            token,
            count,
            prefix,
            mid: Bytes::from_static(mid.as_bytes()),
            seq: None,
            pad,
            stamp,
        });
    }
    let mut fin = Vec::with_capacity(64);
    fin.extend_from_slice(b"{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"");
    fin.extend_from_slice(usage.finish_reason().as_bytes());
    fin.extend_from_slice(b"\"}]}\n\n");
    script.bytes(with(&fin));
    if req.stream_options.unwrap_or_default().include_usage {
        let mut u = Vec::with_capacity(200);
        u.extend_from_slice(b"],");
        usage.push_chat(&mut u);
        u.extend_from_slice(b"}\n\n");
        script.bytes(with(&u));
    }
    script.bytes(Bytes::from_static(b"data: [DONE]\n\n"));
    Ok(Generated::stream(sse_response(ctx, script, knobs)))
}
