//! Frame encoding: whole envelopes, and tunnel body frames as head + body.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use proto::v1::ProviderTunnelFrame;
use proto::{
    ENVELOPE_STREAM_ID_FIELD, ENVELOPE_TUNNEL_FRAME_FIELD, ENVELOPE_TUNNEL_REQUEST_FIELD, Envelope,
    Msg, TUNNEL_FRAME_BODY_FIELD,
};

use super::tunnel_encode::{Fields, frame_fields, len_of};
use super::{DEFAULT_MAX_FRAME_LEN, FrameError, LENGTH_PREFIX_LEN, clamp_max_frame_len};

/// Bytes the encoder's scratch buffer grows by. Heads are tens of bytes, so
/// one block serves many frames before the next allocation; blocks are freed
/// when the last head cut from them is dropped.
const SCRATCH_BLOCK: usize = 8 * 1024;

/// Most slices one tunnel body frame carries ([`BodyFrame::more`] holds at
/// most one less): each is an iovec of the link's vectored write, so the
/// bound keeps a frame well inside a write batch's
/// [`MAX_IOVECS`](crate::write_batch::MAX_IOVECS).
pub const MAX_BODY_PARTS: usize = 32;

/// A tunnel body frame ready for a vectored write: `head`, then `body`, then
/// each of `more`.
///
/// The slices are the caller's `Bytes`, untouched; their concatenation is
/// the frame's `body` field. `head` is the length prefix and the protobuf
/// bytes that precede the body. Several slices make one frame when a sender
/// has several pieces at once (the provider's HTTP chunks of one read): the
/// receiver then handles one frame, not one a piece, and nothing is copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyFrame {
    /// Length prefix + envelope head, ending with the `body` field's length.
    pub head: Bytes,
    /// The body's first (often only) slice.
    pub body: Bytes,
    /// The body's further slices, in order (empty for a one-slice body: no
    /// allocation); at most [`MAX_BODY_PARTS`] − 1.
    pub more: Vec<Bytes>,
}

impl BodyFrame {
    /// Total bytes on the wire (prefix included).
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len() + self.more.iter().map(Bytes::len).sum::<usize>()
    }

    /// Always false: a frame has at least its length prefix.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The body's slices in wire order (after `head`), empty ones included.
    pub fn parts(&self) -> impl Iterator<Item = &Bytes> {
        std::iter::once(&self.body).chain(&self.more)
    }
}

/// Encodes envelopes into frames under a maximum frame length.
#[derive(Debug)]
pub struct FrameEncoder {
    max_frame_len: usize,
    pub(super) scratch: BytesMut,
}

impl Default for FrameEncoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LEN)
    }
}

impl FrameEncoder {
    /// An encoder that refuses to produce frames longer than `max_frame_len`
    /// (the peer's announced maximum; clamped like the decoder's).
    pub fn new(max_frame_len: usize) -> Self {
        Self {
            max_frame_len: clamp_max_frame_len(max_frame_len),
            scratch: BytesMut::new(),
        }
    }

    /// The largest envelope this encoder produces, in bytes.
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// Encodes `envelope` as one frame, `[length][envelope]`.
    ///
    /// Fine for control messages and small events. `bytes` fields are copied
    /// into the frame; send tunnel bodies with
    /// [`encode_tunnel_body`](Self::encode_tunnel_body). A tunnel's request
    /// and its status, headers, end and usage frames are written from their
    /// fields by the tunnel's own writer (`tunnel_encode.rs`), the same
    /// bytes as prost's; everything else by prost.
    pub fn encode(&mut self, envelope: &Envelope) -> Result<Bytes, FrameError> {
        let stream_id = envelope.stream_id;
        match &envelope.msg {
            Some(Msg::ProviderTunnelRequest(request)) => {
                return self.encode_fields(stream_id, ENVELOPE_TUNNEL_REQUEST_FIELD, &**request);
            }
            Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame { frame: Some(frame) })) => {
                if let Some(one) = frame_fields(frame) {
                    return self.encode_fields(stream_id, ENVELOPE_TUNNEL_FRAME_FIELD, &one);
                }
            }
            _ => {}
        }
        let len = envelope.encoded_len();
        self.check_len(len)?;
        self.reserve(LENGTH_PREFIX_LEN + len);
        self.put_prefix(len);
        // `encode_raw`, not `encode`: `encode` measures the message again
        // (a whole pass over it and every nested message) only to check
        // room that a `BytesMut` always has.
        envelope.encode_raw(&mut self.scratch);
        Ok(self.scratch.split().freeze())
    }

    /// Encodes the envelope `{stream_id, <msg_field>: msg}` from a message
    /// described by its [`Fields`] (see `tunnel_encode.rs`).
    pub(super) fn encode_fields(
        &mut self,
        stream_id: u64,
        msg_field: u32,
        msg: &impl Fields,
    ) -> Result<Bytes, FrameError> {
        self.encode_fields_trailing(stream_id, msg_field, msg, 0)
    }

    /// [`encode_fields`](Self::encode_fields) of a message whose last
    /// `trailing` bytes (a field written with `Out::trailing`) are not
    /// written: the frame's head, which they follow as their own slices.
    pub(super) fn encode_fields_trailing(
        &mut self,
        stream_id: u64,
        msg_field: u32,
        msg: &impl Fields,
        trailing: usize,
    ) -> Result<Bytes, FrameError> {
        let msg_len = len_of(msg);
        let len = envelope_len(stream_id, msg_field, msg_len);
        self.check_len(len)?;
        let head_len = LENGTH_PREFIX_LEN + len - trailing;
        self.reserve(head_len);
        self.put_prefix(len);
        self.put_envelope_head(stream_id, msg_field, msg_len);
        msg.fields(&mut self.scratch);
        debug_assert_eq!(self.scratch.len(), head_len);
        Ok(self.scratch.split().freeze())
    }

    /// Encodes the envelope `{stream_id, <msg_field>: msg}` as one frame
    /// from a borrowed message, byte-identical to [`encode`](Self::encode)
    /// of the `Envelope` holding it: a caller with a message of a boxed
    /// variant (a `RunEvent`) need not box it, nor move it, to send it.
    pub fn encode_message<M: Message>(
        &mut self,
        stream_id: u64,
        msg_field: u32,
        msg: &M,
    ) -> Result<Bytes, FrameError> {
        self.encode_head(stream_id, msg_field, msg, None)
    }

    /// Encodes a `ProviderTunnelFrame{body}` on `stream_id` without copying
    /// `body`: returns the head to write before it.
    pub fn encode_tunnel_body(
        &mut self,
        stream_id: u64,
        body: Bytes,
    ) -> Result<BodyFrame, FrameError> {
        self.encode_tunnel_body_parts(stream_id, body, Vec::new())
    }

    /// Encodes a `ProviderTunnelFrame{body}` on `stream_id` whose body is
    /// `body` followed by each of `more`, copying none of them: the
    /// receiver sees one frame with their concatenation. At most
    /// [`MAX_BODY_PARTS`] slices in all ([`FrameError::TooManyParts`]).
    pub fn encode_tunnel_body_parts(
        &mut self,
        stream_id: u64,
        body: Bytes,
        more: Vec<Bytes>,
    ) -> Result<BodyFrame, FrameError> {
        let body_len = body_parts_len(&body, &more)?;
        let head = self.encode_head(
            stream_id,
            ENVELOPE_TUNNEL_FRAME_FIELD,
            &ProviderTunnelFrame::default(),
            Some((TUNNEL_FRAME_BODY_FIELD, body_len)),
        )?;
        Ok(BodyFrame { head, body, more })
    }

    /// Encodes the envelope `{stream_id, <msg_field>: msg + {<bytes_field>:
    /// bytes}}` without copying `bytes`: `msg` is encoded as usual (its own
    /// `bytes_field` left empty by the caller), then the tag and length of
    /// `bytes_field`, which end the head; `bytes` follow as their own slice.
    ///
    /// A protobuf decoder takes fields in any order, so prost decodes the
    /// frame as the envelope whose message has `bytes` in that field. With
    /// an empty `msg` the result is byte-identical to prost's encoding.
    pub fn encode_with_trailing_bytes<M: Message>(
        &mut self,
        stream_id: u64,
        msg_field: u32,
        msg: &M,
        bytes_field: u32,
        bytes: Bytes,
    ) -> Result<BodyFrame, FrameError> {
        let head = self.encode_head(stream_id, msg_field, msg, Some((bytes_field, bytes.len())))?;
        Ok(BodyFrame {
            head,
            body: bytes,
            more: Vec::new(),
        })
    }

    /// The frame `[length][envelope]` of `{stream_id, <msg_field>: msg}`,
    /// or, with `trailing = Some((bytes_field, bytes_len))`, its head up to
    /// the tag and length of that field of `msg`, whose `bytes_len` bytes
    /// the caller writes after it.
    pub(super) fn encode_head<M: Message>(
        &mut self,
        stream_id: u64,
        msg_field: u32,
        msg: &M,
        trailing: Option<(u32, usize)>,
    ) -> Result<Bytes, FrameError> {
        let (trailing_head, bytes_len) = match trailing {
            Some((field, len)) => (key_len(field) + encoded_len_varint(len as u64), len),
            None => (0, 0),
        };
        let inner_len = msg.encoded_len() + trailing_head + bytes_len;
        let envelope_len = envelope_len(stream_id, msg_field, inner_len);
        self.check_len(envelope_len)?;

        let head_len = LENGTH_PREFIX_LEN + envelope_len - bytes_len;
        self.reserve(head_len);
        self.put_prefix(envelope_len);
        self.put_envelope_head(stream_id, msg_field, inner_len);
        // Measured above already (see `encode`).
        msg.encode_raw(&mut self.scratch);
        if let Some((field, len)) = trailing {
            put_key_varint(
                &mut self.scratch,
                field,
                WireType::LengthDelimited,
                len as u64,
            );
        }
        debug_assert_eq!(self.scratch.len(), head_len);
        Ok(self.scratch.split().freeze())
    }

    pub(super) fn check_len(&self, len: usize) -> Result<(), FrameError> {
        if len > self.max_frame_len {
            return Err(FrameError::TooLarge {
                len: len as u64,
                max: self.max_frame_len,
            });
        }
        Ok(())
    }

    pub(super) fn reserve(&mut self, additional: usize) {
        crate::write_batch::reserve_in_blocks(&mut self.scratch, additional, SCRATCH_BLOCK);
    }

    pub(super) fn put_prefix(&mut self, envelope_len: usize) {
        // `check_len` bounds `envelope_len` by MAX_CONFIGURABLE_FRAME_LEN < u32::MAX.
        self.scratch.put_u32(envelope_len as u32);
    }

    /// Writes the head of the envelope `{stream_id, <msg_field>: msg}` up
    /// to the message's own bytes (of which there are `msg_len`): the
    /// stream id, then the message's key and length.
    pub(super) fn put_envelope_head(&mut self, stream_id: u64, msg_field: u32, msg_len: usize) {
        let out = &mut self.scratch;
        // prost encodes `stream_id` only when it is not the default.
        if stream_id != 0 {
            put_key_varint(out, ENVELOPE_STREAM_ID_FIELD, WireType::Varint, stream_id);
        }
        put_key_varint(out, msg_field, WireType::LengthDelimited, msg_len as u64);
    }
}

/// Writes a field's key (`field`, `wire_type`) and then `value`, as prost's
/// `encode_key` and `encode_varint` would: the value is the field's own for
/// a varint field, its length for a length-delimited one.
///
/// Every key a frame head holds is one byte, and most values are too: those
/// two bytes go in with one capacity check, inlined, where prost's pair of
/// calls checked and wrote byte by byte (~25 instructions a varint, ~20
/// varints a small tunnelled request on each side; `hack/instructions.sh`).
/// A longer value is prost's: writing 2- to 4-byte values by hand as well
/// (stream ids past 127, lengths past 127) measured the same.
#[inline]
pub(super) fn put_key_varint(out: &mut BytesMut, field: u32, wire_type: WireType, value: u64) {
    let key = (u64::from(field) << 3) | wire_type as u64;
    if key < 0x80 && value < 0x80 {
        out.put_slice(&[key as u8, value as u8]);
    } else {
        encode_key(field, wire_type, out);
        encode_varint(value, out);
    }
}

/// The length of a body of `body` then each of `more`; more than
/// [`MAX_BODY_PARTS`] slices are refused.
pub(super) fn body_parts_len(body: &Bytes, more: &[Bytes]) -> Result<usize, FrameError> {
    if more.len() >= MAX_BODY_PARTS {
        return Err(FrameError::TooManyParts {
            parts: more.len() + 1,
            max: MAX_BODY_PARTS,
        });
    }
    Ok(body.len() + more.iter().map(Bytes::len).sum::<usize>())
}

/// The encoded length of the envelope `{stream_id, <msg_field>: msg}`
/// whose message is `msg_len` bytes (see
/// [`FrameEncoder::put_envelope_head`]).
pub(super) fn envelope_len(stream_id: u64, msg_field: u32, msg_len: usize) -> usize {
    let stream_len = if stream_id == 0 {
        0
    } else {
        key_len(ENVELOPE_STREAM_ID_FIELD) + encoded_len_varint(stream_id)
    };
    stream_len + key_len(msg_field) + encoded_len_varint(msg_len as u64) + msg_len
}
