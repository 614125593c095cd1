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
//! - [`reserve_str`]: a text that accumulates (an answer's deltas) grows
//!   into a fresh string while it is small; a large one (past
//!   [`REALLOC_FROM`]) is `realloc`ed, which jemalloc can then do in place.

use bytes::BytesMut;

/// From this capacity on, [`reserve_str`] lets the string `realloc`:
/// jemalloc's large size classes (16 KiB and up) can grow in place.
pub const REALLOC_FROM: usize = 16 * 1024;

/// Makes `text` hold at least `additional` more bytes: as
/// [`String::reserve`] (at least double its capacity), but while it is
/// under [`REALLOC_FROM`] into a fresh string with its bytes copied over,
/// not `realloc`ed (see the module docs).
pub fn reserve_str(text: &mut String, additional: usize) {
    if text.capacity() - text.len() >= additional {
        return;
    }
    if text.capacity() >= REALLOC_FROM {
        text.reserve(additional);
        return;
    }
    let mut fresh = String::with_capacity((text.len() + additional).max(2 * text.capacity()));
    fresh.push_str(text);
    *text = fresh;
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
    use super::{REALLOC_FROM, make_room, reserve_str};
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
