//! Room in a receive buffer, made without `realloc`.
//!
//! A reader keeps the bytes it has not parsed yet (part of a line, of a
//! head) and reads more after them. When the buffer has no room left,
//! [`BytesMut::reserve`] grows it in place where it can, and otherwise, for a
//! buffer that was never split, `realloc`s its allocation: jemalloc then
//! copies the whole old allocation across size classes, ~450–600
//! instructions for a small one, where an allocation, a copy of the unparsed
//! bytes alone and a free take ~100 (`bench-results/profiles.md`, rounds 37
//! and 47). [`make_room`] reclaims the buffer's own space when it can and
//! otherwise starts a fresh one.

use bytes::BytesMut;

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
    use super::make_room;
    use bytes::BytesMut;

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
