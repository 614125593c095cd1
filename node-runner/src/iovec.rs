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
//! The Edge has the same forty lines (`edge-proxy/src/iovec.rs`): the
//! Edge and the Node share no runtime code by design (DESIGN.md), and
//! `framing`, which they do share, is runtime-free and has no `unsafe`.

// The one `unsafe` besides the LMDB open: implementing monoio's `IoVecBuf`.
#![allow(unsafe_code)]

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
) -> std::io::Result<()> {
    let mut vec = BytesVec::new(bufs);
    while vec.len() > 0 {
        let (written, returned) = write_once(writer, vec).await;
        let mut rest = returned.into_bufs();
        let mut skip = written?;
        rest.retain_mut(|b| {
            let n = skip.min(b.len());
            b.advance(n);
            skip -= n;
            !b.is_empty()
        });
        vec = BytesVec::new(rest);
    }
    Ok(())
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
}
