//! OpenAI usage objects (F18): what a tunnel reads from the provider's bytes
//! on the side, never changing what it relays.

use std::fmt;
use std::sync::LazyLock;

use bytes::Bytes;
use proto::v1::Usage;
use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::quoted_key::QuotedKey;
use super::usage_quick;

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
///
/// A compact document is read by [`usage_quick::read`] in one pass; any
/// other (or one it declines) by serde, typed: only `usage` and the shape of
/// `choices` are kept, everything else is skipped without building a value
/// (a whole `serde_json::Value` tree of a response body was ~6 % of the
/// Node's CPU on small non-streaming requests; the typed parse was still
/// ~7,500 instructions of a small chat's ~55,000 on the Node). A count that
/// is not an unsigned integer reads as absent.
pub(crate) fn observe(json: &[u8]) -> Option<Observed> {
    if !mentions_usage(json) {
        return None;
    }
    // Checked as UTF-8 once and read as a `str`: read as bytes, serde_json
    // checks each string on its own.
    let json = simdutf8::basic::from_utf8(json).ok()?;
    usage_quick::read(json).unwrap_or_else(|| observe_with_serde(json))
}

/// The counts of a `usage` object, as either reader finds them.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Counts {
    pub(super) prompt: Option<u64>,
    pub(super) completion: Option<u64>,
    pub(super) reasoning: Option<u64>,
    pub(super) cached: Option<u64>,
}

impl Counts {
    /// What a document with these counts says: `choices_non_empty` is
    /// whether its `choices` holds anything.
    pub(super) fn observed(self, choices_non_empty: bool) -> Observed {
        Observed {
            usage: Usage {
                input_tokens: self.prompt.unwrap_or(0),
                output_tokens: self.completion.unwrap_or(0),
                reasoning_tokens: self.reasoning,
                cached_input_tokens: self.cached,
            },
            usage_only: !choices_non_empty,
        }
    }
}

/// [`observe`]'s reading through serde, for any document.
pub(super) fn observe_with_serde(json: &str) -> Option<Observed> {
    let doc: UsageDoc = serde_json::from_str(json).ok()?;
    let usage = doc.usage?;
    let counts = Counts {
        prompt: usage.prompt_tokens.0,
        completion: usage.completion_tokens.0,
        reasoning: usage
            .completion_tokens_details
            .and_then(|d| d.reasoning_tokens.0),
        cached: usage.prompt_tokens_details.and_then(|d| d.cached_tokens.0),
    };
    Some(counts.observed(doc.choices.is_some_and(|c| c.non_empty)))
}

/// The top level of an OpenAI response or chunk, as far as usage goes.
#[derive(Deserialize)]
struct UsageDoc {
    /// `null` and absent are the same: no usage.
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    choices: Option<ChoicesShape>,
}

/// An OpenAI `usage` object; unknown fields are skipped.
#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Count,
    #[serde(default)]
    completion_tokens: Count,
    #[serde(default)]
    completion_tokens_details: Option<ReasoningDetails>,
    #[serde(default)]
    prompt_tokens_details: Option<CachedDetails>,
}

#[derive(Deserialize)]
struct ReasoningDetails {
    #[serde(default)]
    reasoning_tokens: Count,
}

#[derive(Deserialize)]
struct CachedDetails {
    #[serde(default)]
    cached_tokens: Count,
}

/// A token count: an unsigned integer, or absent for any other JSON value
/// (which is skipped, never an error).
#[derive(Default)]
struct Count(Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        d.deserialize_any(CountVisitor).map(Count)
    }
}

/// Whether `choices` holds anything: an empty array is "no choices"; any
/// other value (a non-empty array or something odd) is not.
struct ChoicesShape {
    non_empty: bool,
}

impl<'de> Deserialize<'de> for ChoicesShape {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<ChoicesShape, D::Error> {
        struct Shape;
        impl<'de> Visitor<'de> for Shape {
            type Value = ChoicesShape;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ChoicesShape, A::Error> {
                let mut non_empty = false;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    non_empty = true;
                }
                Ok(ChoicesShape { non_empty })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ChoicesShape, A::Error> {
                IgnoredAny.visit_map(map)?;
                Ok(ChoicesShape { non_empty: true })
            }
            fn visit_bool<E>(self, _: bool) -> Result<ChoicesShape, E> {
                Ok(ChoicesShape { non_empty: true })
            }
            fn visit_i64<E>(self, _: i64) -> Result<ChoicesShape, E> {
                Ok(ChoicesShape { non_empty: true })
            }
            fn visit_u64<E>(self, _: u64) -> Result<ChoicesShape, E> {
                Ok(ChoicesShape { non_empty: true })
            }
            fn visit_f64<E>(self, _: f64) -> Result<ChoicesShape, E> {
                Ok(ChoicesShape { non_empty: true })
            }
            fn visit_str<E>(self, _: &str) -> Result<ChoicesShape, E> {
                Ok(ChoicesShape { non_empty: true })
            }
            fn visit_unit<E>(self) -> Result<ChoicesShape, E> {
                // `"choices": null` is treated like an absent key.
                Ok(ChoicesShape { non_empty: false })
            }
        }
        d.deserialize_any(Shape)
    }
}

/// Reads any JSON value: an unsigned integer gives `Some(n)`, anything else
/// is skipped and gives `None`.
struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E>(self, n: u64) -> Result<Option<u64>, E> {
        Ok(Some(n))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Option<u64>, E> {
        Ok(u64::try_from(n).ok())
    }
    fn visit_f64<E>(self, _: f64) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<u64>, A::Error> {
        IgnoredAny.visit_seq(seq)?;
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<u64>, A::Error> {
        IgnoredAny.visit_map(map)?;
        Ok(None)
    }
}

/// Whether `json` contains `"usage"` followed (after optional whitespace) by
/// `:` and something other than `null`.
pub(super) fn mentions_usage(json: &[u8]) -> bool {
    values_of(json, usage_key()).any(|value| !value.starts_with(b"null"))
}

/// The quoted key `"usage"`.
pub(super) const USAGE_KEY: &[u8; 7] = b"\"usage\"";

/// The finder of [`USAGE_KEY`], built once.
pub(super) fn usage_key() -> &'static QuotedKey {
    static KEY: LazyLock<QuotedKey> = LazyLock::new(|| QuotedKey::new(USAGE_KEY));
    &KEY
}

/// The bytes after each `key` (a finder of a quoted member name) that is
/// followed, after optional whitespace, by `:`: the rest of `json` from
/// the value on, leading whitespace skipped. A raw quoted name cannot occur
/// inside a JSON string (its quotes would be escaped), only as a key.
///
/// This runs over every relayed event (64 KiB ones too): see
/// [`QuotedKey`] for how it searches.
pub(super) fn values_of<'a>(
    json: &'a [u8],
    key: &'a QuotedKey,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = json;
    std::iter::from_fn(move || {
        while let Some(at) = key.find(rest) {
            rest = &rest[at + key.needle().len()..];
            if let Some(value) = rest.trim_ascii_start().strip_prefix(b":") {
                return Some(value.trim_ascii_start());
            }
        }
        None
    })
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
    fn odd_counts_read_as_absent_and_odd_choices_as_present() {
        let o = observe(
            br#"{"usage":{"prompt_tokens":"3","completion_tokens":2.5,
            "completion_tokens_details":{"reasoning_tokens":-1},
            "prompt_tokens_details":null,"extra":{"a":[1,2]}},"choices":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(
            o.usage,
            Usage {
                input_tokens: 0,
                output_tokens: 0,
                reasoning_tokens: None,
                cached_input_tokens: None,
            }
        );
        assert!(!o.usage_only);
        let o =
            observe(br#"{"choices":null,"usage":{"prompt_tokens":9},"x":[{"y":null}]}"#).unwrap();
        assert!(o.usage_only);
        assert_eq!(o.usage.input_tokens, 9);
        let o = observe(
            br#"{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":4}}"#,
        )
        .unwrap();
        assert!(!o.usage_only);
        assert_eq!(o.usage.output_tokens, 4);
        // Not an object at the top: no usage.
        assert_eq!(observe(br#"["usage", {"usage":{}}]"#), None);
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
