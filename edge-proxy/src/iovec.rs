//! Vectored writes of `Bytes` slices without copying them (DESIGN.md, "The
//! zero-copy data path"), for both of the Edge's writers: an ingress chunk
//! (size line, the body slice as received from the node, CRLF) and a node
//! link batch (`framing::write_batch::WriteBatch`) each go to the kernel as
//! one `writev`.
//!
//! monoio's `writev` takes ownership of an [`IoVecBuf`] until the operation
//! completes (also when the future is dropped mid-flight), so the buffer
//! must own the memory its iovecs point into: [`BytesVec`] owns its `Bytes`.
//! (monoio's `write_vectored_all` keeps the caller's buffer on its own stack
//! and hands the kernel only a copy of the iovecs; a dropped future could
//! then free memory the kernel still reads. [`write_all`] therefore drives
//! `writev` itself.)
//!
//! On io_uring a write is first offered to the socket at once
//! ([`write_now`], see `crate::at_once`); the ring writes what it leaves.

// Implementing monoio's `IoVecBuf`.
#![allow(unsafe_code)]

use std::ops::Deref;
use std::os::fd::RawFd;

use bytes::{Buf, Bytes};
use monoio::buf::IoVecBuf;
use monoio::io::AsyncWriteRent;

use crate::at_once::send_now;

/// `Bytes` slices and the iovecs pointing into them, owned together.
#[derive(Debug)]
pub(crate) struct BytesVec {
    iovecs: Vec<libc::iovec>,
    bufs: Vec<Bytes>,
}

impl BytesVec {
    /// The iovecs of `bufs` (empty slices are skipped).
    pub(crate) fn new(mut bufs: Vec<Bytes>) -> Self {
        bufs.retain(|b| !b.is_empty());
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
) -> std::io::Result<()> {
    let mut vec = BytesVec::new(bufs);
    let mut left = vec.len();
    while left > 0 {
        let (written, returned) = write_once(writer, vec).await;
        let skip = written?;
        left = left.saturating_sub(skip);
        if left == 0 {
            // The usual case: the kernel took it all in one write.
            break;
        }
        let mut rest = returned.into_bufs();
        advance(&mut rest, skip);
        vec = BytesVec::new(rest);
    }
    Ok(())
}

/// On io_uring, offers `bufs` to the socket `fd` at once ([`send_now`]):
/// what it did not take, for the caller to write through the runtime —
/// nothing, usually. Elsewhere all of `bufs`: the epoll driver's own
/// write already tries the socket first. The caller starts this only when
/// no write of its socket is in flight.
pub(crate) fn write_now(fd: RawFd, mut bufs: Vec<Bytes>) -> std::io::Result<Vec<Bytes>> {
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
) -> Option<std::io::Result<usize>> {
    if crate::runtime::on_uring() {
        send_now(fd, bufs)
    } else {
        None
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
    fn iovecs_point_into_the_original_slices() {
        let body = Bytes::from(vec![7u8; 1000]);
        let vec = BytesVec::new(vec![
            Bytes::from_static(b"3e8\r\n"),
            body.clone(),
            Bytes::new(),
            Bytes::from_static(b"\r\n"),
        ]);
        assert_eq!(vec.read_iovec_len(), 3);
        assert_eq!(vec.len(), 1007);
        // The body iovec is the body's own memory: no copy was made.
        assert_eq!(vec.iovecs[1].iov_base as *const u8, body.as_ptr());
        assert_eq!(vec.iovecs[1].iov_len, body.len());
    }

    /// The Edge's whole tunnel path, from the node socket's receive buffer
    /// to the client `writev`: decode the body frame, chunk it, build the
    /// iovecs. The body iovec must point into the receive buffer itself —
    /// zero copies on the Edge (the Node's side is covered by the perf
    /// tunnel tests).
    #[test]
    fn a_tunnel_body_goes_from_the_receive_buffer_to_writev_uncopied() {
        use framing::frame::{FrameDecoder, FrameEncoder};
        use framing::http::ChunkedEncoder;
        use proto::v1::envelope::Msg;
        use proto::v1::provider_tunnel_frame::Frame;

        let body = Bytes::from(vec![b'x'; 64 * 1024]);
        let frame = FrameEncoder::new(1 << 20)
            .encode_tunnel_body(7, body)
            .unwrap();
        // What the link reader holds after a socket read.
        let mut received = bytes::BytesMut::new();
        received.extend_from_slice(&frame.head);
        received.extend_from_slice(&frame.body);
        let range = received.as_ptr() as usize..received.as_ptr() as usize + received.len();

        let envelope = FrameDecoder::new(1 << 20)
            .decode(&mut received)
            .unwrap()
            .expect("one frame");
        let Some(Msg::ProviderTunnelFrame(tunnel)) = envelope.msg else {
            panic!("not a tunnel frame");
        };
        let Some(Frame::Body(decoded)) = tunnel.frame else {
            panic!("not a body");
        };
        let chunk = ChunkedEncoder::new().encode(decoded).unwrap();
        let vec = BytesVec::new(chunk.into_parts().to_vec());
        let body_iovec = vec.iovecs[1];
        let start = body_iovec.iov_base as usize;
        assert!(range.contains(&start) && range.contains(&(start + body_iovec.iov_len - 1)));
        assert_eq!(body_iovec.iov_len, 64 * 1024);
    }

    #[test]
    fn large_vectored_writes_arrive_whole_and_in_order_under_both_drivers() {
        // Large enough that the kernel takes it in several partial writes.
        let parts: Vec<Bytes> = (0..64u8)
            .map(|i| Bytes::from(vec![i; 64 * 1024 + usize::from(i)]))
            .collect();
        let expected: Vec<u8> = parts.iter().flat_map(|b| b.iter().copied()).collect();
        for driver in [
            crate::runtime::IoDriver::Epoll,
            crate::runtime::IoDriver::Uring,
        ] {
            if driver == crate::runtime::IoDriver::Uring && !monoio::utils::detect_uring() {
                continue;
            }
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let reader = std::thread::spawn(move || {
                let (mut socket, _) = listener.accept().unwrap();
                let mut all = Vec::new();
                socket.read_to_end(&mut all).unwrap();
                all
            });
            let parts = parts.clone();
            crate::runtime::block_on(driver, async move {
                let mut stream = monoio::net::TcpStream::connect(addr).await.unwrap();
                write_all(&mut stream, parts).await.unwrap();
            })
            .unwrap();
            assert_eq!(reader.join().unwrap(), expected, "{driver:?}");
        }
    }
}
