//! A raw HTTP/1.1 client for the chaos scenarios: one streaming chat
//! request per connection, read to the end, classified by what it ended
//! with. Async (tokio), so thousands of streams fit on one thread.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a client behaves after sending its request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reader {
    /// Reads everything as it comes.
    Eager,
    /// Reads the head, then stops reading for this long (a slow client
    /// whose socket buffers fill), then reads the rest.
    StallAfterHead(Duration),
    /// Reads everything as it comes, adding each read's bytes to the
    /// counter (what a group of streams has received so far).
    Counting(&'static AtomicU64),
}

/// What one request ended with.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// The response status (0 when no head arrived).
    pub(crate) status: u16,
    /// The body ended by its framing (chunked terminator or full length),
    /// not by a cut connection.
    pub(crate) complete: bool,
    /// `data: [DONE]` events.
    pub(crate) done: usize,
    /// `data: {"error"…` events (the F27 error event after the head).
    pub(crate) error_events: usize,
    /// SSE data events in all.
    pub(crate) data_events: usize,
    /// Why reading stopped early, when it did.
    pub(crate) io_error: Option<String>,
    /// No end within the deadline: the request hung.
    pub(crate) timed_out: bool,
    /// The first bytes of the body (to say why a request failed).
    pub(crate) body_head: String,
}

impl Outcome {
    /// A body cut after the head: the connection ended (EOF or reset)
    /// before the last chunk. For a raw tunnel this is the designed end of a
    /// failure after commit (edge-proxy/src/ingress/tunnel.rs): the client
    /// sees the truncation.
    pub(crate) fn cut(&self) -> bool {
        self.status != 0 && !self.complete && !self.timed_out
    }

    /// Terminals the client saw: a complete non-200 answer is one; a
    /// complete 200 stream counts its `[DONE]` plus its error events (an
    /// error event ends a stream without `[DONE]`); a cut stream is one
    /// when nothing else ended it. A hang is none.
    pub(crate) fn terminals(&self) -> usize {
        if self.cut() {
            return 1 + self.done + self.error_events;
        }
        if !self.complete {
            return 0;
        }
        if self.status != 200 {
            return 1;
        }
        self.done + self.error_events
    }

    /// Exactly one terminal: the invariant every scenario asserts.
    pub(crate) fn one_terminal(&self) -> bool {
        self.terminals() == 1
    }

    /// A successful stream: 200, `[DONE]`, no error event.
    pub(crate) fn ok(&self) -> bool {
        self.one_terminal() && self.status == 200 && self.done == 1
    }
}

/// The request bytes of one streaming chat for `model`, its prompt `hi`
/// followed by `pad` more bytes.
pub(crate) fn chat_request(host: SocketAddr, model: &str, pad: usize) -> Vec<u8> {
    let pad = "a".repeat(pad);
    let body = format!(
        r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"hi{pad}"}}]}}"#
    );
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends one streaming chat to `addr` and reads the answer as `reader`
/// says, giving up after `deadline` (the outcome then has `io_error`).
pub(crate) async fn stream_chat(
    addr: SocketAddr,
    model: &str,
    reader: Reader,
    deadline: Duration,
) -> Outcome {
    stream_padded_chat(addr, model, 0, reader, deadline).await
}

/// [`stream_chat`] with a prompt `pad` bytes longer (an upload).
pub(crate) async fn stream_padded_chat(
    addr: SocketAddr,
    model: &str,
    pad: usize,
    reader: Reader,
    deadline: Duration,
) -> Outcome {
    match tokio::time::timeout(deadline, exchange(addr, model, pad, reader)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome {
            io_error: Some(format!("no end within {deadline:?}")),
            timed_out: true,
            ..Outcome::default()
        },
    }
}

async fn exchange(addr: SocketAddr, model: &str, pad: usize, reader: Reader) -> Outcome {
    let mut out = Outcome::default();
    let mut socket = match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) => {
            out.io_error = Some(format!("connect: {e}"));
            return out;
        }
    };
    if let Err(e) = socket.write_all(&chat_request(addr, model, pad)).await {
        out.io_error = Some(format!("write: {e}"));
        return out;
    }
    let mut raw = Vec::with_capacity(4096);
    let mut buf = vec![0u8; 16 * 1024];
    let mut stalled = false;
    loop {
        if let Reader::StallAfterHead(pause) = reader
            && !stalled
            && find(&raw, b"\r\n\r\n").is_some()
        {
            stalled = true;
            tokio::time::sleep(pause).await;
        }
        match socket.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if let Reader::Counting(received) = reader {
                    received.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            Err(e) => {
                out.io_error = Some(format!("read: {e}"));
                break;
            }
        }
        if raw.ends_with(b"\r\n0\r\n\r\n") || raw.ends_with(b"\n0\r\n\r\n") {
            break;
        }
    }
    classify(&raw, &mut out);
    out
}

fn classify(raw: &[u8], out: &mut Outcome) {
    let Some(head_end) = find(raw, b"\r\n\r\n") else {
        return;
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    out.status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let rest = &raw[head_end + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        match dechunk(rest) {
            Some(body) => {
                out.complete = true;
                body
            }
            None => rest.to_vec(),
        }
    } else {
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        out.complete = length.is_some_and(|n| rest.len() >= n);
        rest.to_vec()
    };
    let text = String::from_utf8_lossy(&body);
    out.body_head = text.chars().take(200).collect();
    for line in text.lines() {
        if let Some(data) = line.strip_prefix("data: ") {
            out.data_events += 1;
            if data == "[DONE]" {
                out.done += 1;
            } else if data.starts_with("{\"error\"") {
                out.error_events += 1;
            }
        }
    }
}

/// The body of a chunked message, or `None` when its last chunk is missing.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = find(rest, b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        if rest.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
fn chunked(events: &[&str]) -> Vec<u8> {
    let mut raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for e in events {
        raw.extend_from_slice(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes());
    }
    raw
}

#[test]
fn classifies_a_chunked_stream_an_error_event_a_cut_and_an_http_error() {
    let mut ok = chunked(&["data: {\"a\":1}\n\n", "data: [DONE]\n\n"]);
    ok.extend_from_slice(b"0\r\n\r\n");
    let mut out = Outcome::default();
    classify(&ok, &mut out);
    assert!(out.ok() && !out.cut(), "{out:?}");
    let mut err = chunked(&["data: {\"error\":1}\n\n"]);
    err.extend_from_slice(b"0\r\n\r\n");
    let mut out = Outcome::default();
    classify(&err, &mut out);
    assert!(out.one_terminal() && !out.ok(), "{out:?}");
    let cut = chunked(&["data: {\"a\":1}\n\n"]);
    let mut out = Outcome::default();
    classify(&cut, &mut out);
    assert!(out.cut() && out.one_terminal() && !out.ok(), "{out:?}");
    let http = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\n\r\n{}";
    let mut out = Outcome::default();
    classify(http, &mut out);
    assert!(out.one_terminal() && !out.cut(), "{out:?}");
    let hung = Outcome {
        timed_out: true,
        ..Outcome::default()
    };
    assert_eq!(hung.terminals(), 0);
}
