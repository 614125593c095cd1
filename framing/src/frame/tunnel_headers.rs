//! A tunnel's `headers` frame encoded from borrowed fields.
//!
//! prost writes a `Bytes` field by cloning it and dropping the clone, and
//! the `Header` messages it writes must first be built from `Bytes` slices
//! of the provider's head: two to four reference-count operations a field.
//! [`FrameEncoder::encode_tunnel_headers`] writes the same bytes from
//! borrowed slices (~2k instructions a small answer on the Node;
//! `bench-results/profiles.md`, round 37).

use bytes::Bytes;
use proto::ENVELOPE_TUNNEL_FRAME_FIELD;

use super::tunnel_encode::OneOf;
use super::{FrameEncoder, FrameError};

impl FrameEncoder {
    /// Encodes `ProviderTunnelFrame{headers: TunnelHeaders{headers}}` on
    /// `stream_id`, each header a `(name, value)` pair, byte-identical to
    /// [`encode`](Self::encode) of the `Envelope` holding the same
    /// `Header`s (empty names and values are left out, as prost leaves
    /// out a default field).
    pub fn encode_tunnel_headers(
        &mut self,
        stream_id: u64,
        headers: &[(&[u8], &[u8])],
    ) -> Result<Bytes, FrameError> {
        self.encode_fields(
            stream_id,
            ENVELOPE_TUNNEL_FRAME_FIELD,
            &OneOf::HeaderPairs(headers),
        )
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use proptest::prelude::*;
    use proto::v1::provider_tunnel_frame::Frame;
    use proto::v1::{ProviderTunnelFrame, TunnelHeaders};
    use proto::{Envelope, Msg};

    use super::super::tunnel_tests::frame_by_prost;
    use super::super::{FrameDecoder, FrameEncoder};

    /// A frame's headers as (name, value) pairs.
    type Fields<'a> = Vec<(&'a [u8], &'a [u8])>;

    /// What prost makes of the same headers as `Header` messages (not
    /// `encode`, which writes a headers frame with the same field writer).
    fn by_prost(stream_id: u64, headers: &[(&[u8], &[u8])]) -> Bytes {
        let envelope = Envelope {
            stream_id,
            msg: Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
                frame: Some(Frame::Headers(TunnelHeaders::copied(headers))),
            })),
        };
        frame_by_prost(&envelope)
    }

    #[test]
    fn a_headers_frame_is_prosts_byte_for_byte() {
        let long = vec![b'v'; 300];
        let cases: [(u64, Fields<'_>); 4] = [
            (
                7,
                vec![
                    (b"content-type", b"application/json"),
                    (b"x-request-id", b"abc"),
                ],
            ),
            (0, vec![]),
            (u64::MAX, vec![(b"x-empty", b""), (b"", b"no name")]),
            (1 << 20, vec![(b"x-long", &long[..])]),
        ];
        let mut encoder = FrameEncoder::default();
        for (stream_id, headers) in cases {
            let ours = encoder.encode_tunnel_headers(stream_id, &headers).unwrap();
            assert_eq!(
                ours,
                by_prost(stream_id, &headers),
                "{stream_id} {headers:?}"
            );
            let mut buf = BytesMut::from(&ours[..]);
            let decoded = FrameDecoder::new(1 << 20)
                .decode(&mut buf)
                .unwrap()
                .unwrap();
            assert_eq!(decoded.stream_id, stream_id);
        }
    }

    #[test]
    fn a_headers_frame_over_the_limit_is_refused() {
        let value = vec![b'v'; 2048];
        let mut encoder = FrameEncoder::new(1024);
        assert!(matches!(
            encoder.encode_tunnel_headers(3, &[(b"x", &value[..])]),
            Err(super::super::FrameError::TooLarge { .. })
        ));
    }

    proptest! {
        #[test]
        fn any_headers_encode_as_prost_does(
            stream_id in any::<u64>(),
            headers in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..40),
                 proptest::collection::vec(any::<u8>(), 0..200)),
                0..12,
            ),
        ) {
            let pairs: Fields<'_> = headers.iter().map(|(n, v)| (&n[..], &v[..])).collect();
            let ours = FrameEncoder::default().encode_tunnel_headers(stream_id, &pairs).unwrap();
            prop_assert_eq!(ours, by_prost(stream_id, &pairs));
        }
    }
}
