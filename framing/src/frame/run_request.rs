//! A run's request as one frame whose long message texts and long
//! parameters are their own slices: the Edge sends a prompt, or an agent's
//! tools, it holds as `Bytes` without copying it into the frame, as a
//! tunnel request's body already goes.
//!
//! The frame is what prost would encode but for the order of fields, which
//! a protobuf decoder does not care about: each message's `content` comes
//! last in its message, and the request's `input` last in the request, so
//! that a text ends the bytes written before it and the rest follows after.

use bytes::{Bytes, BytesMut};
use prost::Message;
use prost::encoding::{WireType, encoded_len_varint, key_len};
use proto::v1::{RunInput, RunRequest};
use proto::{
    CHAT_MESSAGE_CONTENT_FIELD, CHAT_MESSAGE_EXTRA_FIELD, CHAT_MESSAGE_ROLE_FIELD,
    ENVELOPE_RUN_REQUEST_FIELD, RUN_INPUT_ESCAPED_CONTENT_FIELD, RUN_INPUT_MESSAGES_FIELD,
    RUN_INPUT_PARAMETERS_FIELD, RUN_INPUT_PARAMETERS_INDEX_FIELD, RUN_REQUEST_INPUT_FIELD,
};

use super::encode::{envelope_len, put_key_varint};
use super::tunnel_encode::Out;
use super::{BodyFrame, FrameEncoder, FrameError, LENGTH_PREFIX_LEN, MAX_BODY_PARTS};
use crate::write_batch::COPY_MAX;

/// Whether `request` has a message text, or parameters, long enough to go
/// as its own slice ([`FrameEncoder::encode_run_request`]); otherwise
/// encode it whole.
pub fn has_long_texts(request: &RunRequest) -> bool {
    request.input.as_ref().is_some_and(|input| {
        input.parameters_json.len() > COPY_MAX
            || input.messages.iter().any(|m| m.content.len() > COPY_MAX)
    })
}

/// Makes a run's input plain for a node that takes only plain texts: each
/// message's JSON-escaped content ([`RunInput::escaped_content`]) is
/// unescaped. An input that is plain already is left as it is.
///
/// # Errors
/// [`FrameError::Malformed`] for a content that is not the body of a JSON
/// string (the Edge sends only bodies its cursor checked).
pub fn unescape_content(input: &mut RunInput) -> Result<(), FrameError> {
    if !input.escaped_content {
        return Ok(());
    }
    for message in &mut input.messages {
        let text = crate::json_quick::unescape(
            std::str::from_utf8(&message.content)
                .map_err(|_| FrameError::Malformed("escaped content is not UTF-8".into()))?,
        )
        .ok_or_else(|| FrameError::Malformed("escaped content is not a JSON string".into()))?;
        message.content = text.into_bytes().into();
    }
    input.escaped_content = false;
    Ok(())
}

impl FrameEncoder {
    /// Encodes `{stream_id, run_request: request}` as one frame in which
    /// the parameters and each message text longer than `COPY_MAX` are
    /// their own slices, not copied (up to [`MAX_BODY_PARTS`] slices in
    /// all; texts past that are copied). Decodes to the same envelope as
    /// [`encode`](Self::encode)'s.
    pub fn encode_run_request(
        &mut self,
        stream_id: u64,
        mut request: RunRequest,
    ) -> Result<BodyFrame, FrameError> {
        let input = request.input.take();
        let rest = request;
        let (messages, parameters, index, escaped) = match &input {
            Some(input) => (
                &input.messages[..],
                &input.parameters_json,
                &input.parameters_index[..],
                input.escaped_content,
            ),
            None => (&[][..], &Bytes::new(), &[][..], false),
        };
        // Lengths do not depend on the order of fields: prost's are the frame's.
        let input_len = input.as_ref().map_or(0, Message::encoded_len);
        let mut request_len = rest.encoded_len();
        if input.is_some() {
            request_len +=
                key_len(RUN_REQUEST_INPUT_FIELD) + encoded_len_varint(input_len as u64) + input_len;
        }
        let envelope_len = envelope_len(stream_id, ENVELOPE_RUN_REQUEST_FIELD, request_len);
        self.check_len(envelope_len)?;

        // Which texts go as slices: long parameters, then the long message
        // texts, while a text and the bytes after it fit the frame's parts.
        let slice_parameters = parameters.len() > COPY_MAX;
        let sliced: Vec<bool> = messages
            .iter()
            .scan(usize::from(slice_parameters), |slices, m| {
                let slice = m.content.len() > COPY_MAX && (*slices + 1) * 2 <= MAX_BODY_PARTS;
                *slices += usize::from(slice);
                Some(slice)
            })
            .collect();
        let sliced_len: usize = messages
            .iter()
            .zip(&sliced)
            .filter(|(_, s)| **s)
            .map(|(m, _)| m.content.len())
            .sum::<usize>()
            + if slice_parameters {
                parameters.len()
            } else {
                0
            };
        self.reserve(LENGTH_PREFIX_LEN + envelope_len - sliced_len);
        self.put_prefix(envelope_len);
        self.put_envelope_head(stream_id, ENVELOPE_RUN_REQUEST_FIELD, request_len);
        let out = &mut self.scratch;
        rest.encode(out)
            .map_err(|e| FrameError::Malformed(e.to_string()))?;
        let mut parts = Vec::new();
        if input.is_some() {
            put_key_varint(
                out,
                RUN_REQUEST_INPUT_FIELD,
                WireType::LengthDelimited,
                input_len as u64,
            );
            if slice_parameters {
                put_sliced_field(out, &mut parts, RUN_INPUT_PARAMETERS_FIELD, parameters);
            } else {
                Out::bytes(out, RUN_INPUT_PARAMETERS_FIELD, parameters);
            }
            if escaped {
                prost::encoding::bool::encode(RUN_INPUT_ESCAPED_CONTENT_FIELD, &escaped, out);
            }
            prost::encoding::uint32::encode_packed(RUN_INPUT_PARAMETERS_INDEX_FIELD, index, out);
            for (m, slice) in messages.iter().zip(&sliced) {
                put_key_varint(
                    out,
                    RUN_INPUT_MESSAGES_FIELD,
                    WireType::LengthDelimited,
                    m.encoded_len() as u64,
                );
                Out::bytes(out, CHAT_MESSAGE_ROLE_FIELD, &m.role);
                Out::bytes(out, CHAT_MESSAGE_EXTRA_FIELD, &m.extra_json);
                if *slice {
                    put_sliced_field(out, &mut parts, CHAT_MESSAGE_CONTENT_FIELD, &m.content);
                } else {
                    Out::bytes(out, CHAT_MESSAGE_CONTENT_FIELD, &m.content);
                }
            }
        }
        if !out.is_empty() || parts.is_empty() {
            parts.push(out.split().freeze());
        }
        let mut parts = parts.into_iter();
        let head = parts.next().unwrap_or_default();
        let body = parts.next().unwrap_or_default();
        Ok(BodyFrame {
            head,
            body,
            more: parts.collect(),
        })
    }
}

/// Writes a `bytes` field's key and length into `out`, then hands `out`'s
/// bytes and the field's own bytes to `parts`, uncopied.
fn put_sliced_field(out: &mut BytesMut, parts: &mut Vec<Bytes>, field: u32, bytes: &Bytes) {
    put_key_varint(out, field, WireType::LengthDelimited, bytes.len() as u64);
    parts.push(out.split().freeze());
    parts.push(bytes.clone());
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use proptest::prelude::*;
    use proto::v1::{ChatMessage, RunInput};
    use proto::{Envelope, Msg};

    use super::super::{FrameDecoder, message_field};
    use super::*;

    fn run(stream_id: u64, request: &RunRequest) -> Envelope {
        Envelope {
            stream_id,
            msg: Some(Msg::RunRequest(Box::new(request.clone()))),
        }
    }

    fn text(len: usize, byte: u8) -> Bytes {
        Bytes::from(vec![byte; len])
    }

    /// A frame's slices, one buffer as the receiver reads them.
    fn bytes_of(frame: &BodyFrame) -> BytesMut {
        let mut b = BytesMut::from(&frame.head[..]);
        for part in frame.parts() {
            b.put_slice(part);
        }
        b
    }

    fn decode_all(mut rx: BytesMut) -> Vec<Envelope> {
        let mut decoder = FrameDecoder::default();
        let mut out = Vec::new();
        while let Some(envelope) = decoder.decode(&mut rx).unwrap() {
            out.push(envelope);
        }
        assert!(rx.is_empty(), "{} bytes left", rx.len());
        out
    }

    #[test]
    fn a_long_text_is_its_own_slice_and_the_frame_decodes_as_the_request() {
        let prompt = text(100_000, b'p');
        let request = RunRequest {
            run_id: "r1".into(),
            adapter: "a".into(),
            target: "m".into(),
            input: Some(RunInput {
                messages: vec![
                    ChatMessage {
                        role: "system".into(),
                        content: "be brief".into(),
                        extra_json: Bytes::new(),
                    },
                    ChatMessage {
                        role: "user".into(),
                        content: prompt.clone(),
                        extra_json: br#"{"name":"ann"}"#[..].into(),
                    },
                ],
                parameters_json: br#"{"temperature":0}"#[..].into(),
                escaped_content: false,
                parameters_index: vec![2, 13, 15, 16],
            }),
            ..RunRequest::default()
        };
        let mut encoder = FrameEncoder::default();
        assert!(has_long_texts(&request));
        let frame = encoder.encode_run_request(7, request.clone()).unwrap();
        assert_eq!(
            frame.body.as_ptr(),
            prompt.as_ptr(),
            "the prompt was copied"
        );
        assert!(frame.more.is_empty(), "nothing follows the last text");
        assert_eq!(
            message_field(&frame.head),
            Some(proto::ENVELOPE_RUN_REQUEST_FIELD)
        );
        assert_eq!(decode_all(bytes_of(&frame)), [run(7, &request)]);
        let whole = encoder.encode(&run(7, &request)).unwrap();
        assert_eq!(frame.len(), whole.len(), "the same length as prost's frame");

        let short = RunRequest {
            input: Some(RunInput {
                messages: vec![ChatMessage {
                    content: text(COPY_MAX, b'x'),
                    ..ChatMessage::default()
                }],
                ..RunInput::default()
            }),
            ..RunRequest::default()
        };
        assert!(!has_long_texts(&short));
        assert!(!has_long_texts(&RunRequest::default()));
    }

    #[test]
    fn long_parameters_are_their_own_slice() {
        // An agent's tools: short messages, tens of KB of parameters.
        let tools = text(21_000, b't');
        let request = RunRequest {
            run_id: "r2".into(),
            input: Some(RunInput {
                messages: vec![ChatMessage {
                    role: "user".into(),
                    content: "hi".into(),
                    ..ChatMessage::default()
                }],
                parameters_json: tools.clone(),
                parameters_index: vec![2, 7, 9, 20_999],
                ..RunInput::default()
            }),
            ..RunRequest::default()
        };
        assert!(has_long_texts(&request));
        let mut encoder = FrameEncoder::default();
        let frame = encoder.encode_run_request(9, request.clone()).unwrap();
        assert_eq!(frame.body.as_ptr(), tools.as_ptr(), "the tools were copied");
        assert_eq!(frame.more.len(), 1, "the index and the message follow");
        assert_eq!(decode_all(bytes_of(&frame)), [run(9, &request)]);
        let whole = encoder.encode(&run(9, &request)).unwrap();
        assert_eq!(frame.len(), whole.len(), "the same length as prost's frame");
    }

    fn message() -> impl Strategy<Value = ChatMessage> {
        let content = prop_oneof![
            Just(0usize),
            1usize..200,
            (COPY_MAX + 1)..(COPY_MAX + 3_000),
        ];
        (
            "[a-z]{0,6}",
            content,
            any::<u8>(),
            prop::collection::vec(any::<u8>(), 0..20),
        )
            .prop_map(|(role, len, byte, extra)| ChatMessage {
                role: role.into(),
                content: text(len, byte),
                extra_json: extra.into(),
            })
    }

    proptest! {
        /// Any request (no input, no messages, up to 40 of them, long texts
        /// past the parts' bound, long parameters, a parameters index or
        /// none) decodes as itself, whole or in pieces of
        /// any length; its frame has at most `MAX_BODY_PARTS` slices, and
        /// the long texts it slices are the request's own bytes.
        #[test]
        fn any_run_request_decodes_as_itself_whole_or_in_pieces(
            stream_id in 0u64..u64::MAX,
            messages in prop::option::of(prop::collection::vec(message(), 0..40)),
            parameters in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..30),
                prop::collection::vec(any::<u8>(), COPY_MAX + 1..COPY_MAX + 3_000),
            ],
            parameters_index in prop::collection::vec(any::<u32>(), 0..12),
            run_id in "[a-z0-9]{0,12}",
            piece_len in 1usize..20_000,
            escaped_content in any::<bool>(),
        ) {
            let request = RunRequest {
                run_id,
                input: messages.map(|messages| RunInput {
                    messages,
                    parameters_json: parameters.into(),
                    escaped_content,
                    parameters_index,
                }),
                ..RunRequest::default()
            };
            let mut encoder = FrameEncoder::default();
            let frame = encoder.encode_run_request(stream_id, request.clone()).unwrap();
            prop_assert!(frame.parts().count() <= MAX_BODY_PARTS);
            let long: Vec<usize> = request.input.iter()
                .flat_map(|i| {
                    std::iter::once(&i.parameters_json).chain(i.messages.iter().map(|m| &m.content))
                })
                .filter(|text| text.len() > COPY_MAX)
                .map(|text| text.as_ptr() as usize)
                .collect();
            let sliced = frame.parts().filter(|p| long.contains(&(p.as_ptr() as usize))).count();
            prop_assert_eq!(sliced, long.len().min(MAX_BODY_PARTS / 2), "long texts not sliced");
            let expected = run(stream_id, &request);
            prop_assert_eq!(decode_all(bytes_of(&frame)), vec![expected.clone()]);

            let slices = std::iter::once(frame.head.clone()).chain(frame.parts().cloned());
            let pieces = encoder.encode_pieces(stream_id, slices, piece_len).unwrap();
            let mut rx = BytesMut::new();
            for piece in &pieces {
                rx.put_slice(&bytes_of(piece));
            }
            prop_assert_eq!(decode_all(rx), vec![expected]);
        }
    }
}
