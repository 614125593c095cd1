//! The chunked transfer coding (RFC 9112 §7.1): a vectored, zero-copy
//! encoder and a sans-IO, zero-copy, streaming decoder.
//!
//! # Encoder
//! [`ChunkedEncoder::encode`] turns a body `Bytes` into a [`ChunkFrame`]:
//! `head` (hex size + CRLF, carved from a small reusable scratch block, so
//! about one allocation per hundred chunks), `body` (the caller's `Bytes`,
//! untouched) and `tail` (a static CRLF). The frame is a [`Buf`] and gives
//! three `IoSlice`s for one vectored write. An empty body yields `None`: a
//! zero-size chunk would end the stream, so only [`LAST_CHUNK`] can.
//!
//! # Decoder
//! [`ChunkedDecoder`] is a state machine over the receive buffer:
//!
//! ```text
//!            size line "N[;ext]\r\n"        N bytes (streamed)
//!   ┌──────▶ Size ─────────── N > 0 ─────▶ Data ──▶ DataCrlf "\r\n" ──┐
//!   │         │                                                        │
//!   │         └── N = 0 ──▶ Trailers ("name: value\r\n")* "\r\n" ──▶ Done (End)
//!   └──────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Chunk data is yielded as soon as it is buffered (a 64 KiB chunk split
//! over reads comes out in pieces, never buffered whole); each piece is
//! split off the receive buffer. Framing lines are consumed only when
//! complete, so the decoder buffers at most one partial line, bounded by
//! [`MAX_CHUNK_SIZE_LINE`] or [`MAX_TRAILER_BYTES`].
//!
//! # Strictness
//! - Every framing line must end in CRLF. A bare LF or bare CR anywhere in
//!   a size or trailer line is [`HttpError::InvalidChunkLineEnding`]; data
//!   not followed by CRLF is [`HttpError::MissingChunkTerminator`]. Lenient
//!   line endings are where two parsers disagree and smuggling starts.
//! - Sizes are `1*HEXDIG` (leading zeros allowed), overflow-checked into
//!   `u64`. After the digits only `[SP/HTAB]* ";" extension` may follow.
//! - Extensions are skipped; they may not contain control characters, and
//!   all extensions of one body together are bounded by
//!   [`CHUNKED_EXTENSIONS_LIMIT`], so tiny chunks with large extensions
//!   cannot burn CPU unboundedly.
//! - Trailer fields are skipped (never merged into the head); each line must
//!   look like a field (no leading whitespace, has a `:`, no controls).

use std::io::IoSlice;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::HttpError;
use super::body::BodyItem;

/// The last chunk with an empty trailer section: ends a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Longest chunk-size line accepted, extensions and CRLF included (4 KiB).
pub const MAX_CHUNK_SIZE_LINE: usize = 4 * 1024;

/// Most bytes of chunk extensions (from the first byte after the size
/// digits to the CR) accepted over one whole body (16 KiB).
pub const CHUNKED_EXTENSIONS_LIMIT: usize = 16 * 1024;

/// Longest trailer section accepted: every line after the last-chunk line,
/// the final empty line's CRLF included (16 KiB).
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;

const CRLF: &[u8] = b"\r\n";
/// 16 hex digits (`u64::MAX`) + CRLF.
const SIZE_LINE_MAX: usize = 18;
/// Scratch block from which size lines are carved.
const SCRATCH_BLOCK: usize = 512;
const HEX: &[u8; 16] = b"0123456789abcdef";

/// The size line of a chunk of `len` bytes (hex digits, CRLF) and its
/// length; `None` for 0, which would end the body.
fn size_line_bytes(len: u64) -> Option<([u8; SIZE_LINE_MAX], usize)> {
    if len == 0 {
        return None;
    }
    let digits = (64 - len.leading_zeros()).div_ceil(4) as usize;
    let mut line = [0u8; SIZE_LINE_MAX];
    for (k, slot) in line[..digits].iter_mut().enumerate() {
        *slot = HEX[((len >> (4 * (digits - 1 - k))) & 0xf) as usize];
    }
    line[digits..digits + 2].copy_from_slice(CRLF);
    Some((line, digits + 2))
}

/// Encodes body pieces as chunks. Holds only a small scratch block for size
/// lines; one encoder per response stream.
#[derive(Debug, Default)]
pub struct ChunkedEncoder {
    scratch: BytesMut,
}

impl ChunkedEncoder {
    /// A new encoder (allocates on first use).
    pub fn new() -> Self {
        Self::default()
    }

    /// Frame `body` as one chunk, or `None` if it is empty (an empty chunk
    /// would end the body; use [`ChunkedEncoder::last_chunk`] for that).
    pub fn encode(&mut self, body: Bytes) -> Option<ChunkFrame> {
        let head = self.size_line(body.len() as u64)?;
        Some(ChunkFrame {
            head,
            body,
            tail: Self::crlf(),
        })
    }

    /// The size line (hex size + CRLF) of a chunk of `len` bytes whose body
    /// the caller writes as several slices, followed by [`Self::crlf`]; or
    /// `None` for 0 (which would end the body).
    pub fn size_line(&mut self, len: u64) -> Option<Bytes> {
        let (line, n) = size_line_bytes(len)?;
        if self.scratch.capacity() < SIZE_LINE_MAX {
            self.scratch = BytesMut::with_capacity(SCRATCH_BLOCK);
        }
        self.scratch.extend_from_slice(&line[..n]);
        Some(self.scratch.split().freeze())
    }

    /// [`Self::size_line`] for a writer that sends a chunk now and then and
    /// keeps no encoder: the line is a small allocation of its own, freed
    /// once it is written, where a fresh encoder would allocate a whole
    /// scratch block for it (and a kept one would hold that block for as
    /// long as its connection lives).
    pub fn lone_size_line(len: u64) -> Option<Bytes> {
        let (line, n) = size_line_bytes(len)?;
        Some(Bytes::copy_from_slice(&line[..n]))
    }

    /// A whole chunk of `body` for a writer that keeps no encoder (see
    /// [`Self::lone_size_line`]); `None` if `body` is empty.
    pub fn lone_chunk(body: Bytes) -> Option<ChunkFrame> {
        Some(ChunkFrame {
            head: Self::lone_size_line(body.len() as u64)?,
            body,
            tail: Self::crlf(),
        })
    }

    /// The CRLF that ends a chunk's data, as a static `Bytes`.
    pub fn crlf() -> Bytes {
        Bytes::from_static(CRLF)
    }

    /// [`LAST_CHUNK`] as a static `Bytes` (no allocation).
    pub fn last_chunk() -> Bytes {
        Bytes::from_static(LAST_CHUNK)
    }
}

/// One encoded chunk: size line, untouched body, CRLF. A [`Buf`] over the
/// three parts, which never copies unless asked to span parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkFrame {
    head: Bytes,
    body: Bytes,
    tail: Bytes,
}

impl ChunkFrame {
    /// The size line, e.g. `1f40\r\n` (what is left of it after `advance`).
    pub fn head(&self) -> &Bytes {
        &self.head
    }

    /// The body, the same allocation the caller passed in.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The trailing CRLF.
    pub fn tail(&self) -> &Bytes {
        &self.tail
    }

    /// The three parts, for runtimes that take owned buffers (io_uring).
    pub fn into_parts(self) -> [Bytes; 3] {
        [self.head, self.body, self.tail]
    }

    /// The three parts as slices for `write_vectored`.
    pub fn io_slices(&self) -> [IoSlice<'_>; 3] {
        [
            IoSlice::new(&self.head),
            IoSlice::new(&self.body),
            IoSlice::new(&self.tail),
        ]
    }
}

impl Buf for ChunkFrame {
    fn remaining(&self) -> usize {
        self.head.len() + self.body.len() + self.tail.len()
    }

    fn chunk(&self) -> &[u8] {
        [&self.head, &self.body, &self.tail]
            .into_iter()
            .find(|part| !part.is_empty())
            .map_or(&[][..], |part| &part[..])
    }

    fn advance(&mut self, mut cnt: usize) {
        for part in [&mut self.head, &mut self.body] {
            let n = cnt.min(part.len());
            part.advance(n);
            cnt -= n;
        }
        // Panics past the end, as `Buf::advance` documents.
        self.tail.advance(cnt);
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let parts = [&self.head, &self.body, &self.tail];
        let mut filled = 0;
        for (slot, part) in dst
            .iter_mut()
            .zip(parts.into_iter().filter(|p| !p.is_empty()))
        {
            *slot = IoSlice::new(part);
            filled += 1;
        }
        filled
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        // Zero copy while the request stays inside one part.
        for part in [&mut self.head, &mut self.body, &mut self.tail] {
            if !part.is_empty() {
                if len <= part.len() {
                    return part.split_to(len);
                }
                break;
            }
        }
        let mut out = BytesMut::with_capacity(len);
        out.put((&mut *self).take(len));
        out.freeze()
    }
}

/// Where the decoder is in the chunked grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Expecting a chunk-size line.
    Size,
    /// Inside chunk data.
    Data { remaining: u64 },
    /// Expecting the CRLF after chunk data.
    DataCrlf,
    /// After the last chunk: trailer lines until an empty line.
    Trailers,
    /// `End` was returned.
    Done,
}

/// Sans-IO decoder of a chunked body (see the module docs).
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    extension_bytes: usize,
    trailer_bytes: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a chunked body.
    pub fn new() -> Self {
        Self {
            state: State::Size,
            extension_bytes: 0,
            trailer_bytes: 0,
        }
    }

    /// True once `End` was returned.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consume framing from the front of `buf` and return the next item:
    /// `Data` (a non-empty slice split off `buf`), `End` once after the
    /// trailers, or `Ok(None)` for "need more bytes" (and forever after
    /// `End`, leaving what follows the body in `buf`).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<BodyItem>, HttpError> {
        loop {
            match self.state {
                State::Size => {
                    let too_long = HttpError::ChunkSizeLineTooLong {
                        limit: MAX_CHUNK_SIZE_LINE,
                    };
                    let Some(line_len) = find_line(buf, MAX_CHUNK_SIZE_LINE, too_long)? else {
                        return Ok(None);
                    };
                    let (size, ext_len) = parse_size_line(&buf[..line_len - 2])?;
                    self.extension_bytes += ext_len;
                    if self.extension_bytes > CHUNKED_EXTENSIONS_LIMIT {
                        return Err(HttpError::ChunkExtensionsTooLarge {
                            limit: CHUNKED_EXTENSIONS_LIMIT,
                        });
                    }
                    buf.advance(line_len);
                    self.state = match size {
                        0 => State::Trailers,
                        remaining => State::Data { remaining },
                    };
                }
                State::Data { remaining } => {
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    let take = usize::try_from(remaining).map_or(buf.len(), |r| r.min(buf.len()));
                    let left = remaining - take as u64;
                    self.state = match left {
                        0 => State::DataCrlf,
                        remaining => State::Data { remaining },
                    };
                    return Ok(Some(BodyItem::Data(buf.split_to(take).freeze())));
                }
                State::DataCrlf => match (buf.first(), buf.get(1)) {
                    (None, _) | (Some(b'\r'), None) => return Ok(None),
                    (Some(b'\r'), Some(b'\n')) => {
                        buf.advance(2);
                        self.state = State::Size;
                    }
                    _ => return Err(HttpError::MissingChunkTerminator),
                },
                State::Trailers => {
                    let budget = MAX_TRAILER_BYTES - self.trailer_bytes;
                    let too_long = HttpError::TrailersTooLarge {
                        limit: MAX_TRAILER_BYTES,
                    };
                    let Some(line_len) = find_line(buf, budget, too_long)? else {
                        return Ok(None);
                    };
                    if line_len > 2 {
                        check_trailer_line(&buf[..line_len - 2])?;
                    }
                    self.trailer_bytes += line_len;
                    buf.advance(line_len);
                    if line_len == 2 {
                        self.state = State::Done;
                        return Ok(Some(BodyItem::End));
                    }
                }
                State::Done => return Ok(None),
            }
        }
    }
}

/// Length (CRLF included) of the complete line at the front of `buf`, if
/// one ends within `limit` bytes; `too_long` once `limit` bytes hold no LF.
fn find_line(buf: &[u8], limit: usize, too_long: HttpError) -> Result<Option<usize>, HttpError> {
    let window = &buf[..buf.len().min(limit)];
    match memchr::memchr(b'\n', window) {
        Some(i) if i > 0 && window[i - 1] == b'\r' => Ok(Some(i + 1)),
        Some(_) => Err(HttpError::InvalidChunkLineEnding),
        None if buf.len() >= limit.max(1) => Err(too_long),
        None => Ok(None),
    }
}

/// Parse `1*HEXDIG [ BWS ";" ext ]` (CRLF stripped): the size and the
/// number of extension bytes.
fn parse_size_line(line: &[u8]) -> Result<(u64, usize), HttpError> {
    if memchr::memchr(b'\r', line).is_some() {
        return Err(HttpError::InvalidChunkLineEnding);
    }
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(HttpError::InvalidChunkSize);
    }
    let size = line[..digits].iter().try_fold(0u64, |acc, &b| {
        let nibble = u64::from(char::from(b).to_digit(16).unwrap_or_default());
        acc.checked_mul(16)
            .and_then(|acc| acc.checked_add(nibble))
            .ok_or(HttpError::ChunkSizeOverflow)
    })?;
    let ext = &line[digits..];
    if !ext.is_empty() {
        let ws = ext.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
        if ext.get(ws) != Some(&b';') {
            return Err(HttpError::InvalidChunkSize);
        }
        if ext.iter().any(|&b| is_ctl(b)) {
            return Err(HttpError::InvalidChunkExtension);
        }
    }
    Ok((size, ext.len()))
}

/// A trailer line (CRLF stripped, non-empty) must look like a field line.
fn check_trailer_line(line: &[u8]) -> Result<(), HttpError> {
    if memchr::memchr(b'\r', line).is_some() {
        return Err(HttpError::InvalidChunkLineEnding);
    }
    let starts_with_ws = matches!(line.first(), Some(b' ' | b'\t'));
    if starts_with_ws || !line.contains(&b':') || line.iter().any(|&b| is_ctl(b)) {
        return Err(HttpError::InvalidTrailer);
    }
    Ok(())
}

/// Control characters other than HTAB.
fn is_ctl(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

#[cfg(test)]
#[path = "chunked_tests.rs"]
mod tests;
