//! The SSE encoder: events, comments, the `[DONE]` sentinel, `retry`.
//!
//! Output always ends with a blank line, so each call writes one complete
//! block that any conforming parser dispatches (events) or skips (comments,
//! `retry`) on its own. Line breaks inside data (`\n`, `\r\n` or `\r`) become
//! separate `data:` lines, so a parser gives the data back with every line
//! break as `\n`. Nothing is written when an error is returned.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};
use memchr::{memchr, memchr2, memchr3};

use super::{DONE_DATA, SseError, SseEvent};

/// Writes `event` as one block: `event:` (when `Some`), `id:` (when `Some`;
/// `Some("")` resets the last event ID), then one `data:` line per line of
/// data, then a blank line.
///
/// Fails with [`SseError::Unencodable`] when the event type contains CR or
/// LF, or the id contains CR, LF or NUL.
pub fn encode_event(event: &SseEvent, dst: &mut BytesMut) -> Result<(), SseError> {
    if event
        .event
        .as_ref()
        .is_some_and(|e| memchr2(b'\r', b'\n', e).is_some())
    {
        return Err(SseError::Unencodable { field: "event" });
    }
    if event
        .id
        .as_ref()
        .is_some_and(|id| memchr3(b'\r', b'\n', 0, id).is_some())
    {
        return Err(SseError::Unencodable { field: "id" });
    }
    let head = event.event.as_ref().map_or(0, |e| e.len() + 8)
        + event.id.as_ref().map_or(0, |id| id.len() + 5);
    dst.reserve(head + event.data.len() + 8);
    if let Some(name) = &event.event {
        put_line(dst, b"event:", name);
    }
    if let Some(id) = &event.id {
        put_line(dst, b"id:", id);
    }
    put_lines(dst, b"data:", &event.data);
    dst.put_u8(b'\n');
    Ok(())
}

/// Writes a comment block (`: text`, one comment line per line of `text`,
/// then a blank line). `encode_comment(b"ping", dst)` is the usual
/// keep-alive.
pub fn encode_comment(text: &[u8], dst: &mut BytesMut) {
    dst.reserve(text.len() + 4);
    put_lines(dst, b":", text);
    dst.put_u8(b'\n');
}

/// Writes the OpenAI end-of-stream sentinel, `data: [DONE]` and a blank line.
pub fn encode_done(dst: &mut BytesMut) {
    dst.reserve(DONE_DATA.len() + 8);
    put_line(dst, b"data:", DONE_DATA);
    dst.put_u8(b'\n');
}

/// Writes `retry: <ms>` and a blank line: the client's reconnection time.
pub fn encode_retry(ms: u64, dst: &mut BytesMut) {
    // Writing a u64 into a BytesMut cannot fail.
    let _ = write!(dst, "retry: {ms}\n\n");
}

/// Writes `field` + one `field` line per line of `value` (split at `\n`,
/// `\r\n` and `\r`).
fn put_lines(dst: &mut BytesMut, field: &[u8], mut value: &[u8]) {
    while let Some(at) = memchr2(b'\r', b'\n', value) {
        put_line(dst, field, &value[..at]);
        let crlf = value[at] == b'\r' && value.get(at + 1) == Some(&b'\n');
        value = &value[at + 1 + usize::from(crlf)..];
    }
    put_line(dst, field, value);
}

/// Writes `field`, then ` value` unless `value` is empty, then `\n`. The
/// space keeps a value that starts with a space intact (parsers drop one).
fn put_line(dst: &mut BytesMut, field: &[u8], value: &[u8]) {
    debug_assert!(memchr(b'\n', value).is_none());
    dst.put_slice(field);
    if !value.is_empty() {
        dst.put_u8(b' ');
        dst.put_slice(value);
    }
    dst.put_u8(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(event: &SseEvent) -> BytesMut {
        let mut dst = BytesMut::new();
        encode_event(event, &mut dst).unwrap();
        dst
    }

    #[test]
    fn event_with_all_fields() {
        let ev = SseEvent::new("a\nb\r\nc\rd")
            .with_event("delta")
            .with_id("7");
        assert_eq!(
            &encode(&ev)[..],
            b"event: delta\nid: 7\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
        );
    }

    #[test]
    fn empty_and_space_led_data() {
        assert_eq!(&encode(&SseEvent::new(""))[..], b"data:\n\n");
        assert_eq!(&encode(&SseEvent::new(" x"))[..], b"data:  x\n\n");
        assert_eq!(&encode(&SseEvent::new("x\n"))[..], b"data: x\ndata:\n\n");
    }

    #[test]
    fn sentinel_comment_retry() {
        let mut dst = BytesMut::new();
        encode_done(&mut dst);
        encode_comment(b"ping", &mut dst);
        encode_comment(b"", &mut dst);
        encode_retry(1500, &mut dst);
        assert_eq!(&dst[..], b"data: [DONE]\n\n: ping\n\n:\n\nretry: 1500\n\n");
        assert_eq!(&encode(&SseEvent::done())[..], b"data: [DONE]\n\n");
    }

    #[test]
    fn unencodable_fields_write_nothing() {
        let mut dst = BytesMut::new();
        for (ev, field) in [
            (SseEvent::new("x").with_event("a\nb"), "event"),
            (SseEvent::new("x").with_event("a\rb"), "event"),
            (SseEvent::new("x").with_id("a\0b"), "id"),
            (SseEvent::new("x").with_id("a\r\nb"), "id"),
        ] {
            assert_eq!(
                encode_event(&ev, &mut dst),
                Err(SseError::Unencodable { field })
            );
        }
        assert!(dst.is_empty());
    }
}
