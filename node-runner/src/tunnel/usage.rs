//! OpenAI usage objects (F18): what a tunnel reads from the provider's bytes
//! on the side, never changing what it relays.

use bytes::Bytes;
use proto::v1::Usage;
use serde_json::Value;

/// Largest non-streaming JSON body scanned for usage: a larger body is still
/// relayed, unchanged, but its usage is not extracted.
pub const MAX_JSON_USAGE_BODY: usize = 4 * 1024 * 1024;

/// What one JSON document (an SSE event's data or a whole body) says about
/// usage.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Observed {
    /// The counts of its top-level `usage` object.
    pub(crate) usage: Usage,
    /// Whether it is the usage-only chunk of a stream: `choices` is an empty
    /// array (or absent) next to the `usage` object — the chunk
    /// `stream_options.include_usage` adds at the end.
    pub(crate) usage_only: bool,
}

/// The usage of `json`, when it is an object with a top-level `usage`
/// object. A cheap substring check skips the parse for the many events that
/// carry none (every token event of a stream).
pub(crate) fn observe(json: &[u8]) -> Option<Observed> {
    if !mentions_usage(json) {
        return None;
    }
    let value: Value = serde_json::from_slice(json).ok()?;
    let usage = value.get("usage").filter(|u| u.is_object())?;
    let usage_only = match value.get("choices") {
        None => true,
        Some(Value::Array(choices)) => choices.is_empty(),
        Some(_) => false,
    };
    Some(Observed {
        usage: usage_of(usage),
        usage_only,
    })
}

/// Whether `json` contains `"usage"` followed (after optional whitespace) by
/// `:` and something other than `null`.
fn mentions_usage(json: &[u8]) -> bool {
    const KEY: &[u8] = b"\"usage\"";
    let mut rest = json;
    while let Some(at) = find(rest, KEY) {
        rest = &rest[at + KEY.len()..];
        let after = rest.trim_ascii_start();
        if let Some(value) = after.strip_prefix(b":") {
            if !value.trim_ascii_start().starts_with(b"null") {
                return true;
            }
        }
    }
    false
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    // memmem, not a byte-by-byte window compare: this runs over every
    // relayed event (64 KiB ones too).
    memchr::memmem::find(haystack, needle)
}

/// The counts of an OpenAI `usage` object. Reasoning and cached counts are
/// set only when the provider reported them (nothing is estimated).
pub(crate) fn usage_of(usage: &Value) -> Usage {
    let count = |v: Option<&Value>| v.and_then(Value::as_u64);
    Usage {
        input_tokens: count(usage.get("prompt_tokens")).unwrap_or(0),
        output_tokens: count(usage.get("completion_tokens")).unwrap_or(0),
        reasoning_tokens: count(usage.pointer("/completion_tokens_details/reasoning_tokens")),
        cached_input_tokens: count(usage.pointer("/prompt_tokens_details/cached_tokens")),
    }
}

/// The body of a non-streaming response, kept aside (refcounted slices of
/// what was relayed, no copy) up to [`MAX_JSON_USAGE_BODY`], for its usage
/// at the end.
#[derive(Debug, Default)]
pub(crate) struct JsonTap {
    parts: Vec<Bytes>,
    len: usize,
    over: bool,
}

impl JsonTap {
    /// Keeps `chunk` (a clone of the relayed slice).
    pub(crate) fn feed(&mut self, chunk: &Bytes) {
        if self.over {
            return;
        }
        self.len += chunk.len();
        if self.len > MAX_JSON_USAGE_BODY {
            self.over = true;
            self.parts = Vec::new();
        } else {
            self.parts.push(chunk.clone());
        }
    }

    /// The usage of the whole body, if it is a JSON object with one. The
    /// parts are joined (one copy, off the relay path) only when there are
    /// several.
    pub(crate) fn finish(&mut self) -> Option<Usage> {
        let parts = std::mem::take(&mut self.parts);
        if self.over {
            return None;
        }
        let observed = match parts.as_slice() {
            [one] => observe(one),
            parts => observe(&parts.concat()),
        };
        observed.map(|o| o.usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_only_chunk_and_breakdown() {
        let o = observe(
            br#"{"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,
            "completion_tokens_details":{"reasoning_tokens":2},
            "prompt_tokens_details":{"cached_tokens":1}}}"#,
        )
        .unwrap();
        assert!(o.usage_only);
        assert_eq!(
            o.usage,
            Usage {
                input_tokens: 3,
                output_tokens: 5,
                reasoning_tokens: Some(2),
                cached_input_tokens: Some(1),
            }
        );
        let o = observe(br#"{"choices":[{"delta":{}}],"usage":{"prompt_tokens":1}}"#).unwrap();
        assert!(!o.usage_only);
        assert_eq!(o.usage.reasoning_tokens, None);
        assert_eq!(o.usage.cached_input_tokens, None);
    }

    #[test]
    fn events_without_usage_are_not_parsed() {
        assert!(!mentions_usage(
            br#"{"choices":[{"delta":{"content":"usage"}}]}"#
        ));
        assert!(!mentions_usage(br#"{"choices":[],"usage" : null}"#));
        assert!(mentions_usage(br#"{"usage" :{"prompt_tokens":1}}"#));
        assert_eq!(observe(br#"{"choices":[],"usage":null}"#), None);
        assert_eq!(observe(b"not json \"usage\": 1"), None);
        assert_eq!(observe(br#"{"usage":7}"#), None);
    }

    #[test]
    fn json_tap_joins_parts_and_gives_up_over_the_cap() {
        let mut tap = JsonTap::default();
        for part in [&br#"{"usage":{"prompt_"#[..], br#"tokens":4}}"#] {
            tap.feed(&Bytes::copy_from_slice(part));
        }
        assert_eq!(tap.finish().unwrap().input_tokens, 4);
        let mut tap = JsonTap::default();
        tap.feed(&Bytes::from(vec![b' '; MAX_JSON_USAGE_BODY]));
        tap.feed(&Bytes::from_static(br#"{"usage":{"prompt_tokens":4}}"#));
        assert_eq!(tap.finish(), None);
    }
}
