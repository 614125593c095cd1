//! An `https://` provider connection's byte stream: a TCP socket and its
//! rustls client session, driven sans-IO (`crate::tls_io`, as the link's
//! TLS is) after the handshake.
//!
//! A read takes as much ciphertext from the socket as the plaintext it has
//! room for (at least one whole record), and reads on while the socket
//! shows more, so a busy stream's reads fill and grow as a plain one's do:
//! through `monoio-rustls` no read returned more than one record (16 KiB),
//! and an `https://` tunnel's frames were that small
//! (bench-results/profiles.md, round 55). The ciphertext buffer is
//! released while the connection waits on a quiet socket
//! ([`TlsStream::release_input`]).

use std::cell::RefCell;
use std::io;
use std::os::fd::AsRawFd;

use bytes::{Bytes, BytesMut};
use framing::tls::{CipherIn, Step};
use framing::write_batch::WriteSlices;
use monoio::net::TcpStream;

use super::conn::{readable_now, recv_now};

/// Ciphertext gathered from rustls before one socket write of a request,
/// when the socket did not take rustls' records at once.
const CIPHER_WRITE: usize = 64 * 1024;

/// A TCP socket and its TLS client session, after the handshake.
pub(super) struct TlsStream {
    tcp: TcpStream,
    /// Borrowed only between awaits (`crate::tls_io`).
    session: RefCell<rustls::Connection>,
    /// Ciphertext read but not yet handed to rustls.
    input: CipherIn,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("tcp", &self.tcp)
            .finish_non_exhaustive()
    }
}

impl TlsStream {
    /// The stream of `tcp` after `session`'s completed handshake.
    pub(super) fn new(tcp: TcpStream, session: rustls::Connection) -> Self {
        Self {
            tcp,
            session: RefCell::new(session),
            // No buffer until a read needs one; then as large as its room.
            input: CipherIn::with_capacity(0),
        }
    }

    /// The TCP socket.
    pub(super) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Frees the ciphertext buffer if rustls took all of it (before a
    /// wait on a quiet socket).
    pub(super) fn release_input(&mut self) {
        self.input.release();
    }

    /// The ciphertext buffer's capacity (the buffer-release tests).
    #[cfg(test)]
    pub(super) fn input_capacity(&self) -> usize {
        self.input.capacity()
    }

    /// Encrypts `slices`, in order, and writes the records out: as much as
    /// rustls' send buffer takes, then a flush, until none is left.
    pub(super) async fn write_all(&mut self, slices: Vec<Bytes>) -> io::Result<()> {
        let mut slices = WriteSlices::from(slices);
        let mut cipher = Vec::new();
        let fd = self.tcp.as_raw_fd();
        loop {
            let queued = framing::tls::queue(&mut self.session.borrow_mut(), slices.slices())?;
            slices.advance(queued);
            crate::tls_io::flush(&mut self.tcp, fd, &self.session, &mut cipher, CIPHER_WRITE)
                .await?;
            if slices.is_empty() {
                return Ok(());
            }
        }
    }

    /// Appends up to `room` bytes of plaintext to `buf` (see
    /// [`crate::tls_io::read`]), reading ciphertext for that much room. A
    /// socket read ends mid-record, and the plaintext stops at the last
    /// whole one: when it filled its buffer and the socket shows more, the
    /// read goes on, so a busy stream's read fills its room as a plain
    /// one's does (and its reads keep growing, `Connection::read_size`).
    /// It goes on through the runtime, not with [`read_now`](Self::read_now):
    /// this is the read that yields the stream's turn (see `recv_now`).
    pub(super) async fn read(&mut self, buf: &mut BytesMut, room: usize) -> io::Result<usize> {
        let mut got = 0;
        loop {
            let rest = room - got;
            let n = crate::tls_io::read(
                &mut self.tcp,
                &self.session,
                &mut self.input,
                buf,
                rest,
                cipher_read(rest),
            )
            .await?;
            got += n;
            if n == 0 || got >= room || !self.input.last_read_filled() || !readable_now(&self.tcp) {
                return Ok(got);
            }
        }
    }

    /// As [`read`](Self::read), without waiting: the plaintext rustls
    /// holds, then what the socket has now (`recv(2)` with
    /// `MSG_DONTWAIT`, [`recv_now`]), on while a socket read fills its
    /// buffer. `None` when nothing is at hand: the caller then reads
    /// through the runtime. On io_uring this saves a busy stream, and a
    /// response whose readiness was just awaited, a trip through the ring
    /// (as for plain TCP, `Connection::read_more`).
    pub(super) fn read_now(
        &mut self,
        buf: &mut BytesMut,
        room: usize,
    ) -> Option<io::Result<usize>> {
        let start = buf.len();
        loop {
            let step = self
                .input
                .step(&mut self.session.borrow_mut(), buf, start, room);
            let got = buf.len() - start;
            match step {
                Err(error) => return Some(Err(error)),
                // Full, or the peer's close_notify, or the socket read
                // before did not fill its buffer: nothing more waits.
                Ok(Step::Done) if got >= room || got == 0 || !self.input.last_read_filled() => {
                    return Some(Ok(got));
                }
                // Everything handed to rustls, and more may be waiting.
                Ok(_) => {}
            }
            let mut cipher = self.input.socket_buffer();
            cipher.reserve_exact(cipher_read(room - got));
            let taken = recv_now(&self.tcp, &mut cipher);
            self.input.read_into(cipher);
            match taken {
                None if got == 0 => return None,
                None | Some(Ok(0)) => return Some(Ok(got)),
                Some(Ok(_)) => {}
                Some(Err(error)) => return Some(Err(error)),
            }
        }
    }
}

/// Ciphertext to read from the socket for `room` bytes of plaintext: a
/// record's header, nonce and tag add at most ~29 bytes a 16 KiB record;
/// never less than one whole record.
fn cipher_read(room: usize) -> usize {
    (room + room / 512 + 64).max(RECORD_READ)
}

/// The least ciphertext a TLS socket read takes: one whole record (16 KiB
/// of plaintext) and its overhead, so a small room does not cut a record
/// into many reads.
const RECORD_READ: usize = 16 * 1024 + 64;
