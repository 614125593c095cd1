//! A JSON object from the Edge — a run's `parameters_json`, a message's
//! `extra_json` — as its members, each value kept as the JSON text it came
//! as, not parsed.
//!
//! An agent's turn declares its tools, ~1 KB of JSON schema each and tens
//! of them in a coding agent's request, and the Edge passes them on as the
//! client wrote them. Parsed into a `serde_json::Value` tree and printed
//! again into the provider's body, 24 such tools (~21 KB) had cost the
//! Node ~1M instructions a request (issue 8: `TOOLS=24
//! hack/instructions.sh`). Here a run's parameters are taken where the
//! Edge's index says their members lie (`RunInput.parameters_index`,
//! `framing::json_members`: the Edge's cursor checked each value), and
//! any other object's members are found by `framing::json_quick`'s
//! cursor, which checks every value is JSON; either way they are written
//! as they are, and only the few members an adapter reads or changes
//! (`stream_options`, Ollama's sampling knobs) are parsed, when it takes
//! them. An object the cursor declines (an escaped key, a number with an
//! exponent, deeper nesting) is read by serde, as every object was before.
//!
//! **Invariants:** a later duplicate key wins (as in a JSON object parsed
//! whole), and the members are written in the order first seen; every
//! value written is JSON (checked by the Edge's cursor or this one, or
//! serde's).

use std::borrow::Cow;

use framing::json_members;
use framing::json_quick::{Cursor, MAX_SKIP_DEPTH, last_wins};
use json_escape_simd::escape_into;
use proto::v1::{ExecutionFailure, FailureCode, FailureSide, RunInput};
use serde_json::Value;

use super::failure;

/// A JSON object's members, in order, each key once.
#[derive(Debug, Default)]
pub(super) struct Fields<'a> {
    members: Vec<(Cow<'a, str>, Member<'a>)>,
}

/// A member's value.
#[derive(Debug)]
pub(super) enum Member<'a> {
    /// The JSON text of a value the cursor checked.
    Raw(&'a str),
    /// A value serde read, or an adapter made.
    Value(Value),
}

impl From<Value> for Member<'_> {
    fn from(value: Value) -> Self {
        Self::Value(value)
    }
}

impl Member<'_> {
    /// The value, parsed if it is still text.
    pub(super) fn into_value(self) -> Value {
        match self {
            // The cursor took it as JSON, which serde reads too; `Null` is
            // never reached.
            Self::Raw(text) => serde_json::from_str(text).unwrap_or(Value::Null),
            Self::Value(value) => value,
        }
    }

    /// Writes the value's JSON.
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Self::Raw(text) => out.extend_from_slice(text.as_bytes()),
            // A `Value` (string keys only) into a Vec cannot fail.
            Self::Value(value) => {
                let _ = serde_json::to_writer(&mut *out, value);
            }
        }
    }
}

impl<'a> Fields<'a> {
    /// The members of a run's parameters: taken as the Edge's index
    /// (`RunInput.parameters_index`, [`framing::json_members`]) says they
    /// lie, when it fits the object; else read as [`Self::parse`] reads any
    /// object.
    pub(super) fn parameters(input: &'a RunInput) -> Result<Self, ExecutionFailure> {
        let (bytes, index) = (&input.parameters_json, &input.parameters_index[..]);
        if let Some(fields) = Self::indexed(bytes, index) {
            return Ok(fields);
        }
        if !index.is_empty() {
            tracing::debug!(
                event = "parameters_index_refused",
                members = index.len() / 4,
                "the Edge's index of parameters_json does not fit it; reading the object"
            );
        }
        Self::parse(bytes, "parameters_json")
    }

    /// The members `index` finds in `bytes`; `None` where it does not fit.
    fn indexed(bytes: &'a [u8], index: &[u32]) -> Option<Self> {
        if index.is_empty() {
            return None;
        }
        let text = simdutf8::basic::from_utf8(bytes).ok()?;
        let members = json_members::members(text, index)?
            .into_iter()
            .map(|(key, value)| (Cow::Borrowed(key), Member::Raw(value)))
            .collect();
        Some(Self {
            members: last_wins(members),
        })
    }

    /// The members of `bytes`, a JSON object (empty or whitespace is `{}`);
    /// anything else is the client's error, naming `what`.
    pub(super) fn parse(bytes: &'a [u8], what: &str) -> Result<Self, ExecutionFailure> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::default());
        }
        if let Some(fields) = Self::quick(bytes) {
            return Ok(fields);
        }
        match serde_json::from_slice(bytes) {
            Ok(Value::Object(map)) => {
                let members = map
                    .into_iter()
                    .map(|(key, value)| (Cow::Owned(key), Member::Value(value)))
                    .collect();
                Ok(Self { members })
            }
            _ => Err(failure(
                FailureCode::InvalidRequest,
                FailureSide::Client,
                format!("{what} is not a JSON object"),
            )),
        }
    }

    /// The members as the cursor reads them; `None` where it declines.
    fn quick(bytes: &'a [u8]) -> Option<Self> {
        let text = simdutf8::basic::from_utf8(bytes).ok()?;
        let mut cursor = Cursor::spaced(text);
        let mut members = Vec::new();
        cursor.object(|key, cursor| {
            let value = cursor.skip_any_text(MAX_SKIP_DEPTH - 1)?;
            members.push((Cow::Borrowed(key), Member::Raw(value)));
            Some(())
        })?;
        cursor.only_whitespace_left().then(|| Self {
            members: last_wins(members),
        })
    }

    /// Takes `key`'s value out.
    pub(super) fn remove(&mut self, key: &str) -> Option<Member<'a>> {
        let at = self.members.iter().position(|(k, _)| k == key)?;
        Some(self.members.remove(at).1)
    }

    /// Sets `key` to `value`: in the place of its value if it has one, else
    /// last.
    pub(super) fn insert(&mut self, key: impl Into<Cow<'a, str>>, value: impl Into<Member<'a>>) {
        let (key, value) = (key.into(), value.into());
        match self.members.iter_mut().find(|(k, _)| *k == key) {
            Some((_, slot)) => *slot = value,
            None => self.members.push((key, value)),
        }
    }

    /// Writes each member but those `skip` names as `"key":value,`.
    pub(super) fn write_members(&self, out: &mut Vec<u8>, skip: &[&str]) {
        self.write_members_pasting(out, skip, |_, _| false);
    }

    /// [`Self::write_members`], but a value still as its text that `paste`
    /// takes (given the text and where in `out` it goes) is left out of
    /// `out`, for the caller to put there as a slice of its own.
    pub(super) fn write_members_pasting(
        &self,
        out: &mut Vec<u8>,
        skip: &[&str],
        mut paste: impl FnMut(&str, usize) -> bool,
    ) {
        for (key, value) in &self.members {
            if !skip.contains(&key.as_ref()) {
                escape_into(key, out);
                out.push(b':');
                match value {
                    Member::Raw(text) if paste(text, out.len()) => {}
                    value => value.write(out),
                }
                out.push(b',');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// `fields` written as an object.
    fn object(fields: &Fields<'_>) -> Vec<u8> {
        let mut out = b"{".to_vec();
        fields.write_members(&mut out, &[]);
        if out.len() > 1 {
            out.pop();
        }
        out.push(b'}');
        out
    }

    #[test]
    fn values_are_written_as_they_came_and_later_duplicates_win() {
        let text =
            "{\"tools\": [{\"type\": \"function\", \"x\": 1.50}],\n \"t\":0.2, \"tools\":[]}";
        let fields = Fields::parse(text.as_bytes(), "p").unwrap();
        assert!(matches!(fields.members[0].1, Member::Raw(_)));
        assert_eq!(&object(&fields)[..], br#"{"tools":[],"t":0.2}"#);
        let kept = r#"{"b":{"deep":[1, -0.25, "\u00e9\n"]},"a":null}"#;
        let fields = Fields::parse(kept.as_bytes(), "p").unwrap();
        assert_eq!(String::from_utf8(object(&fields)).unwrap(), kept);
    }

    #[test]
    fn many_members_are_each_kept_once() {
        // A client's thousands of parameters: each key once, the last value.
        let members: Vec<String> = (0..30_000)
            .map(|i| format!("\"p{}\":{i}", i % 10_000))
            .collect();
        let text = format!("{{{}}}", members.join(","));
        let fields = Fields::parse(text.as_bytes(), "p").unwrap();
        assert_eq!(fields.members.len(), 10_000);
        let written: Value = serde_json::from_slice(&object(&fields)).unwrap();
        assert_eq!(written, serde_json::from_str::<Value>(&text).unwrap());
        assert_eq!(written["p7"], 20_007);
    }

    #[test]
    fn what_the_cursor_declines_is_read_by_serde() {
        let text = r#"{"b\u0041":1e3,"a":2}"#;
        let fields = Fields::parse(text.as_bytes(), "p").unwrap();
        assert!(matches!(fields.members[0].1, Member::Value(_)));
        assert_eq!(&object(&fields)[..], br#"{"a":2,"bA":1000.0}"#);
        for empty in ["", " \n"] {
            assert!(
                Fields::parse(empty.as_bytes(), "p")
                    .unwrap()
                    .members
                    .is_empty()
            );
        }
        for not_an_object in ["7", "[1]", "{\"a\":}", "{} {}", "\"x\""] {
            let error = Fields::parse(not_an_object.as_bytes(), "p_json").unwrap_err();
            assert_eq!(error.code, FailureCode::InvalidRequest as i32);
            assert_eq!(error.side, FailureSide::Client as i32);
            assert!(error.message.contains("p_json"), "{error:?}");
        }
    }

    #[test]
    fn members_are_taken_set_and_skipped() {
        let mut fields = Fields::parse(br#"{"a":{"x":1},"b":2,"c":3}"#, "p").unwrap();
        assert_eq!(fields.remove("a").unwrap().into_value(), json!({"x": 1}));
        assert!(fields.remove("a").is_none());
        fields.insert("b", json!("two"));
        fields.insert("d", json!(true));
        let mut out = Vec::new();
        fields.write_members(&mut out, &["c"]);
        assert_eq!(&out[..], br#""b":"two","d":true,"#);
    }

    /// JSON values, nested.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!(null)),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// JSON objects of nested values, compact or spaced, keys repeated.
    fn json_object() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(("[a-d]{1,2}", json_value()), 0..6),
            any::<bool>(),
        )
            .prop_map(|(members, pretty)| {
                let members: Vec<String> = members
                    .iter()
                    .map(|(key, value)| {
                        let value = if pretty {
                            serde_json::to_string_pretty(value).unwrap()
                        } else {
                            value.to_string()
                        };
                        format!("{key:?}:{value}")
                    })
                    .collect();
                format!("{{{}}}", members.join(if pretty { ",\n  " } else { "," }))
            })
    }

    /// A run's input whose parameters the Edge wrote, with their index.
    fn indexed(members: &[(&str, &str)]) -> RunInput {
        let (object, index) = json_members::write_indexed(members);
        RunInput {
            parameters_json: object.into(),
            parameters_index: index,
            ..RunInput::default()
        }
    }

    #[test]
    fn an_index_that_fits_takes_the_members_as_they_lie() {
        let input = indexed(&[("tools", r#"[{"x": 1.50}]"#), ("t", "0.2"), ("tools", "[]")]);
        let fields = Fields::parameters(&input).unwrap();
        assert!(matches!(fields.members[0].1, Member::Raw(_)));
        // A later duplicate wins, in the first's place, as the parse has it.
        assert_eq!(&object(&fields)[..], br#"{"tools":[],"t":0.2}"#);
        let parsed = Fields::parse(&input.parameters_json, "p").unwrap();
        assert_eq!(object(&fields), object(&parsed));
    }

    #[test]
    fn an_index_that_does_not_fit_reads_the_object() {
        let mut input = indexed(&[("a", "1"), ("b", r#""é""#)]);
        let whole = object(&Fields::parse(&input.parameters_json, "p").unwrap());
        for bad in [
            vec![],
            vec![2, 3, 5],
            vec![0, 0, 0, 0],
            vec![2, 3, 5, 6, 8, 9, 11, 13],
        ] {
            input.parameters_index = bad;
            assert_eq!(object(&Fields::parameters(&input).unwrap()), whole);
        }
        // Not an object: refused, index or none, as the parse refuses it.
        input.parameters_json = "[1]".into();
        input.parameters_index = vec![1, 1, 1, 2];
        let error = Fields::parameters(&input).unwrap_err();
        assert_eq!(error.code, FailureCode::InvalidRequest as i32);
        assert!(error.message.contains("parameters_json"), "{error:?}");
    }

    proptest! {
        /// Whichever way an object is read, it is written as serde reads it.
        #[test]
        fn an_object_is_written_as_serde_reads_it(text in json_object()) {
            let fields = Fields::parse(text.as_bytes(), "p").unwrap();
            let written: Value = serde_json::from_slice(&object(&fields)).unwrap();
            prop_assert_eq!(written, serde_json::from_str::<Value>(&text).unwrap());
        }

        /// Members the Edge indexed are taken as the parse takes them.
        #[test]
        fn indexed_members_are_taken_as_the_parse_takes_them(
            members in prop::collection::vec(("[a-d]{1,2}", json_value()), 1..6),
        ) {
            let texts: Vec<(String, String)> =
                members.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
            let members: Vec<(&str, &str)> =
                texts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let input = indexed(&members);
            let fields = Fields::parameters(&input).unwrap();
            prop_assert!(fields.members.iter().all(|(_, m)| matches!(m, Member::Raw(_))));
            let parsed = Fields::parse(&input.parameters_json, "p").unwrap();
            prop_assert_eq!(object(&fields), object(&parsed));
        }
    }
}
