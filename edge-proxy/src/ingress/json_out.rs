//! JSON text of an answer's fixed shapes, written straight into the
//! event buffer: keys and constants as they are, only the strings that
//! vary (a text, an id, a model's name) escaped, by `json_escape_simd`.
//!
//! The shapes had been serde-derived structs. serde_json escapes every
//! key and every string value with its byte-wise scan, ~140 instructions
//! a string; a streamed Responses answer wrote ~110 of them (its closing
//! events carry the text four times). Written here, the Edge's
//! instructions for that whole request fell by a fifth
//! (`bench-results/instructions-responses.md`). The bytes are those of
//! the `json!` forms the structs had replaced (`sse_tests` holds every
//! shape to them). A delta's chunk, the per-event path, was already
//! written in place (`sse.rs`); through this writer it cost ~110
//! instructions more an event, so it stays as it is.

use json_escape_simd::escape_into;

/// A JSON writer over an event buffer.
pub(crate) struct JsonOut<'a>(pub(crate) &'a mut Vec<u8>);

impl JsonOut<'_> {
    /// JSON text as it is: punctuation, keys, constants.
    #[inline]
    pub(crate) fn raw(&mut self, text: &str) -> &mut Self {
        self.0.extend_from_slice(text.as_bytes());
        self
    }

    /// A string, quoted and escaped.
    #[inline]
    pub(crate) fn str(&mut self, text: &str) -> &mut Self {
        escape_into(text, self.0);
        self
    }

    /// A count.
    #[inline]
    pub(crate) fn num(&mut self, count: u64) -> &mut Self {
        self.0
            .extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
        self
    }
}

/// One SSE event, named when `name` is, whose data `write` writes.
pub(crate) fn sse_event(
    bytes: &mut Vec<u8>,
    name: Option<&str>,
    write: impl FnOnce(&mut JsonOut<'_>),
) {
    if let Some(name) = name {
        bytes.extend_from_slice(b"event: ");
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(b"data: ");
    write(&mut JsonOut(bytes));
    bytes.extend_from_slice(b"\n\n");
}
