//! A tunnel's frames that were ready together, sent as one `batch` frame.
//!
//! A small answer is four frames on the link — `status`, `headers`, `body`,
//! `end` — and each costs the Node an encode and a queue, and the Edge a
//! decode, a delivery and a channel message. A `TunnelBatch` carries
//! several of them in one frame (two frames a small answer: ~1.0k fewer
//! instructions on the Edge, 1.2–1.9k on the Node;
//! `bench-results/profiles.md`, round 46), to an Edge that takes batches
//! (`NodeConfigPayload.tunnel_batches`):
//! [`FrameEncoder::encode_tunnel_head`] writes a tunnel's `status` and
//! `headers` together, and [`FrameEncoder::encode_tunnel_last`] its last
//! body bytes with its `end`, the body following the head as its own
//! slices, as [`FrameEncoder::encode_tunnel_body_parts`] does. Both are
//! byte-identical to prost's encoding of the envelope holding the same
//! batch (property-tested).

use bytes::Bytes;
use proto::v1::{TunnelEnd, TunnelHeaders, TunnelStatus};
use proto::{
    ENVELOPE_TUNNEL_FRAME_FIELD, TUNNEL_FRAME_BATCH_FIELD, TUNNEL_FRAME_BODY_FIELD,
    TUNNEL_FRAME_END_FIELD, TUNNEL_FRAME_HEADERS_FIELD, TUNNEL_FRAME_STATUS_FIELD,
};

use super::encode::MAX_BODY_PARTS;
use super::tunnel_encode::{Fields, HeaderPairs, Out};
use super::{BodyFrame, FrameEncoder, FrameError};

/// A batch's fields, in field order (`TunnelBatch` numbers them as the
/// `ProviderTunnelFrame` variants they stand for).
pub(super) struct BatchFields<'a, H> {
    pub(super) status: Option<u32>,
    pub(super) headers: Option<&'a H>,
    pub(super) end: Option<&'a TunnelEnd>,
    pub(super) body: BatchBody<'a>,
}

/// Where a batch's body bytes go.
pub(super) enum BatchBody<'a> {
    /// Into the frame (left out when empty, as prost leaves it out).
    Inline(&'a [u8]),
    /// After the frame's head, as their own slices: this many bytes, at
    /// least one.
    Trailing(usize),
}

impl<H: Fields> Fields for BatchFields<'_, H> {
    fn fields<O: Out>(&self, out: &mut O) {
        if let Some(code) = self.status {
            out.message(TUNNEL_FRAME_STATUS_FIELD, &TunnelStatus { code });
        }
        if let Some(headers) = self.headers {
            out.message(TUNNEL_FRAME_HEADERS_FIELD, headers);
        }
        if let Some(end) = self.end {
            out.message(TUNNEL_FRAME_END_FIELD, end);
        }
        match self.body {
            BatchBody::Inline(body) => out.bytes(TUNNEL_FRAME_BODY_FIELD, body),
            BatchBody::Trailing(len) => out.trailing(TUNNEL_FRAME_BODY_FIELD, len),
        }
    }
}

/// A batch as the one field of its `ProviderTunnelFrame`.
struct InFrame<'a, H>(BatchFields<'a, H>);

impl<H: Fields> Fields for InFrame<'_, H> {
    fn fields<O: Out>(&self, out: &mut O) {
        out.message(TUNNEL_FRAME_BATCH_FIELD, &self.0);
    }
}

impl FrameEncoder {
    /// Encodes `ProviderTunnelFrame{batch: {status: {code}, headers}}` on
    /// `stream_id`, each header a borrowed `(name, value)` pair: a tunnel's
    /// head in one frame, for an Edge that takes batches.
    pub fn encode_tunnel_head(
        &mut self,
        stream_id: u64,
        code: u32,
        headers: &[(&[u8], &[u8])],
    ) -> Result<Bytes, FrameError> {
        let batch = BatchFields {
            status: Some(code),
            headers: Some(&HeaderPairs(headers)),
            end: None,
            body: BatchBody::Inline(&[]),
        };
        self.encode_fields(stream_id, ENVELOPE_TUNNEL_FRAME_FIELD, &InFrame(batch))
    }

    /// Encodes `ProviderTunnelFrame{batch: {end, body}}` on `stream_id`, the
    /// body being `body` then each of `more`: a tunnel's last body bytes
    /// and its end in one frame, for an Edge that takes batches. Only the
    /// head is written; the slices follow it, never copied.
    pub fn encode_tunnel_last(
        &mut self,
        stream_id: u64,
        body: Bytes,
        more: Vec<Bytes>,
        end: &TunnelEnd,
    ) -> Result<BodyFrame, FrameError> {
        if more.len() >= MAX_BODY_PARTS {
            return Err(FrameError::TooManyParts {
                parts: more.len() + 1,
                max: MAX_BODY_PARTS,
            });
        }
        let body_len = body.len() + more.iter().map(Bytes::len).sum::<usize>();
        let batch = BatchFields {
            status: None,
            headers: None::<&TunnelHeaders>,
            end: Some(end),
            body: match body_len {
                0 => BatchBody::Inline(&[]),
                len => BatchBody::Trailing(len),
            },
        };
        let head = self.encode_fields_trailing(
            stream_id,
            ENVELOPE_TUNNEL_FRAME_FIELD,
            &InFrame(batch),
            body_len,
        )?;
        Ok(BodyFrame { head, body, more })
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use proptest::prelude::*;
    use proto::v1::provider_tunnel_frame::Frame;
    use proto::v1::{ProviderTunnelFrame, TunnelBatch, TunnelEnd, TunnelHeaders, TunnelStatus};
    use proto::{Envelope, Msg};

    use super::super::tunnel_tests::{any_usage, frame_by_prost};
    use super::super::{BodyFrame, FrameDecoder, FrameEncoder, FrameError, MAX_BODY_PARTS};

    fn batch_envelope(stream_id: u64, batch: TunnelBatch) -> Envelope {
        Envelope {
            stream_id,
            msg: Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
                frame: Some(Frame::Batch(Box::new(batch))),
            })),
        }
    }

    /// A body frame's head and slices, joined as the writer sends them.
    fn joined(frame: &BodyFrame) -> Bytes {
        let mut wire = BytesMut::from(&frame.head[..]);
        frame.parts().for_each(|part| wire.extend_from_slice(part));
        wire.freeze()
    }

    fn decoded(wire: &Bytes) -> Envelope {
        let mut buf = BytesMut::from(&wire[..]);
        let envelope = FrameDecoder::new(1 << 20)
            .decode(&mut buf)
            .unwrap()
            .unwrap();
        assert!(buf.is_empty());
        envelope
    }

    #[test]
    fn a_head_is_prosts_batch_of_status_and_headers() {
        let fields: [(&[u8], &[u8]); 2] = [
            (b"content-type", b"application/json"),
            (b"content-length", b"17"),
        ];
        let ours = FrameEncoder::default()
            .encode_tunnel_head(7, 200, &fields)
            .unwrap();
        let expected = batch_envelope(
            7,
            TunnelBatch {
                status: Some(TunnelStatus { code: 200 }),
                headers: Some(TunnelHeaders::copied(&fields)),
                ..TunnelBatch::default()
            },
        );
        assert_eq!(ours, frame_by_prost(&expected));
        assert_eq!(decoded(&ours), expected);
    }

    #[test]
    fn a_last_frame_is_prosts_batch_of_end_and_body_with_the_body_uncopied() {
        let body = Bytes::from_static(b"{\"usage\":{}}");
        let more = vec![Bytes::from_static(b"\n"), Bytes::from_static(b"tail")];
        let end = TunnelEnd::default();
        let frame = FrameEncoder::default()
            .encode_tunnel_last(9, body.clone(), more.clone(), &end)
            .unwrap();
        assert_eq!(frame.body.as_ptr(), body.as_ptr(), "not copied");
        let expected = batch_envelope(
            9,
            TunnelBatch {
                end: Some(end),
                body: Bytes::from_static(b"{\"usage\":{}}\ntail"),
                ..TunnelBatch::default()
            },
        );
        let wire = joined(&frame);
        assert_eq!(wire, frame_by_prost(&expected));
        assert_eq!(decoded(&wire), expected);
    }

    #[test]
    fn an_empty_last_body_is_left_out_as_prost_leaves_it() {
        let end = TunnelEnd::default();
        let frame = FrameEncoder::default()
            .encode_tunnel_last(1, Bytes::new(), vec![Bytes::new()], &end)
            .unwrap();
        let expected = batch_envelope(
            1,
            TunnelBatch {
                end: Some(end),
                ..TunnelBatch::default()
            },
        );
        assert_eq!(joined(&frame), frame_by_prost(&expected));
    }

    #[test]
    fn too_many_slices_or_too_long_a_frame_is_refused() {
        let end = TunnelEnd::default();
        let more = vec![Bytes::from_static(b"x"); MAX_BODY_PARTS];
        assert!(matches!(
            FrameEncoder::default().encode_tunnel_last(1, Bytes::new(), more, &end),
            Err(FrameError::TooManyParts { .. })
        ));
        let body = Bytes::from(vec![b'x'; 2048]);
        assert!(matches!(
            FrameEncoder::new(1024).encode_tunnel_last(1, body, Vec::new(), &end),
            Err(FrameError::TooLarge { .. })
        ));
        let value = vec![b'v'; 2048];
        assert!(matches!(
            FrameEncoder::new(1024).encode_tunnel_head(1, 200, &[(b"x", &value[..])]),
            Err(FrameError::TooLarge { .. })
        ));
    }

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    fn any_pairs() -> impl Strategy<Value = Pairs> {
        proptest::collection::vec(
            (
                proptest::collection::vec(any::<u8>(), 0..24),
                proptest::collection::vec(any::<u8>(), 0..64),
            ),
            0..8,
        )
    }

    fn any_slices() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..5)
    }

    proptest! {
        #[test]
        fn any_head_is_written_as_prost_writes_it(
            stream_id in any::<u64>(),
            code in any::<u32>(),
            pairs in any_pairs(),
        ) {
            let fields: Vec<(&[u8], &[u8])> =
                pairs.iter().map(|(n, v)| (&n[..], &v[..])).collect();
            let ours = FrameEncoder::default().encode_tunnel_head(stream_id, code, &fields).unwrap();
            let expected = batch_envelope(stream_id, TunnelBatch {
                status: Some(TunnelStatus { code }),
                headers: Some(TunnelHeaders::copied(&fields)),
                ..TunnelBatch::default()
            });
            prop_assert_eq!(ours, frame_by_prost(&expected));
        }

        #[test]
        fn any_last_frame_is_written_as_prost_writes_it(
            stream_id in any::<u64>(),
            slices in any_slices(),
            usage in proptest::option::of(any_usage()),
        ) {
            let mut parts = slices.into_iter().map(Bytes::from);
            let body = parts.next().unwrap_or_default();
            let more: Vec<Bytes> = parts.collect();
            let whole: Vec<u8> = std::iter::once(&body)
                .chain(&more)
                .flat_map(|b| b.iter().copied())
                .collect();
            let end = TunnelEnd { usage };
            let frame = FrameEncoder::default()
                .encode_tunnel_last(stream_id, body, more, &end)
                .unwrap();
            let expected = batch_envelope(stream_id, TunnelBatch {
                end: Some(end),
                body: Bytes::from(whole),
                ..TunnelBatch::default()
            });
            prop_assert_eq!(joined(&frame), frame_by_prost(&expected));
        }
    }
}
