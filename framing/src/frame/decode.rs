//! Frame decoding: split frames off a receive buffer, then decode envelopes.

use bytes::{Buf, Bytes, BytesMut};
use prost::Message;
use proto::{Envelope, Msg};

use super::pieces::Gathering;
use super::{DEFAULT_MAX_FRAME_LEN, FrameError, LENGTH_PREFIX_LEN, clamp_max_frame_len};

/// Where the decoder is within the current frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the 4-byte length prefix.
    Head,
    /// The prefix is consumed; waiting for `len` envelope bytes.
    Body { len: usize },
}

/// Splits length-prefixed frames off a receive buffer (see the module docs).
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max_frame_len: usize,
    state: State,
    /// Room reserved beyond the rest of a frame (see [`Self::set_read_ahead`]).
    read_ahead: usize,
    /// Frames coming in pieces, by stream.
    pieces: Gathering,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LEN)
    }
}

impl FrameDecoder {
    /// A decoder that refuses frames longer than `max_frame_len` bytes
    /// (clamped to `1..=`[`super::MAX_CONFIGURABLE_FRAME_LEN`]).
    pub fn new(max_frame_len: usize) -> Self {
        Self {
            max_frame_len: clamp_max_frame_len(max_frame_len),
            state: State::Head,
            read_ahead: 0,
            pieces: Gathering::default(),
        }
    }

    /// When the rest of a frame does not fit the buffer's free room, reserve
    /// `bytes` more than that rest: the read that finishes the frame can
    /// bring the frames after it too. With none (the default) a stream of
    /// large frames costs two reads a frame, the second sized to the
    /// frame's remainder, however little that is. The buffer may then hold
    /// up to `max_frame_len + bytes`. A reader may change it between reads
    /// (e.g. to its next read size).
    pub fn set_read_ahead(&mut self, bytes: usize) {
        self.read_ahead = bytes;
    }

    /// The largest envelope this decoder accepts, in bytes.
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// Splits the next complete frame's envelope bytes off `buf`.
    ///
    /// Returns `Ok(None)` when `buf` holds no complete frame yet. Once the
    /// length prefix has been read, the rest of the frame is reserved in
    /// `buf` so the caller's next read fills it without reallocating. An
    /// oversize prefix is refused before anything is reserved; `buf` is then
    /// left as it was.
    pub fn decode_frame(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let len = match self.state {
            State::Body { len } => len,
            State::Head => {
                let Some(prefix) = buf.get(..LENGTH_PREFIX_LEN) else {
                    return Ok(None);
                };
                let announced = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
                // A u32 always fits a usize on the 32/64-bit targets IOP runs on;
                // if it did not, treat it as oversize.
                let len = usize::try_from(announced).unwrap_or(usize::MAX);
                if len > self.max_frame_len {
                    return Err(FrameError::TooLarge {
                        len: u64::from(announced),
                        max: self.max_frame_len,
                    });
                }
                buf.advance(LENGTH_PREFIX_LEN);
                if let Some(missing) = len.checked_sub(buf.len()).filter(|m| *m > 0)
                    && buf.capacity() - buf.len() < missing
                {
                    buf.reserve(missing.saturating_add(self.read_ahead));
                }
                self.state = State::Body { len };
                len
            }
        };
        if buf.len() < len {
            return Ok(None);
        }
        self.state = State::Head;
        Ok(Some(buf.split_to(len).freeze()))
    }

    /// Makes room in `buf` for the next read: when fewer than `min_spare`
    /// bytes are free, reserves `reserve` more. Except in the middle of a
    /// frame whose rest [`decode_frame`](Self::decode_frame) has already
    /// reserved: the read fills that, so the last piece of a long frame
    /// does not move (copy) the whole frame into a larger buffer.
    pub fn reserve_read(&self, buf: &mut BytesMut, min_spare: usize, reserve: usize) {
        let spare = buf.capacity() - buf.len();
        if let State::Body { len } = self.state {
            let missing = len.saturating_sub(buf.len());
            if spare > 0 && spare >= missing {
                return;
            }
        }
        if spare < min_spare {
            buf.reserve(reserve);
        }
    }

    /// Splits and decodes the next complete [`Envelope`] off `buf`.
    ///
    /// `bytes` fields of the result (tunnel bodies, request bodies, leases) are
    /// slices of `buf`'s memory, not copies. An envelope without a message is
    /// [`FrameError::MissingMessage`]. A frame that came in pieces is handed
    /// out whole, with the last piece (its bytes then slices of the gathered
    /// copy).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Envelope>, FrameError> {
        while let Some(frame) = self.decode_frame(buf)? {
            let envelope = decode_envelope(frame)?;
            let Envelope {
                stream_id,
                msg: Some(Msg::EnvelopePiece(piece)),
            } = envelope
            else {
                self.pieces.drop_stream(envelope.stream_id);
                return Ok(Some(envelope));
            };
            if let Some(whole) = self.pieces.take(stream_id, piece, self.max_frame_len)? {
                return Ok(Some(whole));
            }
        }
        Ok(None)
    }

    /// Like [`decode`](Self::decode), for after the peer has closed its side:
    /// bytes left over that do not form a whole frame are
    /// [`FrameError::Truncated`]; an empty buffer is a clean end (`Ok(None)`).
    pub fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Envelope>, FrameError> {
        if let Some(envelope) = self.decode(buf)? {
            return Ok(Some(envelope));
        }
        match self.state {
            State::Head if buf.is_empty() => match self.pieces.unfinished() {
                Some((stream_id, gathered)) => Err(FrameError::UnfinishedPieces {
                    stream_id,
                    gathered,
                }),
                None => Ok(None),
            },
            State::Head => Err(FrameError::Truncated {
                buffered: buf.len(),
                expected: LENGTH_PREFIX_LEN,
            }),
            State::Body { len } => Err(FrameError::Truncated {
                buffered: LENGTH_PREFIX_LEN + buf.len(),
                expected: LENGTH_PREFIX_LEN + len,
            }),
        }
    }
}

/// Decodes one envelope from a frame's bytes without copying `bytes` fields:
/// a tunnel's frames by [`tunnel_decode`](super::tunnel_decode), the rest
/// (and whatever that declines) by prost.
pub(super) fn decode_envelope(frame: Bytes) -> Result<Envelope, FrameError> {
    if let Some(envelope) = super::tunnel_decode::decode(&frame) {
        return Ok(envelope);
    }
    let envelope = Envelope::decode(frame).map_err(|e| FrameError::Malformed(e.to_string()))?;
    if envelope.msg.is_none() {
        return Err(FrameError::MissingMessage {
            stream_id: envelope.stream_id,
        });
    }
    Ok(envelope)
}
