//! Large frames in pieces (`EnvelopePiece`).
//!
//! A frame is written whole: nothing else (not even a heartbeat) can go on
//! the link until its last byte has. A 4 MiB prompt on a 4 mbit/s link is
//! 8 s of that, longer than the heartbeat may wait, and every other
//! stream's request and credit wait behind it. So a sender may cut a large
//! frame into pieces ([`FrameEncoder::encode_pieces`]): each piece is a frame
//! of its own on the same stream, carrying the next bytes of the whole
//! envelope (its encoding without the length prefix), the last one marked.
//! The link writer then takes them like any other frames, in turn with the
//! other streams' (`fair_queue`), heartbeats overtaking at every piece.
//!
//! The receiver's [`FrameDecoder`](super::FrameDecoder) gathers one stream's
//! pieces and hands out the whole envelope when the last arrives, as if it
//! had come in one frame: nothing above the decoder knows. The first piece
//! announces the whole's length, so the gathering buffer is reserved once
//! and each piece is copied into it once (a frame sent whole is not copied
//! at all: pieces cost one copy of the frame on the receiver).
//!
//! # Invariants
//! - Cutting copies nothing: a piece's slices are slices of the whole
//!   frame's (property-tested: pieces gathered give back the envelope).
//! - A whole is at most the decoder's `max_frame_len`, checked on the
//!   announced length before anything is reserved ([`FrameError::TooLarge`]);
//!   what all streams have reserved is at most [`GATHERED_FRAMES`] of those
//!   ([`FrameError::TooMuchGathered`]); pieces that do not add up to what
//!   was announced, a whole that is itself a piece or names another stream,
//!   are [`FrameError::Malformed`]. Each error ends the link, as a bad frame
//!   does.
//! - Any other frame of a stream that is gathering drops what it gathered
//!   (a sender that gave up on a frame says so by sending something else).

use bytes::{Bytes, BytesMut};
use foldhash::HashMap;
use prost::encoding::{WireType, decode_key, decode_varint};
use proto::v1::EnvelopePiece;
use proto::{ENVELOPE_PIECE_FIELD, ENVELOPE_STREAM_ID_FIELD, Envelope, Msg, PIECE_BYTES_FIELD};

use super::decode::decode_envelope;
use super::{BodyFrame, FrameEncoder, FrameError, LENGTH_PREFIX_LEN, MAX_BODY_PARTS};

/// What all streams of one link may have gathered at once, in whole frames
/// of the decoder's maximum (32 × 4 MiB = 128 MiB by default): a bound on a
/// broken peer's cost, far above what the Edge's admission lets a Node's
/// uploads hold.
pub const GATHERED_FRAMES: usize = 32;

impl FrameEncoder {
    /// Cuts the frame `frame` of stream `stream_id` (its wire bytes in
    /// order, length prefix first, as [`Outgoing`](crate::link::Outgoing)
    /// holds them) into piece frames of at most `piece_len` bytes of it
    /// each, copying none of it. Always at least one piece; the receiver
    /// gathers them back into the frame's envelope.
    pub fn encode_pieces(
        &mut self,
        stream_id: u64,
        frame: impl IntoIterator<Item = Bytes>,
        piece_len: usize,
    ) -> Result<Vec<BodyFrame>, FrameError> {
        let piece_len = piece_len.max(1);
        let mut prefix = LENGTH_PREFIX_LEN;
        let mut rest = std::collections::VecDeque::new();
        for mut slice in frame {
            let skip = prefix.min(slice.len());
            prefix -= skip;
            let _ = slice.split_to(skip);
            if !slice.is_empty() {
                rest.push_back(slice);
            }
        }
        let mut left: usize = rest.iter().map(Bytes::len).sum();
        let mut pieces = Vec::with_capacity(left.div_ceil(piece_len).max(1));
        loop {
            let mut parts = Vec::new();
            let mut len = 0;
            while len < piece_len && parts.len() < MAX_BODY_PARTS {
                let Some(mut slice) = rest.pop_front() else {
                    break;
                };
                if slice.len() > piece_len - len {
                    rest.push_front(slice.split_off(piece_len - len));
                }
                len += slice.len();
                parts.push(slice);
            }
            let whole_len = if pieces.is_empty() { left as u64 } else { 0 };
            left -= len;
            let last = left == 0;
            let piece = EnvelopePiece {
                last,
                bytes: Bytes::new(),
                whole_len,
            };
            let head = self.encode_head(
                stream_id,
                ENVELOPE_PIECE_FIELD,
                &piece,
                Some((PIECE_BYTES_FIELD, len)),
            )?;
            let mut parts = parts.into_iter();
            let body = parts.next().unwrap_or_default();
            pieces.push(BodyFrame {
                head,
                body,
                more: parts.collect(),
            });
            if last {
                return Ok(pieces);
            }
        }
    }
}

/// The field number of the message a frame carries (`Envelope.msg`: 20
/// for a `RunRequest`, [`ENVELOPE_PIECE_FIELD`] for a piece, …), read from
/// its first bytes, `head` (the length prefix first), without decoding it.
/// `None` when they do not start an envelope.
pub fn message_field(head: &[u8]) -> Option<u32> {
    let mut head = head.get(LENGTH_PREFIX_LEN..)?;
    let (mut field, mut wire) = decode_key(&mut head).ok()?;
    if (field, wire) == (ENVELOPE_STREAM_ID_FIELD, WireType::Varint) {
        decode_varint(&mut head).ok()?;
        (field, wire) = decode_key(&mut head).ok()?;
    }
    (wire == WireType::LengthDelimited).then_some(field)
}

/// One stream's frame, gathered so far.
#[derive(Debug, Clone)]
struct Gather {
    buf: BytesMut,
    /// Bytes this gather counts against the link's bound: what it reserved.
    reserved: usize,
    /// The whole's length, when its first piece said it.
    announced: Option<usize>,
}

/// The pieces a decoder has gathered, by stream.
#[derive(Debug, Clone, Default)]
pub(super) struct Gathering {
    streams: HashMap<u64, Gather>,
    /// Bytes reserved over all streams.
    held: usize,
}

impl Gathering {
    /// Takes a piece of `stream_id`'s frame; the whole envelope once `piece`
    /// is its last. `max_frame_len` bounds a whole.
    pub(super) fn take(
        &mut self,
        stream_id: u64,
        piece: EnvelopePiece,
        max_frame_len: usize,
    ) -> Result<Option<Envelope>, FrameError> {
        let max_held = max_frame_len.saturating_mul(GATHERED_FRAMES);
        let said = usize::try_from(piece.whole_len).unwrap_or(usize::MAX);
        let whole = match self.streams.get_mut(&stream_id) {
            // A first piece that announces less than it carries, or a last
            // one other than it carries.
            None if piece.whole_len > 0
                && (said < piece.bytes.len() || piece.last && said != piece.bytes.len()) =>
            {
                return Err(unlike_announced(stream_id));
            }
            // One piece: its bytes are the whole, uncopied.
            None if piece.last => piece.bytes,
            None => {
                // The first piece: reserve the whole once, after checking
                // what it announces (or, unannounced, this piece).
                let gather = new_gather(said.max(piece.bytes.len()), &piece, max_frame_len)?;
                hold(&mut self.held, gather.reserved, max_held)?;
                self.streams.insert(stream_id, gather);
                return Ok(None);
            }
            Some(gather) => {
                let len = gather.buf.len() + piece.bytes.len();
                if len > max_frame_len {
                    return Err(FrameError::TooLarge {
                        len: len as u64,
                        max: max_frame_len,
                    });
                }
                if gather.announced.is_some_and(|whole| len > whole) {
                    return Err(unlike_announced(stream_id));
                }
                if len > gather.reserved {
                    hold(&mut self.held, len - gather.reserved, max_held)?;
                    gather.reserved = len;
                }
                gather.buf.extend_from_slice(&piece.bytes);
                if !piece.last {
                    return Ok(None);
                }
                let Some(gather) = self.streams.remove(&stream_id) else {
                    unreachable!("the gather was just found");
                };
                self.held -= gather.reserved;
                if gather
                    .announced
                    .is_some_and(|whole| whole != gather.buf.len())
                {
                    return Err(unlike_announced(stream_id));
                }
                gather.buf.freeze()
            }
        };
        let envelope = decode_envelope(whole)?;
        if matches!(envelope.msg, Some(Msg::EnvelopePiece(_))) {
            return Err(FrameError::Malformed(format!(
                "the pieces of stream {stream_id} make another piece"
            )));
        }
        if envelope.stream_id != stream_id {
            return Err(FrameError::Malformed(format!(
                "the pieces of stream {stream_id} make a frame of stream {}",
                envelope.stream_id
            )));
        }
        Ok(Some(envelope))
    }

    /// Forgets what `stream_id` gathered (another of its frames came).
    pub(super) fn drop_stream(&mut self, stream_id: u64) {
        if self.streams.is_empty() {
            return;
        }
        if let Some(gather) = self.streams.remove(&stream_id) {
            self.held -= gather.reserved;
        }
    }

    /// A stream that has gathered part of a frame, and how much.
    pub(super) fn unfinished(&self) -> Option<(u64, usize)> {
        self.streams
            .iter()
            .next()
            .map(|(stream_id, gather)| (*stream_id, gather.buf.len()))
    }
}

/// The gather a first piece starts: `whole` bytes reserved (at most
/// `max_frame_len`, checked before reserving), the piece's copied in.
fn new_gather(
    whole: usize,
    piece: &EnvelopePiece,
    max_frame_len: usize,
) -> Result<Gather, FrameError> {
    if whole > max_frame_len {
        return Err(FrameError::TooLarge {
            len: whole as u64,
            max: max_frame_len,
        });
    }
    let mut buf = BytesMut::with_capacity(whole);
    buf.extend_from_slice(&piece.bytes);
    Ok(Gather {
        buf,
        reserved: whole,
        announced: (piece.whole_len > 0).then_some(whole),
    })
}

/// Counts `more` bytes reserved into `held`, unless that passes `max`.
fn hold(held: &mut usize, more: usize, max: usize) -> Result<(), FrameError> {
    let total = *held + more;
    if total > max {
        return Err(FrameError::TooMuchGathered { held: total, max });
    }
    *held = total;
    Ok(())
}

fn unlike_announced(stream_id: u64) -> FrameError {
    FrameError::Malformed(format!(
        "the pieces of stream {stream_id} do not add up to the length its first piece announced"
    ))
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use proptest::prelude::*;
    use proto::TUNNEL_REQUEST_BODY_FIELD;
    use proto::v1::{HeartbeatPing, ProviderTunnelRequest, WindowUpdate};

    use super::super::FrameDecoder;
    use super::*;

    fn request(stream_id: u64, body: Bytes) -> Envelope {
        Envelope {
            stream_id,
            msg: Some(Msg::ProviderTunnelRequest(Box::new(
                ProviderTunnelRequest {
                    tunnel_id: format!("t{stream_id}"),
                    path: "/v1/chat/completions".into(),
                    body,
                    ..ProviderTunnelRequest::default()
                },
            ))),
        }
    }

    /// The request frame as the Edge writes it: its head, then its body as
    /// its own slice.
    fn request_frame(encoder: &mut FrameEncoder, stream_id: u64, body: &Bytes) -> Vec<Bytes> {
        let Some(Msg::ProviderTunnelRequest(head)) = request(stream_id, Bytes::new()).msg else {
            unreachable!()
        };
        let frame = encoder
            .encode_with_trailing_bytes(
                stream_id,
                proto::ENVELOPE_TUNNEL_REQUEST_FIELD,
                &*head,
                TUNNEL_REQUEST_BODY_FIELD,
                body.clone(),
            )
            .unwrap();
        frame
            .parts()
            .cloned()
            .fold(vec![frame.head.clone()], |mut v, p| {
                v.push(p);
                v
            })
    }

    /// `stream_id`'s request with `body`, in pieces of `piece_len`.
    fn cut(
        encoder: &mut FrameEncoder,
        stream_id: u64,
        body: &Bytes,
        piece_len: usize,
    ) -> Result<Vec<BodyFrame>, FrameError> {
        let frame = request_frame(encoder, stream_id, body);
        encoder.encode_pieces(stream_id, frame, piece_len)
    }

    /// A first piece of stream 1 made by hand: `bytes`, announcing
    /// `whole_len`.
    fn first_piece(encoder: &mut FrameEncoder, bytes: &'static [u8], whole_len: u64) -> BytesMut {
        let piece = EnvelopePiece {
            last: false,
            bytes: Bytes::from_static(bytes),
            whole_len,
        };
        let envelope = Envelope {
            stream_id: 1,
            msg: Some(Msg::EnvelopePiece(piece)),
        };
        BytesMut::from(&encoder.encode(&envelope).unwrap()[..])
    }

    fn wire(pieces: &[BodyFrame]) -> Vec<BytesMut> {
        pieces
            .iter()
            .map(|piece| {
                let mut b = BytesMut::from(&piece.head[..]);
                for part in piece.parts() {
                    b.put_slice(part);
                }
                b
            })
            .collect()
    }

    fn body(len: usize) -> Bytes {
        (0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>().into()
    }

    #[test]
    fn a_long_request_goes_in_pieces_of_its_own_bytes_and_comes_out_whole() {
        let mut encoder = FrameEncoder::default();
        let body = body(300 * 1024);
        let pieces = cut(&mut encoder, 7, &body, 64 * 1024).unwrap();
        assert_eq!(pieces.len(), 5, "300 KiB and a head in 64 KiB pieces");
        for piece in &pieces {
            assert!(piece.parts().map(Bytes::len).sum::<usize>() <= 64 * 1024);
        }
        // Nothing copied: the pieces' slices point into the body.
        let inside = |p: &Bytes| {
            let range = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
            range.contains(&(p.as_ptr() as usize))
        };
        assert!(pieces[1..].iter().all(|p| p.parts().all(inside)));

        let mut decoder = FrameDecoder::default();
        let frames = wire(&pieces);
        let (last, first) = frames.split_last().unwrap();
        for frame in first {
            let mut rx = frame.clone();
            assert_eq!(decoder.decode(&mut rx).unwrap(), None);
            assert!(rx.is_empty());
        }
        let mut rx = last.clone();
        assert_eq!(decoder.decode(&mut rx).unwrap(), Some(request(7, body)));
        assert_eq!(
            decoder.decode_eof(&mut rx).unwrap(),
            None,
            "nothing left over"
        );
    }

    #[test]
    fn pieces_of_two_streams_interleave_with_other_frames() {
        let mut encoder = FrameEncoder::default();
        let (a, b) = (body(10_000), body(7_000));
        let pa = cut(&mut encoder, 1, &a, 3_000).unwrap();
        let pb = cut(&mut encoder, 3, &b, 3_000).unwrap();
        let ping = Envelope {
            stream_id: 0,
            msg: Some(Msg::HeartbeatPing(HeartbeatPing { seq: 9 })),
        };
        let mut rx = BytesMut::new();
        let (wa, wb) = (wire(&pa), wire(&pb));
        for i in 0..wa.len().max(wb.len()) {
            rx.extend_from_slice(wa.get(i).map_or(&[][..], |w| &w[..]));
            rx.extend_from_slice(wb.get(i).map_or(&[][..], |w| &w[..]));
            if i == 1 {
                rx.extend_from_slice(&encoder.encode(&ping).unwrap());
            }
        }
        let mut decoder = FrameDecoder::default();
        let mut out = Vec::new();
        while let Some(envelope) = decoder.decode(&mut rx).unwrap() {
            out.push(envelope);
        }
        assert_eq!(out, vec![ping, request(3, b), request(1, a)]);
    }

    #[test]
    fn a_frame_says_what_it_carries_in_its_first_bytes() {
        let mut encoder = FrameEncoder::default();
        for stream_id in [0, 1, 300, u64::MAX] {
            let pieces = cut(&mut encoder, stream_id, &body(1_000), 400).unwrap();
            for piece in &pieces {
                assert_eq!(message_field(&piece.head), Some(ENVELOPE_PIECE_FIELD));
            }
            let request = request_frame(&mut encoder, stream_id, &body(1_000));
            let field = message_field(&request[0]);
            assert_eq!(field, Some(proto::ENVELOPE_TUNNEL_REQUEST_FIELD));
            let body = encoder.encode_tunnel_body(stream_id, body(1_000)).unwrap();
            assert_eq!(
                message_field(&body.head),
                Some(proto::ENVELOPE_TUNNEL_FRAME_FIELD)
            );
        }
        assert_eq!(message_field(&[0, 0, 0, 2]), None, "too short");
        assert_eq!(message_field(&[0, 0, 0, 2, 0xff, 0xff]), None, "not a key");
    }

    #[test]
    fn a_short_frame_is_one_piece_decoded_without_a_copy() {
        let mut encoder = FrameEncoder::default();
        let frame = encoder.encode(&request(5, body(100))).unwrap();
        let pieces = encoder.encode_pieces(5, [frame], 64 * 1024).unwrap();
        assert_eq!(pieces.len(), 1);
        let mut rx = wire(&pieces).remove(0);
        let start = rx.as_ptr() as usize;
        let whole = FrameDecoder::default().decode(&mut rx).unwrap().unwrap();
        let Some(Msg::ProviderTunnelRequest(request)) = whole.msg else {
            panic!("{whole:?}")
        };
        assert!((start..start + 200).contains(&(request.body.as_ptr() as usize)));
    }

    #[test]
    fn another_frame_of_a_gathering_stream_drops_what_it_gathered() {
        let mut encoder = FrameEncoder::default();
        let pieces = wire(&cut(&mut encoder, 1, &body(5_000), 2_000).unwrap());
        let update = Envelope {
            stream_id: 1,
            msg: Some(Msg::WindowUpdate(WindowUpdate { increment: 1 })),
        };
        let mut rx = pieces[0].clone();
        rx.extend_from_slice(&encoder.encode(&update).unwrap());
        let mut decoder = FrameDecoder::default();
        assert_eq!(decoder.decode(&mut rx).unwrap(), Some(update));
        assert_eq!(decoder.decode_eof(&mut rx).unwrap(), None, "nothing held");
    }

    #[test]
    fn bad_pieces_are_typed_errors() {
        let mut encoder = FrameEncoder::default();
        let decode_all = |decoder: &mut FrameDecoder, frames: Vec<BytesMut>| {
            let mut rx = BytesMut::new();
            frames.iter().for_each(|f| rx.extend_from_slice(f));
            while decoder.decode(&mut rx)?.is_some() {}
            decoder.decode_eof(&mut rx)
        };
        let frame = request_frame(&mut encoder, 1, &body(5_000));
        let pieces = wire(&encoder.encode_pieces(1, frame.clone(), 1_000).unwrap());

        // A whole larger than the receiver's frames.
        let err = decode_all(&mut FrameDecoder::new(4_000), pieces.clone()).unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { max: 4_000, .. }),
            "{err}"
        );
        // More unfinished than GATHERED_FRAMES whole frames over all streams.
        let mut many = Vec::new();
        for stream_id in 1..=(GATHERED_FRAMES as u64 + 1) {
            // ~990 bytes a whole, all but its last few bytes sent.
            let mut pieces = wire(&cut(&mut encoder, stream_id, &body(950), 490).unwrap());
            assert_eq!(pieces.len(), 3);
            many.extend(pieces.drain(..2));
        }
        let err = decode_all(&mut FrameDecoder::new(1_000), many).unwrap_err();
        assert!(matches!(err, FrameError::TooMuchGathered { .. }), "{err}");
        // Pieces sent on a stream other than their frame's.
        let err = decode_all(
            &mut FrameDecoder::default(),
            wire(&encoder.encode_pieces(2, frame.clone(), 1_000).unwrap()),
        )
        .unwrap_err();
        assert!(matches!(err, FrameError::Malformed(_)), "{err}");
        // Pieces of a piece.
        let inner = encoder.encode_pieces(1, frame.clone(), 1_000).unwrap();
        let nested = inner[0].parts().cloned();
        let nested = std::iter::once(inner[0].head.clone()).chain(nested);
        let err = decode_all(
            &mut FrameDecoder::default(),
            wire(&encoder.encode_pieces(1, nested, 100).unwrap()),
        )
        .unwrap_err();
        assert!(matches!(err, FrameError::Malformed(_)), "{err}");
        // A piece lost in between: the rest do not add up to the whole.
        let mut gappy = pieces.clone();
        gappy.remove(2);
        let err = decode_all(&mut FrameDecoder::default(), gappy).unwrap_err();
        assert!(matches!(err, FrameError::Malformed(_)), "{err}");
        // A first piece announcing more than a frame: refused before
        // anything is reserved for it.
        let err = decode_all(
            &mut FrameDecoder::default(),
            vec![first_piece(&mut encoder, b"x", 1 << 40)],
        )
        .unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { len, .. } if len == 1 << 40),
            "{err}"
        );
        // A first piece announcing less than it carries.
        let err = decode_all(
            &mut FrameDecoder::default(),
            vec![first_piece(&mut encoder, b"xyz", 2)],
        )
        .unwrap_err();
        assert!(matches!(err, FrameError::Malformed(_)), "{err}");
        // The link ends before the last piece.
        let err = decode_all(&mut FrameDecoder::default(), pieces[..2].to_vec()).unwrap_err();
        assert_eq!(
            err,
            FrameError::UnfinishedPieces {
                stream_id: 1,
                gathered: 2_000
            }
        );
    }

    proptest! {
        #[test]
        fn any_cut_gathers_back_into_the_frame(
            len in 0usize..20_000,
            piece_len in 1usize..6_000,
            split in any::<prop::sample::Index>(),
        ) {
            let mut encoder = FrameEncoder::default();
            let body = body(len);
            let mut frame = request_frame(&mut encoder, 9, &body);
            // The prefix and head split anywhere across slices.
            let head = frame.remove(0);
            let at = split.index(head.len() + 1);
            frame.insert(0, head.slice(at..));
            frame.insert(0, head.slice(..at));
            let pieces = encoder.encode_pieces(9, frame, piece_len).unwrap();
            prop_assert!(pieces.iter().all(|p| p.parts().map(Bytes::len).sum::<usize>() <= piece_len));
            let mut rx = BytesMut::new();
            wire(&pieces).iter().for_each(|w| rx.extend_from_slice(w));
            let mut decoder = FrameDecoder::default();
            prop_assert_eq!(decoder.decode(&mut rx).unwrap(), Some(request(9, body)));
            prop_assert_eq!(decoder.decode_eof(&mut rx).unwrap(), None);
        }
    }
}
