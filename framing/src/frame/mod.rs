//! The Edge–Node socket frame codec.
//!
//! Every message on the node socket is one frame:
//!
//! ```text
//! +----------------------+------------------------------------+
//! | length: u32, BE      | protobuf `Envelope`, `length` bytes |
//! +----------------------+------------------------------------+
//! ```
//!
//! # Decoding ([`FrameDecoder`])
//! A two-state machine over the caller's receive buffer, in the shape of
//! tokio-util's `Decoder` (`Ok(None)` means "need more bytes"):
//!
//! | state  | input                       | next                             |
//! |--------|-----------------------------|----------------------------------|
//! | `Head` | < 4 bytes buffered          | `Head`, `Ok(None)`               |
//! | `Head` | length > max frame length   | error [`FrameError::TooLarge`]   |
//! | `Head` | length ≤ max                | `Body{len}`; reserves the rest   |
//! | `Body` | < len bytes buffered        | `Body{len}`, `Ok(None)`          |
//! | `Body` | ≥ len bytes buffered        | `Head`, the frame as `Bytes`     |
//!
//! The length is checked **before** anything is reserved, so a hostile peer
//! announcing a 4 GiB frame costs nothing. A complete frame is split off the
//! buffer with `split_to(len).freeze()`: no copy. Protobuf `bytes` fields are
//! generated as [`bytes::Bytes`], so decoding the envelope from that `Bytes`
//! makes each body field a refcounted slice of the receive buffer. A
//! tunnel's request and answer frames are read without prost's generic
//! walk (`tunnel_decode.rs`), to the same values, property-tested against
//! prost; anything else, and anything that reader declines, goes to prost.
//!
//! # Encoding ([`FrameEncoder`])
//! [`FrameEncoder::encode`] writes `[length][envelope]` for control messages.
//! prost copies `bytes` fields while encoding, so tunnel bodies take
//! [`FrameEncoder::encode_tunnel_body`] instead: it writes only the head —
//! length, `stream_id`, the tag and length of `provider_tunnel_frame`, the tag
//! and length of `body` — and returns it beside the untouched body, for a
//! vectored write. Head + body is byte-identical to prost's encoding of the
//! same `Envelope` (property-tested), so the receiver needs no special case.
//! A body frame may carry several slices ([`MAX_BODY_PARTS`],
//! [`FrameEncoder::encode_tunnel_body_parts`]): their concatenation is the
//! body. [`FrameEncoder::encode_message`] encodes a borrowed message as the
//! envelope holding it would be, without building (or boxing into) one; a
//! [`TunnelOpen`] is a tunnel's request with shared and `'static` texts,
//! written as prost writes the equal `ProviderTunnelRequest`
//! ([`FrameEncoder::encode_tunnel_open`]).
//!
//! # Pieces
//! A large frame may be sent as several `EnvelopePiece` frames
//! ([`FrameEncoder::encode_pieces`]), so it does not hold the link whole;
//! the decoder gathers them and hands out the envelope they make (see
//! `pieces.rs`).
//!
//! # Errors
//! Oversize, malformed and message-less frames are typed [`FrameError`]s; the
//! connection that sent one is not recoverable (its framing is lost) and the
//! caller closes it.

mod decode;
mod encode;
mod pieces;
mod run_request;
mod tunnel_batch;
mod tunnel_decode;
mod tunnel_encode;
mod tunnel_headers;
mod tunnel_open;
#[cfg(test)]
mod tunnel_tests;

pub use decode::FrameDecoder;
pub use encode::{BodyFrame, FrameEncoder, MAX_BODY_PARTS};
pub use pieces::{GATHERED_FRAMES, message_field};
pub use run_request::{has_long_texts, unescape_content};
pub use tunnel_batch::TunnelHead;
pub use tunnel_open::TunnelOpen;

/// Bytes of the big-endian `u32` length prefix.
pub const LENGTH_PREFIX_LEN: usize = 4;

/// Default hard maximum of one frame's envelope, in bytes (4 MiB).
///
/// Large enough for a request body with a long prompt; tunnel bodies are sent
/// in chunks far below it. Both sides announce their own maximum during
/// registration and the sender never exceeds the receiver's.
pub const DEFAULT_MAX_FRAME_LEN: usize = 4 * 1024 * 1024;

/// Largest maximum a codec may be configured with: the length prefix is a
/// `u32`, and 1 GiB is far past any sane frame.
pub const MAX_CONFIGURABLE_FRAME_LEN: usize = 1 << 30;

/// Errors of the frame codec.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A frame's length exceeds the configured maximum. Reported from the
    /// 4-byte prefix alone, before any buffer is reserved for the frame.
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// The announced (decoding) or computed (encoding) envelope length.
        len: u64,
        /// The configured maximum.
        max: usize,
    },
    /// The envelope bytes are not a valid protobuf `Envelope`.
    #[error("malformed envelope: {0}")]
    Malformed(String),
    /// The envelope decoded but carries no message (an empty `oneof`, or one
    /// this build does not know).
    #[error("envelope on stream {stream_id} carries no message")]
    MissingMessage {
        /// The envelope's stream id.
        stream_id: u64,
    },
    /// The peer closed the stream in the middle of a frame.
    #[error("stream ended inside a frame: {buffered} of {expected} bytes")]
    Truncated {
        /// Bytes of the frame (prefix included) that did arrive.
        buffered: usize,
        /// Bytes the frame needed (prefix included).
        expected: usize,
    },
    /// A tunnel body frame was given more slices than one frame carries.
    #[error("a body frame of {parts} slices exceeds the maximum of {max}")]
    TooManyParts {
        /// The slices given.
        parts: usize,
        /// [`MAX_BODY_PARTS`].
        max: usize,
    },
    /// The pieces the link's streams have gathered and not finished exceed
    /// [`GATHERED_FRAMES`] whole frames (see [`FrameEncoder::encode_pieces`]).
    #[error("{held} bytes of unfinished pieces exceed the maximum of {max} bytes")]
    TooMuchGathered {
        /// The bytes that would be held.
        held: usize,
        /// The maximum.
        max: usize,
    },
    /// The peer closed the link while a stream's frame was still coming in
    /// pieces.
    #[error("stream ended with {gathered} bytes of stream {stream_id}'s frame in pieces")]
    UnfinishedPieces {
        /// The stream whose frame was unfinished.
        stream_id: u64,
        /// The bytes of it that did arrive.
        gathered: usize,
    },
}

/// Clamps a configured maximum frame length into `1..=MAX_CONFIGURABLE_FRAME_LEN`.
fn clamp_max_frame_len(max: usize) -> usize {
    max.clamp(1, MAX_CONFIGURABLE_FRAME_LEN)
}

#[cfg(test)]
mod tests;
