//! Reading what a socket already holds, without waiting.
//!
//! On io_uring every read is a ring operation: its completion is taken
//! only when the run queue next empties (the task sleeps until then and
//! the ring is entered once more), even when the bytes are already in the
//! socket. A reader that knows they likely are — its last read filled its
//! buffer — takes them with one `recv(2)` instead ([`recv_now`]). The
//! epoll driver needs none of this: it reads first and waits only for an
//! empty socket.
//!
//! The Node has the same few lines for its provider reads
//! (`node-runner/src/provider_http/conn.rs`): the two share no runtime code
//! by design, and `framing` does no I/O.

// A read into a buffer's spare capacity; see the SAFETY notes.
#![allow(unsafe_code)]

use std::io;
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

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

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
}
