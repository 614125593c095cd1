//! One connection to a provider: the transport, its receive buffer, and the
//! cancel-safety flag.
//!
//! The transport is an enum, plain TCP or TCP with a rustls client
//! session driven sans-IO (`crate::tls_io`, the link's steps), with the
//! same `read`/`write` calls; nothing above this module knows which it is.
//! Reads append to the receive buffer's spare capacity (monoio would
//! otherwise write at the buffer's start, over bytes not yet parsed). A TLS
//! read takes as much ciphertext from the socket as the plaintext it has
//! room for, so a busy `https://` stream reads, and a tunnel sends frames,
//! as large as a plain one's.
//!
//! TLS end of stream: a `close_notify` reads as EOF, and so does a TCP close
//! without one (rustls' `UnexpectedEof`). The body framing then decides: a
//! `Content-Length` or chunked body cut short is
//! [`ProviderError::BodyTruncated`]; a close-delimited body ends there, as
//! with plain TCP.
//!
//! Idle streams hold no receive buffer: after a read that drained the
//! socket (fewer bytes than offered), and before the first read (the wait
//! for the head), with nothing left unparsed, a read first gives the
//! buffer up and waits for the socket to be readable, then reserves a
//! fresh one. A stream quiet for minutes (a model thinking) then costs no
//! [`READ_RESERVE`] bytes, nor does a request waiting for its head; a busy
//! one reads straight on (after a full read, or when a zero-timeout poll
//! shows bytes already waiting, the buffer it holds is reused). So a buffer lives from the moment
//! bytes arrive until its slices are relayed, and a burst of new streams
//! does not hold one each. Under TLS the same: a read that appended less
//! than its room left nothing in rustls or in the ciphertext buffer, so the
//! socket's readiness tells; a TLS connection waiting so gives up its
//! ciphertext buffer too.
//!
//! On io_uring, a read that knows its bytes are waiting (after a read that
//! filled its room, or once the socket has shown them) takes them with a
//! `recv(2)` that does not wait, not through the ring ([`recv_now`]), if
//! the read before it went through the runtime: a busy tunnel's two reads
//! go out in one link write, and it still yields its turn.
//!
//! Reads reserve [`READ_MIN`] after a short read and double up to
//! [`READ_RESERVE`] while they fill: a token that wakes a slow stream takes
//! a 2 KiB buffer, not a full reservation. Thousands of slow streams each
//! taking and freeing 16 KiB per token left the Node's heap fragmented
//! (issue 8: ~1 KB a stream of resident memory at 3,000 streams with a
//! token a second). A stream whose reads keep filling reaches 128 KiB, two
//! of the tunnel's largest body frames: with a 16 KiB ceiling a large-chunk
//! stream cost a read, a frame and a link write per 16 KiB, and the Node
//! spent 2.2–2.7 ms of CPU a MiB relayed; at 128 KiB, 1.4–1.6 ms (the
//! in-process `cpu` bench, issue 8). A busy stream holds at most that much
//! more than before, within its 256 KiB flow-control window.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use monoio::buf::{IoBufMut, SliceMut};
use monoio::io::AsyncReadRent;
use monoio::net::TcpStream;

use super::error::ProviderError;
use super::request::{BaseUrl, RequestBody, Scheme};
use super::tls;
use super::tls_stream::TlsStream;
use crate::sockopt::with_socket;

/// The most bytes reserved in the receive buffer before a read (reads
/// that keep filling grow to it; see the module docs).
pub(crate) const READ_RESERVE: usize = 128 * 1024;

/// The first read's reservation, and each one after a short read.
pub(crate) const READ_MIN: usize = 2 * 1024;

/// The byte stream under HTTP.
#[derive(Debug)]
enum Transport {
    /// Plain TCP (`http://`).
    Plain(TcpStream),
    /// rustls over TCP (`https://`); boxed, the session state is large.
    Tls(Box<TlsStream>),
}

impl Transport {
    /// The TCP socket under either.
    fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(stream) => stream,
            Self::Tls(tls) => tls.tcp(),
        }
    }
}

/// A connection and what has been read from it but not yet handed out.
#[derive(Debug)]
pub(crate) struct Connection {
    io: Transport,
    /// Received bytes not yet parsed or handed out.
    pub(crate) buf: BytesMut,
    /// True when this connection served a response before (came from the
    /// pool): only then is an early EOF a stale-connection symptom.
    pub(crate) reused: bool,
    /// True while a read or write is in flight. If the future doing it is
    /// dropped, it stays true: the buffer went with the operation and the
    /// framing position is lost, so the connection must never be reused.
    busy: bool,
    /// Addresses of the bytes the last read put in `buf` (for the
    /// zero-copy tests: a body chunk must point into such a range).
    pub(crate) last_read: Range<usize>,
    /// True when the last read drained the socket (it returned fewer bytes
    /// than offered), or nothing was read since the connection was opened
    /// or pooled: the next read is likely to wait, so it waits without a
    /// buffer (see the module docs).
    drained: bool,
    /// Free space to reserve before the next read: [`READ_MIN`] after a
    /// short read, doubling up to [`READ_RESERVE`] while reads fill.
    read_size: usize,
    /// True when the last read took its bytes at once ([`recv_now`]): the
    /// next one goes through the runtime, so a busy stream yields its turn
    /// of the loop after at most two reads.
    read_at_once: bool,
}

impl Connection {
    /// Resolves the base's host (a literal IP needs no lookup), connects
    /// and, for `https`, completes the TLS handshake (SNI and certificate
    /// check for the host, ALPN `http/1.1`), all within `timeout`. With a
    /// `receive_buffer`, the socket's `SO_RCVBUF` is set to it
    /// ([`ProviderClientConfig::receive_buffer`](super::ProviderClientConfig::receive_buffer)).
    pub(crate) async fn connect(
        base: &BaseUrl,
        timeout: Duration,
        tls: &Arc<rustls::ClientConfig>,
        receive_buffer: Option<u32>,
    ) -> Result<Self, ProviderError> {
        let open = async {
            let addr = resolve(base).map_err(|e| ProviderError::connect(&e))?;
            let stream = TcpStream::connect_addr(addr)
                .await
                .map_err(|e| ProviderError::connect(&e))?;
            let _ = stream.set_nodelay(true);
            if let Some(bytes) = receive_buffer
                && let Err(error) = set_receive_buffer(&stream, bytes)
            {
                tracing::debug!(%error, bytes, "could not set a provider connection's receive buffer");
            }
            match base.scheme() {
                Scheme::Http => Ok(Transport::Plain(stream)),
                Scheme::Https => handshake(base, stream, tls).await,
            }
        };
        // Boxed: monoio's timer is 640 B aligned to 128, which would size
        // and align every provider call's future (each run allocates one,
        // with `posix_memalign`) for a step that is over in a moment.
        let io = match Box::pin(monoio::time::timeout(timeout, open)).await {
            Ok(io) => io?,
            Err(_) => {
                return Err(ProviderError::ConnectTimeout {
                    after_ms: timeout.as_millis() as u64,
                });
            }
        };
        Ok(Self {
            io,
            // No buffer until the provider has answered (see `drained`).
            buf: BytesMut::new(),
            read_size: READ_MIN,
            reused: false,
            busy: false,
            last_read: 0..0,
            drained: true,
            read_at_once: false,
        })
    }

    /// Whether the connection is in a known framing position (no operation
    /// was abandoned half-way).
    pub(crate) fn is_clean(&self) -> bool {
        !self.busy
    }

    /// Writes `head` then `body`'s slices, in full: one vectored write when
    /// there is a body (its slices uncopied), one plain write otherwise.
    pub(crate) async fn write(&mut self, head: Bytes, body: RequestBody) -> io::Result<()> {
        self.busy = true;
        match &mut self.io {
            Transport::Plain(stream) => {
                // Usually the socket takes it all at once (on io_uring; see
                // `iovec::write_now`). No write is in flight: a connection
                // whose write was abandoned is not reused (`is_clean`).
                let rest = crate::iovec::write_now(stream.as_raw_fd(), body.after(head))?;
                crate::iovec::write_all(stream, rest).await?;
            }
            Transport::Tls(tls) => tls.write_all(body.after(head)).await?,
        }
        self.busy = false;
        Ok(())
    }

    /// Reads once into the spare capacity of `buf`, after the bytes it
    /// holds; `Ok(0)` is EOF (for TLS also a close without `close_notify`).
    /// When the socket was drained and nothing is left unparsed, first
    /// releases the buffer and waits for readability (see the module docs).
    pub(crate) async fn read_more(&mut self) -> io::Result<usize> {
        // Whether bytes are likely waiting: after a read that filled its
        // room, or once the socket has shown them.
        let mut waiting = !self.drained;
        if self.drained && self.buf.is_empty() {
            let stream = self.io.tcp();
            // Bytes already waiting (a busy stream read short): read them
            // into the buffer we hold, no churn. Holding none (the wait for
            // a response's head, or after a release), there is nothing to
            // keep: no poll(2) first, the wait below sees bytes already
            // there at once.
            if self.buf.capacity() == 0 || !readable_now(stream) {
                self.buf = BytesMut::new();
                if let Transport::Tls(tls) = &mut self.io {
                    // Nothing is left in it (the last read was short).
                    tls.release_input();
                }
                let stream = self.io.tcp();
                // Not `busy`: no buffer is in flight, so dropping this wait
                // leaves the framing position intact. Not relaxed: the
                // epoll driver's cached readiness could be stale.
                stream.readable(false).await?;
                // The wait was this stream's turn through the runtime.
                self.read_at_once = false;
            }
            waiting = true;
        }
        if self.buf.capacity() - self.buf.len() < self.read_size / 4 {
            framing::room::make_room(&mut self.buf, self.read_size);
        }
        let (len, capacity) = (self.buf.len(), self.buf.capacity());
        let start = self.buf.as_ptr() as usize + len;
        // On io_uring, bytes known to be waiting are taken without a trip
        // through the ring (see `recv_now`), every other read.
        let at_once = waiting && !self.read_at_once && crate::runtime::on_uring();
        let taken = match &mut self.io {
            Transport::Plain(stream) if at_once => recv_now(stream, &mut self.buf),
            Transport::Tls(tls) if at_once => tls.read_now(&mut self.buf, capacity - len),
            _ => None,
        };
        self.read_at_once = taken.is_some();
        let result = match taken {
            Some(result) => result,
            None => self.read_into_spare().await,
        };
        let n = result?;
        self.last_read = start..start + n;
        self.drained = n < capacity - len;
        self.read_size = if self.drained {
            READ_MIN
        } else {
            (self.read_size * 2).min(READ_RESERVE)
        };
        Ok(n)
    }

    /// One read through the runtime into the spare capacity of `buf`.
    async fn read_into_spare(&mut self) -> io::Result<usize> {
        self.busy = true;
        let result = match &mut self.io {
            Transport::Plain(stream) => {
                let buf = std::mem::take(&mut self.buf);
                let (len, capacity) = (buf.len(), buf.capacity());
                let (result, spare) = stream.read(buf.slice_mut(len..capacity)).await;
                self.buf = SliceMut::into_inner(spare);
                result
            }
            Transport::Tls(tls) => {
                let room = self.buf.capacity() - self.buf.len();
                // Boxed: the TLS read's future would otherwise size every
                // plain stream's read, held while the stream idles.
                Box::pin(tls.read(&mut self.buf, room)).await
            }
        };
        self.busy = false;
        result
    }

    /// Gives up the receive buffer if it holds nothing unparsed: its
    /// allocation is freed once the body slices handed out are dropped.
    pub(crate) fn release_buffer(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
            self.drained = true;
        }
    }

    /// The socket's `SO_RCVBUF` as the kernel reports it (plain TCP only;
    /// the receive-buffer test).
    #[cfg(test)]
    pub(crate) fn socket_receive_buffer(&self) -> io::Result<usize> {
        with_socket(self.io.tcp(), |socket| socket.recv_buffer_size())
    }

    /// The receive buffers' capacity, plaintext and (under TLS)
    /// ciphertext (the buffer-release tests).
    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> usize {
        let cipher = match &self.io {
            Transport::Plain(_) => 0,
            Transport::Tls(tls) => tls.input_capacity(),
        };
        self.buf.capacity() + cipher
    }
}

/// Sets `stream`'s `SO_RCVBUF` to `bytes` (the kernel caps it at
/// `net.core.rmem_max` and keeps twice what it grants).
fn set_receive_buffer(stream: &TcpStream, bytes: u32) -> io::Result<()> {
    with_socket(stream, |socket| socket.set_recv_buffer_size(bytes as usize))
}

/// Whether `stream` has bytes (or its end) to read right now: a
/// zero-timeout `poll(2)`, which never waits. An error reads as "not now";
/// the wait that follows reports it.
#[allow(unsafe_code)]
pub(super) fn readable_now(stream: &TcpStream) -> bool {
    let mut fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `fd` is one initialized `pollfd` on this stack frame, the
    // count is 1 and the timeout 0; poll(2) only writes its `revents`.
    // Tested by `readable_now_sees_waiting_bytes_without_waiting`.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready > 0
}

/// Reads what `stream` already holds into the spare capacity of `buf`,
/// after its bytes, without waiting: `recv(2)` with `MSG_DONTWAIT`. `None`
/// when nothing is waiting (or `buf` has no spare room): the caller then
/// reads through the runtime. `Some(Ok(0))` is the end of the stream.
///
/// For io_uring, where every read is a ring operation: its completion is
/// taken only when the run queue next empties, so a stream whose bytes are
/// already there would hand out one read per turn of the loop, and the
/// link writer would send one read's frame at a time.
///
/// Only every other read is taken at once: a stream that always found its
/// bytes waiting would otherwise read on, turn after turn of its own, while
/// every other stream's frames queued behind its frames on the link (issue
/// 8: unbounded, the `s2-load` bench's saturated probe's added p99 went
/// from +2.4–3.5 ms to +4.4–6.5 ms with the Node's end alone, +7–13 ms with
/// both). Every other read, the Node's link writes in the `s1` bench went
/// from ~73 KB to ~126 KB, and the saturated tail stayed.
///
/// The Edge has the same few lines for its link reads
/// (`edge-proxy/src/link/transport.rs`): the two share no runtime code by
/// design, and `framing` does no I/O.
#[allow(unsafe_code)]
pub(super) fn recv_now<B: RecvBuf>(
    stream: &impl AsRawFd,
    buf: &mut B,
) -> Option<io::Result<usize>> {
    let spare = buf.spare_capacity_mut();
    if spare.is_empty() {
        return None;
    }
    // SAFETY: `spare` is `buf`'s spare capacity: `spare.len()` bytes valid
    // for writes while it is borrowed here, and recv(2) writes at most that
    // many. Tested by `recv_now_takes_waiting_bytes_and_never_waits`.
    let read = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            spare.as_mut_ptr().cast(),
            spare.len(),
            libc::MSG_DONTWAIT,
        )
    };
    match usize::try_from(read) {
        Ok(n) => {
            // SAFETY: recv(2) initialized the first `n` bytes of the spare
            // capacity, right after the buffer's `len()` bytes.
            unsafe { buf.set_len(buf.len() + n) };
            Some(Ok(n))
        }
        Err(_) => {
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => None,
                _ => Some(Err(error)),
            }
        }
    }
}

/// A buffer [`recv_now`] appends to: the receive buffer, or a TLS
/// connection's ciphertext buffer.
#[allow(unsafe_code)]
pub(super) trait RecvBuf {
    /// Bytes held.
    fn len(&self) -> usize;
    /// The room after them.
    fn spare_capacity_mut(&mut self) -> &mut [std::mem::MaybeUninit<u8>];
    /// Sets the bytes held to `len`.
    ///
    /// # Safety
    /// `len` is at most the capacity, and the bytes up to it are
    /// initialized.
    unsafe fn set_len(&mut self, len: usize);
}

#[allow(unsafe_code)]
impl RecvBuf for BytesMut {
    fn len(&self) -> usize {
        BytesMut::len(self)
    }
    fn spare_capacity_mut(&mut self) -> &mut [std::mem::MaybeUninit<u8>] {
        BytesMut::spare_capacity_mut(self)
    }
    unsafe fn set_len(&mut self, len: usize) {
        // SAFETY: the caller's contract is `BytesMut::set_len`'s.
        unsafe { BytesMut::set_len(self, len) }
    }
}

#[allow(unsafe_code)]
impl RecvBuf for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn spare_capacity_mut(&mut self) -> &mut [std::mem::MaybeUninit<u8>] {
        Vec::spare_capacity_mut(self)
    }
    unsafe fn set_len(&mut self, len: usize) {
        // SAFETY: the caller's contract is `Vec::set_len`'s.
        unsafe { Vec::set_len(self, len) }
    }
}

/// The TLS handshake on a connected `stream`, for `base`'s host.
async fn handshake(
    base: &BaseUrl,
    mut stream: TcpStream,
    config: &Arc<rustls::ClientConfig>,
) -> Result<Transport, ProviderError> {
    let host = base.connect_host();
    // `BaseUrl::parse` refuses an https host that is no server name.
    let name = base.server_name().ok_or_else(|| ProviderError::Tls {
        host: host.to_owned(),
        failure: super::TlsFailure::Handshake,
        message: "host is not a valid TLS server name".to_owned(),
    })?;
    let session = rustls::ClientConnection::new(Arc::clone(config), name)
        .map_err(|error| tls::rustls_error(host, &error))?;
    let mut session = rustls::Connection::Client(session);
    crate::tls_io::handshake(&mut stream, &mut session)
        .await
        .map_err(|error| tls::handshake_error(host, &error))?;
    Ok(Transport::Tls(Box::new(TlsStream::new(stream, session))))
}

fn resolve(base: &BaseUrl) -> io::Result<SocketAddr> {
    let host = base.connect_host();
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, base.port()));
    }
    // Blocking lookup via the system resolver: see "Not done" in the module
    // docs.
    (host, base.port())
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "host has no address"))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn readable_now_sees_waiting_bytes_without_waiting() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .expect("epoll runtime")
            .block_on(async {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let mut peer =
                    std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
                let (ours, _) = listener.accept().unwrap();
                let ours = TcpStream::from_std(ours).unwrap();
                assert!(!readable_now(&ours), "nothing sent yet");
                peer.write_all(b"x").unwrap();
                // Loopback delivers at once; poll until it shows (bounded).
                let seen = (0..1000).any(|_| {
                    readable_now(&ours) || {
                        std::thread::yield_now();
                        false
                    }
                });
                assert!(seen);
                drop(peer);
                assert!(readable_now(&ours), "an end of stream is readable too");
            });
    }

    /// `recv_now` retried until it answers: loopback delivers at once, but
    /// the peer's bytes may show a moment after its write (bounded).
    fn answered(stream: &std::net::TcpStream, buf: &mut impl RecvBuf) -> io::Result<usize> {
        (0..1000)
            .find_map(|_| {
                recv_now(stream, buf).or_else(|| {
                    std::thread::yield_now();
                    None
                })
            })
            .expect("recv_now answers")
    }

    #[test]
    fn recv_now_takes_waiting_bytes_and_never_waits() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (ours, _) = listener.accept().unwrap();
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(b"kept|");
        // Nothing sent yet: no read, no wait (the socket is blocking).
        assert!(recv_now(&ours, &mut buf).is_none());
        assert_eq!(&buf[..], b"kept|");

        peer.write_all(b"waiting bytes").unwrap();
        assert_eq!(answered(&ours, &mut buf).unwrap(), 13);
        // Appended after the bytes the buffer held.
        assert_eq!(&buf[..], b"kept|waiting bytes");

        // No spare room: nothing is read (a 0 would read as the end).
        peer.write_all(b"more").unwrap();
        let mut full = BytesMut::new();
        assert!(recv_now(&ours, &mut full).is_none());

        // A TLS connection's ciphertext buffer, a `Vec`, the same way.
        let mut cipher = Vec::with_capacity(64);
        cipher.extend_from_slice(b"kept|");
        assert_eq!(answered(&ours, &mut cipher).unwrap(), 4);
        assert_eq!(&cipher[..], b"kept|more");
        peer.write_all(b"again").unwrap();

        // The end of the stream reads as 0, after what was left.
        drop(peer);
        let mut rest = BytesMut::with_capacity(16);
        assert_eq!(answered(&ours, &mut rest).unwrap(), 5);
        assert_eq!(answered(&ours, &mut rest).unwrap(), 0);
        assert_eq!(&rest[..], b"again");
    }
}
