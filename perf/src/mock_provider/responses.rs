//! `POST /v1/responses` in the OpenAI Responses API shape.
//!
//! Stream (`event:` + `data:` SSE, every event with a `sequence_number`):
//!
//! ```text
//! response.created, response.in_progress,
//! [reasoning-tokens > 0]  response.output_item.added (reasoning),
//!                         response.reasoning_text.delta…, response.reasoning_text.done,
//!                         response.output_item.done
//! response.output_item.added (message), response.content_part.added,
//! response.output_text.delta…, response.output_text.done,
//! response.content_part.done, response.output_item.done,
//! response.completed (or response.incomplete past max_output_tokens), with usage
//! ```
//!
//! The non-streaming body is the `response` object of `response.completed`.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Deserialize;

use super::body::{Script, TokenRun, event_count};
use super::knobs::{Knobs, MAX_NON_STREAM_TOKENS};
use super::openai::Usage;
use super::request::{TextLen, push_json_str, push_num, unix_now};
use super::respond::{Generated, json_ok, sse_response};
use super::server::Ctx;
use super::text::{EventBuf, Token, pad_len};

#[derive(Debug, Deserialize)]
struct ResponsesRequest<'a> {
    #[serde(borrow)]
    model: Cow<'a, str>,
    input: TextLen,
    #[serde(default)]
    instructions: TextLen,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    max_output_tokens: Option<u64>,
}

/// Builds one event (or body) from JSON bytes and generated text segments.
#[derive(Debug, Default)]
struct Ev {
    buf: EventBuf,
    cur: Vec<u8>,
}

impl Ev {
    fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.cur.extend_from_slice(b);
        self
    }

    fn num(&mut self, n: u64) -> &mut Self {
        push_num(&mut self.cur, n);
        self
    }

    fn flush(&mut self) {
        if !self.cur.is_empty() {
            self.buf.push(Bytes::from(std::mem::take(&mut self.cur)));
        }
    }

    /// The text a run of token events carried, as zero-copy segments.
    fn text(&mut self, t: &RunText) -> &mut Self {
        self.flush();
        self.buf.push_run_text(t.token, t.tokens, t.chunk, t.pad);
        self
    }

    fn finish(mut self) -> EventBuf {
        self.flush();
        self.buf
    }
}

/// The shape of a token run's text: what its `*.done` events repeat.
#[derive(Debug, Clone, Copy)]
struct RunText {
    token: Token,
    tokens: u64,
    chunk: u32,
    pad: usize,
}

/// Per-request facts every event needs.
struct Resp<'a> {
    id: u64,
    created: u64,
    model: &'a str,
    usage: Usage,
    seq: u64,
}

impl Resp<'_> {
    /// Starts `event: NAME\ndata: {"type":NAME,"sequence_number":N` and bumps
    /// the sequence number.
    fn event(&mut self, name: &str) -> Ev {
        let mut e = Ev::default();
        e.raw(b"event: ")
            .raw(name.as_bytes())
            .raw(b"\ndata: {\"type\":\"");
        e.raw(name.as_bytes())
            .raw(b"\",\"sequence_number\":")
            .num(self.seq);
        self.seq += 1;
        e
    }

    fn reasoning_item(&self, e: &mut Ev, text: Option<&RunText>) {
        e.raw(b"{\"id\":\"rs_mock-")
            .num(self.id)
            .raw(b"\",\"type\":\"reasoning\",\"summary\":[]");
        match text {
            Some(t) => {
                e.raw(b",\"content\":[{\"type\":\"reasoning_text\",\"text\":\"")
                    .text(t);
                e.raw(b"\"}]}")
            }
            None => e.raw(b",\"content\":[]}"),
        };
    }

    fn message_item(&self, e: &mut Ev, text: Option<&RunText>) {
        let status: &[u8] = if text.is_some() {
            b"completed"
        } else {
            b"in_progress"
        };
        e.raw(b"{\"id\":\"msg_mock-")
            .num(self.id)
            .raw(b"\",\"type\":\"message\",\"status\":\"");
        e.raw(status)
            .raw(b"\",\"role\":\"assistant\",\"content\":[");
        if let Some(t) = text {
            e.raw(b"{\"type\":\"output_text\",\"text\":\"").text(t);
            e.raw(b"\",\"annotations\":[]}");
        }
        e.raw(b"]}");
    }

    /// The `response` object; `texts` = None while in progress.
    fn object(&self, e: &mut Ev, texts: Option<(&RunText, &RunText)>) {
        let u = &self.usage;
        let status: &[u8] = match texts {
            None => b"in_progress",
            Some(_) if u.length_limited => b"incomplete",
            Some(_) => b"completed",
        };
        e.raw(b"{\"id\":\"resp_mock-")
            .num(self.id)
            .raw(b"\",\"object\":\"response\",\"created_at\":");
        e.num(self.created)
            .raw(b",\"status\":\"")
            .raw(status)
            .raw(b"\",\"model\":");
        push_json_str(&mut e.cur, self.model);
        e.raw(b",\"output\":[");
        let Some((r, c)) = texts else {
            e.raw(b"],\"usage\":null,\"incomplete_details\":null}");
            return;
        };
        if u.reasoning > 0 {
            self.reasoning_item(e, Some(r));
            e.raw(b",");
        }
        self.message_item(e, Some(c));
        e.raw(b"],\"usage\":{\"input_tokens\":").num(u.prompt);
        e.raw(b",\"input_tokens_details\":{\"cached_tokens\":")
            .num(u.cached);
        e.raw(b"},\"output_tokens\":").num(u.completion());
        e.raw(b",\"output_tokens_details\":{\"reasoning_tokens\":")
            .num(u.reasoning);
        e.raw(b"},\"total_tokens\":").num(u.prompt + u.completion());
        if u.length_limited {
            e.raw(b"},\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}");
        } else {
            e.raw(b"},\"incomplete_details\":null}");
        }
    }

    /// `item_id`/`output_index`/`content_index` of the item at `output_index`.
    fn item_ref(&self, e: &mut Ev, kind: &[u8], output_index: u64) {
        e.raw(b",\"item_id\":\"")
            .raw(kind)
            .raw(b"_mock-")
            .num(self.id);
        e.raw(b"\",\"output_index\":")
            .num(output_index)
            .raw(b",\"content_index\":0");
    }
}

/// Template of `response.*.delta` events: everything before the text, and
/// the pad that brings each event to `event-bytes`.
fn delta_run(
    r: &Resp<'_>,
    knobs: &Knobs,
    name: &str,
    kind: &[u8],
    oi: u64,
    token: Token,
    count: u64,
) -> TokenRun {
    let mut e = Ev::default();
    e.raw(b"event: ")
        .raw(name.as_bytes())
        .raw(b"\ndata: {\"type\":\"")
        .raw(name.as_bytes());
    e.raw(b"\"");
    r.item_ref(&mut e, kind, oi);
    e.raw(b",\"delta\":\"");
    let prefix = e.finish().into_bytes();
    const MID: &str = "\",\"sequence_number\":";
    let overhead = prefix.len() + MID.len() + 8;
    TokenRun {
        token,
        count,
        pad: pad_len(knobs.event_bytes, overhead, knobs.chunk_size),
        prefix,
        mid: Bytes::from_static(MID.as_bytes()),
        seq: Some((r.seq, Bytes::from_static(b"}\n\n"))),
        stamp: None,
    }
}

pub(crate) fn responses(ctx: &Ctx, knobs: &Knobs, body: &[u8]) -> Result<Generated, String> {
    let req: ResponsesRequest<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let prompt = TextLen(req.input.0 + req.instructions.0);
    let usage = Usage::new(knobs, prompt, req.max_output_tokens);
    let mut r = Resp {
        id: ctx.next_id(),
        created: unix_now(),
        model: &req.model,
        usage,
        seq: 0,
    };
    let chunk = knobs.chunk_size;
    let mut rtext = RunText {
        token: Token::Reasoning,
        tokens: usage.reasoning,
        chunk,
        pad: 0,
    };
    let mut ctext = RunText {
        token: Token::Content,
        tokens: usage.content,
        chunk,
        pad: 0,
    };

    if !req.stream {
        if usage.completion() > MAX_NON_STREAM_TOKENS {
            return Err("tokens + reasoning-tokens too large for a non-streaming response".into());
        }
        let mut e = Ev::default();
        r.object(&mut e, Some((&rtext, &ctext)));
        return Ok(Generated::full(json_ok(e.finish().into_bytes())));
    }

    let mut s = Script::default();
    let end = |mut e: Ev| {
        e.raw(b"}\n\n");
        e.finish()
    };
    for name in ["response.created", "response.in_progress"] {
        let mut e = r.event(name);
        e.raw(b",\"response\":");
        r.object(&mut e, None);
        s.event(end(e));
    }
    let mut oi = 0;
    if usage.reasoning > 0 {
        let mut e = r.event("response.output_item.added");
        e.raw(b",\"output_index\":0,\"item\":");
        r.reasoning_item(&mut e, None);
        s.event(end(e));
        let run = delta_run(
            &r,
            knobs,
            "response.reasoning_text.delta",
            b"rs",
            0,
            Token::Reasoning,
            usage.reasoning,
        );
        rtext.pad = run.pad;
        r.seq += event_count(usage.reasoning, chunk);
        s.tokens(run);
        let mut e = r.event("response.reasoning_text.done");
        r.item_ref(&mut e, b"rs", 0);
        e.raw(b",\"text\":\"").text(&rtext).raw(b"\"");
        s.event(end(e));
        let mut e = r.event("response.output_item.done");
        e.raw(b",\"output_index\":0,\"item\":");
        r.reasoning_item(&mut e, Some(&rtext));
        s.event(end(e));
        oi = 1;
    }
    let mut e = r.event("response.output_item.added");
    e.raw(b",\"output_index\":").num(oi).raw(b",\"item\":");
    r.message_item(&mut e, None);
    s.event(end(e));
    let mut e = r.event("response.content_part.added");
    r.item_ref(&mut e, b"msg", oi);
    e.raw(b",\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}");
    s.event(end(e));
    let run = delta_run(
        &r,
        knobs,
        "response.output_text.delta",
        b"msg",
        oi,
        Token::Content,
        usage.content,
    );
    ctext.pad = run.pad;
    r.seq += event_count(usage.content, chunk);
    s.tokens(run);
    let mut e = r.event("response.output_text.done");
    r.item_ref(&mut e, b"msg", oi);
    e.raw(b",\"text\":\"")
        .text(&ctext)
        .raw(b"\",\"logprobs\":[]");
    s.event(end(e));
    let mut e = r.event("response.content_part.done");
    r.item_ref(&mut e, b"msg", oi);
    e.raw(b",\"part\":{\"type\":\"output_text\",\"text\":\"")
        .text(&ctext);
    e.raw(b"\",\"annotations\":[]}");
    s.event(end(e));
    let mut e = r.event("response.output_item.done");
    e.raw(b",\"output_index\":").num(oi).raw(b",\"item\":");
    r.message_item(&mut e, Some(&ctext));
    s.event(end(e));
    let last = if usage.length_limited {
        "response.incomplete"
    } else {
        "response.completed"
    };
    let mut e = r.event(last);
    e.raw(b",\"response\":");
    r.object(&mut e, Some((&rtext, &ctext)));
    s.event(end(e));
    Ok(Generated::stream(sse_response(ctx, s, knobs)))
}
