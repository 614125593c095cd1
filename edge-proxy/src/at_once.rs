//! Socket reads and writes taken at once, without waiting.
//!
//! On io_uring every read and write is a ring operation: its completion is
//! taken only when the run queue next empties (the task sleeps until then
//! and the ring is entered once more), even when the socket could take or
//! give the bytes at once. A loopback write, for one, always completes when
//! the ring is entered: the task then waits a turn of the loop and the ring
//! costs an entry just to say so.
//!
//! - A reader that knows bytes are likely waiting — its last read filled its
//!   buffer — takes them with one `recv(2)` instead ([`recv_now`]).
//! - A writer whose last write went out whole offers the next to the kernel
//!   with one `sendmsg(2)` ([`send_now`]), and goes through the ring only
//!   for what the socket does not take.
//!
//! Neither ever waits (`MSG_DONTWAIT`: on io_uring monoio's sockets are
//! blocking). A write taken at once must not overtake a ring write still in
//! flight on the same socket: the callers start one only after the
//! previous write completed (a write future dropped mid-flight ends its
//! connection). The epoll driver needs none of this: it reads and writes
//! first and waits only for a socket that is empty or full.
//!
//! The Node has the same few lines for its provider reads
//! (`node-runner/src/provider_http/conn.rs`) and writes
//! (`node-runner/src/iovec.rs`): the two share no runtime code by design,
//! and `framing` does no I/O.

// recv(2) into a buffer's spare capacity and sendmsg(2) from borrowed
// slices; see the SAFETY notes.
#![allow(unsafe_code)]

use std::io;
use std::ops::Deref;
use std::os::fd::RawFd;

use bytes::BytesMut;

/// Reads what the socket `fd` already holds into the spare capacity of
/// `buf`, after its bytes, without waiting: `recv(2)` with `MSG_DONTWAIT`.
/// `None` when nothing is waiting (or `buf` has no spare room): the caller
/// then reads through the runtime. `Some(Ok(0))` is the end of the stream.
pub(crate) fn recv_now(fd: RawFd, buf: &mut BytesMut) -> Option<io::Result<usize>> {
    let spare = buf.spare_capacity_mut();
    if spare.is_empty() {
        return None;
    }
    // SAFETY: `spare` is `buf`'s spare capacity: `spare.len()` bytes valid
    // for writes while it is borrowed here, and recv(2) writes at most that
    // many. `fd` is the caller's open socket. Tested below and by the
    // callers' tests (`a_busy_link_takes_waiting_bytes_at_once_every_other_read`,
    // `a_full_watching_read_takes_the_rest_at_once`).
    let read = unsafe {
        libc::recv(
            fd,
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

/// The most slices one [`send_now`] offers; the caller writes the rest
/// after (a link batch or an answer is a handful).
pub(crate) const SEND_SLICES: usize = 64;

/// Offers the first [`SEND_SLICES`] of `slices`, in order, to the socket
/// `fd` without waiting: one `sendmsg(2)` with `MSG_DONTWAIT`. How many
/// bytes the kernel took (fewer than offered when its buffer filled);
/// `None` when it took none for want of room (or nothing was offered): the
/// caller then writes through the runtime, which waits for room.
pub(crate) fn send_now<B: Deref<Target = [u8]>>(
    fd: RawFd,
    slices: &[B],
) -> Option<io::Result<usize>> {
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
    // pointer. `fd` is the caller's open socket. Tested below and by the
    // callers' tests (`a_small_answer_goes_out_at_once`,
    // `link_writes_go_out_at_once_while_the_socket_has_room`).
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

/// The socket `fd` as an [`io::Write`] that never waits, on either driver:
/// each write is one [`send_now`], and `WouldBlock` when the socket takes
/// nothing. The link's TLS flush hands it rustls' queued records as they
/// lie (`framing::tls::send_queued`), so they are not first copied into
/// one buffer for the runtime. As with [`send_now`], the caller uses it
/// only when no write of its socket is in flight.
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

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    use bytes::Bytes;

    use super::*;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (theirs, _) = listener.accept().unwrap();
        (ours, theirs)
    }

    #[test]
    fn takes_waiting_bytes_after_the_buffers_and_never_waits() {
        let (ours, mut theirs) = pair();
        let mut buf = BytesMut::with_capacity(16);
        buf.extend_from_slice(b"ab");
        // Nothing waiting: no wait (the socket is blocking), no bytes.
        assert!(recv_now(ours.as_raw_fd(), &mut buf).is_none());
        assert_eq!(&buf[..], b"ab");

        theirs.write_all(b"cdefghijklmnopqrstuvwxyz").unwrap();
        // Loopback delivers on write; read what fits the spare room.
        let n = recv_now(ours.as_raw_fd(), &mut buf).unwrap().unwrap();
        assert_eq!(n, buf.capacity() - 2);
        assert_eq!(&buf[..], &b"abcdefghijklmnopqrstuvwxyz"[..buf.len()]);

        // No spare room: nothing read, whatever waits.
        let mut full = BytesMut::new();
        assert!(recv_now(ours.as_raw_fd(), &mut full).is_none());

        // The rest, then the end of the stream.
        let mut rest = BytesMut::with_capacity(64);
        assert!(recv_now(ours.as_raw_fd(), &mut rest).unwrap().unwrap() > 0);
        drop(theirs);
        assert_eq!(recv_now(ours.as_raw_fd(), &mut rest).unwrap().unwrap(), 0);
    }

    #[test]
    fn send_now_as_a_writer_keeps_order_and_says_would_block_when_full() {
        use std::io::{IoSlice, Read as _};

        let (ours, mut theirs) = pair();
        let mut socket = SendNow(ours.as_raw_fd());
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
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(&got[..4], b"abcd");
        assert!(got[4..].iter().all(|&b| b == 7));
    }

    #[test]
    fn sends_what_fits_in_order_and_never_waits() {
        use std::io::Read as _;

        let (ours, mut theirs) = pair();
        let fd = ours.as_raw_fd();
        // Empty slices are skipped; nothing to offer is no write.
        let slices = [
            Bytes::from_static(b"ab"),
            Bytes::new(),
            Bytes::from_static(b"cde"),
        ];
        assert_eq!(send_now(fd, &slices).unwrap().unwrap(), 5);
        let mut got = [0; 5];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abcde");
        assert!(send_now(fd, &[Bytes::new()]).is_none());
        assert!(send_now::<Bytes>(fd, &[]).is_none());

        // At most SEND_SLICES slices a call; the caller writes the rest.
        let many: Vec<Bytes> = (0..SEND_SLICES as u8 + 10)
            .map(|i| Bytes::from(vec![i]))
            .collect();
        assert_eq!(send_now(fd, &many).unwrap().unwrap(), SEND_SLICES);
        let mut got = vec![0; SEND_SLICES];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(got, (0..SEND_SLICES as u8).collect::<Vec<_>>());

        // A peer that reads nothing: the socket fills, and a write that
        // finds no room takes nothing and returns (the socket is blocking).
        let block = Bytes::from(vec![7u8; 1 << 20]);
        let mut sent = 0;
        let mut full = false;
        for _ in 0..1024 {
            match send_now(fd, std::slice::from_ref(&block)) {
                Some(n) => sent += n.unwrap(),
                None => {
                    full = true;
                    break;
                }
            }
        }
        assert!(full && sent > 0, "{sent} bytes sent, full: {full}");

        // A peer gone: a typed error, not a signal or a wait.
        drop(theirs);
        let error = (0..1024)
            .find_map(|_| match send_now(fd, std::slice::from_ref(&block)) {
                Some(Err(error)) => Some(error),
                _ => None,
            })
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
