//! The IOP Edge–Node wire.
//!
//! `proto/runtime.proto` is the contract; this crate is its prost-generated
//! Rust form (module [`v1`]) and nothing more. The .proto documents every
//! message; read it first.
//!
//! # Invariants
//! - Built with `protox`, so a fresh machine needs no system `protoc`.
//! - Every protobuf `bytes` field is a [`bytes::Bytes`]: decoding an
//!   [`v1::Envelope`] from a `Bytes` buffer makes body fields refcounted
//!   slices of that buffer (no copy). The `framing` crate relies on this.
//! - No I/O, no runtime, no clock: plain data types.

#![forbid(unsafe_code)]

/// `iop.runtime.v1`: the runtime wire, generated from `runtime.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/iop.runtime.v1.rs"));
}

pub use v1::Envelope;
pub use v1::envelope::Msg;

/// Field number of `Envelope.stream_id`.
pub const ENVELOPE_STREAM_ID_FIELD: u32 = 1;
/// Field number of `Envelope.run_request`.
pub const ENVELOPE_RUN_REQUEST_FIELD: u32 = 20;
/// Field number of `Envelope.run_event`.
pub const ENVELOPE_RUN_EVENT_FIELD: u32 = 21;
/// Field number of `RunEvent.text`.
pub const RUN_EVENT_TEXT_FIELD: u32 = 3;
/// Field number of `Envelope.provider_tunnel_frame`.
pub const ENVELOPE_TUNNEL_FRAME_FIELD: u32 = 31;
/// Field number of `ProviderTunnelFrame.body`.
pub const TUNNEL_FRAME_BODY_FIELD: u32 = 15;
/// Field number of `ProviderTunnelFrame.status`.
pub const TUNNEL_FRAME_STATUS_FIELD: u32 = 1;
/// Field number of `ProviderTunnelFrame.headers`.
pub const TUNNEL_FRAME_HEADERS_FIELD: u32 = 2;
/// Field number of `ProviderTunnelFrame.end`.
pub const TUNNEL_FRAME_END_FIELD: u32 = 4;
/// Field number of `ProviderTunnelFrame.usage`.
pub const TUNNEL_FRAME_USAGE_FIELD: u32 = 6;
/// Field number of `ProviderTunnelFrame.batch`.
pub const TUNNEL_FRAME_BATCH_FIELD: u32 = 7;
/// Field number of `TunnelHeaders.headers`.
pub const TUNNEL_HEADERS_LIST_FIELD: u32 = 1;
/// Field number of `Header.name`.
pub const HEADER_NAME_FIELD: u32 = 1;
/// Field number of `Header.value`.
pub const HEADER_VALUE_FIELD: u32 = 2;
/// Field number of `Envelope.provider_tunnel_request`.
pub const ENVELOPE_TUNNEL_REQUEST_FIELD: u32 = 30;
/// Field number of `ProviderTunnelRequest.body`.
pub const TUNNEL_REQUEST_BODY_FIELD: u32 = 7;
/// Field number of `Envelope.envelope_piece`.
pub const ENVELOPE_PIECE_FIELD: u32 = 70;
/// Field number of `EnvelopePiece.bytes`.
pub const PIECE_BYTES_FIELD: u32 = 2;
/// Field number of `RunRequest.input`.
pub const RUN_REQUEST_INPUT_FIELD: u32 = 6;
/// Field number of `RunInput.messages`.
pub const RUN_INPUT_MESSAGES_FIELD: u32 = 1;
/// Field number of `RunInput.parameters_json`.
pub const RUN_INPUT_PARAMETERS_FIELD: u32 = 2;
/// Field number of `RunInput.escaped_content`.
pub const RUN_INPUT_ESCAPED_CONTENT_FIELD: u32 = 3;
/// Field number of `RunInput.parameters_index`.
pub const RUN_INPUT_PARAMETERS_INDEX_FIELD: u32 = 4;
/// Field number of `ChatMessage.role`.
pub const CHAT_MESSAGE_ROLE_FIELD: u32 = 1;
/// Field number of `ChatMessage.content`.
pub const CHAT_MESSAGE_CONTENT_FIELD: u32 = 2;
/// Field number of `ChatMessage.extra_json`.
pub const CHAT_MESSAGE_EXTRA_FIELD: u32 = 3;

/// The default response-stall timeout (F20), used when the wire carries 0.
pub const DEFAULT_RESPONSE_STALL_TIMEOUT_MS: u64 = 300_000;

/// What every `RunEvent` costs of its run's credit besides its payload, so
/// that events without text (starts, usage, empty deltas) are bounded too.
pub const RUN_EVENT_CREDIT_BASE: u32 = 64;

/// The credit a `RunEvent` spends of its run's window
/// (`RunRequest.initial_window`): its `text`, `finish_reason` and
/// `extra_json` bytes plus [`RUN_EVENT_CREDIT_BASE`]. The Node spends it
/// when it sends the event and the Edge grants it back when its client took
/// the event, so both ends compute it from the same event.
pub fn run_event_credit(event: &v1::RunEvent) -> u32 {
    let payload = event.text.len() + event.finish_reason.len() + event.extra_json.len();
    RUN_EVENT_CREDIT_BASE.saturating_add(u32::try_from(payload).unwrap_or(u32::MAX))
}

impl v1::TunnelHeaders {
    /// The message holding copies of `fields`, each a `(name, value)`
    /// pair, in order.
    pub fn copied(fields: &[(&[u8], &[u8])]) -> Self {
        let headers = fields
            .iter()
            .map(|&(name, value)| v1::Header {
                name: bytes::Bytes::copy_from_slice(name),
                value: bytes::Bytes::copy_from_slice(value),
            })
            .collect();
        Self { headers }
    }
}

#[cfg(test)]
mod tests {
    use super::v1::*;
    use bytes::Bytes;
    use prost::Message;

    #[test]
    fn bytes_fields_decode_as_slices_of_the_input() {
        let body = Bytes::from(vec![7u8; 1024]);
        let env = Envelope {
            stream_id: 3,
            msg: Some(envelope::Msg::ProviderTunnelFrame(ProviderTunnelFrame {
                frame: Some(provider_tunnel_frame::Frame::Body(body.clone())),
            })),
        };
        let wire = Bytes::from(env.encode_to_vec());
        let back = Envelope::decode(wire.clone()).unwrap();
        assert_eq!(back, env);
        let Some(envelope::Msg::ProviderTunnelFrame(ProviderTunnelFrame {
            frame: Some(provider_tunnel_frame::Frame::Body(got)),
        })) = back.msg
        else {
            panic!("not a body frame")
        };
        let range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();
        assert!(range.contains(&(got.as_ptr() as usize)));
    }

    #[test]
    fn a_run_event_costs_its_payload_and_a_base() {
        let mut event = RunEvent {
            text: "héllo".into(),
            finish_reason: "stop".into(),
            extra_json: Bytes::from_static(b"{}"),
            ..RunEvent::default()
        };
        assert_eq!(
            crate::run_event_credit(&event),
            crate::RUN_EVENT_CREDIT_BASE + 6 + 4 + 2
        );
        event = RunEvent::default();
        assert_eq!(
            crate::run_event_credit(&event),
            crate::RUN_EVENT_CREDIT_BASE,
            "an event without payload still costs"
        );
    }

    #[test]
    fn optional_usage_counts_keep_presence() {
        let usage = Usage {
            input_tokens: 5,
            output_tokens: 7,
            reasoning_tokens: Some(0),
            cached_input_tokens: None,
        };
        let back = Usage::decode(usage.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back.reasoning_tokens, Some(0), "a reported zero is kept");
        assert_eq!(back.cached_input_tokens, None, "unreported stays absent");
    }
}
