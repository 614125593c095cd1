//! [`WriteBatch`]: turns a queue of [`Outgoing`] link commands into the
//! ordered slices of one vectored write, without copying bodies.
//!
//! # What is copied and what is not
//! - Small frames ([`Outgoing::Frame`] up to [`COPY_MAX`] bytes: control
//!   messages, run events, tunnel status/headers/usage/terminals) are copied
//!   into one buffer, so a burst of them costs one iovec, not one each.
//! - A tunnel body frame ([`Outgoing::Body`]) puts its head (length prefix and
//!   protobuf head, a few bytes) into that buffer and each of its body slices
//!   becomes an iovec of its own: the provider's bytes are **never copied**
//!   on the send side (`tests::body_slices_are_the_callers_bytes` checks
//!   pointers).
//! - A frame longer than [`COPY_MAX`] is also passed as its own slice: copying
//!   it would cost more than the iovec.
//!
//! The slices come out in exactly the order the commands went in; their
//! concatenation is the bytes the commands describe (property-tested).
//!
//! # Bounds
//! One batch holds at most [`MAX_IOVECS`] slices (far below Linux's
//! `IOV_MAX` of 1024) and stops taking commands once it holds
//! [`MAX_BATCH_BYTES`]; what is not taken stays queued for the next batch.
//!
//! # Driving it (sans-IO)
//! ```
//! use bytes::Bytes;
//! use framing::frame::FrameEncoder;
//! use framing::link::Outgoing;
//! use framing::write_batch::WriteBatch;
//!
//! let mut enc = FrameEncoder::default();
//! let body = Bytes::from_static(b"data: {}\n\n");
//! let mut queue = vec![Outgoing::Body(enc.encode_tunnel_body(7, body.clone()).unwrap())]
//!     .into_iter();
//! let mut batch = WriteBatch::new();
//! let close = batch.fill(Outgoing::Frame(Bytes::from_static(b"ping")), || queue.next());
//! assert!(!close);
//! let slices = batch.take();
//! // `ping` + the body's head in one slice, the body as the second.
//! assert_eq!(slices.slices().len(), 2);
//! assert_eq!(slices.slices()[1].as_ptr(), body.as_ptr());
//! ```
//!
//! The writer task loops: wait for one command, [`WriteBatch::fill`] with
//! what is queued without waiting, [`WriteBatch::take`], write the slices with
//! one vectored write (all of them, handling partial writes), and shut the
//! socket down once [`WriteBatch::is_closed`].
//!
//! # The monoio write
//! This crate has no runtime. monoio 0.2.4 writes vectored with
//! `AsyncWriteRentExt::write_vectored_all(buf)` where `buf: IoVecBuf`; it
//! implements `IoVecBuf` only for `VecBuf` (built from `Vec<Vec<u8>>`, which
//! would copy) and `Vec<libc::iovec>` (which does not own the memory). The
//! drivers therefore need one small owning wrapper of their own:
//! `struct IoSlices { iovecs: Vec<libc::iovec>, bufs: Vec<Bytes> }` with an
//! `unsafe impl IoVecBuf` whose SAFETY note says: every iovec points into the
//! heap storage of a `Bytes` in `bufs`; that storage never moves while the
//! `Bytes` lives, and the runtime owns the wrapper until the operation
//! completes (also when the future is dropped under io_uring), so the kernel
//! never reads freed memory. `write_vectored_all` then handles partial writes
//! itself. Where no unsafe code is allowed, writing each slice with
//! `write_all(bytes)` (monoio implements `IoBuf` for `Bytes`) keeps the zero
//! copy at the cost of one syscall per slice; [`WriteSlices::advance`] serves
//! drivers that call `writev` directly.

use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};

use crate::frame::{BodyFrame, MAX_BODY_PARTS};
use crate::link::Outgoing;

/// Frames up to this many bytes are copied into the batch buffer; longer ones
/// are passed as their own slice.
pub const COPY_MAX: usize = 4 * 1024;

/// Most slices one batch hands out (Linux's `IOV_MAX` is 1024).
pub const MAX_IOVECS: usize = 256;

/// The slices and frame ends a fresh batch has room for before its lists
/// grow: a few small answers' frames, or a burst of events.
const LIST_CAPACITY: usize = 16;

/// A batch stops taking commands once it holds this many bytes.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;

/// A batch's limit while the peer is behind (see [`WriteBatch::paced`]):
/// what a command queued during a write may have to wait for.
pub const BEHIND_BATCH_BYTES: usize = 64 * 1024;

/// Collects [`Outgoing`] commands into the slices of one vectored write; see
/// the module docs.
#[derive(Debug)]
pub struct WriteBatch {
    /// The copy segment being built (small frames, body heads).
    buf: BytesMut,
    /// Finished slices, in wire order.
    slices: Vec<Bytes>,
    /// Bytes in `slices` and `buf`.
    len: usize,
    /// Where each frame ends, in bytes from the batch's start.
    ends: Vec<usize>,
    closed: bool,
    /// Bytes at which it is full ([`WriteBatch::limit`]).
    limit: usize,
    /// A written batch's lists, emptied, for the next [`WriteBatch::take`]
    /// (see [`WriteBatch::recycle`]).
    spare: Option<(Vec<Bytes>, Vec<usize>)>,
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self {
            buf: BytesMut::new(),
            slices: Vec::new(),
            len: 0,
            ends: Vec::new(),
            closed: false,
            limit: MAX_BATCH_BYTES,
            spare: None,
        }
    }
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one command. [`Outgoing::Close`] marks the batch closed: what
    /// came before it is still to be written, then the connection is shut
    /// down. Commands after a close are dropped (returns false for them).
    pub fn push(&mut self, command: Outgoing) -> bool {
        if self.closed {
            return false;
        }
        match command {
            Outgoing::Frame(frame) if frame.len() > COPY_MAX => {
                self.len += frame.len();
                self.seal();
                self.slices.push(frame);
            }
            Outgoing::Frame(frame) => {
                self.len += frame.len();
                self.copy_in(&frame);
            }
            Outgoing::Body(frame) => {
                self.len += frame.len();
                self.copy_in(&frame.head);
                let BodyFrame { body, more, .. } = frame;
                for part in std::iter::once(body).chain(more) {
                    if !part.is_empty() {
                        self.seal();
                        self.slices.push(part);
                    }
                }
            }
            Outgoing::Close => {
                self.closed = true;
                return true;
            }
            // Nothing of the stream waits here to be dropped.
            Outgoing::Withdraw => return true,
        }
        self.ends.push(self.len);
        true
    }

    /// Adds `first`, then every command `next` yields without waiting, until
    /// `next` has none, a [`Outgoing::Close`] was added, or the batch is
    /// [full](Self::is_full) (then `next` is not called again, so what it
    /// holds stays queued). Returns whether the batch is closed.
    pub fn fill(&mut self, first: Outgoing, mut next: impl FnMut() -> Option<Outgoing>) -> bool {
        self.push(first);
        while !self.closed && !self.is_full() {
            match next() {
                Some(command) => {
                    self.push(command);
                }
                None => break,
            }
        }
        self.closed
    }

    /// Whether the batch takes no more commands until [`take`](Self::take):
    /// another body could exceed [`MAX_IOVECS`], or it holds
    /// its [limit](Self::limit) of bytes ([`MAX_BATCH_BYTES`] by default).
    pub fn is_full(&self) -> bool {
        // A command adds at most one sealed buffer and `MAX_BODY_PARTS`
        // body slices, and the open buffer becomes one more at `take`.
        self.slices.len() + MAX_BODY_PARTS + 2 > MAX_IOVECS || self.len >= self.limit
    }

    /// The bytes at which the batch is [full](Self::is_full):
    /// [`MAX_BATCH_BYTES`] unless [`set_limit`](Self::set_limit) lowered it.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Makes the batch full at `bytes` (at least 1, at most
    /// [`MAX_BATCH_BYTES`]). A writer whose peer reads slowly takes small
    /// batches, so that what it queues meanwhile (a new stream's first
    /// frame) does not wait behind a large one.
    pub fn set_limit(&mut self, bytes: usize) {
        self.limit = bytes.clamp(1, MAX_BATCH_BYTES);
    }

    /// Sets the next batch's limit from how the last write went: `whole`
    /// (the kernel took every write at once) doubles it, up to
    /// [`MAX_BATCH_BYTES`]; otherwise the peer or the network is behind and
    /// the limit drops to [`BEHIND_BATCH_BYTES`], so that a stream's command
    /// queued meanwhile waits behind at most that much of a batch already
    /// taken. A new batch starts at the full limit; a writer that wants to
    /// start careful calls this with `false` first.
    pub fn paced(&mut self, whole: bool) {
        let next = if whole {
            self.limit().saturating_mul(2)
        } else {
            BEHIND_BATCH_BYTES
        };
        self.set_limit(next);
    }

    /// Bytes to write in this batch.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a [`Outgoing::Close`] was added: after writing what was taken,
    /// shut the connection down.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The slices to write, in order; the batch is empty afterwards (a close
    /// stays recorded).
    pub fn take(&mut self) -> WriteSlices {
        self.seal();
        // The next batch's lists are a written batch's, handed back
        // ([`recycle`](Self::recycle)), or made at their usual size at
        // once: grown from empty push by push they were ~2 allocations and
        // a `realloc` a batch (`bench-results/profiles.md`, round 37).
        let (slices, ends) = self.spare.take().unwrap_or_else(|| {
            (
                Vec::with_capacity(LIST_CAPACITY),
                Vec::with_capacity(LIST_CAPACITY),
            )
        });
        let remaining = std::mem::take(&mut self.len);
        WriteSlices {
            slices: std::mem::replace(&mut self.slices, slices),
            first: 0,
            remaining,
            written: 0,
            ends: std::mem::replace(&mut self.ends, ends),
            next_end: 0,
        }
    }

    /// Takes back a batch [`take`](Self::take) handed out, once written:
    /// its slices are let go and its lists kept, emptied, for the next
    /// batch, so a writer that hands each one back makes no lists batch
    /// after batch (two allocations a write, each side of the link, a
    /// small request's; `bench-results/profiles.md`, round 50).
    pub fn recycle(&mut self, done: WriteSlices) {
        let WriteSlices {
            mut slices,
            mut ends,
            ..
        } = done;
        slices.clear();
        ends.clear();
        self.spare = Some((slices, ends));
    }

    /// Copies `bytes` into the current copy segment. Room is made
    /// [`COPY_MAX`] at a time: grown frame by frame, a batch of a small
    /// answer's frames was a `realloc` each (~230 instructions a frame on
    /// the Node; `bench-results/profiles.md`, round 37). Once the slices
    /// cut from it are written and dropped, the same allocation is used
    /// again.
    fn copy_in(&mut self, bytes: &[u8]) {
        reserve_in_blocks(&mut self.buf, bytes.len(), COPY_MAX);
        self.buf.extend_from_slice(bytes);
    }

    /// Ends the current copy segment as a slice of its own.
    fn seal(&mut self) {
        if !self.buf.is_empty() {
            self.slices.push(self.buf.split().freeze());
        }
    }
}

/// Makes room in `buf` for `additional` more bytes, at least `block` at a
/// time: a buffer filled by many small pieces grows once a block, not by
/// a `realloc` a piece, and once the slices cut from it are dropped the
/// same allocation is used again. The write batch's copy segment and the
/// frame encoder's scratch grow this way.
pub(crate) fn reserve_in_blocks(buf: &mut BytesMut, additional: usize, block: usize) {
    if buf.capacity() - buf.len() < additional {
        buf.reserve(additional.max(block));
    }
}

/// The ordered slices of one vectored write, with the position reached so
/// far (for drivers that handle partial `writev` results themselves) and
/// where its frames end, so a driver can put an urgent frame in between
/// two of them ([`frame_rest`](Self::frame_rest), [`split_to`](Self::split_to)).
#[derive(Debug, Default, Clone)]
pub struct WriteSlices {
    slices: Vec<Bytes>,
    first: usize,
    remaining: usize,
    /// Bytes written so far.
    written: usize,
    /// Where each frame ends, in bytes from the start.
    ends: Vec<usize>,
    /// The first of `ends` past `written`.
    next_end: usize,
}

impl From<Vec<Bytes>> for WriteSlices {
    /// `slices` as one write, in order (empty ones dropped), with no frame
    /// ends recorded: nothing is put between them.
    fn from(mut slices: Vec<Bytes>) -> Self {
        slices.retain(|slice| !slice.is_empty());
        let remaining = slices.iter().map(Bytes::len).sum();
        Self {
            slices,
            remaining,
            ..Self::default()
        }
    }
}

impl WriteSlices {
    /// The slices still to write, in order; none is empty.
    pub fn slices(&self) -> &[Bytes] {
        &self.slices[self.first..]
    }

    /// Bytes still to write.
    pub fn len(&self) -> usize {
        self.remaining
    }

    /// Whether everything was written.
    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }

    /// Records that the next `n` bytes were written: fully written slices are
    /// dropped and a partly written one is sliced (no copy).
    ///
    /// # Panics
    /// When `n` is more than [`len`](Self::len).
    pub fn advance(&mut self, mut n: usize) {
        assert!(n <= self.remaining, "advanced past the end of the batch");
        self.remaining -= n;
        self.written += n;
        while self
            .ends
            .get(self.next_end)
            .is_some_and(|&end| end <= self.written)
        {
            self.next_end += 1;
        }
        while n > 0 {
            let slice = &mut self.slices[self.first];
            if n >= slice.len() {
                n -= slice.len();
                self.slices[self.first] = Bytes::new();
                self.first += 1;
            } else {
                slice.advance(n);
                n = 0;
            }
        }
    }

    /// Bytes left of the frame a partial write stopped in: 0 when the
    /// position is between two frames (or at the end), where another frame
    /// may go on the wire.
    pub fn frame_rest(&self) -> usize {
        let start = match self.next_end {
            0 => 0,
            i => self.ends[i - 1],
        };
        match self.ends.get(self.next_end) {
            Some(&end) if self.written > start => end - self.written,
            _ => 0,
        }
    }

    /// Hands out the next `n` bytes as slices of their own (no copy) and
    /// advances past them.
    ///
    /// # Panics
    /// When `n` is more than [`len`](Self::len).
    pub fn split_to(&mut self, n: usize) -> Vec<Bytes> {
        assert!(n <= self.remaining, "split past the end of the batch");
        let mut out = Vec::new();
        let mut left = n;
        let mut i = self.first;
        while left > 0 {
            let slice = &self.slices[i];
            if left >= slice.len() {
                left -= slice.len();
                out.push(slice.clone());
                i += 1;
            } else {
                out.push(slice.slice(..left));
                left = 0;
            }
        }
        self.advance(n);
        out
    }

    /// Makes way for urgent frames after a partial write: when bytes are
    /// left and `urgent` yields a frame, returns the rest of the frame in
    /// progress followed by every urgent frame, to be written next (the
    /// batch then goes on from the frame boundary). `None` — and `urgent`
    /// not polled — when everything was written: the urgent frames then
    /// go out with the next batch.
    pub fn overtake(&mut self, urgent: impl IntoIterator<Item = Bytes>) -> Option<Vec<Bytes>> {
        if self.is_empty() {
            return None;
        }
        let mut urgent = urgent.into_iter();
        let first = urgent.next()?;
        let mut out = self.split_to(self.frame_rest());
        out.push(first);
        out.extend(urgent);
        Some(out)
    }

    /// The remaining slices as `std::io::IoSlice`s, for
    /// `std::io::Write::write_vectored` (tests and blocking tools).
    pub fn io_slices(&self) -> Vec<IoSlice<'_>> {
        self.slices().iter().map(|s| IoSlice::new(s)).collect()
    }

    /// The remaining slices, owned (e.g. for an owning iovec wrapper).
    pub fn into_vec(mut self) -> Vec<Bytes> {
        self.slices.drain(..self.first);
        self.slices
    }
}

#[cfg(test)]
#[path = "write_batch_tests.rs"]
mod tests;
