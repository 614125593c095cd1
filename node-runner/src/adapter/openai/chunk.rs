//! One `chat.completion.chunk`, read straight from its bytes into the few
//! fields the adapter uses — no `serde_json::Value` tree per chunk.
//!
//! Every SSE event of a run goes through here, so the parse is the Node's
//! hot path on the normalized route: token text is borrowed from the event
//! (owned only when it has JSON escapes), unknown fields are skipped
//! without building anything, and `choices` past the first are skipped.
//!
//! It reads exactly what a `Value` walk read before: a field of an
//! unexpected type counts as absent (`content: 5`, `delta: null`,
//! `choices: {}`), numbers are counts only when they are non-negative
//! integers, the last of duplicate keys wins, and `error` counts when the
//! key is present with any value.

use std::borrow::Cow;
use std::fmt;

use proto::v1::Usage;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::adapter::lenient::{
    Count, FromMap, JsonObject, Lenient, Text, ignore_others, read_text,
};

/// A parsed event body: an object (the chunk), or some other JSON value.
pub(super) type ChunkJson<'a> = JsonObject<Chunk<'a>>;

/// The fields of a `chat.completion.chunk` the adapter reads.
#[derive(Debug, Default)]
pub(super) struct Chunk<'a> {
    /// `error`: present (with any value) on a mid-stream error.
    pub(super) error: Option<ErrorJson<'a>>,
    /// `choices[0]`, when `choices` is an array with an object first.
    pub(super) choice: Option<Choice<'a>>,
    /// `usage`, when an object.
    pub(super) usage: Option<UsageJson>,
}

/// `error`'s `type`, when `error` is an object with a string `type`.
#[derive(Debug, Default)]
pub(super) struct ErrorJson<'a> {
    /// `error.type`.
    pub(super) kind: Option<Cow<'a, str>>,
}

/// `choices[0]`.
#[derive(Debug, Default)]
pub(super) struct Choice<'a> {
    /// `delta.reasoning_content`.
    pub(super) reasoning_content: Option<Cow<'a, str>>,
    /// `delta.reasoning`.
    pub(super) reasoning: Option<Cow<'a, str>>,
    /// `delta.content`.
    pub(super) content: Option<Cow<'a, str>>,
    /// `finish_reason`, when a string.
    pub(super) finish_reason: Option<Cow<'a, str>>,
}

/// An OpenAI `usage` object.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct UsageJson {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    cached_tokens: Option<u64>,
}

impl From<UsageJson> for Usage {
    fn from(usage: UsageJson) -> Self {
        Usage {
            input_tokens: usage.prompt_tokens.unwrap_or(0),
            output_tokens: usage.completion_tokens.unwrap_or(0),
            reasoning_tokens: usage.reasoning_tokens,
            cached_input_tokens: usage.cached_tokens,
        }
    }
}

impl<'a> ChunkJson<'a> {
    /// Parses one event's data.
    pub(super) fn parse(data: &'a str) -> serde_json::Result<Self> {
        serde_json::from_str(data)
    }
}

/// Reads `usage` from any deserializer (a `Value` too); `None` unless it
/// is an object.
#[cfg(test)]
pub(super) fn usage_from<'de, D: Deserializer<'de>>(
    value: D,
) -> Result<Option<UsageJson>, D::Error> {
    Ok(Lenient::<UsageJson>::deserialize(value)?.0)
}

/// `choices[0]` as an object, or `None` (not an array, empty, or a first
/// element that is not an object); later elements are skipped.
#[derive(Default)]
struct FirstChoice<'de>(Option<Choice<'de>>);

impl<'de> Deserialize<'de> for FirstChoice<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstChoice<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<Lenient<Choice<'de>>>()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstChoice(first.and_then(|c| c.0)))
            }
            ignore_others!(bool, i64, u64, f64, str, unit, map);
        }
        d.deserialize_any(V)
    }
}

/// `error`: present with any value; its `type` when an object.
struct ErrorField<'de>(ErrorJson<'de>);

impl<'de> Deserialize<'de> for ErrorField<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let object = Lenient::<ErrorJson<'de>>::deserialize(d)?;
        Ok(ErrorField(object.0.unwrap_or_default()))
    }
}

impl<'de> FromMap<'de> for ErrorJson<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "type" => self.kind = map.next_value::<Text<'de>>()?.0,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

impl<'de> FromMap<'de> for Chunk<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "error" => self.error = Some(map.next_value::<ErrorField<'de>>()?.0),
            "choices" => self.choice = map.next_value::<FirstChoice<'de>>()?.0,
            "usage" => self.usage = map.next_value::<Lenient<UsageJson>>()?.0,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

impl<'de> FromMap<'de> for Choice<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "delta" => {
                let delta = map
                    .next_value::<Lenient<Delta<'de>>>()?
                    .0
                    .unwrap_or_default();
                self.reasoning_content = delta.reasoning_content;
                self.reasoning = delta.reasoning;
                self.content = delta.content;
            }
            "finish_reason" => self.finish_reason = map.next_value::<Text<'de>>()?.0,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// `choices[0].delta`.
#[derive(Default)]
struct Delta<'de> {
    reasoning_content: Option<Cow<'de, str>>,
    reasoning: Option<Cow<'de, str>>,
    content: Option<Cow<'de, str>>,
}

impl<'de> FromMap<'de> for Delta<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let slot = match key {
            "reasoning_content" => Some(&mut self.reasoning_content),
            "reasoning" => Some(&mut self.reasoning),
            "content" => Some(&mut self.content),
            _ => None,
        };
        read_text(map, slot)
    }
}

impl<'de> FromMap<'de> for UsageJson {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "prompt_tokens" => self.prompt_tokens = map.next_value::<Count>()?.0,
            "completion_tokens" => self.completion_tokens = map.next_value::<Count>()?.0,
            "completion_tokens_details" => {
                self.reasoning_tokens = map
                    .next_value::<Lenient<Details>>()?
                    .0
                    .and_then(|d| d.reasoning_tokens);
            }
            "prompt_tokens_details" => {
                self.cached_tokens = map
                    .next_value::<Lenient<Details>>()?
                    .0
                    .and_then(|d| d.cached_tokens);
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// `usage.*_tokens_details`.
#[derive(Default)]
struct Details {
    reasoning_tokens: Option<u64>,
    cached_tokens: Option<u64>,
}

impl<'de> FromMap<'de> for Details {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "reasoning_tokens" => self.reasoning_tokens = map.next_value::<Count>()?.0,
            "cached_tokens" => self.cached_tokens = map.next_value::<Count>()?.0,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "chunk_tests.rs"]
mod tests;
