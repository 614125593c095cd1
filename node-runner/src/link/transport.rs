//! The byte stream under one node connection: plain TCP, or TLS over TCP
//! driven sans-IO through a `rustls::Connection` (F28).
//!
//! ```text
//!   TCP read half ──ciphertext──▶ rustls (Rc<RefCell>) ──plaintext──▶ frame buffer
//!   frame slices  ──plaintext───▶ rustls (same session) ──ciphertext──▶ TCP write half
//! ```
//!
//! The record-layer steps (feed, drain, queue, gather, handshake steps)
//! are `framing::tls`, shared with the other end of the link; the
//! handshake, a TLS read and a flush over a socket are `crate::tls_io`,
//! shared with `https://` provider connections. This file holds the
//! halves and what each link read and write asks of them.
//!
//! The reader and the writer are separate tasks, as for plain TCP; they
//! share the rustls session through a `RefCell` that is never borrowed
//! across an await, and each owns its half of the socket. So the read can
//! be dropped mid-way (the connection's close signal ends it) and no
//! `unsafe` is needed —
//! unlike splitting a `monoio-rustls` stream, whose halves alias one
//! session through an `UnsafeCell`.
//!
//! TLS records the reader makes rustls queue (a key update answer) go out
//! with the writer's next flush; the link's heartbeat guarantees one.
//!
//! Plain TCP keeps the zero-copy vectored writes; under TLS every byte is
//! encrypted, so slices are copied into rustls (one copy, no way around it),
//! and its records go to the socket from its own buffers, one `sendmsg(2)`
//! a flush (`framing::tls::send_queued`); only what the socket does not
//! take at once is gathered into one buffer for a write that waits.
//!
//! The Edge and the Node each have this file (`edge-proxy/src/link/transport.rs`):
//! they share no runtime code by design (see `super::iovec`).

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use framing::tls;
use framing::write_batch::WriteSlices;
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent, OwnedReadHalf, OwnedWriteHalf, Splitable};
use monoio::net::TcpStream;
use rustls::Connection;

use crate::{iovec, tls_io};

/// Ciphertext read from the socket at once: about four TLS records. One
/// record a read (18 KiB) took the Edge ~60 system calls a MiB of a bulk
/// stream against ~12 on a plain link; 64 KiB, ~20 (bench-results/profiles.md,
/// round 31).
const CIPHER_READ: usize = 64 * 1024;
/// The least plaintext a TLS read takes, whatever room the caller left.
const PLAIN_ROOM_MIN: usize = 4 * 1024;
/// Ciphertext gathered from rustls before one socket write, when the socket
/// did not take rustls' records at once (a full socket). A gather is
/// written whole before the next, so this bounds how long an urgent frame
/// (a heartbeat, F5) waits behind one on a slow network.
const CIPHER_WRITE: usize = 64 * 1024;

/// One connection's stream, before it is split into its reader and writer.
pub(crate) enum LinkStream {
    /// Plain TCP (unmanaged/dev).
    Plain(TcpStream),
    /// TLS with a completed handshake (boxed: a session is large).
    Tls(TcpStream, Box<Connection>),
}

impl LinkStream {
    /// The reader and the writer halves.
    pub(crate) fn into_split(self) -> (LinkReader, LinkWriter) {
        match self {
            Self::Plain(stream) => {
                let fd = stream.as_raw_fd();
                let (read, write) = stream.into_split();
                (
                    LinkReader {
                        half: read,
                        tls: None,
                    },
                    LinkWriter {
                        half: write,
                        tls: None,
                        fd,
                        at_once: true,
                    },
                )
            }
            Self::Tls(stream, session) => {
                let session = Rc::new(RefCell::new(*session));
                let fd = stream.as_raw_fd();
                let (read, write) = stream.into_split();
                (
                    LinkReader {
                        half: read,
                        tls: Some(TlsRead {
                            session: Rc::clone(&session),
                            input: tls::CipherIn::with_capacity(CIPHER_READ),
                        }),
                    },
                    LinkWriter {
                        half: write,
                        tls: Some(TlsWrite {
                            session,
                            cipher: Vec::with_capacity(CIPHER_WRITE),
                        }),
                        fd,
                        at_once: false,
                    },
                )
            }
        }
    }
}

struct TlsRead {
    session: Rc<RefCell<Connection>>,
    input: tls::CipherIn,
}

struct TlsWrite {
    session: Rc<RefCell<Connection>>,
    cipher: Vec<u8>,
}

/// The reading half of a [`LinkStream`].
pub(crate) struct LinkReader {
    half: OwnedReadHalf<TcpStream>,
    tls: Option<TlsRead>,
}

impl LinkReader {
    /// Appends what arrives to `buf` (after its current bytes); `Ok(0)` is
    /// the end of the stream. Dropping the future mid-way cancels the read
    /// (the link ends it with its close signal, `framing::close`).
    pub(crate) async fn read(&mut self, buf: BytesMut) -> (io::Result<usize>, BytesMut) {
        match &mut self.tls {
            None => {
                // monoio reads into a `BytesMut` at its start: read into the
                // spare capacity, which would otherwise overwrite a partial frame.
                let (len, capacity) = (buf.len(), buf.capacity());
                let (result, returned) = self.half.read(buf.slice_mut(len..capacity)).await;
                (result, returned.into_inner())
            }
            Some(tls) => tls.read(&mut self.half, buf).await,
        }
    }
}

impl TlsRead {
    /// As a plain read: appends what arrives, at most the buffer's spare
    /// room (so a buffer reserved for the rest of a frame is not outgrown);
    /// `Ok(0)` is the end of the stream.
    async fn read(
        &mut self,
        half: &mut OwnedReadHalf<TcpStream>,
        mut buf: BytesMut,
    ) -> (io::Result<usize>, BytesMut) {
        let room = (buf.capacity() - buf.len()).max(PLAIN_ROOM_MIN);
        let result = tls_io::read(
            half,
            &self.session,
            &mut self.input,
            &mut buf,
            room,
            CIPHER_READ,
        )
        .await;
        (result, buf)
    }
}

/// The writing half of a [`LinkStream`].
pub(crate) struct LinkWriter {
    half: OwnedWriteHalf<TcpStream>,
    tls: Option<TlsWrite>,
    /// The socket `half` writes, for writes taken at once.
    fd: RawFd,
    /// True when the last write went out whole (plain links; a TLS flush
    /// keeps its own): the socket likely has room, so the next is offered
    /// to it at once ([`iovec::sent_now`]) before the ring is asked to wait
    /// for room.
    at_once: bool,
}

impl LinkWriter {
    /// Writes every slice, in order.
    pub(crate) async fn write_all(&mut self, slices: Vec<Bytes>) -> io::Result<()> {
        match &mut self.tls {
            None => {
                let rest = if self.at_once {
                    iovec::write_now(self.fd, slices)?
                } else {
                    slices
                };
                // Whole once it returns: the socket had room at the end.
                iovec::write_all(&mut self.half, rest).await?;
                self.at_once = true;
                Ok(())
            }
            Some(_) => {
                let mut slices = WriteSlices::from(slices);
                while !slices.is_empty() {
                    self.write_some(&mut slices).await?;
                }
                Ok(())
            }
        }
    }

    /// Writes what the kernel takes of `slices` now (under TLS: up to one
    /// gather of ciphertext) and advances it past that. Returns whether the
    /// kernel took all it was offered at once (`false`: the peer or the
    /// network is behind, and the socket holds its unsent limit).
    pub(crate) async fn write_some(&mut self, slices: &mut WriteSlices) -> io::Result<bool> {
        let (written, whole) = match &mut self.tls {
            None => {
                let offered = slices.len();
                let taken = match self.at_once {
                    true => iovec::sent_now(self.fd, slices.slices()).transpose()?,
                    false => None,
                };
                let n = match taken {
                    Some(n) => n,
                    None => iovec::write_some(&mut self.half, slices.slices()).await?,
                };
                self.at_once = n == offered;
                (n, n == offered)
            }
            Some(tls) => {
                // As much as rustls' send buffer takes (64 KiB: about one
                // gather), records cut across the slices; 0 when it was
                // full, and the flush makes room for the next call.
                let queued = tls::queue(&mut tls.session.borrow_mut(), slices.slices())?;
                (queued, tls.flush(&mut self.half, self.fd).await?)
            }
        };
        slices.advance(written);
        Ok(whole)
    }

    /// Writes `slices` as the kernel takes them; after a partial write, the
    /// `urgent` frames queued meanwhile go out as soon as the frame in
    /// progress is whole, ahead of the rest of the batch (F5: heartbeats
    /// overtake queued body frames). Returns whether every write was taken
    /// whole (see [`write_some`](Self::write_some)).
    pub(crate) async fn write_overtaking(
        &mut self,
        slices: &mut WriteSlices,
        urgent: &mut local_sync::mpsc::unbounded::Rx<Bytes>,
    ) -> io::Result<bool> {
        let mut whole = true;
        while !slices.is_empty() {
            whole &= self.write_some(slices).await?;
            if let Some(out) = slices.overtake(std::iter::from_fn(|| urgent.try_recv().ok())) {
                self.write_all(out).await?;
            }
        }
        Ok(whole)
    }

    /// Ends the stream: `close_notify` under TLS, then a TCP shutdown.
    pub(crate) async fn shutdown(&mut self) -> io::Result<()> {
        if let Some(tls) = &mut self.tls {
            tls.session.borrow_mut().send_close_notify();
            let _ = tls.flush(&mut self.half, self.fd).await;
        }
        self.half.shutdown().await
    }
}

impl TlsWrite {
    /// Writes out every TLS record rustls has queued (see
    /// [`tls_io::flush`]). Returns whether the kernel took each gather in
    /// one write.
    async fn flush(&mut self, half: &mut OwnedWriteHalf<TcpStream>, fd: RawFd) -> io::Result<bool> {
        tls_io::flush(half, fd, &self.session, &mut self.cipher, CIPHER_WRITE).await
    }
}

/// Bounds what the kernel holds unsent on the link socket to
/// [`UNSENT_LOW_WATER`](framing::link::UNSENT_LOW_WATER) (`TCP_NOTSENT_LOWAT`),
/// so heartbeats queued in user space overtake the rest of a slow link's
/// backlog instead of waiting behind a socket buffer of it.
pub(crate) fn limit_unsent(stream: &TcpStream) -> io::Result<()> {
    crate::sockopt::with_socket(stream, |socket| {
        socket.set_tcp_notsent_lowat(framing::link::UNSENT_LOW_WATER)
    })
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
