//! Server-Sent Events (`text/event-stream`): an incremental parser with two
//! thin fronts over one core, and an encoder.
//!
//! # Contract
//! Parsing follows the WHATWG HTML "event stream interpretation" rules, at the
//! byte level:
//!
//! - Lines end in LF, CRLF or a lone CR. A CR that ends one input and an LF
//!   that starts the next are **one** line ending, so the line is finished as
//!   soon as the CR arrives (no waiting for the next byte).
//! - One leading UTF-8 BOM (`EF BB BF`) at the very start of the stream is
//!   dropped, even when it is split across inputs.
//! - `:` at the start of a line makes a comment. Comments are skipped unless
//!   [`SseConfig::comments`] is set, then they are reported (text after the
//!   colon, minus one optional leading space).
//! - `name:value` sets a field; one space after the colon is dropped. A line
//!   with no colon is a field with an empty value (`data` alone is an empty
//!   data line).
//! - `data` appends its value and a LF to the data buffer; `event` sets the
//!   event type; `id` sets the last event ID unless the value contains NUL;
//!   `retry` sets the reconnection time when the value is all ASCII digits
//!   (values that overflow `u64` are ignored). Every other field is ignored.
//! - A blank line dispatches the event, unless no `data` line was seen since
//!   the last dispatch: then the event type is reset and nothing is reported.
//!   The data is the data lines joined with `\n`; the last event ID persists
//!   across events until a later `id` field changes it.
//! - At end of stream a pending (not blank-line terminated) event is
//!   discarded, never dispatched.
//!
//! Names and values are byte strings: nothing is UTF-8 validated, so invalid
//! UTF-8 passes through untouched (the spec would replace it with U+FFFD).
//!
//! # Fronts
//! | type           | input                 | output                            | holds between calls                    |
//! |----------------|-----------------------|-----------------------------------|----------------------------------------|
//! | [`SseObserver`] | `&[u8]` chunks, by reference | [`SseItemRef`] borrowed from the chunk or its own buffers, via a callback | a partial line and the data of an event that spans chunks |
//! | [`SseDecoder`]  | `&mut BytesMut` (tokio-util `Decoder` shape) | owned [`SseItem`] / [`SseEvent`], data zero-copy for one-line events | an offset into the caller's buffer |
//!
//! Both drive the same private core, which owns every parsing decision (line
//! endings, BOM, field rules, limits); the fronts only decide where bytes
//! live. The observer exists for the relay: it forwards each chunk untouched
//! and lets the observer look at the same bytes on the side.
//!
//! # Cost
//! Line ends are found with `memchr2`. An event that lies inside one chunk is
//! reported without copying or allocating (its data borrows the chunk). Lines
//! of ignored fields (and comments when not observed) are not buffered, even
//! when they span chunks: as soon as a line's first bytes show it is ignored
//! (at most 5 bytes, while its name could still become `event` or `retry`),
//! its bytes are only counted. Buffers that are needed are reused, so a warm
//! observer does not allocate (`tests/sse_alloc.rs` counts).
//!
//! # Limits
//! | limit | default | meaning |
//! |-------|---------|---------|
//! | [`SseConfig::max_line_len`] | [`DEFAULT_MAX_LINE_LEN`] | bytes in one line, line ending excluded |
//! | [`SseConfig::max_data_len`] | [`DEFAULT_MAX_DATA_LEN`] | bytes of one event's data (lines joined with `\n`) |
//!
//! A line of exactly `max_line_len` bytes is accepted, one more is
//! [`SseError::LineTooLong`], reported as soon as that many bytes are seen
//! without a line ending. Data of exactly `max_data_len` bytes is accepted, one
//! more is [`SseError::DataTooLarge`]. Errors are sticky: every later call on
//! the same parser returns the same error. So, whatever the input, a parser
//! holds at most `max_line_len` bytes of partial line, `max_data_len` bytes of
//! data, and `max_line_len` bytes each of event type and last event ID.
//!
//! # Parser states
//! | state | entered on | left on |
//! |-------|------------|---------|
//! | stream start | new parser | first byte (a full BOM is dropped; a partial BOM makes the first line an ignored field) |
//! | line start | line ending | any byte |
//! | after CR | line ended by CR as the last input byte | next byte: an LF is dropped |
//! | in line (kept) | first bytes of a line that may matter | line ending → the line is interpreted |
//! | in line (skipped) | first bytes show an ignored field | line ending |
//! | failed | a limit broken | never |

mod decoder;
mod encoder;
mod machine;
mod observer;

use bytes::Bytes;

pub use decoder::SseDecoder;
pub use encoder::{encode_comment, encode_done, encode_event, encode_retry};
pub use observer::SseObserver;

/// Default [`SseConfig::max_line_len`]: 4 MiB.
///
/// Large because a whole response can arrive on one line: OpenAI's Responses
/// API ends with a `response.completed` event that repeats the full output,
/// and that is exactly the event usage extraction needs.
pub const DEFAULT_MAX_LINE_LEN: usize = 4 * 1024 * 1024;

/// Default [`SseConfig::max_data_len`]: 4 MiB (see [`DEFAULT_MAX_LINE_LEN`]).
pub const DEFAULT_MAX_DATA_LEN: usize = 4 * 1024 * 1024;

/// The data of the OpenAI end-of-stream sentinel event, `data: [DONE]`.
pub const DONE_DATA: &[u8] = b"[DONE]";

/// Errors of the Server-Sent Events codec.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line (line ending excluded) was longer than the configured limit.
    #[error("SSE line longer than {limit} bytes")]
    LineTooLong {
        /// The configured [`SseConfig::max_line_len`].
        limit: usize,
    },
    /// An event's data (lines joined with `\n`) was longer than the limit.
    #[error("SSE event data longer than {limit} bytes")]
    DataTooLarge {
        /// The configured [`SseConfig::max_data_len`].
        limit: usize,
    },
    /// The encoder was given a field it cannot write: an event type or id with
    /// CR or LF in it (it would end the line early), or an id with NUL (parsers
    /// ignore such ids).
    #[error("SSE `{field}` field cannot be encoded: it contains CR, LF or (id) NUL")]
    Unencodable {
        /// `"event"` or `"id"`.
        field: &'static str,
    },
}

/// Parser settings. Build with [`SseConfig::default`] and the `with_*`
/// methods, or set the public fields.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseConfig {
    /// Longest line accepted, in bytes, line ending excluded.
    pub max_line_len: usize,
    /// Longest event data accepted, in bytes, after joining lines with `\n`.
    pub max_data_len: usize,
    /// Report comment lines as [`SseItem::Comment`] / [`SseItemRef::Comment`].
    /// Off by default: comments are then skipped without being buffered.
    pub comments: bool,
}

impl SseConfig {
    /// The defaults: [`DEFAULT_MAX_LINE_LEN`], [`DEFAULT_MAX_DATA_LEN`], no
    /// comments.
    pub const fn new() -> Self {
        Self {
            max_line_len: DEFAULT_MAX_LINE_LEN,
            max_data_len: DEFAULT_MAX_DATA_LEN,
            comments: false,
        }
    }

    /// Sets [`SseConfig::max_line_len`].
    pub const fn with_max_line_len(mut self, max: usize) -> Self {
        self.max_line_len = max;
        self
    }

    /// Sets [`SseConfig::max_data_len`].
    pub const fn with_max_data_len(mut self, max: usize) -> Self {
        self.max_data_len = max;
        self
    }

    /// Sets [`SseConfig::comments`].
    pub const fn with_comments(mut self, on: bool) -> Self {
        self.comments = on;
        self
    }
}

impl Default for SseConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// An owned event: what [`SseDecoder`] returns and what [`encode_event`] writes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The event type; `None` when no (or an empty) `event` field was given,
    /// which a browser reports as `"message"`.
    pub event: Option<Bytes>,
    /// The data, lines joined with `\n`, no trailing newline.
    pub data: Bytes,
    /// The last event ID at dispatch; `None` when empty. When encoding,
    /// `Some` writes an `id` line (`Some("")` resets the ID) and `None` writes
    /// none.
    pub id: Option<Bytes>,
}

impl SseEvent {
    /// An event with `data` and no type or id.
    pub fn new(data: impl Into<Bytes>) -> Self {
        Self {
            event: None,
            data: data.into(),
            id: None,
        }
    }

    /// The OpenAI end-of-stream sentinel, `data: [DONE]`.
    pub fn done() -> Self {
        Self::new(Bytes::from_static(DONE_DATA))
    }

    /// Sets the event type.
    pub fn with_event(mut self, event: impl Into<Bytes>) -> Self {
        self.event = Some(event.into());
        self
    }

    /// Sets the id.
    pub fn with_id(mut self, id: impl Into<Bytes>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Whether this is the OpenAI `data: [DONE]` sentinel.
    pub fn is_done(&self) -> bool {
        self.data == DONE_DATA
    }

    /// This event as a borrowed view.
    pub fn as_event_ref(&self) -> SseEventRef<'_> {
        SseEventRef {
            event: self.event.as_deref(),
            data: &self.data,
            id: self.id.as_deref(),
        }
    }
}

/// A borrowed event, reported by [`SseObserver`]. Valid only inside the
/// callback: it points into the chunk being fed or into the observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEventRef<'a> {
    /// The event type; `None` for the default (`"message"`).
    pub event: Option<&'a [u8]>,
    /// The data, lines joined with `\n`, no trailing newline.
    pub data: &'a [u8],
    /// The last event ID at dispatch; `None` when empty.
    pub id: Option<&'a [u8]>,
}

impl SseEventRef<'_> {
    /// Whether this is the OpenAI `data: [DONE]` sentinel.
    pub fn is_done(&self) -> bool {
        self.data == DONE_DATA
    }

    /// Copies this event into an owned [`SseEvent`].
    pub fn to_owned_event(&self) -> SseEvent {
        SseEvent {
            event: self.event.map(Bytes::copy_from_slice),
            data: Bytes::copy_from_slice(self.data),
            id: self.id.map(Bytes::copy_from_slice),
        }
    }
}

/// What [`SseDecoder::decode_item`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// A dispatched event.
    Event(SseEvent),
    /// A comment line's text after the colon (one leading space dropped).
    /// Only reported when [`SseConfig::comments`] is set.
    Comment(Bytes),
}

/// What [`SseObserver::feed`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseItemRef<'a> {
    /// A dispatched event.
    Event(SseEventRef<'a>),
    /// A comment line's text after the colon (one leading space dropped).
    /// Only reported when [`SseConfig::comments`] is set.
    Comment(&'a [u8]),
}

impl SseItemRef<'_> {
    /// Copies this item into an owned [`SseItem`].
    pub fn to_owned_item(&self) -> SseItem {
        match self {
            Self::Event(e) => SseItem::Event(e.to_owned_event()),
            Self::Comment(c) => SseItem::Comment(Bytes::copy_from_slice(c)),
        }
    }
}
