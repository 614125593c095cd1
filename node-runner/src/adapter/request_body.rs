//! A chat request body for a provider: the adapter's top-level fields and
//! the run's messages under `"messages"`, written straight from the run.
//!
//! A run whose texts come JSON-escaped (`RunInput.escaped_content`: the
//! client's own escapes, checked by the Edge) has them written between
//! quotes as they are, neither unescaped nor escaped again; a text of
//! [`PASTED_SLICE_MIN`] bytes or more is not even copied: the body is then
//! its JSON around the text, and the text itself as a slice of the run's
//! frame ([`RequestBody`]'s slices go out in one vectored write). So is a
//! parameter's value that long, still as the Edge sent it (an agent's
//! `tools`).
//!
//! Each message is its `extra_json` object's fields, then `role` and
//! `content` (which win over extra fields of the same name). The body's
//! shape is fixed, so it is written as it is: the top-level fields and the
//! extras as the Edge sent their values ([`Fields`]: an agent's tools are
//! not parsed and printed again), each message's role and text through
//! `json_escape_simd`, the same bytes as serde_json's escaping (tested
//! below) at ~18 GB/s on plain text where serde_json's byte loop runs at
//! ~0.7 GB/s. A message's text is escaped into the body once, never copied
//! into a JSON tree first: a 1 MB prompt had cost the Node a clone of its
//! text into a `serde_json::Value`, fresh pages for it, and ~1.5 ms of
//! escaping on top.

use bytes::Bytes;
use json_escape_simd::escape_into;
use proto::v1::{ExecutionFailure, FailureCode, FailureSide, RunInput};

use super::body_fields::Fields;
use super::failure;
use crate::provider_http::RequestBody;

/// An escaped text this long or longer goes into the body as a slice of
/// the run's frame; a shorter one is copied (an iovec and a refcount cost
/// more than a copy of a few KiB).
pub(super) const PASTED_SLICE_MIN: usize = 4 * 1024;

/// `fields` with the run's messages as `"messages"` (a `messages` among
/// `fields` is replaced), as JSON bytes. An `extra_json` that is not a
/// JSON object is the client's error.
pub(super) fn with_messages(
    fields: Fields<'_>,
    input: &RunInput,
) -> Result<RequestBody, ExecutionFailure> {
    let (json, pasted) = json_around_texts(fields, input)?;
    if pasted.is_empty() {
        return Ok(json.into());
    }
    let json = Bytes::from(json);
    let mut parts = Vec::with_capacity(2 * pasted.len() + 1);
    let mut from = 0;
    for (at, text) in pasted {
        parts.push(json.slice(from..at));
        parts.push(text);
        from = at;
    }
    parts.push(json.slice(from..));
    Ok(RequestBody::from_parts(parts))
}

/// Texts that go into a body as slices of the frame, each with where in
/// the body's JSON it goes.
type Pasted = Vec<(usize, Bytes)>;

/// The body's JSON but for the texts pasted as slices, and those.
fn json_around_texts(
    fields: Fields<'_>,
    input: &RunInput,
) -> Result<(Vec<u8>, Pasted), ExecutionFailure> {
    let mut pasted = Pasted::new();
    // Sized up front (see `body_capacity`): a body that grows is copied
    // whole by the allocator, a long prompt included.
    let mut out = Vec::with_capacity(body_capacity(input));
    out.push(b'{');
    fields.write_members_pasting(&mut out, &["messages"], |value, at| {
        match long_slice_of(&input.parameters_json, value) {
            Some(slice) => {
                pasted.push((at, slice));
                true
            }
            None => false,
        }
    });
    out.extend_from_slice(b"\"messages\":[");
    for (i, message) in input.messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        Fields::parse(&message.extra_json, "message extra_json")?
            .write_members(&mut out, &["role", "content"]);
        out.extend_from_slice(b"\"role\":");
        escape_into(text(&message.role, "role")?, &mut out);
        out.extend_from_slice(b",\"content\":");
        let content = text(&message.content, "content")?;
        if input.escaped_content {
            // A JSON string's body already, checked by the Edge.
            out.push(b'"');
            if pasted_as_slice(input, &message.content) {
                pasted.push((out.len(), message.content.clone()));
            } else {
                out.extend_from_slice(content.as_bytes());
            }
            out.push(b'"');
        } else {
            escape_into(content, &mut out);
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    Ok((out, pasted))
}

/// `text` as a slice of `whole` when it is one and long enough to go into
/// the body as a slice of the frame.
fn long_slice_of(whole: &Bytes, text: &str) -> Option<Bytes> {
    if text.len() < PASTED_SLICE_MIN {
        return None;
    }
    framing::shared_bytes::slice_within(whole, text.as_bytes())
}

/// Whether `content` goes into the body as a slice of the frame.
fn pasted_as_slice(input: &RunInput, content: &Bytes) -> bool {
    input.escaped_content && content.len() >= PASTED_SLICE_MIN
}

/// A message's text or role (`what`), which the wire carries as bytes (to
/// decode it without a copy) but which must be UTF-8.
fn text<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str, ExecutionFailure> {
    simdutf8::compat::from_utf8(bytes).map_err(|e| {
        failure(
            FailureCode::InvalidRequest,
            FailureSide::Client,
            format!("a message's {what} is not UTF-8: {e}"),
        )
    })
}

/// The body's buffer: every message's parts and the parameters (but the
/// texts pasted as slices), with room for keys, quotes and a few escapes,
/// plus the room `escape_into` asks past the end for the longest text it
/// escapes (six times its length, its SIMD stores' worst case) so that
/// asking never grows the buffer.
///
/// Sized for the texts alone, a 1 MB prompt's `reserve` grew the buffer to
/// 6 MB, and the allocator copied the 1 MB buffer it had: 14 % of the
/// Node's CPU on a normalized 1 MB request. The room past what is written
/// is address space, not memory: pages never touched are never backed.
fn body_capacity(input: &RunInput) -> usize {
    let messages: usize = input
        .messages
        .iter()
        .map(|m| {
            let copied = if pasted_as_slice(input, &m.content) {
                0
            } else {
                m.content.len()
            };
            m.role.len() + copied + m.extra_json.len() + 64
        })
        .sum();
    let escaped = |m: &proto::v1::ChatMessage| {
        if input.escaped_content {
            0
        } else {
            m.content.len()
        }
    };
    let longest = input
        .messages
        .iter()
        .map(|m| m.role.len().max(escaped(m)))
        .max()
        .unwrap_or(0);
    messages + input.parameters_json.len() + 256 + ESCAPE_ROOM * longest + 64
}

/// What `escape_into` reserves past the end beyond a text's own length,
/// per byte of it (it reserves `6 * len + 35`).
const ESCAPE_ROOM: usize = 5;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proto::v1::ChatMessage;
    use serde_json::{Value, json};

    use super::*;

    fn message(role: &str, content: &str, extra: &str) -> ChatMessage {
        ChatMessage {
            role: role.as_bytes().to_vec().into(),
            content: content.as_bytes().to_vec().into(),
            extra_json: extra.as_bytes().to_vec().into(),
        }
    }

    #[test]
    fn the_body_is_the_fields_and_each_message_with_its_extras() {
        let input = RunInput {
            messages: vec![
                message("system", "be \"brief\"\n", ""),
                message(
                    "user",
                    "hi",
                    r#"{"name":"ann","role":"ignored","images":["x"]}"#,
                ),
            ],
            ..RunInput::default()
        };
        let mut fields = Fields::default();
        fields.insert("model", json!("m"));
        fields.insert("stream", json!(true));
        fields.insert("messages", json!("replaced"));
        let body: Value =
            serde_json::from_slice(&with_messages(fields, &input).unwrap().to_bytes()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "stream": true,
                "messages": [
                    {"role": "system", "content": "be \"brief\"\n"},
                    {"name": "ann", "images": ["x"], "role": "user", "content": "hi"},
                ],
            })
        );
    }

    #[test]
    fn an_extra_that_is_not_an_object_is_the_clients_error() {
        let input = RunInput {
            messages: vec![message("user", "hi", "[1]")],
            ..RunInput::default()
        };
        let error = with_messages(Fields::default(), &input).unwrap_err();
        assert!(error.message.contains("message extra_json"), "{error:?}");
    }

    #[test]
    fn a_text_or_role_that_is_not_utf8_is_the_clients_error() {
        for what in ["content", "role"] {
            let mut not_utf8 = message("user", "", "");
            let bytes = vec![b'h', 0xff, b'i'].into();
            match what {
                "content" => not_utf8.content = bytes,
                _ => not_utf8.role = bytes,
            }
            let input = RunInput {
                messages: vec![not_utf8],
                ..RunInput::default()
            };
            let error = with_messages(Fields::default(), &input).unwrap_err();
            assert_eq!(error.code, FailureCode::InvalidRequest as i32);
            assert_eq!(error.side, FailureSide::Client as i32);
            let expected = format!("a message's {what} is not UTF-8");
            assert!(error.message.contains(&expected), "{error:?}");
        }
    }

    #[test]
    fn the_body_is_compact_json_in_field_order_and_extras_as_sent() {
        let input = RunInput {
            messages: vec![
                message("system", "a\"b\\c\n\u{1}é😀", r#"{"z":1,"a":[true,null]}"#),
                message("user", "", ""),
            ],
            ..RunInput::default()
        };
        let mut fields = Fields::default();
        fields.insert("stream", json!(false));
        fields.insert("model", json!("m\"1"));
        let body = with_messages(fields, &input).unwrap().to_bytes();
        assert_eq!(
            String::from_utf8(body.to_vec()).unwrap(),
            concat!(
                r#"{"stream":false,"model":"m\"1","messages":["#,
                r#"{"z":1,"a":[true,null],"role":"system","content":"a\"b\\c\n\u0001é😀"},"#,
                r#"{"role":"user","content":""}]}"#,
            )
        );
        let empty = with_messages(Fields::default(), &RunInput::default()).unwrap();
        assert_eq!(&empty.to_bytes()[..], br#"{"messages":[]}"#);
    }

    #[test]
    fn escaped_texts_are_written_as_they_are() {
        let escaped = r#"a\"b\\c\n\u00e9 \/ é"#;
        let input = RunInput {
            messages: vec![
                message("user", escaped, ""),
                message("user", "", ""),
                // An agent's turn: extras beside an escaped text.
                message("tool", r#"{\"t\":1}"#, r#"{"tool_call_id":"c\n1"}"#),
            ],
            escaped_content: true,
            ..RunInput::default()
        };
        let body = with_messages(Fields::default(), &input).unwrap().to_bytes();
        let expected = format!(
            r#"{{"messages":[{{"role":"user","content":"{escaped}"}},{{"role":"user","content":""}},{{"tool_call_id":"c\n1","role":"tool","content":"{{\"t\":1}}"}}]}}"#
        );
        assert_eq!(String::from_utf8(body.to_vec()).unwrap(), expected);
        let parsed: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(parsed["messages"][0]["content"], "a\"b\\c\né / é");
        assert_eq!(parsed["messages"][2]["content"], r#"{"t":1}"#);
        assert_eq!(parsed["messages"][2]["tool_call_id"], "c\n1");
    }

    #[test]
    fn a_long_escaped_text_goes_as_a_slice_of_the_frame() {
        // JSON-escaped, as the Edge sends it.
        let long = r#"a \"long\" text\n"#.repeat(PASTED_SLICE_MIN / 8);
        let frame = bytes::Bytes::from(long.clone());
        let mut input = RunInput {
            messages: vec![message("system", r"short \n", ""), message("user", "", "")],
            escaped_content: true,
            ..RunInput::default()
        };
        input.messages[1].content = frame.clone();
        let (json, pasted) = json_around_texts(Fields::default(), &input).unwrap();
        assert_eq!(json.capacity(), body_capacity(&input), "the buffer grew");
        assert!(
            json.capacity() < PASTED_SLICE_MIN,
            "the pasted text has no room"
        );
        assert_eq!(pasted.len(), 1);
        let body = with_messages(Fields::default(), &input).unwrap();
        let slices: Vec<_> = body.parts().collect();
        assert_eq!((slices.len(), slices[1].as_ptr()), (3, frame.as_ptr()));
        let parsed: Value = serde_json::from_slice(&body.to_bytes()).unwrap();
        assert_eq!(parsed["messages"][0]["content"], "short \n");
        let plain = "a \"long\" text\n".repeat(PASTED_SLICE_MIN / 8);
        assert_eq!(parsed["messages"][1]["content"], plain);
    }

    #[test]
    fn a_long_parameter_goes_as_a_slice_of_the_frame() {
        // An agent's tools as the Edge sent them, beside a short one.
        let tools = format!(
            "[{}]",
            vec![r#"{"type":"function","function":{"name":"f","parameters":{}}}"#; 80].join(",")
        );
        let (object, index) = framing::json_members::write_indexed(&[
            ("tools", tools.as_str()),
            ("temperature", "0.5"),
        ]);
        let input = RunInput {
            messages: vec![message("user", "hi", "")],
            parameters_json: object.into(),
            parameters_index: index,
            ..RunInput::default()
        };
        let fields = Fields::parameters(&input).unwrap();
        let body = with_messages(fields, &input).unwrap();
        let slices: Vec<_> = body.parts().collect();
        assert_eq!(slices.len(), 3);
        assert!(
            input
                .parameters_json
                .as_ptr_range()
                .contains(&slices[1].as_ptr()),
            "the tools were copied"
        );
        assert_eq!(&slices[1][..], tools.as_bytes());
        let parsed: Value = serde_json::from_slice(&body.to_bytes()).unwrap();
        let expected: Value = serde_json::from_str(&tools).unwrap();
        assert_eq!(parsed["tools"], expected);
        assert_eq!(parsed["temperature"], 0.5);
        assert_eq!(parsed["messages"][0]["content"], "hi");
        // A short parameter, or one an adapter made, is copied.
        let mut fields = Fields::parameters(&input).unwrap();
        fields.insert("tools", json!([]));
        assert_eq!(with_messages(fields, &input).unwrap().parts().count(), 1);
    }

    #[test]
    fn a_long_prompts_body_is_written_without_growing_its_buffer() {
        let long = "p".repeat(1 << 20);
        let escaped = "line \"one\"\n".repeat(50_000);
        for (first, second) in [(long.as_str(), "hi"), ("be brief", escaped.as_str())] {
            let input = RunInput {
                messages: vec![message("system", first, ""), message("user", second, "")],
                ..RunInput::default()
            };
            let mut fields = Fields::default();
            fields.insert("model", json!("m"));
            let (body, _) = json_around_texts(fields, &input).unwrap();
            assert_eq!(body.capacity(), body_capacity(&input), "the buffer grew");
            let parsed: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(parsed["messages"][0]["content"], first);
            assert_eq!(parsed["messages"][1]["content"], second);
        }
    }

    proptest! {
        /// The SIMD escaper writes what serde_json writes, for any text
        /// (control characters, quotes, backslashes, any plane).
        #[test]
        fn text_is_escaped_as_serde_json_escapes_it(text in any::<String>(), ascii in "[\\x00-\\x7f]{0,200}") {
            for text in [&text, &ascii] {
                let mut ours = Vec::new();
                escape_into(text, &mut ours);
                prop_assert_eq!(ours, serde_json::to_vec(text).unwrap());
            }
        }
    }
}
