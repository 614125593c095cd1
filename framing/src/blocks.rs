//! [`Blocks`]: small buffers cut from blocks they share.
//!
//! An HTTP head is a few hundred bytes, written once and sent at once. Made
//! in a buffer of its own it is two allocations (the buffer, and the shared
//! header `bytes` makes the first time a buffer is split or frozen); cut
//! from a block that many heads share it is a reference count, and the
//! block is freed when the last buffer cut from it is dropped (as the frame
//! encoder's scratch and a write batch's copy segment grow:
//! `write_batch::reserve_in_blocks`). A block stays allocated while any of
//! its buffers lives, so this is for buffers sent and dropped soon, not for
//! ones kept.

use bytes::BytesMut;

use crate::write_batch::reserve_in_blocks;

/// Where small buffers are cut from; see the module docs. One a core (it
/// is not shared between threads).
#[derive(Debug)]
pub struct Blocks {
    buf: BytesMut,
    block: usize,
}

impl Blocks {
    /// Blocks of `block` bytes (a buffer longer than that gets room of its
    /// own).
    pub fn new(block: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            block,
        }
    }

    /// Makes room for `room` bytes, lets `write` append a buffer's bytes,
    /// and cuts them off as a buffer of their own. A failed `write` leaves
    /// nothing behind.
    ///
    /// # Errors
    /// `write`'s.
    pub fn cut<E>(
        &mut self,
        room: usize,
        write: impl FnOnce(&mut BytesMut) -> Result<(), E>,
    ) -> Result<BytesMut, E> {
        reserve_in_blocks(&mut self.buf, room, self.block);
        match write(&mut self.buf) {
            Ok(()) => Ok(self.buf.split()),
            Err(error) => {
                self.buf.clear();
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(bytes: &'static [u8]) -> impl FnOnce(&mut BytesMut) -> Result<(), ()> {
        move |buf| {
            buf.extend_from_slice(bytes);
            Ok(())
        }
    }

    #[test]
    fn buffers_cut_one_after_another_share_a_block() {
        let mut blocks = Blocks::new(1024);
        let first = blocks.cut(16, put(b"HTTP/1.1 200 OK\r\n\r\n")).unwrap();
        let second = blocks.cut(16, put(b"POST / HTTP/1.1\r\n\r\n")).unwrap();
        assert_eq!(&first[..], b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(&second[..], b"POST / HTTP/1.1\r\n\r\n");
        assert_eq!(
            second.as_ptr(),
            first.as_ptr().wrapping_add(first.len()),
            "the second is cut right after the first, from the same block"
        );
        let (first, second) = (first.freeze(), second.freeze());
        assert_eq!(&first[..5], b"HTTP/");
        assert_eq!(&second[..5], b"POST ");
    }

    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let mut blocks = Blocks::new(1024);
        let failed = blocks.cut(16, |buf| {
            buf.extend_from_slice(b"half a head");
            Err("too long")
        });
        assert_eq!(failed.unwrap_err(), "too long");
        let next = blocks.cut(16, put(b"whole")).unwrap();
        assert_eq!(&next[..], b"whole");
    }

    #[test]
    fn a_buffer_longer_than_a_block_gets_room_of_its_own() {
        let mut blocks = Blocks::new(64);
        let long = vec![b'x'; 1000];
        let cut = blocks
            .cut(long.len(), |buf| {
                buf.extend_from_slice(&long);
                Ok::<_, ()>(())
            })
            .unwrap();
        assert_eq!(&cut[..], &long[..]);
    }
}
