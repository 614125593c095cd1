//! Body framings and their decoders, behind one [`BodyDecoder`].
//!
//! # Contract
//! `decode(&mut BytesMut)` returns at most one [`BodyItem`] per call:
//! `Data` is a non-empty slice split off the front of the buffer (zero
//! copy); `End` is returned exactly once, when the body is complete; after
//! it, `decode` returns `Ok(None)` and leaves the buffer (the next pipelined
//! message) alone. `Ok(None)` before `End` means "need more bytes".
//! Data is handed out as soon as it arrives, so a decoder never holds body
//! bytes back; it buffers at most one partial framing line (see
//! [`super::chunked`]'s limits).
//!
//! When the peer closes, call `decode_eof` until it returns `Ok(None)`:
//! close-delimited bodies end there, every other framing that is not yet
//! complete is [`HttpError::IncompleteBody`].
//!
//! ```text
//! framing          data comes from                 End when
//! Empty            -                               first call
//! Length(n)        next n bytes                    n bytes handed out
//! Chunked          chunk data (ChunkedDecoder)     last chunk + trailers
//! CloseDelimited   every byte                      decode_eof
//! ```

use bytes::{Bytes, BytesMut};

use super::HttpError;
use super::chunked::ChunkedDecoder;

/// How a message body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BodyFraming {
    /// No body (no framing fields, or a response that cannot have one).
    Empty,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// A response body that runs until the server closes the connection.
    CloseDelimited,
}

/// One output of a body decoder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyItem {
    /// Body bytes: a non-empty slice of the receive buffer.
    Data(Bytes),
    /// The body is complete.
    End,
}

/// The item [`ChunkedDecoder`] yields; the same type as every body decoder's.
pub type ChunkedItem = BodyItem;

/// Decoder for a `Content-Length` body: hands out up to the remaining count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentLengthDecoder {
    remaining: u64,
    done: bool,
}

impl ContentLengthDecoder {
    /// A decoder for a body of exactly `len` bytes.
    pub fn new(len: u64) -> Self {
        Self {
            remaining: len,
            done: false,
        }
    }

    /// Body bytes still expected.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// True once `End` was returned.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Split off up to the remaining count; `End` once it reaches zero.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<BodyItem>, HttpError> {
        if self.done {
            return Ok(None);
        }
        if self.remaining == 0 {
            self.done = true;
            return Ok(Some(BodyItem::End));
        }
        if buf.is_empty() {
            return Ok(None);
        }
        let take = usize::try_from(self.remaining).map_or(buf.len(), |r| r.min(buf.len()));
        self.remaining -= take as u64;
        Ok(Some(BodyItem::Data(buf.split_to(take).freeze())))
    }
}

/// One decoder for every [`BodyFraming`], so drivers treat bodies uniformly.
#[derive(Clone, Debug)]
pub struct BodyDecoder {
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    Empty { done: bool },
    Length(ContentLengthDecoder),
    Chunked(ChunkedDecoder),
    CloseDelimited { done: bool },
}

impl BodyDecoder {
    /// A decoder for a body framed as `framing`.
    pub fn new(framing: BodyFraming) -> Self {
        let kind = match framing {
            BodyFraming::Empty => Kind::Empty { done: false },
            BodyFraming::Length(n) => Kind::Length(ContentLengthDecoder::new(n)),
            BodyFraming::Chunked => Kind::Chunked(ChunkedDecoder::new()),
            BodyFraming::CloseDelimited => Kind::CloseDelimited { done: false },
        };
        Self { kind }
    }

    /// True once `End` was returned.
    pub fn is_done(&self) -> bool {
        match &self.kind {
            Kind::Empty { done } | Kind::CloseDelimited { done } => *done,
            Kind::Length(d) => d.is_done(),
            Kind::Chunked(d) => d.is_done(),
        }
    }

    /// Decode the next item from `buf` (see the module docs).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<BodyItem>, HttpError> {
        match &mut self.kind {
            Kind::Empty { done: true } | Kind::CloseDelimited { done: true } => Ok(None),
            Kind::Empty { done } => {
                *done = true;
                Ok(Some(BodyItem::End))
            }
            Kind::Length(d) => d.decode(buf),
            Kind::Chunked(d) => d.decode(buf),
            Kind::CloseDelimited { .. } if buf.is_empty() => Ok(None),
            Kind::CloseDelimited { .. } => Ok(Some(BodyItem::Data(buf.split().freeze()))),
        }
    }

    /// Decode after the peer closed its side: drains `buf`, then `End` for a
    /// close-delimited body, or [`HttpError::IncompleteBody`] for a body
    /// whose framing says more was due. `Ok(None)` once finished.
    pub fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<BodyItem>, HttpError> {
        if let Some(item) = self.decode(buf)? {
            return Ok(Some(item));
        }
        if self.is_done() {
            return Ok(None);
        }
        match &mut self.kind {
            Kind::CloseDelimited { done } => {
                *done = true;
                Ok(Some(BodyItem::End))
            }
            _ => Err(HttpError::IncompleteBody),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drain `decoder` over `buf`, returning concatenated data and whether
    /// `End` was seen.
    fn drain(
        decoder: &mut BodyDecoder,
        buf: &mut BytesMut,
        eof: bool,
    ) -> Result<(Vec<u8>, bool), HttpError> {
        let mut data = Vec::new();
        let mut ended = false;
        loop {
            let item = if eof {
                decoder.decode_eof(buf)?
            } else {
                decoder.decode(buf)?
            };
            match item {
                Some(BodyItem::Data(d)) => {
                    assert!(!d.is_empty(), "Data is never empty");
                    data.extend_from_slice(&d);
                }
                Some(BodyItem::End) => {
                    assert!(!ended, "End is returned once");
                    ended = true;
                }
                None => return Ok((data, ended)),
            }
        }
    }

    #[test]
    fn length_stops_at_the_count_and_keeps_the_rest() {
        let mut d = BodyDecoder::new(BodyFraming::Length(5));
        let mut buf = BytesMut::from(&b"hel"[..]);
        assert_eq!(drain(&mut d, &mut buf, false), Ok((b"hel".to_vec(), false)));
        buf.extend_from_slice(b"loGET /");
        assert_eq!(drain(&mut d, &mut buf, false), Ok((b"lo".to_vec(), true)));
        assert_eq!(&buf[..], b"GET /");
        assert!(d.is_done());
    }

    #[test]
    fn length_zero_and_empty_end_at_once() {
        for framing in [BodyFraming::Length(0), BodyFraming::Empty] {
            let mut d = BodyDecoder::new(framing);
            let mut buf = BytesMut::from(&b"next"[..]);
            assert_eq!(d.decode(&mut buf), Ok(Some(BodyItem::End)));
            assert_eq!(d.decode(&mut buf), Ok(None));
            assert_eq!(&buf[..], b"next");
        }
    }

    #[test]
    fn length_huge_count_streams() {
        let mut d = ContentLengthDecoder::new(u64::MAX);
        let mut buf = BytesMut::from(&b"abc"[..]);
        assert_eq!(
            d.decode(&mut buf),
            Ok(Some(BodyItem::Data(Bytes::from_static(b"abc"))))
        );
        assert_eq!(d.remaining(), u64::MAX - 3);
        assert_eq!(d.decode(&mut buf), Ok(None));
    }

    #[test]
    fn close_delimited_ends_only_at_eof() {
        let mut d = BodyDecoder::new(BodyFraming::CloseDelimited);
        let mut buf = BytesMut::from(&b"data: 1\n\n"[..]);
        assert_eq!(
            drain(&mut d, &mut buf, false),
            Ok((b"data: 1\n\n".to_vec(), false))
        );
        buf.extend_from_slice(b"tail");
        assert_eq!(drain(&mut d, &mut buf, true), Ok((b"tail".to_vec(), true)));
        assert_eq!(d.decode_eof(&mut buf), Ok(None));
    }

    #[test]
    fn eof_before_the_end_is_incomplete() {
        let mut d = BodyDecoder::new(BodyFraming::Length(4));
        let mut buf = BytesMut::from(&b"ab"[..]);
        assert_eq!(
            drain(&mut d, &mut buf, true),
            Err(HttpError::IncompleteBody)
        );

        let mut d = BodyDecoder::new(BodyFraming::Chunked);
        let mut buf = BytesMut::from(&b"2\r\nab\r\n"[..]);
        assert_eq!(
            drain(&mut d, &mut buf, true),
            Err(HttpError::IncompleteBody)
        );

        let mut d = BodyDecoder::new(BodyFraming::Chunked);
        let mut buf = BytesMut::from(&b"2\r\nab\r\n0\r\n\r\n"[..]);
        assert_eq!(drain(&mut d, &mut buf, true), Ok((b"ab".to_vec(), true)));
    }
}
