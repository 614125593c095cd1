//! Room in a buffer or a string, made without `realloc`.
//!
//! Growing a `Vec` (and so a `String`, or a `BytesMut` that was never split)
//! `realloc`s its allocation. Between jemalloc's small size classes that is
//! its slow path and a copy of the whole old allocation, ~450–600
//! instructions, where an allocation, a copy of what is kept and a free take
//! ~100 (`bench-results/profiles.md`, rounds 37 and 47).
//!
//! - [`make_room`]: a receive buffer keeps the bytes it has not parsed yet
//!   (part of a line, of a head) and reads more after them: its own space
//!   is reclaimed when it can be, else a fresh buffer takes the kept bytes.
//! - [`reserve_str`] and [`reserve_vec`]: a text or a byte buffer that
//!   accumulates (an answer's deltas, a line that crosses reads) grows into
//!   a fresh one while it is small; a large one (past [`REALLOC_FROM`]) is
//!   `realloc`ed, which jemalloc can then do in place.

use bytes::BytesMut;

/// From this capacity on, [`reserve_str`] and [`reserve_vec`] let their
/// buffer `realloc`: jemalloc's large size classes (16 KiB and up) can grow
/// in place.
pub const REALLOC_FROM: usize = 16 * 1024;

/// A buffer that accumulates: a `String` or a `Vec<u8>`.
trait Accumulates: Sized {
    fn len_and_capacity(&self) -> (usize, usize);
    fn realloc_for(&mut self, additional: usize);
    /// A copy of it in a fresh buffer of `capacity`.
    fn copied_into(&self, capacity: usize) -> Self;
}

/// The one implementation for both buffers: `$append` copies a buffer's
/// contents after another's.
macro_rules! accumulates {
    ($buf:ty, $append:ident) => {
        impl Accumulates for $buf {
            fn len_and_capacity(&self) -> (usize, usize) {
                (self.len(), self.capacity())
            }
            fn realloc_for(&mut self, additional: usize) {
                self.reserve(additional);
            }
            fn copied_into(&self, capacity: usize) -> Self {
                let mut fresh = Self::with_capacity(capacity);
                fresh.$append(self);
                fresh
            }
        }
    };
}

accumulates!(String, push_str);
accumulates!(Vec<u8>, extend_from_slice);

/// As `reserve` (at least double the capacity), but while the buffer is
/// under [`REALLOC_FROM`] into a fresh one with its bytes copied over.
fn reserve<T: Accumulates>(buf: &mut T, additional: usize) {
    let (len, capacity) = buf.len_and_capacity();
    if capacity - len >= additional {
        return;
    }
    if capacity >= REALLOC_FROM {
        buf.realloc_for(additional);
        return;
    }
    *buf = buf.copied_into((len + additional).max(2 * capacity));
}

/// Makes `text` hold at least `additional` more bytes: as
/// [`String::reserve`] (at least double its capacity), but while it is
/// under [`REALLOC_FROM`] into a fresh string with its bytes copied over,
/// not `realloc`ed (see the module docs).
pub fn reserve_str(text: &mut String, additional: usize) {
    reserve(text, additional);
}

/// [`reserve_str`] for bytes.
pub fn reserve_vec(bytes: &mut Vec<u8>, additional: usize) {
    reserve(bytes, additional);
}

/// Makes `buf` hold at least `additional` bytes of spare capacity after
/// its bytes: left as it is when it has them, else its own allocation
/// reclaimed (the bytes before it already handed on, none in use), else a
/// fresh buffer of `len + additional` with its bytes copied over.
pub fn make_room(buf: &mut BytesMut, additional: usize) {
    if buf.capacity() - buf.len() >= additional || buf.try_reclaim(additional) {
        return;
    }
    let mut fresh = BytesMut::with_capacity(buf.len() + additional);
    fresh.extend_from_slice(buf);
    *buf = fresh;
}

#[cfg(test)]
mod tests {
    use super::{REALLOC_FROM, make_room, reserve_str, reserve_vec};
    use bytes::BytesMut;

    #[test]
    fn a_string_gets_room_and_keeps_its_text() {
        let mut text = String::from("abc");
        reserve_str(&mut text, 10);
        assert!(text.capacity() - text.len() >= 10);
        assert_eq!(text, "abc");
        let (at, room) = (text.as_ptr(), text.capacity());
        reserve_str(&mut text, 2);
        assert_eq!(
            (text.as_ptr(), text.capacity()),
            (at, room),
            "room enough: kept"
        );
        // Doubles, as `String::reserve`, so that small additions amortize.
        text.push_str(&"x".repeat(text.capacity() - text.len()));
        let full = text.capacity();
        reserve_str(&mut text, 1);
        assert!(text.capacity() >= 2 * full);
        assert!(text.starts_with("abcx"));
        // Bytes the same way.
        let mut bytes = b"abc".to_vec();
        reserve_vec(&mut bytes, 10);
        assert!(bytes.capacity() - bytes.len() >= 10);
        assert_eq!(bytes, b"abc");
        // A large one grows as `String::reserve` does.
        let mut large = String::with_capacity(REALLOC_FROM);
        large.push('z');
        reserve_str(&mut large, REALLOC_FROM);
        assert!(large.capacity() - large.len() >= REALLOC_FROM);
        assert_eq!(large, "z");
    }

    #[test]
    fn room_is_left_reclaimed_or_fresh_and_the_bytes_stay() {
        // Room enough: the same allocation.
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(b"abc");
        let at = buf.as_ptr();
        make_room(&mut buf, 32);
        assert_eq!((buf.as_ptr(), &buf[..]), (at, &b"abc"[..]));

        // The bytes before these handed on and dropped: the same
        // allocation, reclaimed.
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(&[b'x'; 60]);
        drop(buf.split_to(58));
        let start = buf.as_ptr() as usize - 58;
        make_room(&mut buf, 40);
        assert!(buf.capacity() - buf.len() >= 40);
        assert_eq!(
            buf.as_ptr() as usize,
            start,
            "moved to the front of its own allocation"
        );
        assert_eq!(&buf[..], b"xx");

        // Those bytes still in use elsewhere: a fresh buffer, the bytes
        // copied, what was handed on untouched.
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(b"0123456789");
        let handed = buf.split_to(8).freeze();
        make_room(&mut buf, 100);
        assert!(buf.capacity() - buf.len() >= 100);
        assert_eq!(&buf[..], b"89");
        assert_eq!(&handed[..], b"01234567");
    }
}
