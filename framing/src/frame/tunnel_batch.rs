//! A tunnel's frames that were ready together, sent as one `batch` frame.
//!
//! A small answer is four frames on the link — `status`, `headers`, `body`,
//! `end` — and each costs the Node an encode and a queue, and the Edge a
//! decode, a delivery and a channel message. A `TunnelBatch` carries
//! several of them in one frame, to an Edge that takes batches
//! (`NodeConfigPayload.tunnel_batches`; `bench-results/profiles.md`, round
//! 46, for what it saves). A sink encodes a tunnel's head first
//! ([`FrameEncoder::tunnel_head`]: the batch's `status` and `headers`
//! fields) and holds it until it knows what goes with it; then
//! [`FrameEncoder::encode_tunnel_batch`] writes the frame: that head, the
//! `end`, the body, each when given, the body following the frame's head as
//! its own slices (as [`FrameEncoder::encode_tunnel_body_parts`]'s do).
//! Byte-identical to prost's encoding of the envelope holding the same
//! batch (property-tested).

use bytes::Bytes;
use proto::v1::{TunnelEnd, TunnelStatus};
use proto::{
    ENVELOPE_TUNNEL_FRAME_FIELD, TUNNEL_FRAME_BATCH_FIELD, TUNNEL_FRAME_BODY_FIELD,
    TUNNEL_FRAME_END_FIELD, TUNNEL_FRAME_HEADERS_FIELD, TUNNEL_FRAME_STATUS_FIELD,
};

use super::encode::body_parts_len;
use super::tunnel_encode::{Fields, HeaderPairs, Out};
use super::{BodyFrame, FrameEncoder, FrameError};

/// A batch's fields, in field order (`TunnelBatch` numbers them as the
/// `ProviderTunnelFrame` variants they stand for).
pub(super) struct BatchFields<'a, H> {
    pub(super) status: Option<u32>,
    pub(super) headers: Option<&'a H>,
    /// `status` and `headers` already encoded (a [`TunnelHead`]'s bytes),
    /// in their place.
    pub(super) head: &'a [u8],
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
        out.raw(self.head);
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

/// A tunnel's `status` and `headers`, encoded as the first fields of a
/// batch, for a sink to hold until it knows what is ready to go with
/// them ([`FrameEncoder::encode_tunnel_batch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelHead(Bytes);

impl FrameEncoder {
    /// A tunnel's head, `status: {code}` and `headers` (each a borrowed
    /// `(name, value)` pair), encoded for a later batch. Its size is
    /// checked with the frame it goes in.
    pub fn tunnel_head(&mut self, code: u32, headers: &[(&[u8], &[u8])]) -> TunnelHead {
        let fields = BatchFields {
            status: Some(code),
            headers: Some(&HeaderPairs(headers)),
            head: &[],
            end: None,
            body: BatchBody::Inline(&[]),
        };
        self.reserve(super::tunnel_encode::len_of(&fields));
        fields.fields(&mut self.scratch);
        TunnelHead(self.scratch.split().freeze())
    }

    /// Encodes `ProviderTunnelFrame{batch: {status, headers, end, body}}` on
    /// `stream_id`: `head`'s status and headers, `end`, and the body
    /// `(body, more)` (`body` then each of `more`), each when given. Only
    /// the frame's head is written; the body's slices follow it, never
    /// copied. With no body (or an empty one) the frame's head is the whole
    /// frame, and the returned slices are empty.
    pub fn encode_tunnel_batch(
        &mut self,
        stream_id: u64,
        head: Option<&TunnelHead>,
        body: Option<(Bytes, Vec<Bytes>)>,
        end: Option<&TunnelEnd>,
    ) -> Result<BodyFrame, FrameError> {
        let (body, more) = body.unwrap_or_default();
        let body_len = body_parts_len(&body, &more)?;
        let head = self.encode_fields_trailing(
            stream_id,
            ENVELOPE_TUNNEL_FRAME_FIELD,
            &batch(head, body_len, end),
            body_len,
        )?;
        Ok(BodyFrame { head, body, more })
    }

    /// Whether [`encode_tunnel_batch`](Self::encode_tunnel_batch) of the
    /// same parts would succeed: the frame is within
    /// [`max_frame_len`](Self::max_frame_len) and the body within
    /// [`MAX_BODY_PARTS`](super::MAX_BODY_PARTS) slices. A head held for
    /// the first body frame may make that frame too long, and then goes
    /// alone.
    pub fn tunnel_batch_fits(
        &self,
        stream_id: u64,
        head: Option<&TunnelHead>,
        body: Option<&(Bytes, Vec<Bytes>)>,
        end: Option<&TunnelEnd>,
    ) -> bool {
        let Ok(body_len) = body.map_or(Ok(0), |(body, more)| body_parts_len(body, more)) else {
            return false;
        };
        let msg_len = super::tunnel_encode::len_of(&batch(head, body_len, end));
        let len = super::encode::envelope_len(stream_id, ENVELOPE_TUNNEL_FRAME_FIELD, msg_len);
        len <= self.max_frame_len()
    }
}

/// The batch of `head`, `body_len` trailing body bytes and `end`, as the
/// one field of its `ProviderTunnelFrame`.
fn batch<'a>(
    head: Option<&'a TunnelHead>,
    body_len: usize,
    end: Option<&'a TunnelEnd>,
) -> InFrame<'a, HeaderPairs<'a>> {
    InFrame(BatchFields {
        status: None,
        headers: None,
        head: head.map_or(&[][..], |head| &head.0[..]),
        end,
        body: match body_len {
            0 => BatchBody::Inline(&[]),
            len => BatchBody::Trailing(len),
        },
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;
    use proto::v1::provider_tunnel_frame::Frame;
    use proto::v1::{ProviderTunnelFrame, TunnelBatch, TunnelEnd, TunnelHeaders, TunnelStatus};
    use proto::{Envelope, Msg};

    use super::super::tunnel_tests::{any_usage, decoded, frame_by_prost, joined};
    use super::super::{BodyFrame, FrameEncoder, FrameError, MAX_BODY_PARTS};

    type Pairs<'a> = [(&'a [u8], &'a [u8])];

    fn batch_envelope(stream_id: u64, batch: TunnelBatch) -> Envelope {
        Envelope {
            stream_id,
            msg: Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
                frame: Some(Frame::Batch(Box::new(batch))),
            })),
        }
    }

    /// What our encoder writes of a batch, and what prost writes of it.
    fn both(
        stream_id: u64,
        head: Option<(u32, &Pairs<'_>)>,
        body: Option<(Bytes, Vec<Bytes>)>,
        end: Option<TunnelEnd>,
    ) -> (BodyFrame, Envelope) {
        let mut encoder = FrameEncoder::default();
        let held = head.map(|(code, fields)| encoder.tunnel_head(code, fields));
        let whole: Vec<u8> = body
            .iter()
            .flat_map(|(body, more)| std::iter::once(body).chain(more))
            .flat_map(|part| part.iter().copied())
            .collect();
        let frame = encoder
            .encode_tunnel_batch(stream_id, held.as_ref(), body, end.as_ref())
            .unwrap();
        let batch = TunnelBatch {
            status: head.map(|(code, _)| TunnelStatus { code }),
            headers: head.map(|(_, fields)| TunnelHeaders::copied(fields)),
            end,
            body: Bytes::from(whole),
        };
        (frame, batch_envelope(stream_id, batch))
    }

    const FIELDS: [(&[u8], &[u8]); 2] = [
        (b"content-type", b"application/json"),
        (b"content-length", b"12"),
    ];

    #[test]
    fn a_small_answer_is_one_batch_of_prosts_bytes_with_the_body_uncopied() {
        let body = Bytes::from_static(b"{\"usage\":{}}");
        let (frame, expected) = both(
            7,
            Some((200, &FIELDS)),
            Some((body.clone(), Vec::new())),
            Some(TunnelEnd::default()),
        );
        assert_eq!(frame.body.as_ptr(), body.as_ptr(), "not copied");
        let wire = joined(&frame);
        assert_eq!(wire, frame_by_prost(&expected));
        assert_eq!(decoded(&wire), expected);
    }

    #[test]
    fn a_head_alone_is_its_frame_s_head() {
        let (frame, expected) = both(7, Some((200, &FIELDS)), None, None);
        assert!(frame.body.is_empty() && frame.more.is_empty());
        assert_eq!(frame.head, frame_by_prost(&expected));
        assert_eq!(decoded(&frame.head), expected);
    }

    #[test]
    fn a_last_body_in_slices_with_its_end_is_prosts_batch() {
        let parts = vec![Bytes::from_static(b"\n"), Bytes::from_static(b"tail")];
        let (frame, expected) = both(
            9,
            None,
            Some((Bytes::from_static(b"data"), parts)),
            Some(TunnelEnd::default()),
        );
        assert_eq!(joined(&frame), frame_by_prost(&expected));
        assert_eq!(decoded(&joined(&frame)), expected);
    }

    #[test]
    fn an_empty_body_is_left_out_as_prost_leaves_it() {
        let (frame, expected) = both(
            1,
            None,
            Some((Bytes::new(), vec![Bytes::new()])),
            Some(TunnelEnd::default()),
        );
        assert_eq!(joined(&frame), frame_by_prost(&expected));
    }

    #[test]
    fn too_many_slices_or_too_long_a_frame_is_refused() {
        let end = TunnelEnd::default();
        let more = vec![Bytes::from_static(b"x"); MAX_BODY_PARTS];
        assert!(matches!(
            FrameEncoder::default().encode_tunnel_batch(1, None, Some((Bytes::new(), more)), None),
            Err(FrameError::TooManyParts { .. })
        ));
        let body = Bytes::from(vec![b'x'; 2048]);
        assert!(matches!(
            FrameEncoder::new(1024).encode_tunnel_batch(1, None, Some((body, vec![])), Some(&end)),
            Err(FrameError::TooLarge { .. })
        ));
        let value = vec![b'v'; 2048];
        let mut encoder = FrameEncoder::new(1024);
        let head = encoder.tunnel_head(200, &[(b"x", &value[..])]);
        assert!(matches!(
            encoder.encode_tunnel_batch(1, Some(&head), None, None),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn whether_a_batch_fits_is_whether_it_encodes() {
        let value = vec![b'v'; 300];
        let end = TunnelEnd::default();
        let mut encoder = FrameEncoder::new(1024);
        let head = encoder.tunnel_head(200, &[(b"x-long", &value[..])]);
        let mut seen = [false; 2];
        for body_len in [0, 1, 600, 650, 690, 700, 720, 1024] {
            for (head, end) in [
                (Some(&head), None),
                (Some(&head), Some(&end)),
                (None, Some(&end)),
            ] {
                let body = (body_len > 0).then(|| (Bytes::from(vec![b'b'; body_len]), Vec::new()));
                let fits = encoder.tunnel_batch_fits(7, head, body.as_ref(), end);
                let encoded = encoder.encode_tunnel_batch(7, head, body, end);
                assert_eq!(
                    fits,
                    encoded.is_ok(),
                    "{body_len} {:?} {:?}",
                    head.is_some(),
                    end
                );
                seen[usize::from(fits)] = true;
            }
        }
        assert_eq!(seen, [true, true], "both sides of the limit");
    }

    fn any_pairs() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
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
        /// Any head, body and end, each given or not, are written as
        /// prost writes their batch, and read back as it.
        #[test]
        fn any_batch_is_written_as_prost_writes_it(
            stream_id in any::<u64>(),
            head in proptest::option::of((any::<u32>(), any_pairs())),
            slices in proptest::option::of(any_slices()),
            end in proptest::option::of(proptest::option::of(any_usage())),
        ) {
            let fields = head.as_ref().map(|(code, pairs)| {
                let pairs: Vec<(&[u8], &[u8])> =
                    pairs.iter().map(|(n, v)| (&n[..], &v[..])).collect();
                (*code, pairs)
            });
            let body = slices.map(|slices| {
                let mut parts = slices.into_iter().map(Bytes::from);
                let first = parts.next().unwrap_or_default();
                (first, parts.collect())
            });
            let (frame, expected) = both(
                stream_id,
                fields.as_ref().map(|(code, pairs)| (*code, &pairs[..])),
                body,
                end.map(|usage| TunnelEnd { usage }),
            );
            let wire = joined(&frame);
            prop_assert_eq!(&wire, &frame_by_prost(&expected));
            prop_assert_eq!(decoded(&wire), expected);
        }
    }
}
