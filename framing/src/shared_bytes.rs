//! A received buffer's bytes handed on as slices of it, not copies.
//!
//! A reader that borrows from a [`Bytes`] buffer (serde_json reading a
//! body, a line splitter, an index of members) hands out `&[u8]`s; where
//! one lies inside the buffer it is passed on as a refcounted slice of it.

use bytes::Bytes;

/// `part` as a slice of `whole` when it lies inside it (no copy); `None`
/// when it does not (it was unescaped, say, into a buffer of its own).
pub fn slice_within(whole: &Bytes, part: &[u8]) -> Option<Bytes> {
    let inside = whole.as_ptr_range();
    let range = part.as_ptr_range();
    (inside.start <= range.start && range.end <= inside.end).then(|| whole.slice_ref(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_inside_is_a_slice_and_one_outside_is_none() {
        let whole = Bytes::from_static(b"{\"a\":\"text\"}");
        let part = &whole[6..10];
        let slice = slice_within(&whole, part).unwrap();
        assert_eq!((&slice[..], slice.as_ptr()), (&b"text"[..], part.as_ptr()));
        assert_eq!(slice_within(&whole, &whole[..]).unwrap(), whole);
        assert_eq!(slice_within(&whole, b"text"), None);
        let other = Bytes::from_static(b"elsewhere");
        assert_eq!(slice_within(&whole, &other[..4]), None);
    }
}
