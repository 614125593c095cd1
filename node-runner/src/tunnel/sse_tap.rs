//! [`SseTap`]: watches a relayed SSE body for usage (F18) and, when asked,
//! cuts the provider's usage-only event out of it — by slicing, never by
//! copying.
//!
//! A small boundary scanner here looks at every byte of the provider's
//! stream and finds where each event ends (the blank line that dispatches
//! it). An event that lies whole in one chunk, has one data line, and does
//! not show a non-null `"usage":` in its bytes is not shown to the observer
//! at all: its data (that line's value) could not report usage either
//! (`usage::observe` reads only events that do), and the observer's parse
//! (its own scan, and a copy of the event's data) was most of what the tap
//! cost a token stream. An event that spans chunks is kept aside as slices
//! until its end ([`Unobserved`], up to [`MAX_UNOBSERVED`] bytes) and skips
//! the observer too when its bytes never show the quoted key `"usage"`.
//! Every other event is fed to framing's [`SseObserver`] (data lines,
//! comments, CR/LF rules), one event at a time, so when the observer
//! dispatches an event, its byte range in the stream is known.
//!
//! # Stripping
//! With `strip`, an event whose data is a JSON object with a `usage` object
//! and empty (or no) `choices` is dropped from the output, blank line
//! included, and reported as a usage observation instead. Everything else is
//! relayed as the provider sent it. An event that lies in one chunk is cut
//! out by slicing the chunk around it. An event that spans chunks must be
//! seen whole before it can be judged, so the part of an unfinished event at
//! the end of a chunk is **held back** (kept as slices, not copied) until its
//! end arrives, then relayed or dropped — unless its bytes already show a
//! non-empty `choices` array (`"choices":[{`, the case of every token event
//! once past its first hundred bytes or so), which rules it out: then it is
//! relayed at once. The bound: at most [`MAX_HELD_EVENT`] bytes per stream.
//! An unfinished event longer than that is relayed as it comes and never
//! stripped (a usage-only event is a few hundred bytes). Without `strip`
//! nothing is held: every byte is relayed the moment it is read.
//!
//! Holding a slice (held back, or kept aside unobserved) keeps the HTTP
//! client's receive buffer referenced, so the client's next read goes to a
//! fresh buffer instead of reusing it: an allocation, never a copy. Both end
//! with the event, and a token stream's events rarely span reads
//! (`perf/tests/tunnel.rs` counts allocations).
//!
//! # Limits
//! The observer keeps at most [`OBSERVER_LIMIT`] bytes of a line and of an
//! event's data. A provider that breaks either stops the observation (no more
//! usage, no more stripping); the relay goes on unchanged.

use std::sync::LazyLock;

use bytes::Bytes;
use framing::sse::{SseConfig, SseItemRef, SseObserver};
use proto::v1::Usage;

use super::quoted_key::QuotedKey;
use super::usage::{Observed, USAGE_KEY, mentions_usage, observe, usage_key, values_of};

/// Most bytes of an unfinished event held back while stripping.
pub const MAX_HELD_EVENT: usize = 64 * 1024;

/// The observer's line and data limits, per tunnel.
pub const OBSERVER_LIMIT: usize = 1024 * 1024;

/// What the tap reports besides the bytes to relay.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Usage of the usage-only events completed by the last feed, in order
    /// (each becomes a `usage` frame).
    pub(crate) usage_events: Vec<Usage>,
}

/// The usage observer and stripper of one SSE body; see the module docs.
#[derive(Debug)]
pub(crate) struct SseTap {
    observer: SseObserver,
    strip: bool,
    /// No byte in the current line yet (stream start counts as a line start).
    line_empty: bool,
    /// The last chunk ended with a CR line ending: an LF that starts the
    /// next chunk belongs to it.
    after_cr: bool,
    /// That CR ended an event that was cut: cut the LF too.
    cut_lf: bool,
    /// Held-back parts of the unfinished event (strip mode).
    held: Vec<Bytes>,
    held_len: usize,
    /// The unfinished event is relayed as it comes: it outgrew
    /// [`MAX_HELD_EVENT`] or is known not to be usage-only.
    passthrough: bool,
    /// The unfinished event began in an earlier chunk.
    event_open: bool,
    /// The observer holds part of an event (or a CR whose LF may follow):
    /// the next bytes must be shown to it.
    observer_open: bool,
    /// The start of the unfinished event, not yet shown to the observer;
    /// see [`Unobserved`]. Only while the observer is between events.
    unobserved: Unobserved,
    /// The observer failed: relay everything unchanged from now on.
    failed: bool,
    /// The last usage any event reported.
    last: Option<Usage>,
}

impl SseTap {
    /// A tap; `strip` cuts usage-only events out of the output.
    pub(crate) fn new(strip: bool) -> Self {
        let config = SseConfig::new()
            .with_max_line_len(OBSERVER_LIMIT)
            .with_max_data_len(OBSERVER_LIMIT);
        Self {
            observer: SseObserver::with_config(config),
            strip,
            line_empty: true,
            after_cr: false,
            cut_lf: false,
            held: Vec::new(),
            held_len: 0,
            passthrough: false,
            event_open: false,
            observer_open: false,
            unobserved: Unobserved::default(),
            failed: false,
            last: None,
        }
    }

    /// The last usage seen (for the `end` frame).
    pub(crate) fn last_usage(&self) -> Option<Usage> {
        self.last
    }

    /// Bytes currently held back.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held_len
    }

    /// Bytes the observer has copied aside.
    #[cfg(test)]
    pub(crate) fn observer_buffered(&self) -> usize {
        self.observer.buffered()
    }

    /// Bytes of the unfinished event kept aside, not yet observed.
    #[cfg(test)]
    pub(crate) fn unobserved(&self) -> usize {
        self.unobserved.len
    }

    /// Takes the next chunk of the stream: pushes what to relay now onto
    /// `out` (slices of `chunk` and of earlier held chunks, in stream order)
    /// and records usage in `seen`.
    pub(crate) fn feed(&mut self, chunk: Bytes, out: &mut Vec<Bytes>, seen: &mut Seen) {
        // An empty chunk changes nothing (and must not drop a pending CR).
        if chunk.is_empty() {
            return;
        }
        if self.failed {
            push(out, chunk);
            return;
        }
        let len = chunk.len();
        let mut pos = 0;
        // Start of the chunk bytes not yet relayed or dropped.
        let mut emit_from = 0;
        // Start of the bytes not yet shown to the observer.
        let mut fed = 0;
        if std::mem::take(&mut self.after_cr) && chunk.first() == Some(&b'\n') {
            pos = 1;
            if self.cut_lf {
                emit_from = 1;
            }
        }
        self.cut_lf = false;
        // Where the unfinished event starts in this chunk; `None` when it
        // began in an earlier one.
        let mut event_start = (!self.event_open).then_some(pos);
        // Data lines of the event being scanned (counted only for an event
        // that lies whole in this chunk).
        let mut data_lines = 0;
        while pos < len {
            let line_start = pos;
            let Some(i) = memchr::memchr2(b'\n', b'\r', &chunk[pos..]) else {
                self.line_empty = false;
                break;
            };
            if i > 0 {
                self.line_empty = false;
            }
            let at = pos + i;
            pos = at + 1;
            if chunk[at] == b'\r' {
                if pos == len {
                    self.after_cr = true;
                } else if chunk[pos] == b'\n' {
                    pos += 1;
                }
            }
            if !std::mem::replace(&mut self.line_empty, true) {
                data_lines += usize::from(chunk[line_start..at].starts_with(b"data"));
                continue;
            }
            // A blank line: an event ends at `pos`. One that lies whole in
            // this chunk and cannot carry usage skips the observer, and so
            // does one begun in an earlier chunk whose bytes never show the
            // key. (An event whose blank line ends in a CR at the end of the
            // chunk goes to the observer: it must see the LF that may follow.)
            let event = &chunk[fed..pos];
            let whole = !self.observer_open && !self.after_cr && data_lines <= 1;
            data_lines = 0;
            let skip = if self.unobserved.is_empty() {
                whole && !mentions_usage(event)
            } else {
                self.unobserved.note(event);
                !self.after_cr && !self.unobserved.shows_key
            };
            let observed = if skip {
                self.unobserved.clear();
                None
            } else {
                let Some(observed) = self.show_unobserved().and_then(|()| self.observe(event))
                else {
                    return self.give_up(chunk, emit_from, out);
                };
                observed
            };
            self.observer_open = false;
            fed = pos;
            let usage_only = observed.as_ref().is_some_and(|o| o.usage_only);
            if let Some(o) = observed {
                self.last = Some(o.usage);
                if o.usage_only {
                    seen.usage_events.push(o.usage);
                }
            }
            if self.strip && usage_only && !self.passthrough {
                self.held.clear();
                self.held_len = 0;
                if let Some(start) = event_start {
                    push(out, chunk.slice(emit_from..start));
                }
                emit_from = pos;
                self.cut_lf = self.after_cr;
            } else {
                self.flush(out);
            }
            self.passthrough = false;
            event_start = Some(pos);
        }
        // The unfinished event's bytes in this chunk: kept aside while the
        // observer is between events and the event's start is large
        // (showing them would copy them), else shown to it.
        let rest = &chunk[fed..];
        if self.observer_open
            || self.after_cr
            || (self.unobserved.is_empty() && rest.len() < MIN_UNOBSERVED)
            || self.unobserved.len + rest.len() > MAX_UNOBSERVED
        {
            let shown = self.show_unobserved().and_then(|()| self.observe(rest));
            if shown.is_none() {
                return self.give_up(chunk, emit_from, out);
            }
            self.observer_open |= fed < len || self.after_cr;
        } else if !rest.is_empty() {
            self.unobserved.push(chunk.slice(fed..));
        }
        // The tail: the unfinished event's bytes in this chunk (from
        // `emit_from` when it began in an earlier chunk).
        let tail_start = event_start.unwrap_or(emit_from);
        self.event_open = event_start.is_none_or(|start| start < len);
        if !self.strip || self.passthrough {
            push(out, chunk.slice(emit_from..));
            return;
        }
        push(out, chunk.slice(emit_from..tail_start));
        let tail = chunk.slice(tail_start..);
        if tail.is_empty() {
            return;
        }
        if self.held_len + tail.len() > MAX_HELD_EVENT || has_choices(&tail) {
            self.flush(out);
            push(out, tail);
            self.passthrough = true;
        } else {
            self.held_len += tail.len();
            self.held.push(tail);
        }
    }

    /// End of the body: relays what is held (an unfinished event is the
    /// provider's bytes too) and ends the observation.
    pub(crate) fn finish(&mut self, out: &mut Vec<Bytes>) {
        self.flush(out);
        self.unobserved.clear();
        self.observer.finish();
    }

    /// Shows `bytes` to the observer; `None` when it failed, else the usage
    /// of the event it dispatched, if any.
    #[allow(clippy::option_option)]
    fn observe(&mut self, bytes: &[u8]) -> Option<Option<Observed>> {
        let mut observed = None;
        let result = self.observer.feed(bytes, |item| {
            if let SseItemRef::Event(event) = item
                && !event.is_done()
                && let Some(o) = observe(event.data)
            {
                observed = Some(o);
            }
        });
        result.ok().map(|()| observed)
    }

    /// Shows the unfinished event's bytes kept aside to the observer, which
    /// is then inside that event; `None` when it failed. (They end no event:
    /// the scan found no blank line in them.)
    fn show_unobserved(&mut self) -> Option<()> {
        if self.unobserved.is_empty() {
            return Some(());
        }
        let parts = std::mem::take(&mut self.unobserved.parts);
        self.unobserved.clear();
        self.observer_open = true;
        parts
            .iter()
            .try_for_each(|part| self.observe(part).map(drop))
    }

    /// The observer failed: relay the rest of this chunk and everything
    /// after it unchanged.
    fn give_up(&mut self, chunk: Bytes, emit_from: usize, out: &mut Vec<Bytes>) {
        self.failed = true;
        self.unobserved.clear();
        self.flush(out);
        push(out, chunk.slice(emit_from..));
    }

    fn flush(&mut self, out: &mut Vec<Bytes>) {
        self.held_len = 0;
        for part in self.held.drain(..) {
            push(out, part);
        }
    }
}

/// The start of an unfinished event, kept as slices of the chunks it came in
/// (refcounted, not copied) instead of being shown to the observer, which
/// would copy it into its line and data buffers: a 64 KiB event that spans
/// two reads was copied twice, ~6 % of the Node's CPU relaying large events.
/// At the event's end it goes to the observer only if its bytes show the
/// quoted key `"usage"` anywhere (a looser test than [`mentions_usage`], so
/// it never skips an event the observer would have found usage in).
///
/// Only an event whose start in its first chunk is at least
/// [`MIN_UNOBSERVED`] bytes is kept aside: a slice pins the whole receive
/// buffer it is cut from until the event ends (the next read then takes a
/// fresh one), which costs more than the observer's copy of a short start
/// into buffers it reuses (`perf/tests/tunnel_flow.rs` counts the bytes
/// allocated). The bound: [`MAX_UNOBSERVED`] bytes; a longer unfinished
/// event is shown to the observer as before.
#[derive(Debug, Default)]
struct Unobserved {
    parts: Vec<Bytes>,
    len: usize,
    /// The last bytes noted (at most the key's length − 1): a key may
    /// straddle two parts, or more when they are short.
    tail: [u8; USAGE_KEY.len() - 1],
    tail_len: usize,
    /// The bytes noted so far contain `"usage"`.
    shows_key: bool,
}

/// The shortest start of an event kept aside, unobserved.
pub(crate) const MIN_UNOBSERVED: usize = 16 * 1024;

/// Most bytes of an unfinished event kept aside, unobserved.
pub(crate) const MAX_UNOBSERVED: usize = 256 * 1024;

impl Unobserved {
    fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    fn push(&mut self, part: Bytes) {
        self.note(&part);
        self.len += part.len();
        self.parts.push(part);
    }

    /// Looks for the key in `bytes` and across the seam with what came
    /// before.
    fn note(&mut self, bytes: &[u8]) {
        if self.shows_key || bytes.is_empty() {
            return;
        }
        let mut seam = [0u8; 2 * (USAGE_KEY.len() - 1)];
        let head = bytes.len().min(USAGE_KEY.len() - 1);
        seam[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        seam[self.tail_len..self.tail_len + head].copy_from_slice(&bytes[..head]);
        let seam = &seam[..self.tail_len + head];
        self.shows_key = seam.windows(USAGE_KEY.len()).any(|w| w == USAGE_KEY)
            || usage_key().find(bytes).is_some();
        // The new tail: the last bytes of the seam and `bytes` together.
        let keep = self.tail.len();
        if bytes.len() >= keep {
            self.tail.copy_from_slice(&bytes[bytes.len() - keep..]);
            self.tail_len = keep;
        } else {
            let from = seam.len().saturating_sub(keep);
            self.tail_len = seam.len() - from;
            self.tail[..self.tail_len].copy_from_slice(&seam[from..]);
        }
    }

    fn clear(&mut self) {
        self.parts.clear();
        self.len = 0;
        self.tail_len = 0;
        self.shows_key = false;
    }
}

/// Whether `bytes` show a non-empty `choices` array (`"choices": [` then
/// anything but `]`): such an event is not the usage-only one, so it need
/// not be held.
fn has_choices(bytes: &[u8]) -> bool {
    static KEY: LazyLock<QuotedKey> = LazyLock::new(|| QuotedKey::new(b"\"choices\""));
    values_of(bytes, &KEY).any(|value| {
        value
            .strip_prefix(b"[")
            .and_then(|items| items.trim_ascii_start().first())
            .is_some_and(|&b| b != b']')
    })
}

fn push(out: &mut Vec<Bytes>, bytes: Bytes) {
    if !bytes.is_empty() {
        out.push(bytes);
    }
}

#[cfg(test)]
mod choices_tests {
    use super::has_choices;

    #[test]
    fn only_a_non_empty_choices_array_counts() {
        for (bytes, expected) in [
            (&br#"{"id":"x","choices":[{"index":0"#[..], true),
            (br#"{"choices" : [ {"#, true),
            (br#"{"choices":[],"usage":{"#, false),
            (br#"{"choices": [ ] ,"#, false),
            (br#"{"choices":null,"choices":[{"#, true),
            (br#"{"delta":{"content":"\"choices\":[1]"}"#, false),
            (br#"{"choices""#, false),
            (br#"{"choices":"#, false),
        ] {
            assert_eq!(
                has_choices(bytes),
                expected,
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
