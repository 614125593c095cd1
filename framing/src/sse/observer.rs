//! [`SseObserver`]: watches chunks that are relayed untouched.
//!
//! The relay forwards every received chunk as is and shows the same bytes to
//! the observer by reference. The observer reports complete events through a
//! callback; an event that lies inside one chunk borrows its data from that
//! chunk (no copy, no allocation). Only what spans chunks is copied: the
//! partial line (at most `max_line_len` bytes) and the data of an unfinished
//! event (at most `max_data_len` bytes). Both buffers are reused.

use super::machine::{Action, Machine, Step};
use super::{SseConfig, SseError, SseEventRef, SseItemRef};

/// An incremental SSE parser over borrowed chunks.
///
/// ```
/// use framing::sse::{SseItemRef, SseObserver};
///
/// let mut obs = SseObserver::new();
/// let mut last = Vec::new();
/// for chunk in [&b"data: {\"usage\":"[..], b"1}\n\ndata: [DONE]\n\n"] {
///     // ... forward `chunk` to the client untouched, then:
///     obs.feed(chunk, |item| {
///         if let SseItemRef::Event(ev) = item {
///             if !ev.is_done() {
///                 last.clear();
///                 last.extend_from_slice(ev.data);
///             }
///         }
///     })
///     .unwrap();
/// }
/// assert_eq!(last, b"{\"usage\":1}");
/// ```
#[derive(Debug, Clone)]
pub struct SseObserver {
    machine: Machine,
    /// The kept partial line, when a line that matters spans chunks.
    line: Vec<u8>,
    /// The data of an event that spans chunks or has several data lines.
    data: Vec<u8>,
}

impl SseObserver {
    /// An observer with the default [`SseConfig`].
    pub fn new() -> Self {
        Self::with_config(SseConfig::new())
    }

    /// An observer with `cfg`.
    pub fn with_config(cfg: SseConfig) -> Self {
        Self {
            machine: Machine::new(cfg),
            line: Vec::new(),
            data: Vec::new(),
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &SseConfig {
        self.machine.config()
    }

    /// Parses the next chunk of the stream, calling `on_item` for each event
    /// (and comment, when configured) it completes, in order.
    ///
    /// On error the items before the offending line have been reported and
    /// every later call returns the same error.
    pub fn feed<F>(&mut self, chunk: &[u8], mut on_item: F) -> Result<(), SseError>
    where
        F: FnMut(SseItemRef<'_>),
    {
        let Self {
            machine,
            line,
            data,
        } = self;
        // The data of the event being built, while it is a single line of
        // this chunk: borrowed, copied into `data` only if still pending at
        // the end of the chunk.
        let mut pending: Option<(usize, usize)> = None;
        let mut pos = 0;
        let result = loop {
            let Some(input) = chunk.get(pos..).filter(|rest| !rest.is_empty()) else {
                break Ok(());
            };
            let (end, next) = match machine.step(input) {
                Err(err) => break Err(err),
                Ok(Step::Drop(n)) => {
                    pos += n;
                    continue;
                }
                Ok(Step::Keep) => {
                    line.extend_from_slice(input);
                    break Ok(());
                }
                Ok(Step::Skip) => {
                    line.clear();
                    break Ok(());
                }
                Ok(Step::SkipLine { next }) => {
                    line.clear();
                    pos += next;
                    continue;
                }
                Ok(Step::Line { end, next }) => (end, next),
            };
            // The line's bytes: in the chunk, or (spanning) in `line`.
            let (bytes, base, in_chunk) = if line.is_empty() {
                (chunk, pos, true)
            } else {
                line.extend_from_slice(&input[..end]);
                (&line[..], 0, false)
            };
            let line_end = if in_chunk { pos + end } else { bytes.len() };
            let action = match machine.line(&bytes[base..line_end]) {
                Ok(action) => action,
                Err(err) => break Err(err),
            };
            match action {
                Action::None => {}
                Action::Data { start, first } => {
                    let value = (base + start, line_end);
                    if first && in_chunk {
                        pending = Some(value);
                    } else {
                        if let Some((s, e)) = pending.take() {
                            data.extend_from_slice(&chunk[s..e]);
                        }
                        if !first {
                            data.push(b'\n');
                        }
                        data.extend_from_slice(&bytes[value.0..value.1]);
                    }
                }
                Action::Comment { start } => {
                    on_item(SseItemRef::Comment(&bytes[base + start..line_end]));
                }
                Action::Dispatch => {
                    let event_data = match pending.take() {
                        Some((s, e)) => &chunk[s..e],
                        None => &data[..],
                    };
                    on_item(SseItemRef::Event(SseEventRef {
                        event: machine.event_type(),
                        data: event_data,
                        id: machine.last_id(),
                    }));
                    machine.dispatched();
                    data.clear();
                }
            }
            line.clear();
            pos += next;
        };
        if let Some((s, e)) = pending {
            data.extend_from_slice(&chunk[s..e]);
        }
        result
    }

    /// End of stream: discards the partial line and any undispatched event,
    /// as the spec requires, and returns whether there was one (a truncated
    /// stream). The observer can then go on with a new stream that keeps the
    /// last event ID.
    pub fn finish(&mut self) -> bool {
        self.line.clear();
        self.data.clear();
        self.machine.discard()
    }

    /// Whether a partial line or an undispatched event is pending.
    pub fn is_mid_event(&self) -> bool {
        self.machine.is_mid_event()
    }

    /// Bytes currently copied aside (partial line + pending data); never more
    /// than `max_line_len + max_data_len`.
    pub fn buffered(&self) -> usize {
        self.line.len() + self.data.len()
    }

    /// The last event ID; `None` when empty.
    pub fn last_event_id(&self) -> Option<&[u8]> {
        self.machine.last_id()
    }

    /// The last valid `retry` value (reconnection time), in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.machine.retry()
    }
}

impl Default for SseObserver {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::SseItem;

    fn observe(obs: &mut SseObserver, chunks: &[&[u8]]) -> Vec<SseItem> {
        let mut out = Vec::new();
        for chunk in chunks {
            obs.feed(chunk, |item| out.push(item.to_owned_item()))
                .unwrap();
        }
        out
    }

    fn data(items: &[SseItem]) -> Vec<&[u8]> {
        items
            .iter()
            .map(|item| match item {
                SseItem::Event(e) => &e.data[..],
                SseItem::Comment(c) => &c[..],
            })
            .collect()
    }

    #[test]
    fn event_in_one_chunk_borrows_the_chunk() {
        let chunk = b"data: hello\n\n";
        let mut obs = SseObserver::new();
        let mut seen = None;
        obs.feed(chunk, |item| {
            if let SseItemRef::Event(ev) = item {
                seen = Some(ev.data.as_ptr_range());
            }
        })
        .unwrap();
        assert_eq!(seen, Some(chunk[6..11].as_ptr_range()));
        assert_eq!(obs.buffered(), 0);
    }

    #[test]
    fn pending_data_is_copied_at_chunk_end() {
        let mut obs = SseObserver::new();
        let items = observe(&mut obs, &[b"data: a\n", b"data: b\n", b"\n"]);
        assert_eq!(data(&items), [&b"a\nb"[..]]);
        assert_eq!(obs.buffered(), 0);
    }

    #[test]
    fn line_spanning_chunks() {
        let mut obs = SseObserver::new();
        let items = observe(&mut obs, &[b"da", b"ta: x", b"y\r", b"\n\r\n"]);
        assert_eq!(data(&items), [&b"xy"[..]]);
    }

    #[test]
    fn ignored_lines_are_not_buffered() {
        let mut obs = SseObserver::new();
        assert!(observe(&mut obs, &[b": keep-alive padding"]).is_empty());
        assert_eq!(obs.buffered(), 0);
        assert!(observe(&mut obs, &[b" more\nfoo: bar"]).is_empty());
        assert_eq!(obs.buffered(), 0);
        let items = observe(&mut obs, &[b"\ndata:1\n\n"]);
        assert_eq!(data(&items), [&b"1"[..]]);
    }

    #[test]
    fn finish_reports_truncation() {
        let mut obs = SseObserver::new();
        assert!(observe(&mut obs, &[b"data: x\n"]).is_empty());
        assert!(obs.is_mid_event());
        assert!(obs.finish());
        assert!(!obs.finish());
        assert_eq!(obs.buffered(), 0);
    }

    #[test]
    fn error_is_sticky_and_buffers_stay_bounded() {
        let cfg = SseConfig::new().with_max_line_len(4);
        let mut obs = SseObserver::with_config(cfg);
        let err = obs.feed(b"data:", |_| {}).unwrap_err();
        assert_eq!(err, SseError::LineTooLong { limit: 4 });
        assert_eq!(obs.feed(b"\n", |_| {}).unwrap_err(), err);
        assert_eq!(obs.buffered(), 0);
    }
}
