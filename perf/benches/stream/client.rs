//! A blocking HTTP/1.1 streaming client for the benches: one keep-alive
//! connection, one request at a time, the chunked body decoded and its SSE
//! events counted (by the project's own SSE observer) as they arrive, and
//! (for the mock's `stamp` knob) each event's one-way latency.
//!
//! The same client reads the direct path (the mock provider) and IOP, so
//! its own cost is in both figures of a ratio.

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use framing::sse::{SseItemRef, SseObserver};
use perf::mock_provider::{monotonic_ns, parse_stamp};

/// Bytes read from the socket at a time.
const READ_BYTES: usize = 256 * 1024;

/// What one streamed response carried.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Streamed {
    /// Body bytes (after chunked decoding).
    pub(crate) bytes: u64,
    /// SSE events (`data: [DONE]` included).
    pub(crate) events: u64,
}

/// One keep-alive connection.
pub(crate) struct Client {
    socket: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    /// Connects to `addr` (`TCP_NODELAY`).
    pub(crate) fn connect(addr: SocketAddr) -> Self {
        let socket = TcpStream::connect(addr).expect("connect");
        socket.set_nodelay(true).expect("nodelay");
        Self {
            socket,
            buf: vec![0; READ_BYTES],
        }
    }

    /// POSTs a streaming chat completion for `model` to `path` with the
    /// extra header lines `headers` (each ending in CRLF) and reads the
    /// whole SSE body. `on_events(n, at)` is called after each read that
    /// completed `n` events, with the time the read returned.
    pub(crate) fn stream(
        &mut self,
        path: &str,
        headers: &str,
        model: &str,
        on_events: impl FnMut(u64, Instant),
    ) -> io::Result<Streamed> {
        self.exchange(path, headers, model, |_, _| {}, on_events)
    }

    /// [`stream`](Self::stream) for a body whose events carry the mock's
    /// send stamps (`stamp` knob): `on_latency(ns)` gets each stamped
    /// event's one-way latency, `CLOCK_MONOTONIC` at the read that
    /// completed it minus its stamp. Events without a stamp (the role
    /// chunk, the finish chunk, `[DONE]`) are skipped.
    pub(crate) fn stream_stamped(
        &mut self,
        path: &str,
        headers: &str,
        model: &str,
        mut on_latency: impl FnMut(u64),
    ) -> io::Result<Streamed> {
        let on_event = |data: &[u8], read_ns: u64| {
            if let Some(sent) = parse_stamp(data) {
                on_latency(read_ns.saturating_sub(sent));
            }
        };
        self.exchange(path, headers, model, on_event, |_, _| {})
    }

    /// Sends the request and reads the body: `on_event(data, read_ns)` for
    /// each event (`read_ns`: `CLOCK_MONOTONIC` when the read that completed
    /// it returned), then `on_events(n, at)` after each read that completed
    /// `n` events.
    fn exchange(
        &mut self,
        path: &str,
        headers: &str,
        model: &str,
        mut on_event: impl FnMut(&[u8], u64),
        mut on_events: impl FnMut(u64, Instant),
    ) -> io::Result<Streamed> {
        let body = format!(
            r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}"#
        );
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n\
             accept: text/event-stream\r\n{headers}content-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.socket.write_all(request.as_bytes())?;

        let (head_end, mut filled) = self.read_head()?;
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        if !head.starts_with("HTTP/1.1 200") {
            return Err(io::Error::other(format!("not a 200: {head}")));
        }
        if !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            return Err(io::Error::other(format!("not chunked: {head}")));
        }
        let mut chunked = Chunked::default();
        let mut sse = SseObserver::default();
        let mut streamed = Streamed::default();
        let mut start = head_end;
        loop {
            let at = Instant::now();
            let read_ns = monotonic_ns();
            let mut events = 0;
            let mut failed = None;
            chunked.feed(&self.buf[start..filled], |data| {
                streamed.bytes += data.len() as u64;
                if let Err(e) = sse.feed(data, |item| {
                    if let SseItemRef::Event(event) = item {
                        events += 1;
                        on_event(event.data, read_ns);
                    }
                }) {
                    failed = Some(e);
                }
            })?;
            if let Some(e) = failed {
                return Err(io::Error::other(format!("bad SSE: {e}")));
            }
            if events > 0 {
                streamed.events += events;
                on_events(events, at);
            }
            if chunked.done() {
                return Ok(streamed);
            }
            start = 0;
            filled = read_some(&mut self.socket, &mut self.buf)?;
            if filled == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed mid-body",
                ));
            }
        }
    }

    /// Reads until the end of the response head; (head length, bytes in
    /// the buffer).
    fn read_head(&mut self) -> io::Result<(usize, usize)> {
        let mut filled = 0;
        loop {
            let n = read_some(&mut self.socket, &mut self.buf[filled..])?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before the response head",
                ));
            }
            filled += n;
            if let Some(at) = self.buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok((at + 4, filled));
            }
        }
    }
}

/// `read` that retries on EINTR.
fn read_some(socket: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match socket.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// An HTTP/1.1 chunked-body decoder (no trailers).
#[derive(Debug, Default)]
struct Chunked {
    state: ChunkState,
    /// The size being read.
    size: usize,
    /// Data bytes left in the current chunk.
    left: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading the hex size.
    #[default]
    Size,
    /// Skipping a chunk extension up to the CR.
    Extension,
    /// After the size line's CR.
    SizeLf,
    /// Reading data.
    Data,
    /// After the data: its CR, then LF.
    DataCr,
    DataLf,
    /// After the last chunk's size line: the empty trailer line.
    LastCr,
    LastLf,
    Done,
}

impl Chunked {
    fn done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes `input`, handing each run of body bytes to `data`.
    fn feed(&mut self, mut input: &[u8], mut data: impl FnMut(&[u8])) -> io::Result<()> {
        let Self { state, size, left } = self;
        while let Some(&byte) = input.first() {
            match *state {
                ChunkState::Size => match byte {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let digit = (byte as char).to_digit(16).unwrap_or(0) as usize;
                        *size = size
                            .checked_mul(16)
                            .and_then(|s| s.checked_add(digit))
                            .ok_or_else(|| io::Error::other("chunk size overflows"))?;
                    }
                    b';' => *state = ChunkState::Extension,
                    b'\r' => *state = ChunkState::SizeLf,
                    _ => return Err(io::Error::other("bad chunk size")),
                },
                ChunkState::Extension => {
                    if byte == b'\r' {
                        *state = ChunkState::SizeLf;
                    }
                }
                ChunkState::SizeLf => {
                    expect(byte, b'\n')?;
                    if *size == 0 {
                        *state = ChunkState::LastCr;
                    } else {
                        *left = *size;
                        *size = 0;
                        *state = ChunkState::Data;
                    }
                }
                ChunkState::Data => {
                    let take = (*left).min(input.len());
                    data(&input[..take]);
                    *left -= take;
                    input = &input[take..];
                    if *left == 0 {
                        *state = ChunkState::DataCr;
                    }
                    continue;
                }
                ChunkState::DataCr => {
                    expect(byte, b'\r')?;
                    *state = ChunkState::DataLf;
                }
                ChunkState::DataLf => {
                    expect(byte, b'\n')?;
                    *state = ChunkState::Size;
                }
                ChunkState::LastCr => {
                    expect(byte, b'\r')?;
                    *state = ChunkState::LastLf;
                }
                ChunkState::LastLf => {
                    expect(byte, b'\n')?;
                    *state = ChunkState::Done;
                }
                ChunkState::Done => return Err(io::Error::other("bytes after the last chunk")),
            }
            input = &input[1..];
        }
        Ok(())
    }
}

/// `Ok` when `byte` is `want`.
fn expect(byte: u8, want: u8) -> io::Result<()> {
    if byte == want {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "bad chunked framing: {:?} where {:?} belongs",
            byte as char, want as char
        )))
    }
}
