//! The read side of one client connection: the bytes read and not yet
//! parsed, and at most one read in flight.
//!
//! - **A read outlives whoever waits for it.** The read in flight belongs
//!   to the [`ClientRead`], not to the future that awaits it: a wait that
//!   times out or is dropped leaves the read running, and what it brings
//!   lands in the buffer later. So bytes are never lost and a read is never
//!   cancelled.
//! - **One read watches and then waits.** While a handler answers, a small
//!   read ([`WATCH_READ`] bytes) watches the client ([`ClientRead::watching`]):
//!   its end of stream, or an error, means the client left. If the client
//!   sends nothing, the same read stays in flight after the answer and
//!   brings the first bytes of the next request. A connection therefore
//!   costs one read op per request and no task, channel or canceller
//!   (issue 8: the watcher task and its plumbing were ~0.8 KB a stream).
//! - **Bytes land in arrival order.** A read started while the buffer is
//!   empty becomes the buffer (no copy); one started while unparsed bytes
//!   wait (pipelining) reads into a side buffer that is appended when it
//!   completes. A read awaited at once ([`ClientRead::fill`]) reads into
//!   the buffer's own spare capacity.
//! - **Bytes likely waiting are taken at once.** On io_uring, a read that
//!   follows one that filled its buffer (the watching read's 64 bytes of a
//!   longer request, as a rule) is a `recv(2)` of what the socket holds
//!   ([`crate::at_once::recv_now`]), not one more trip through the ring; nothing
//!   waiting, it reads through the ring as any other.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, OwnedReadHalf};
use monoio::net::TcpStream;

use crate::at_once::recv_now;

/// The watching read while the client sends nothing (the usual case: it
/// waits for the answer). End of stream or an error fits in any size;
/// pipelined bytes switch it to full reads.
pub(super) const WATCH_READ: usize = 64;

/// A full read (a request being read, or pipelined bytes).
const FULL_READ: usize = 4096;

/// Most pipelined bytes buffered while a response is being written: a
/// client that pipelines this far ahead is not read further while it is
/// answered (the rest waits in the kernel), and its leaving is then seen at
/// the next write.
pub(super) const PIPELINE_AHEAD_MAX: usize = 64 * 1024;

type ReadHalf = OwnedReadHalf<TcpStream>;

/// What a finished read hands back: the read half, the buffer it read
/// into, and its result.
type Landed = (ReadHalf, BytesMut, io::Result<usize>);

/// The read side of a client connection (see the module docs).
pub(super) struct ClientRead {
    /// Bytes read and not yet consumed.
    buf: BytesMut,
    /// The read half, while no read is in flight.
    half: Option<ReadHalf>,
    /// The read in flight; it owns the read half until it lands. Boxed: a
    /// read op future is ~0.2 KB and lives only while a read does.
    in_flight: Option<Pin<Box<dyn Future<Output = Landed>>>>,
    /// The connection's socket, for reads taken at once.
    fd: RawFd,
    /// The last read filled its buffer: more bytes are likely waiting.
    filled: bool,
}

impl ClientRead {
    /// The read side of a new connection (`fd` its socket); nothing read
    /// yet.
    pub(super) fn new(half: ReadHalf, fd: RawFd) -> Self {
        Self {
            buf: BytesMut::new(),
            half: Some(half),
            in_flight: None,
            fd,
            filled: false,
        }
    }

    /// The read half, unless a read is in flight (which owns it).
    pub(super) fn into_half(self) -> Option<ReadHalf> {
        self.half
    }

    /// The bytes read and not yet consumed.
    pub(super) fn buf(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The watching read filled its [`WATCH_READ`] bytes, and they are all
    /// there is: the rest of what the client sent is likely waiting in
    /// the socket, for [`fill`](Self::fill) to take at once.
    pub(super) fn watch_read_filled(&self) -> bool {
        self.filled && self.in_flight.is_none() && self.buf.len() <= WATCH_READ
    }

    /// Reads more; `Ok(0)` at end of stream. Waits for the read in flight
    /// if there is one, else reads into the buffer's spare capacity. If
    /// this future is dropped before it completes, the read goes on and its
    /// bytes land later.
    pub(super) async fn fill(&mut self) -> io::Result<usize> {
        if self.in_flight.is_none() {
            // For the watching read's small buffer, a fresh one with its 64
            // bytes of the request copied over, not the same one grown
            // (`realloc` across jemalloc's size classes, ~600 instructions
            // a request: `bench-results/profiles.md`, round 37).
            framing::room::make_room(&mut self.buf, FULL_READ);
            if self.filled && crate::runtime::on_uring() {
                let room = self.buf.capacity() - self.buf.len();
                if let Some(result) = recv_now(self.fd, &mut self.buf) {
                    self.filled = matches!(result, Ok(n) if n == room);
                    return result;
                }
            }
            let buf = std::mem::take(&mut self.buf);
            self.launch(buf);
        }
        poll_fn(|cx| self.poll_landed(cx)).await
    }

    /// Makes the buffer hold `len` bytes in one allocation, so that the
    /// reads that follow land in it back to back (a body of known length).
    /// The [`FULL_READ`] on top keeps [`fill`](Self::fill)'s own
    /// reservation from moving the buffer before `len` bytes are in.
    /// Nothing changes while a read is in flight: it lands in its own
    /// buffer, appended as usual.
    pub(super) fn reserve_total(&mut self, len: usize) {
        if self.in_flight.is_none() && self.buf.len() < len {
            let more = len - self.buf.len();
            self.buf.reserve(more + FULL_READ);
        }
    }

    /// Runs `answer` while watching the client: when a read ends (end of
    /// stream or an error), `gone` is set before `answer` is polled again,
    /// so an answer that checks `gone` whenever it is polled sees it at
    /// once. Pipelined bytes are kept (up to [`PIPELINE_AHEAD_MAX`]). The
    /// read in flight when `answer` ends stays in flight (module docs).
    ///
    /// `answer` comes pinned by the caller, so the connection's task lays
    /// it out once (moved into this future it would be laid out twice).
    pub(super) fn watching<'a, F: Future>(
        &'a mut self,
        gone: &'a Cell<bool>,
        mut answer: Pin<&'a mut F>,
    ) -> impl Future<Output = F::Output> + 'a {
        self.watch();
        poll_fn(move |cx| {
            while self.in_flight.is_some() {
                match self.poll_landed(cx) {
                    Poll::Pending => break,
                    Poll::Ready(Ok(n)) if n > 0 => self.watch(),
                    Poll::Ready(_) => gone.set(true),
                }
            }
            answer.as_mut().poll(cx)
        })
    }

    /// Starts a watching read unless one is in flight or enough pipelined
    /// bytes wait. With nothing buffered, the buffer (the last request's,
    /// up to 4 KiB and more) is let go of for a [`WATCH_READ`]-byte one: a
    /// long answer keeps no read buffer.
    fn watch(&mut self) {
        if self.in_flight.is_some() || self.buf.len() >= PIPELINE_AHEAD_MAX {
            return;
        }
        let buf = if self.buf.is_empty() {
            self.buf = BytesMut::new();
            BytesMut::with_capacity(WATCH_READ)
        } else {
            BytesMut::with_capacity(FULL_READ)
        };
        self.launch(buf);
    }

    /// Starts a read into `buf`'s spare capacity.
    fn launch(&mut self, buf: BytesMut) {
        let Some(mut half) = self.half.take() else {
            return;
        };
        self.in_flight = Some(Box::pin(async move {
            let (len, capacity) = (buf.len(), buf.capacity());
            // Into the spare capacity: monoio reads into a `BytesMut` at
            // its start.
            let (result, returned) = half.read(buf.slice_mut(len..capacity)).await;
            (half, returned.into_inner(), result)
        }));
    }

    /// Polls the read in flight; when it lands, its bytes join the buffer
    /// in order. Nothing in flight: `Ok(0)` (cannot happen: `fill` and
    /// `watching` poll only a read they know is in flight).
    fn poll_landed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(read) = self.in_flight.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        let (half, buf, result) = ready!(read.as_mut().poll(cx));
        self.in_flight = None;
        self.half = Some(half);
        self.filled = result.is_ok() && buf.len() == buf.capacity();
        if self.buf.is_empty() {
            self.buf = buf;
        } else {
            self.buf.extend_from_slice(&buf);
        }
        Poll::Ready(result)
    }
}

#[cfg(test)]
#[path = "client_read_tests.rs"]
mod tests;
