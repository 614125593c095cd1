//! [`SseDecoder`]: the tokio-util `Decoder` shape over a receive buffer.
//!
//! Lines are consumed from the caller's `BytesMut` as they complete; a partial
//! line stays in the buffer and is not rescanned (the decoder remembers how
//! much of it it has seen), and a partial line of an ignored field is dropped
//! from the buffer at once. A one-line event's data is split off the buffer
//! as a `Bytes` slice (no copy); only multi-line data is copied, to join it.

use std::mem;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::machine::{Action, Machine, Step};
use super::{SseConfig, SseError, SseEvent, SseItem};

/// An incremental SSE parser that consumes a `BytesMut`.
///
/// Pass the same buffer to every call and only append to it in between:
/// the decoder keeps an offset into it.
///
/// ```
/// use bytes::BytesMut;
/// use framing::sse::SseDecoder;
///
/// let mut dec = SseDecoder::new();
/// let mut buf = BytesMut::from(&b"event: delta\ndata: tok"[..]);
/// assert_eq!(dec.decode(&mut buf).unwrap(), None); // need more
/// buf.extend_from_slice(b"\n\n");
/// let ev = dec.decode(&mut buf).unwrap().unwrap();
/// assert_eq!((ev.event.as_deref(), &ev.data[..]), (Some(&b"delta"[..]), &b"tok"[..]));
/// ```
#[derive(Debug, Clone)]
pub struct SseDecoder {
    machine: Machine,
    /// Bytes of the kept partial line at the front of the caller's buffer.
    held: usize,
    data: Data,
    /// The last event type / id handed out: repeated values (every Anthropic
    /// event has `event: content_block_delta`) are shared, not reallocated.
    event_cache: Option<Bytes>,
    id_cache: Option<Bytes>,
}

/// The data of the event being built.
#[derive(Debug, Clone, Default)]
enum Data {
    #[default]
    Empty,
    /// One data line, a slice of the receive buffer.
    One(Bytes),
    /// Several data lines, joined.
    Many(BytesMut),
}

impl SseDecoder {
    /// A decoder with the default [`SseConfig`].
    pub fn new() -> Self {
        Self::with_config(SseConfig::new())
    }

    /// A decoder with `cfg`.
    pub fn with_config(cfg: SseConfig) -> Self {
        Self {
            machine: Machine::new(cfg),
            held: 0,
            data: Data::Empty,
            event_cache: None,
            id_cache: None,
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &SseConfig {
        self.machine.config()
    }

    /// The next event; `Ok(None)` means more bytes are needed. Comments are
    /// skipped.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<SseEvent>, SseError> {
        loop {
            match self.decode_item(buf)? {
                Some(SseItem::Event(event)) => return Ok(Some(event)),
                Some(SseItem::Comment(_)) => {}
                None => return Ok(None),
            }
        }
    }

    /// At end of stream: the next event, or `None` once none is left, in
    /// which case the unterminated rest (a partial line or an event without
    /// its blank line) is discarded, as the spec requires. Check
    /// [`SseDecoder::is_mid_event`] first to tell a truncated stream.
    pub fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<SseEvent>, SseError> {
        loop {
            match self.decode_item_eof(buf)? {
                Some(SseItem::Event(event)) => return Ok(Some(event)),
                Some(SseItem::Comment(_)) => {}
                None => return Ok(None),
            }
        }
    }

    /// The next event or comment (comments only when
    /// [`SseConfig::comments`] is set); `Ok(None)` means more bytes are
    /// needed.
    pub fn decode_item(&mut self, buf: &mut BytesMut) -> Result<Option<SseItem>, SseError> {
        debug_assert!(self.held <= buf.len(), "buffer shrank under the decoder");
        loop {
            let Some(input) = buf.get(self.held..).filter(|rest| !rest.is_empty()) else {
                return Ok(None);
            };
            let (end, next) = match self.machine.step(input)? {
                Step::Drop(n) => {
                    // Framing bytes only ever follow a complete line.
                    debug_assert_eq!(self.held, 0);
                    buf.advance(self.held + n);
                    self.held = 0;
                    continue;
                }
                Step::Keep => {
                    self.held = buf.len();
                    return Ok(None);
                }
                Step::Skip => {
                    buf.clear();
                    self.held = 0;
                    return Ok(None);
                }
                Step::SkipLine { next } => {
                    buf.advance(self.held + next);
                    self.held = 0;
                    continue;
                }
                Step::Line { end, next } => (self.held + end, self.held + next),
            };
            self.held = 0;
            match self.machine.line(&buf[..end])? {
                Action::None => buf.advance(next),
                Action::Data { start, first } => {
                    if first {
                        self.data = Data::One(split_value(buf, start, end, next));
                    } else {
                        self.push_data(&buf[start..end]);
                        buf.advance(next);
                    }
                }
                Action::Comment { start } => {
                    let text = split_value(buf, start, end, next);
                    return Ok(Some(SseItem::Comment(text)));
                }
                Action::Dispatch => {
                    buf.advance(next);
                    return Ok(Some(SseItem::Event(self.take_event())));
                }
            }
        }
    }

    /// [`SseDecoder::decode_item`] at end of stream; see
    /// [`SseDecoder::decode_eof`].
    pub fn decode_item_eof(&mut self, buf: &mut BytesMut) -> Result<Option<SseItem>, SseError> {
        let item = self.decode_item(buf)?;
        if item.is_none() {
            buf.clear();
            self.held = 0;
            self.data = Data::Empty;
            self.machine.discard();
        }
        Ok(item)
    }

    /// Whether a partial line or an undispatched event is pending.
    pub fn is_mid_event(&self) -> bool {
        self.machine.is_mid_event()
    }

    /// The last event ID; `None` when empty.
    pub fn last_event_id(&self) -> Option<&[u8]> {
        self.machine.last_id()
    }

    /// The last valid `retry` value (reconnection time), in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.machine.retry()
    }

    fn push_data(&mut self, value: &[u8]) {
        self.data = match mem::take(&mut self.data) {
            Data::Empty => Data::Many(BytesMut::from(value)),
            Data::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + 1 + value.len());
                joined.extend_from_slice(&first);
                joined.put_u8(b'\n');
                joined.extend_from_slice(value);
                Data::Many(joined)
            }
            Data::Many(mut joined) => {
                joined.put_u8(b'\n');
                joined.extend_from_slice(value);
                Data::Many(joined)
            }
        };
    }

    fn take_event(&mut self) -> SseEvent {
        let data = match mem::take(&mut self.data) {
            Data::Empty => Bytes::new(),
            Data::One(data) => data,
            Data::Many(data) => data.freeze(),
        };
        let event = self
            .machine
            .event_type()
            .map(|v| shared(&mut self.event_cache, v));
        let id = self
            .machine
            .last_id()
            .map(|v| shared(&mut self.id_cache, v));
        self.machine.dispatched();
        SseEvent { event, data, id }
    }
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

/// Consumes a line (ending at `next`) from `buf` and returns its
/// `start..end` part, zero-copy. Trimming the `BytesMut` before freezing
/// costs no refcount traffic, unlike slicing the frozen line.
fn split_value(buf: &mut BytesMut, start: usize, end: usize, next: usize) -> Bytes {
    let mut line = buf.split_to(next);
    line.truncate(end);
    line.advance(start);
    line.freeze()
}

/// `value` as `Bytes`, sharing the cached copy when it is the same value.
fn shared(cache: &mut Option<Bytes>, value: &[u8]) -> Bytes {
    match cache {
        Some(cached) if cached[..] == *value => cached.clone(),
        _ => cache.insert(Bytes::copy_from_slice(value)).clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_data_is_a_slice_of_the_buffer() {
        let mut buf = BytesMut::from(&b"data: hello\n\ndata: x"[..]);
        let base = buf.as_ptr();
        let mut dec = SseDecoder::new();
        let ev = dec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(&ev.data[..], b"hello");
        assert_eq!(ev.data.as_ptr(), base.wrapping_add(6));
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        assert_eq!(&buf[..], b"data: x");
    }

    #[test]
    fn partial_line_is_not_rescanned_and_skipped_lines_are_dropped() {
        let mut dec = SseDecoder::new();
        let mut buf = BytesMut::from(&b"data: ab"[..]);
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        assert_eq!(dec.held, 8);
        buf.extend_from_slice(b"c");
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        assert_eq!(dec.held, 9);
        buf.extend_from_slice(b"\n: comment that");
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        assert!(buf.is_empty(), "ignored partial line dropped");
        buf.extend_from_slice(b" goes on\n\n");
        let ev = dec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(&ev.data[..], b"abc");
        assert!(buf.is_empty());
    }

    #[test]
    fn repeated_event_type_is_shared() {
        let mut dec = SseDecoder::new();
        let mut buf = BytesMut::from(&b"event: e\ndata: 1\n\nevent: e\ndata: 2\n\n"[..]);
        let a = dec.decode(&mut buf).unwrap().unwrap().event.unwrap();
        let b = dec.decode(&mut buf).unwrap().unwrap().event.unwrap();
        assert_eq!(a.as_ptr(), b.as_ptr());
    }

    #[test]
    fn eof_discards_unterminated_event() {
        let mut dec = SseDecoder::new();
        let mut buf = BytesMut::from(&b"data: 1\n\ndata: 2\n"[..]);
        assert_eq!(&dec.decode(&mut buf).unwrap().unwrap().data[..], b"1");
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        assert!(dec.is_mid_event());
        assert_eq!(dec.decode_eof(&mut buf).unwrap(), None);
        assert!(!dec.is_mid_event());
        assert!(buf.is_empty());
    }

    #[test]
    fn comments_reported_when_configured() {
        let mut dec = SseDecoder::with_config(SseConfig::new().with_comments(true));
        let mut buf = BytesMut::from(&b": ping\n\n"[..]);
        assert_eq!(
            dec.decode_item(&mut buf).unwrap(),
            Some(SseItem::Comment(Bytes::from_static(b"ping")))
        );
        assert_eq!(dec.decode_item(&mut buf).unwrap(), None);
    }
}
