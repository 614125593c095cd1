//! A tunnel's request encoded without prost's `bytes` clones.
//!
//! prost writes a `Bytes` field by cloning it into the buffer and dropping
//! the clone (two reference-count operations), and each nested `Header`
//! through its own measuring pass: ~1.85k instructions for a small chat's
//! `ProviderTunnelRequest` on the Edge (`bench-results/profiles.md`,
//! round 38). [`FrameEncoder::encode`] writes it from borrowed slices
//! instead, byte-identical to prost (property-tested). The message is
//! described once ([`Fields`]) and run twice: through a length counter,
//! then into the frame.

use bytes::BytesMut;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use proto::v1::{Header, ProviderTunnelRequest};
use proto::{HEADER_NAME_FIELD, HEADER_VALUE_FIELD, TUNNEL_REQUEST_BODY_FIELD};

/// A message's fields, in field order, written to an [`Out`].
pub(super) trait Fields {
    fn fields<O: Out>(&self, out: &mut O);
}

/// Where fields go: a length counter or a frame. A proto3 field equal to
/// its default is left out, as prost leaves it out.
pub(super) trait Out: Sized {
    fn varint(&mut self, field: u32, value: u64);
    fn bytes(&mut self, field: u32, bytes: &[u8]);
    fn message(&mut self, field: u32, message: &impl Fields);
}

/// A message's encoded length.
pub(super) fn len_of(message: &impl Fields) -> usize {
    let mut len = Len(0);
    message.fields(&mut len);
    len.0
}

struct Len(usize);

impl Out for Len {
    fn varint(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.0 += key_len(field) + encoded_len_varint(value);
        }
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.0 += key_len(field) + encoded_len_varint(bytes.len() as u64) + bytes.len();
        }
    }

    fn message(&mut self, field: u32, message: &impl Fields) {
        let len = len_of(message);
        self.0 += key_len(field) + encoded_len_varint(len as u64) + len;
    }
}

impl Out for BytesMut {
    fn varint(&mut self, field: u32, value: u64) {
        if value != 0 {
            encode_key(field, WireType::Varint, self);
            encode_varint(value, self);
        }
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        if !bytes.is_empty() {
            encode_key(field, WireType::LengthDelimited, self);
            encode_varint(bytes.len() as u64, self);
            self.extend_from_slice(bytes);
        }
    }

    fn message(&mut self, field: u32, message: &impl Fields) {
        encode_key(field, WireType::LengthDelimited, self);
        encode_varint(len_of(message) as u64, self);
        message.fields(self);
    }
}

impl Fields for Header {
    fn fields<O: Out>(&self, out: &mut O) {
        out.bytes(HEADER_NAME_FIELD, &self.name);
        out.bytes(HEADER_VALUE_FIELD, &self.value);
    }
}

/// `ProviderTunnelRequest`'s fields as `runtime.proto` numbers them (a
/// number wrong here fails the property test against prost).
impl Fields for ProviderTunnelRequest {
    fn fields<O: Out>(&self, out: &mut O) {
        out.bytes(1, self.tunnel_id.as_bytes());
        out.bytes(2, self.adapter.as_bytes());
        out.bytes(3, self.target.as_bytes());
        out.bytes(4, self.method.as_bytes());
        out.bytes(5, self.path.as_bytes());
        for header in &self.headers {
            out.message(6, header);
        }
        out.bytes(TUNNEL_REQUEST_BODY_FIELD, &self.body);
        out.varint(8, self.response_stall_timeout_ms);
        out.varint(9, self.hard_timeout_ms);
        out.bytes(10, &self.credential_lease);
        out.varint(11, u64::from(self.initial_window));
        out.varint(12, u64::from(self.extract_usage));
        out.varint(13, u64::from(self.strip_usage_event));
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;
    use prost::Message;
    use proto::v1::{Header, ProviderTunnelRequest};
    use proto::{Envelope, Msg};

    use super::super::FrameEncoder;

    fn by_prost(envelope: &Envelope) -> Bytes {
        let mut out = (envelope.encoded_len() as u32).to_be_bytes().to_vec();
        envelope.encode(&mut out).unwrap();
        Bytes::from(out)
    }

    fn any_bytes(max: usize) -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
    }

    prop_compose! {
        fn any_request()(
            texts in proptest::array::uniform5(".{0,24}"),
            headers in proptest::collection::vec((any_bytes(24), any_bytes(64)), 0..6),
            body in any_bytes(256),
            timeouts in any::<(u64, u64)>(),
            credential_lease in any_bytes(32),
            initial_window in any::<u32>(),
            flags in any::<(bool, bool)>(),
        ) -> ProviderTunnelRequest {
            let [tunnel_id, adapter, target, method, path] = texts;
            ProviderTunnelRequest {
                tunnel_id, adapter, target, method, path,
                headers: headers.into_iter().map(|(name, value)| Header { name, value }).collect(),
                body,
                response_stall_timeout_ms: timeouts.0,
                hard_timeout_ms: timeouts.1,
                credential_lease,
                initial_window,
                extract_usage: flags.0,
                strip_usage_event: flags.1,
            }
        }
    }

    #[test]
    fn a_default_request_is_prosts_too() {
        for stream_id in [0, 1, u64::MAX] {
            let envelope = Envelope {
                stream_id,
                msg: Some(Msg::ProviderTunnelRequest(Box::default())),
            };
            let ours = FrameEncoder::default().encode(&envelope).unwrap();
            assert_eq!(ours, by_prost(&envelope));
        }
    }

    #[test]
    fn a_request_over_the_limit_is_refused() {
        let envelope = Envelope {
            stream_id: 1,
            msg: Some(Msg::ProviderTunnelRequest(Box::new(
                ProviderTunnelRequest {
                    body: Bytes::from(vec![b'x'; 2048]),
                    ..ProviderTunnelRequest::default()
                },
            ))),
        };
        assert!(matches!(
            FrameEncoder::new(1024).encode(&envelope),
            Err(super::super::FrameError::TooLarge { .. })
        ));
    }

    proptest! {
        #[test]
        fn any_request_encodes_as_prost_does(stream_id in any::<u64>(), request in any_request()) {
            let envelope = Envelope {
                stream_id,
                msg: Some(Msg::ProviderTunnelRequest(Box::new(request))),
            };
            let ours = FrameEncoder::default().encode(&envelope).unwrap();
            prop_assert_eq!(ours, by_prost(&envelope));
        }
    }
}
