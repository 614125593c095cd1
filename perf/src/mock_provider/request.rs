//! Request-side helpers: the prompt size, JSON writing, clocks and ids.
//!
//! `prompt_tokens` is derived from the input so tests can predict it:
//! **`ceil(text_bytes / 4)`**, where `text_bytes` is the UTF-8 length of
//! every `content` string of the messages (or, for content-part arrays and
//! Responses API items, every `content`/`text` string inside them), plus the
//! Responses API's string `input` and `instructions`.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The summed byte length of the prompt text inside a JSON value, counted
/// while deserializing (no allocation): strings count, arrays sum their
/// elements, objects sum their `content` and `text` members.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextLen(pub u64);

impl TextLen {
    /// `prompt_tokens` for this much text.
    pub fn tokens(self) -> u64 {
        self.0.div_ceil(4)
    }
}

impl<'de> Deserialize<'de> for TextLen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TextLen;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("prompt text")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<TextLen, E> {
                Ok(TextLen(s.len() as u64))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<TextLen, E> {
                Ok(TextLen(0))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<TextLen, E> {
                Ok(TextLen(0))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<TextLen, E> {
                Ok(TextLen(0))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<TextLen, E> {
                Ok(TextLen(0))
            }
            fn visit_unit<E: de::Error>(self) -> Result<TextLen, E> {
                Ok(TextLen(0))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TextLen, A::Error> {
                let mut n = 0;
                while let Some(TextLen(x)) = seq.next_element()? {
                    n += x;
                }
                Ok(TextLen(n))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextLen, A::Error> {
                let mut n = 0;
                while let Some(key) = map.next_key::<KeyKind>()? {
                    match key {
                        KeyKind::Text => n += map.next_value::<TextLen>()?.0,
                        KeyKind::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(TextLen(n))
            }
        }
        d.deserialize_any(V)
    }
}

/// A map key: `content`/`text` (counted) or anything else.
enum KeyKind {
    Text,
    Other,
}

impl<'de> Deserialize<'de> for KeyKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyKind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<KeyKind, E> {
                Ok(match s {
                    "content" | "text" => KeyKind::Text,
                    _ => KeyKind::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Current UTC time as RFC 3339 with nanoseconds (Ollama's `created_at`).
pub(crate) fn rfc3339_now() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs(), d.subsec_nanos())
}

/// Formats a Unix time as `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
pub(crate) fn rfc3339(secs: u64, nanos: u32) -> String {
    let at = UNIX_EPOCH + std::time::Duration::new(secs, nanos);
    humantime::format_rfc3339_nanos(at).to_string()
}

/// Appends `s` as a JSON string literal (quoted, escaped).
pub(crate) fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail, and a &str always serializes.
    serde_json::to_writer(&mut *out, s).expect("JSON string into a Vec");
}

/// Appends the decimal form of `n`.
pub(crate) fn push_num(out: &mut Vec<u8>, n: u64) {
    use std::io::Write;
    write!(out, "{n}").expect("write into a Vec");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_len_counts_content_and_text_only() {
        let v: TextLen = serde_json::from_str(
            r#"[{"role":"system","content":"abcd"},
                {"role":"user","content":[{"type":"text","text":"héllo"},{"type":"image_url","image_url":{"url":"x"}}]},
                {"role":"assistant","content":null,"tool_calls":[{"id":"t"}]}]"#,
        )
        .unwrap();
        assert_eq!(v, TextLen(4 + 6));
        assert_eq!(v.tokens(), 3);
        let s: TextLen = serde_json::from_str(r#""a\"b""#).unwrap();
        assert_eq!(s, TextLen(3));
    }

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.000000005Z");
        assert_eq!(rfc3339(1_767_225_599, 0), "2025-12-31T23:59:59.000000000Z");
    }
}
