//! Vectored writes of `Bytes` slices without copying them: the link
//! writer hands a batch's slices (`framing::write_batch::WriteBatch`) —
//! small frames copied together, tunnel bodies as their own slices — to the
//! kernel in one `writev`, and a provider request goes as its head and its
//! body's slices (`provider_http::RequestBody`: a long text of a run, a
//! slice of its frame, is never copied into the body).
//!
//! monoio's `writev` owns its `IoVecBuf` until the operation completes
//! (also when the future is dropped mid-flight), so the buffer must own the
//! memory its iovecs point into: [`BytesVec`] owns its `Bytes`. (monoio's
//! `write_vectored_all` keeps the caller's buffer on its own stack and
//! hands the kernel only a copy of the iovecs; [`write_all`] therefore
//! drives `writev` itself.)
//!
//! On io_uring a write is first offered to the socket at once, with one
//! `sendmsg(2)` that never waits ([`send_now`]); the ring writes what it
//! leaves. A loopback write always completes when the ring is entered, so
//! through the ring the writer would wait a turn of the loop and the ring
//! cost an entry just to say so. A write taken at once must not overtake a
//! ring write still in flight on its socket: the callers start one only
//! after the previous write completed (a provider connection whose write
//! was abandoned is not reused; the link writer awaits each write).
//!
//! The Edge has the same lines (`edge-proxy/src/iovec.rs`,
//! `edge-proxy/src/at_once.rs`): the Edge and the Node share no runtime
//! code by design (DESIGN.md), and `framing`, which they do share, is
//! runtime-free and has no `unsafe`.

// Implementing monoio's `IoVecBuf`, and sendmsg(2) from borrowed slices.
#![allow(unsafe_code)]

use std::io;
use std::ops::Deref;
use std::os::fd::RawFd;

use bytes::{Buf, Bytes};
use monoio::buf::IoVecBuf;
use monoio::io::AsyncWriteRent;

/// `Bytes` slices and the iovecs pointing into them, owned together.
#[derive(Debug)]
pub(crate) struct BytesVec {
    iovecs: Vec<libc::iovec>,
    bufs: Vec<Bytes>,
}

impl BytesVec {
    /// The iovecs of `bufs` (empty slices are skipped).
    pub(crate) fn new(bufs: Vec<Bytes>) -> Self {
        let bufs: Vec<Bytes> = bufs.into_iter().filter(|b| !b.is_empty()).collect();
        let iovecs = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        Self { iovecs, bufs }
    }

    /// Total bytes.
    pub(crate) fn len(&self) -> usize {
        self.bufs.iter().map(Bytes::len).sum()
    }

    /// The slices, for the caller to continue after a partial write.
    fn into_bufs(self) -> Vec<Bytes> {
        self.bufs
    }
}

// SAFETY: every iovec points into one of `self.bufs` with that slice's exact
// length. The `Bytes` are owned by `self`, never mutated, and their data does
// not move when `self` moves (a `Bytes` points at heap or static memory, not
// into itself). So the pointers stay valid and the memory readable for as
// long as `self` lives — and monoio keeps the buffer alive until the kernel
// has finished with it, also when the write future is dropped.
unsafe impl IoVecBuf for BytesVec {
    fn read_iovec_ptr(&self) -> *const libc::iovec {
        self.iovecs.as_ptr()
    }

    fn read_iovec_len(&self) -> usize {
        self.iovecs.len()
    }
}

/// Writes every slice of `bufs`, in order, with as few `writev`s as the
/// kernel allows; never copies a slice.
pub(crate) async fn write_all<W: AsyncWriteRent>(
    writer: &mut W,
    bufs: Vec<Bytes>,
) -> io::Result<()> {
    let mut vec = BytesVec::new(bufs);
    while vec.len() > 0 {
        let (written, returned) = write_once(writer, vec).await;
        let mut rest = returned.into_bufs();
        advance(&mut rest, written?);
        vec = BytesVec::new(rest);
    }
    Ok(())
}

/// On io_uring, offers `bufs` to the socket `fd` at once ([`send_now`]):
/// what it did not take, for the caller to write through the runtime —
/// nothing, usually. Elsewhere all of `bufs`: the epoll driver's own
/// write already tries the socket first. The caller starts this only when
/// no write of its socket is in flight.
pub(crate) fn write_now(fd: RawFd, mut bufs: Vec<Bytes>) -> io::Result<Vec<Bytes>> {
    if let Some(sent) = sent_now(fd, &bufs) {
        advance(&mut bufs, sent?);
    }
    Ok(bufs)
}

/// On io_uring, how many bytes of `bufs` the socket `fd` took at once
/// ([`send_now`]); `None` elsewhere, or when it took none.
pub(crate) fn sent_now<B: Deref<Target = [u8]>>(
    fd: RawFd,
    bufs: &[B],
) -> Option<io::Result<usize>> {
    if crate::runtime::on_uring() {
        send_now(fd, bufs)
    } else {
        None
    }
}

/// The socket `fd` as an [`io::Write`] that never waits, on either driver:
/// each write is one [`send_now`], and `WouldBlock` when the socket takes
/// nothing. A TLS flush hands it rustls' queued records as they lie
/// (`framing::tls::send_queued`), so they are not first copied into one
/// buffer for the runtime. As with [`write_now`], the caller uses it only
/// when no write of its socket is in flight.
pub(crate) struct SendNow(pub(crate) RawFd);

impl io::Write for SendNow {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match send_now(self.0, bufs) {
            Some(sent) => sent,
            None if bufs.iter().all(|b| b.is_empty()) => Ok(0),
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Drops the first `skip` bytes of `bufs`, and the slices left empty.
fn advance(bufs: &mut Vec<Bytes>, mut skip: usize) {
    bufs.retain_mut(|b| {
        let n = skip.min(b.len());
        b.advance(n);
        skip -= n;
        !b.is_empty()
    });
}

/// The most slices one [`send_now`] offers; the caller writes the rest
/// after (a link batch or a provider request is a handful).
const SEND_SLICES: usize = 64;

/// Offers the first [`SEND_SLICES`] of `slices`, in order, to the socket
/// `fd` without waiting: one `sendmsg(2)` with `MSG_DONTWAIT` (on io_uring
/// monoio's sockets are blocking). How many bytes the kernel took (fewer
/// than offered when its buffer filled); `None` when it took none for want
/// of room (or nothing was offered): the caller then writes through the
/// runtime, which waits for room.
fn send_now<B: Deref<Target = [u8]>>(fd: RawFd, slices: &[B]) -> Option<io::Result<usize>> {
    let mut iovecs = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; SEND_SLICES];
    let mut count = 0;
    for slice in slices
        .iter()
        .map(|slice| &**slice)
        .filter(|s| !s.is_empty())
        .take(SEND_SLICES)
    {
        iovecs[count] = libc::iovec {
            iov_base: slice.as_ptr() as *mut libc::c_void,
            iov_len: slice.len(),
        };
        count += 1;
    }
    if count == 0 {
        return None;
    }
    // SAFETY: `msghdr` is plain data; all-zero is an empty header.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = iovecs.as_mut_ptr();
    header.msg_iovlen = count as _;
    // SAFETY: the first `count` iovecs point into `slices`, each with its
    // slice's exact length; the slices are borrowed, so readable and
    // unmoved, for the whole call, and sendmsg(2) only reads them (and the
    // header, on this stack) before it returns: the kernel keeps no
    // pointer. `fd` is the caller's open socket. Tested below
    // (`send_now_takes_what_fits_in_order_and_never_waits`).
    let sent = unsafe { libc::sendmsg(fd, &header, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    match usize::try_from(sent) {
        Ok(n) => Some(Ok(n)),
        Err(_) => {
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => None,
                _ => Some(Err(error)),
            }
        }
    }
}

/// One `writev` of `bufs` (the slices are cloned, not copied): how many
/// bytes the kernel took, which may be fewer than all.
pub(crate) async fn write_some<W: AsyncWriteRent>(
    writer: &mut W,
    bufs: &[Bytes],
) -> std::io::Result<usize> {
    write_once(writer, BytesVec::new(bufs.to_vec())).await.0
}

/// One `writev`; an interrupted write took 0 bytes, a write of 0 bytes is
/// an error.
async fn write_once<W: AsyncWriteRent>(
    writer: &mut W,
    vec: BytesVec,
) -> (std::io::Result<usize>, BytesVec) {
    let (result, returned) = writer.writev(vec).await;
    let written = match result {
        Ok(0) => Err(std::io::ErrorKind::WriteZero.into()),
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(0),
        other => other,
    };
    (written, returned)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn iovecs_point_into_the_original_slices_and_empty_ones_are_skipped() {
        let body = Bytes::from(vec![7u8; 1000]);
        let vec = BytesVec::new(vec![
            Bytes::from_static(b"head"),
            Bytes::new(),
            body.clone(),
        ]);
        assert_eq!(vec.read_iovec_len(), 2);
        assert_eq!(vec.len(), 1004);
        assert_eq!(vec.iovecs[1].iov_base as *const u8, body.as_ptr());
    }

    #[test]
    fn large_vectored_writes_arrive_whole_and_in_order() {
        let parts: Vec<Bytes> = (0..48u8)
            .map(|i| Bytes::from(vec![i; 64 * 1024 + usize::from(i)]))
            .collect();
        let expected: Vec<u8> = parts.iter().flat_map(|b| b.iter().copied()).collect();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            let mut all = Vec::new();
            socket.read_to_end(&mut all).unwrap();
            all
        });
        monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(async move {
                let mut stream = monoio::net::TcpStream::connect(addr).await.unwrap();
                write_all(&mut stream, parts).await.unwrap();
            });
        assert_eq!(reader.join().unwrap(), expected);
    }

    #[test]
    fn send_now_as_a_writer_keeps_order_and_says_would_block_when_full() {
        use std::io::{IoSlice, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (ours, _) = listener.accept().unwrap();
        let mut socket = SendNow(std::os::fd::AsRawFd::as_raw_fd(&ours));
        let nothing = [IoSlice::new(b""), IoSlice::new(b"")];
        assert_eq!(socket.write_vectored(&nothing).unwrap(), 0);
        let slices = [IoSlice::new(b"ab"), IoSlice::new(b""), IoSlice::new(b"cd")];
        assert_eq!(socket.write_vectored(&slices).unwrap(), 4);
        // A peer that reads nothing: the socket fills and a write that
        // finds no room says WouldBlock at once (the socket is blocking).
        let block = vec![7u8; 1 << 20];
        let mut sent = 4;
        let full = (0..1024).any(|_| match socket.write(&block) {
            Ok(n) => {
                sent += n;
                false
            }
            Err(error) => {
                assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
                true
            }
        });
        assert!(full, "the socket never filled");
        let mut got = vec![0; sent];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got[..4], b"abcd");
        assert!(got[4..].iter().all(|&b| b == 7));
    }

    #[test]
    fn send_now_takes_what_fits_in_order_and_never_waits() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (ours, _) = listener.accept().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&ours);
        // In order, empty slices skipped, at most SEND_SLICES a call.
        let slices: Vec<Bytes> = (0..SEND_SLICES as u8 + 8)
            .map(|i| match i % 3 {
                0 => Bytes::new(),
                _ => Bytes::from(vec![i]),
            })
            .collect();
        let offered: Vec<u8> = slices
            .iter()
            .filter(|b| !b.is_empty())
            .take(SEND_SLICES)
            .flat_map(|b| b.iter().copied())
            .collect();
        assert_eq!(send_now(fd, &slices).unwrap().unwrap(), offered.len());
        let mut got = vec![0; offered.len()];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(got, offered);
        assert!(send_now(fd, &[Bytes::new()]).is_none(), "nothing offered");

        // A peer that reads nothing: the socket fills, and a write that
        // finds no room takes nothing and returns (the socket is blocking).
        let block = Bytes::from(vec![7u8; 1 << 20]);
        let full = (0..1024).any(|_| match send_now(fd, std::slice::from_ref(&block)) {
            Some(sent) => sent.unwrap() == 0,
            None => true,
        });
        assert!(full, "the socket never filled");

        // A peer gone: a typed error, not a signal or a wait.
        drop(peer);
        let error = (0..1024)
            .find_map(|_| send_now(fd, std::slice::from_ref(&block))?.err())
            .expect("the write to a closed peer failed");
        assert!(
            matches!(
                error.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{error:?}"
        );
    }
}
