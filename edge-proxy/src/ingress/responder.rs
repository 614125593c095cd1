//! The writer of one response on a client connection: a full answer, or a
//! body relayed as it comes (chunked, close-delimited for HTTP/1.0, or of a
//! length known up front), with the client's leaving reported by the
//! connection's watching read (see `client_read`).
//! Writes can be corked so frames that arrived together leave in one
//! `writev`; body pieces written while corked leave as one chunk (one size
//! line before the slices, one CRLF after them; nothing is copied).

use std::cell::{Cell, RefCell};
use std::os::fd::RawFd;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use framing::blocks::Blocks;
use framing::http::{ChunkedEncoder, write_response_head};
use monoio::io::OwnedWriteHalf;
use monoio::net::TcpStream;

use super::error::ApiError;
use crate::iovec;

/// Writes one response on the connection.
pub struct Responder {
    pub(super) write: OwnedWriteHalf<TcpStream>,
    /// The socket `write` writes (open while `write` is: the stream closes
    /// when both halves are gone), for [`iovec::write_now`].
    fd: RawFd,
    /// Close the connection after this response.
    pub(super) close: bool,
    /// HTTP/1.0 client: no chunking; the body ends at the close.
    pub(super) http10: bool,
    /// How the body being relayed is framed.
    pub(super) framing: Framing,
    /// Set by the connection's watching read when the client went away
    /// (`ClientRead::watching`, which polls this responder's handler right
    /// after setting it).
    pub(super) gone: Rc<Cell<bool>>,
    failed: bool,
    /// While corked ([`Responder::cork`]), what the writes would have sent,
    /// in order; [`Responder::uncork`] sends it in one `writev`.
    corked: Option<Vec<Bytes>>,
    /// While corked, the chunk that body pieces are being gathered into.
    gathering: Option<Gathering>,
}

/// A header field, borrowed for less long (to join fields made on the spot).
fn shorter<'s, 'l: 's>(field: (&'l [u8], &'l [u8])) -> (&'s [u8], &'s [u8]) {
    field
}

thread_local! {
    /// This core's relayed heads are cut from blocks they share (see
    /// `framing::blocks`): a head a request had been a buffer of its own
    /// and the shared header made when it was frozen, two allocations
    /// (`bench-results/profiles.md`, round 50).
    static HEADS: RefCell<Blocks> = RefCell::new(Blocks::new(HEAD_BLOCK));
}

/// The blocks relayed heads are cut from: a few dozen heads each.
const HEAD_BLOCK: usize = 16 * 1024;

/// A relayed body's head: the server's fields, then `fields`; `None` when
/// a field cannot be written (not a token, or a control byte in a value).
fn relayed_head<'h>(
    status: u16,
    fields: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) -> Option<Bytes> {
    let fields = SERVER_HEADERS
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .chain(fields);
    HEADS
        .with_borrow_mut(|heads| heads.cut(512, |head| write_response_head(head, status, fields)))
        .ok()
        .map(BytesMut::freeze)
}

/// How a relayed body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// No relayed body started (a whole answer frames itself).
    Unstarted,
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// HTTP/1.0: the body ends at the close.
    UntilClose,
    /// `Content-Length`: `left` bytes still to come. A body that would go
    /// past it, or ends short of it, is cut (see [`Responder::chunk`]).
    Sized {
        /// Bytes not yet written.
        left: u64,
    },
}

/// A chunk being gathered while corked: `corked[slot]` is the place of its
/// size line, and `len` its size so far.
#[derive(Debug, Clone, Copy)]
struct Gathering {
    slot: usize,
    len: u64,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("close", &self.close)
            .field("http10", &self.http10)
            .finish_non_exhaustive()
    }
}

const SERVER_HEADERS: [(&str, &str); 1] = [("server", "iop-edge")];

/// What one [`Responder::send`] writes: one slice joins the parts held
/// while corked without a `Vec` of its own (a small answer's head and
/// body were two allocations a request).
pub(super) enum Parts {
    /// One slice.
    One(Bytes),
    /// Several, in order.
    Many(Vec<Bytes>),
}

impl Responder {
    /// A responder for a new connection's write half and its socket.
    pub(super) fn new(write: OwnedWriteHalf<TcpStream>, fd: RawFd) -> Responder {
        Responder {
            write,
            fd,
            close: false,
            http10: false,
            framing: Framing::Unstarted,
            gone: Rc::new(Cell::new(false)),
            failed: false,
            corked: None,
            gathering: None,
        }
    }

    /// Answers with a whole body.
    pub async fn full(&mut self, status: u16, content_type: &str, body: Vec<u8>) {
        self.full_with(status, content_type, body, &[]).await;
    }

    /// Answers with a whole body and extra headers.
    pub async fn full_with(
        &mut self,
        status: u16,
        content_type: &str,
        body: Vec<u8>,
        extra: &[(&str, String)],
    ) {
        // The head is made in a block: nothing of its making stays in this
        // future beside the write.
        let head = {
            let mut head = BytesMut::with_capacity(256);
            let mut digits = itoa::Buffer::new();
            let connection = if self.close { "close" } else { "keep-alive" };
            let fields = SERVER_HEADERS
                .iter()
                .map(|(n, v)| (*n, *v))
                .chain([
                    ("content-type", content_type),
                    ("content-length", digits.format(body.len())),
                    ("connection", connection),
                ])
                .chain(extra.iter().map(|(n, v)| (*n, v.as_str())));
            if write_response_head(&mut head, status, fields).is_err() {
                self.failed = true;
                return;
            }
            head
        };
        let parts = vec![head.freeze(), Bytes::from(body)];
        self.send(Parts::Many(parts)).await;
    }

    /// Answers with an OpenAI-style error.
    pub async fn error(&mut self, error: &ApiError) {
        let mut extra = Vec::new();
        if let Some(seconds) = error.retry_after_s {
            extra.push(("retry-after", seconds.to_string()));
        }
        if error.status == 401 {
            extra.push(("www-authenticate", "Bearer".to_owned()));
        }
        self.full_with(error.status, "application/json", error.body(), &extra)
            .await;
    }

    /// Starts a streamed body (chunked; close-delimited for HTTP/1.0) with
    /// `headers` (which must not contain framing fields). The stream's hints
    /// to caches and buffering proxies (`cache-control: no-cache`,
    /// `x-accel-buffering: no`) follow, each unless `headers` has its own.
    ///
    /// The head is made before the returned future, which holds only it
    /// while it is sent: a quiet stream's task holds the largest future it
    /// awaits for its whole life (`CONNECTION_TASK_BUDGET`).
    pub fn start_stream<'h>(
        &mut self,
        status: u16,
        headers: impl IntoIterator<Item = (&'h [u8], &'h [u8]), IntoIter: Clone>,
    ) -> impl Future<Output = ()> {
        let head = self.stream_head(status, headers);
        self.send_head(head)
    }

    /// A streamed body's head (see [`Responder::start_stream`]); the
    /// responder now frames the body that way.
    pub(super) fn stream_head<'h>(
        &mut self,
        status: u16,
        headers: impl IntoIterator<Item = (&'h [u8], &'h [u8]), IntoIter: Clone>,
    ) -> Option<Bytes> {
        let headers = headers.into_iter();
        let has = |name: &[u8]| headers.clone().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let hints = [
            (b"x-accel-buffering".as_slice(), b"no".as_slice()),
            (b"cache-control".as_slice(), b"no-cache".as_slice()),
        ];
        let hints = hints.into_iter().filter(|(name, _)| !has(name));
        let (framing, connection): ((&[u8], &[u8]), _) = if self.http10 {
            self.begin_body(Framing::UntilClose);
            ((b"connection", b"close"), None)
        } else {
            let connection = self.begin_body(Framing::Chunked);
            (
                (b"transfer-encoding", b"chunked"),
                Some((b"connection".as_slice(), connection)),
            )
        };
        let fields = headers
            .clone()
            .chain([framing])
            .chain(hints)
            .chain(connection);
        relayed_head(status, fields)
    }

    /// Starts a relayed body framed as `framing` (an HTTP/1.0 client's
    /// connection then closes after it); the `Connection` value to send.
    fn begin_body(&mut self, framing: Framing) -> &'static [u8] {
        self.framing = framing;
        self.close |= self.http10;
        if self.close { b"close" } else { b"keep-alive" }
    }

    /// The head of a body of `length` bytes, relayed as it comes
    /// ([`Responder::chunk`]) under a `Content-Length`, with `headers`
    /// (which must not contain framing fields): a provider's answer whose
    /// length it gave. The client then gets the answer as the provider
    /// framed it, no chunk framing to read; a body that does not add up to
    /// `length` is cut, so the client sees the break. The responder now
    /// frames the body that way; [`Responder::send_head`] sends the head.
    pub(super) fn sized_head<'h>(
        &mut self,
        status: u16,
        headers: impl IntoIterator<Item = (&'h [u8], &'h [u8])>,
        length: u64,
    ) -> Option<Bytes> {
        let connection = self.begin_body(Framing::Sized { left: length });
        let mut digits = itoa::Buffer::new();
        let fields = headers.into_iter().map(shorter).chain([
            (
                b"content-length".as_slice(),
                digits.format(length).as_bytes(),
            ),
            (b"connection".as_slice(), connection),
        ]);
        relayed_head(status, fields)
    }

    /// Sends a head made by [`Responder::stream_head`] or
    /// [`Responder::sized_head`]; `None` (a head that could not be written)
    /// fails the answer.
    ///
    /// A plain fn: an async fn would keep `head` in its future beside the
    /// write that took it.
    pub(super) fn send_head(&mut self, head: Option<Bytes>) -> impl Future<Output = ()> + '_ {
        let parts = match head {
            Some(head) => Parts::One(head),
            None => {
                self.failed = true;
                Parts::Many(Vec::new())
            }
        };
        self.send(parts)
    }

    /// Sends body bytes as they are (one chunk), at once; while corked,
    /// they join the chunk the pieces before them went into.
    ///
    /// Under a `Content-Length` (`Responder::sized_head`), bytes that
    /// would go past it are not written: the answer is marked to close
    /// (nothing more of this body is written), and the client, short of
    /// the length, sees the break.
    pub async fn chunk(&mut self, body: Bytes) {
        if body.is_empty() {
            return;
        }
        if let Framing::Sized { left } = &mut self.framing {
            let len = body.len() as u64;
            if len > *left {
                *left = 0;
                self.close = true;
                return;
            }
            *left -= len;
            self.send(Parts::One(body)).await;
            return;
        }
        if self.framing == Framing::Chunked {
            if let Some(parts) = self.corked.as_mut() {
                let gathering = self.gathering.get_or_insert_with(|| {
                    parts.push(Bytes::new());
                    Gathering {
                        slot: parts.len() - 1,
                        len: 0,
                    }
                });
                gathering.len += body.len() as u64;
                parts.push(body);
                return;
            }
            let Some(frame) = ChunkedEncoder::lone_chunk(body) else {
                return;
            };
            self.send(Parts::Many(frame.into_parts().to_vec())).await;
        } else {
            self.send(Parts::One(body)).await;
        }
    }

    /// Ends a streamed body: its last chunk; a body short of its
    /// `Content-Length` is cut instead (the connection closes).
    pub async fn finish(&mut self) {
        match self.framing {
            Framing::Chunked => self.send(Parts::One(ChunkedEncoder::last_chunk())).await,
            Framing::Sized { left } if left > 0 => self.close = true,
            _ => {}
        }
    }

    /// Whether the client is gone or a write failed: stop producing.
    pub fn is_gone(&self) -> bool {
        self.failed || self.gone.get()
    }

    /// Resolves when the client goes away mid-response. It registers no
    /// waker of its own: the connection's watching read wakes the task and
    /// sets the flag before the handler is polled again
    /// (`ClientRead::watching`).
    pub async fn gone(&self) {
        std::future::poll_fn(|_| {
            if self.gone.get() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
    }

    /// Marks the connection to close after this response (a response that
    /// broke off mid-stream cannot be followed by another).
    pub fn close_after(&mut self) {
        self.close = true;
    }

    /// Holds every write from now on until [`Responder::uncork`], which
    /// sends them in one `writev`: a caller that has several pieces ready
    /// at once (a tunnel's head, body and end) costs the client one write,
    /// not one each. The caller bounds what it writes while corked.
    pub fn cork(&mut self) {
        // Room for a small answer's head, chunk and end without growing.
        self.corked.get_or_insert_with(|| Vec::with_capacity(8));
    }

    /// Bytes held by [`Responder::cork`] so far.
    pub fn corked_len(&self) -> usize {
        self.corked
            .as_ref()
            .map_or(0, |parts| parts.iter().map(Bytes::len).sum())
    }

    /// Sends what was held since [`Responder::cork`] and writes directly
    /// again.
    pub async fn uncork(&mut self) {
        self.end_gathering();
        if let Some(parts) = self.corked.take()
            && !parts.is_empty()
        {
            self.send(Parts::Many(parts)).await;
        }
    }

    pub(super) async fn send(&mut self, parts: Parts) {
        if self.failed {
            return;
        }
        self.end_gathering();
        if let Some(corked) = self.corked.as_mut() {
            match parts {
                Parts::One(part) => corked.push(part),
                Parts::Many(parts) => corked.extend(parts),
            }
            return;
        }
        let parts = match parts {
            Parts::One(part) => vec![part],
            Parts::Many(parts) => parts,
        };
        // Usually the socket takes it all at once, and the ring is not
        // entered for it (no write of this connection is in flight: the
        // last one was awaited, and a dropped one ends the connection).
        let rest = match iovec::write_now(self.fd, parts) {
            Ok(rest) if rest.is_empty() => return,
            Ok(rest) => rest,
            Err(_) => {
                self.failed = true;
                return;
            }
        };
        // Boxed: the write op is ~260 B, and inline it would be in every
        // answer's future (each `full`, `chunk`, `error` …) for the whole
        // of the answer, written to or not; one small allocation per write
        // is noise next to the write itself.
        let writing = Box::pin(iovec::write_all(&mut self.write, rest));
        if writing.await.is_err() {
            self.failed = true;
        }
    }

    /// Frames the chunk gathered while corked: its size line into its slot
    /// and a CRLF after its last piece.
    fn end_gathering(&mut self) {
        let (Some(gathering), Some(parts)) = (self.gathering.take(), self.corked.as_mut()) else {
            return;
        };
        if let Some(line) = ChunkedEncoder::lone_size_line(gathering.len) {
            parts[gathering.slot] = line;
            parts.push(ChunkedEncoder::crlf());
        }
    }
}
