//! Generated text and the zero-copy buffers events are made of.
//!
//! A token is a fixed 4-byte word ([`CONTENT_TOKEN`], [`REASONING_TOKEN`]),
//! so the text of `n` tokens is a slice of a long static run of that word and
//! tests can predict every byte. Padding for `event-bytes` is a slice of one
//! static buffer. An event is an [`EventBuf`]: a handful of refcounted
//! segments, some repeated, that hyper writes with `writev` without copying.

use std::io::IoSlice;
use std::sync::OnceLock;

use bytes::{Buf, Bytes, BytesMut};

use super::knobs::MAX_EVENT_BYTES;

/// The text of one content token.
pub const CONTENT_TOKEN: &str = "tok ";
/// The text of one reasoning token.
pub const REASONING_TOKEN: &str = "hmm ";
/// The byte padding `event-bytes` adds to token text.
pub const PAD_BYTE: u8 = b'.';

/// Bytes of each static token run.
const RUN_BYTES: usize = 16 * 1024;
const TOKEN_BYTES: usize = 4;

/// Which token word a text is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    Content,
    Reasoning,
}

fn leak_filled(len: usize, pattern: &[u8]) -> &'static [u8] {
    let v: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
    Box::leak(v.into_boxed_slice())
}

fn run(token: Token) -> &'static [u8] {
    static CONTENT: OnceLock<&'static [u8]> = OnceLock::new();
    static REASONING: OnceLock<&'static [u8]> = OnceLock::new();
    match token {
        Token::Content => CONTENT.get_or_init(|| leak_filled(RUN_BYTES, CONTENT_TOKEN.as_bytes())),
        Token::Reasoning => {
            REASONING.get_or_init(|| leak_filled(RUN_BYTES, REASONING_TOKEN.as_bytes()))
        }
    }
}

/// `len` padding bytes, shared by every event (no allocation, no refcount).
pub(crate) fn pad(len: usize) -> Bytes {
    static PAD: OnceLock<&'static [u8]> = OnceLock::new();
    let all = PAD.get_or_init(|| leak_filled(MAX_EVENT_BYTES, &[PAD_BYTE]));
    Bytes::from_static(&all[..len.min(MAX_EVENT_BYTES)])
}

/// The bytes of `tokens` tokens, as at most two segments.
fn token_segs(token: Token, tokens: u64) -> [Seg; 2] {
    let r = run(token);
    let bytes = tokens as usize * TOKEN_BYTES;
    [
        Seg::repeat(Bytes::from_static(r), bytes / RUN_BYTES),
        Seg::once(Bytes::from_static(&r[..bytes % RUN_BYTES])),
    ]
}

/// Per-event overhead budget for `event-bytes`: the padding that makes an
/// event of `overhead` bytes (everything but token text) plus `chunk` tokens
/// about `event_bytes` long.
pub(crate) fn pad_len(event_bytes: usize, overhead: usize, chunk: u32) -> usize {
    event_bytes.saturating_sub(overhead + chunk as usize * TOKEN_BYTES)
}

/// The decimal digits of `n`, written into `arena` (refilled 4 KiB at a
/// time, so a stream of numbers costs no allocation each).
pub(crate) fn decimal(arena: &mut BytesMut, n: u64) -> Bytes {
    if arena.capacity() < 20 {
        arena.reserve(4096);
    }
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut v = n;
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    arena.extend_from_slice(&tmp[i..]);
    arena.split().freeze()
}

/// One segment: `piece` repeated `times` times (offset `off` into the current copy).
#[derive(Debug, Clone, Default)]
pub(crate) struct Seg {
    piece: Bytes,
    times: usize,
    off: usize,
}

impl Seg {
    pub(crate) fn once(piece: Bytes) -> Self {
        Self::repeat(piece, 1)
    }

    pub(crate) fn repeat(piece: Bytes, times: usize) -> Self {
        let times = if piece.is_empty() { 0 } else { times };
        Self {
            piece,
            times,
            off: 0,
        }
    }

    fn len(&self) -> usize {
        self.piece.len() * self.times - self.off
    }
}

/// Segments per event; enough for the Responses API's `response.completed`
/// (head, reasoning text, middle, content text, tail).
const MAX_SEGS: usize = 8;

/// The payload of one SSE event / NDJSON line / JSON body, as refcounted
/// segments (a [`Buf`] that hyper can `writev` without copying).
#[derive(Debug, Clone, Default)]
pub struct EventBuf {
    segs: [Seg; MAX_SEGS],
    head: usize,
    len: usize,
    remaining: usize,
}

impl EventBuf {
    /// An event made of one buffer.
    pub fn from_bytes(b: Bytes) -> Self {
        let mut e = Self::default();
        e.push(b);
        e
    }

    pub(crate) fn push_seg(&mut self, seg: Seg) -> &mut Self {
        if seg.times > 0 {
            assert!(self.len < MAX_SEGS, "EventBuf: more than MAX_SEGS segments");
            self.remaining += seg.len();
            self.segs[self.len] = seg;
            self.len += 1;
        }
        self
    }

    pub(crate) fn push(&mut self, b: Bytes) -> &mut Self {
        self.push_seg(Seg::once(b))
    }

    pub(crate) fn push_static(&mut self, s: &'static str) -> &mut Self {
        self.push(Bytes::from_static(s.as_bytes()))
    }

    /// Appends the text of `tokens` tokens.
    pub(crate) fn push_tokens(&mut self, token: Token, tokens: u64) -> &mut Self {
        for s in token_segs(token, tokens) {
            self.push_seg(s);
        }
        self
    }

    /// Appends the concatenated text of a whole token run as its events
    /// carried it: `tokens` tokens in events of `chunk` tokens, each followed
    /// by `pad` padding bytes.
    pub(crate) fn push_run_text(
        &mut self,
        token: Token,
        tokens: u64,
        chunk: u32,
        pad: usize,
    ) -> &mut Self {
        if pad == 0 {
            return self.push_tokens(token, tokens);
        }
        let piece = |n: u64| {
            let mut b = BytesMut::with_capacity(n as usize * TOKEN_BYTES + pad);
            for s in token_segs(token, n) {
                for _ in 0..s.times {
                    b.extend_from_slice(&s.piece);
                }
            }
            b.extend_from_slice(&self::pad(pad));
            b.freeze()
        };
        let chunk = u64::from(chunk);
        self.push_seg(Seg::repeat(piece(chunk), (tokens / chunk) as usize));
        if !tokens.is_multiple_of(chunk) {
            self.push(piece(tokens % chunk));
        }
        self
    }

    /// Copies the whole event into one contiguous buffer.
    pub fn into_bytes(mut self) -> Bytes {
        let n = self.remaining;
        self.copy_to_bytes(n)
    }
}

impl Buf for EventBuf {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        match self.segs[..self.len].get(self.head) {
            Some(s) => &s.piece[s.off..],
            None => &[],
        }
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "EventBuf::advance past the end");
        self.remaining -= cnt;
        while cnt > 0 {
            let s = &mut self.segs[self.head];
            let in_piece = s.piece.len() - s.off;
            if cnt < in_piece {
                s.off += cnt;
                return;
            }
            cnt -= in_piece;
            s.off = 0;
            s.times -= 1;
            if s.times == 0 {
                *s = Seg::default();
                self.head += 1;
            }
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for s in &self.segs[self.head..self.len] {
            for i in 0..s.times {
                if n == dst.len() {
                    return n;
                }
                let off = if i == 0 { s.off } else { 0 };
                dst[n] = IoSlice::new(&s.piece[off..]);
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(mut e: EventBuf) -> Vec<u8> {
        let mut v = Vec::new();
        while e.has_remaining() {
            let c = e.chunk().len().min(7); // odd steps cross segment edges
            v.extend_from_slice(&e.chunk()[..c]);
            e.advance(c);
        }
        v
    }

    #[test]
    fn tokens_text_is_predictable() {
        for n in [0u64, 1, 3, 4096, 4097, 10_000] {
            let mut e = EventBuf::default();
            e.push_tokens(Token::Content, n);
            assert_eq!(e.remaining(), n as usize * 4);
            assert_eq!(flat(e), CONTENT_TOKEN.repeat(n as usize).into_bytes());
        }
    }

    #[test]
    fn run_text_matches_concatenated_events() {
        let (tokens, chunk, pad_n) = (10u64, 3u32, 5usize);
        let mut e = EventBuf::default();
        e.push_run_text(Token::Reasoning, tokens, chunk, pad_n);
        let p = ".".repeat(pad_n);
        let want = format!("{}{p}", "hmm ".repeat(3)).repeat(3) + "hmm " + &p;
        assert_eq!(flat(e), want.into_bytes());
    }

    #[test]
    fn decimal_writes_digits() {
        let mut arena = BytesMut::new();
        for n in [0u64, 7, 10, 1_234_567_890, u64::MAX] {
            assert_eq!(decimal(&mut arena, n), n.to_string().as_bytes());
        }
    }

    #[test]
    fn vectored_matches_chunked() {
        let mut e = EventBuf::default();
        e.push_static("a")
            .push_seg(Seg::repeat(Bytes::from_static(b"xy"), 3))
            .push_static("z");
        e.advance(2); // into the first repeat
        let mut io = [IoSlice::new(&[]); 8];
        let n = e.chunks_vectored(&mut io);
        let got: Vec<u8> = io[..n].iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(got, b"yxyxyz");
        assert_eq!(flat(e), b"yxyxyz");
    }
}
