//! A tunnel's frames decoded without prost's generic walk.
//!
//! A small tunnelled request is one `ProviderTunnelRequest` on the Node and
//! four `ProviderTunnelFrame`s on the Edge (status, headers, body, end; to
//! an Edge that takes batches, one `batch` of them, `tunnel_batch.rs`).
//! prost's generated merge read them in ~3.3k instructions on the Node and
//! ~3.9k on the Edge (`bench-results/profiles.md`, round 38): a call, a key
//! check and a `Buf` step for every field, at every level. [`decode`] reads
//! those messages' fields straight off the frame's bytes, and *declines*
//! (returns `None`: the frame then goes through prost) on anything it does
//! not read exactly as prost does: another message, an unknown field, a
//! field of another wire type, a message field given twice (prost merges
//! the two), a tunnel frame's `error`, a string that is not UTF-8, a
//! varint that overflows or does not end, a length past its message's end.
//!
//! So what it returns is what prost returns; the tests hold it to that,
//! for every message it reads and for arbitrary bytes. `bytes` fields are
//! slices of the frame, as prost makes them; a scalar given twice keeps
//! the last, as prost does.

use std::ops::Range;

use bytes::Bytes;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{
    Header, ProviderTunnelFrame, ProviderTunnelRequest, TunnelBatch, TunnelEnd, TunnelHeaders,
    TunnelStatus, Usage,
};
use proto::{
    ENVELOPE_STREAM_ID_FIELD, ENVELOPE_TUNNEL_FRAME_FIELD, ENVELOPE_TUNNEL_REQUEST_FIELD, Envelope,
    HEADER_NAME_FIELD, HEADER_VALUE_FIELD, Msg, TUNNEL_FRAME_BATCH_FIELD, TUNNEL_FRAME_BODY_FIELD,
    TUNNEL_FRAME_END_FIELD, TUNNEL_FRAME_HEADERS_FIELD, TUNNEL_FRAME_STATUS_FIELD,
    TUNNEL_FRAME_USAGE_FIELD, TUNNEL_HEADERS_LIST_FIELD, TUNNEL_REQUEST_BODY_FIELD,
};

use super::tunnel_encode::field;

/// The frame is left to prost.
#[derive(Debug)]
struct Decline;

type Read<T> = Result<T, Decline>;

/// One field's value: a varint, or where a length-delimited one's bytes lie
/// in the frame.
enum Value {
    Varint(u64),
    Bytes(Range<usize>),
}

impl Value {
    fn varint(self) -> Read<u64> {
        match self {
            Value::Varint(v) => Ok(v),
            Value::Bytes(_) => Err(Decline),
        }
    }

    fn bytes(self) -> Read<Range<usize>> {
        match self {
            Value::Bytes(range) => Ok(range),
            Value::Varint(_) => Err(Decline),
        }
    }
}

/// The fields of one message, `frame[at..end]`.
struct FieldReader<'a> {
    frame: &'a [u8],
    at: usize,
    end: usize,
}

impl<'a> FieldReader<'a> {
    fn of(frame: &'a [u8], range: Range<usize>) -> Self {
        Self {
            frame,
            at: range.start,
            end: range.end,
        }
    }

    /// The next field's number and value; `None` at the message's end.
    /// Inlined: called once a field and once more a message, it is most
    /// of what a frame costs.
    #[inline(always)]
    fn next(&mut self) -> Read<Option<(u32, Value)>> {
        if self.at == self.end {
            return Ok(None);
        }
        let key = self.varint()?;
        // Every field read here has a small number, so a key past u32 or
        // of field 0 is never one of them: declined below, as a field of
        // no known number.
        let field = u32::try_from(key >> 3).map_err(|_| Decline)?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| Decline)?;
                let start = self.at;
                let end = start.checked_add(len).ok_or(Decline)?;
                if end > self.end {
                    return Err(Decline);
                }
                self.at = end;
                Value::Bytes(start..end)
            }
            _ => return Err(Decline),
        };
        Ok(Some((field, value)))
    }

    /// A varint, as prost reads it.
    #[inline(always)]
    fn varint(&mut self) -> Read<u64> {
        // Keys, lengths and most values here are one byte.
        if let Some(&byte) = self.frame[..self.end].get(self.at)
            && byte < 0x80
        {
            self.at += 1;
            return Ok(u64::from(byte));
        }
        self.varint_long()
    }

    /// [`varint`](Self::varint) past its first byte's fast path: up to ten
    /// bytes, the tenth 0 or 1 (past that it would overflow a u64, which
    /// prost refuses). Not prost's `decode_varint` over the rest of the
    /// message: through its `Buf` steps it cost the Edge ~1.1k instructions
    /// a small request more (stream ids past 127 are two bytes).
    fn varint_long(&mut self) -> Read<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            if self.at == self.end {
                return Err(Decline);
            }
            let byte = self.frame[self.at];
            self.at += 1;
            if shift == 63 && byte > 1 {
                return Err(Decline);
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(Decline)
    }
}

/// `frame` read as prost would read it, when it is an envelope of a
/// tunnel's request or of one of its answer's frames but an error; `None`
/// otherwise (see the module docs).
pub(super) fn decode(frame: &Bytes) -> Option<Envelope> {
    envelope(frame).ok()
}

fn envelope(frame: &Bytes) -> Read<Envelope> {
    let mut fields = FieldReader::of(frame, 0..frame.len());
    let mut stream_id = 0;
    let mut msg = None;
    while let Some((field, value)) = fields.next()? {
        match field {
            ENVELOPE_STREAM_ID_FIELD => stream_id = value.varint()?,
            _ if msg.is_some() => return Err(Decline),
            ENVELOPE_TUNNEL_FRAME_FIELD => {
                msg = Some(Msg::ProviderTunnelFrame(tunnel_frame(
                    frame,
                    value.bytes()?,
                )?));
            }
            ENVELOPE_TUNNEL_REQUEST_FIELD => {
                msg = Some(Msg::ProviderTunnelRequest(Box::new(tunnel_request(
                    frame,
                    value.bytes()?,
                )?)));
            }
            _ => return Err(Decline),
        }
    }
    let msg = msg.ok_or(Decline)?;
    Ok(Envelope {
        stream_id,
        msg: Some(msg),
    })
}

/// A `ProviderTunnelFrame` of exactly one variant, not `error`.
fn tunnel_frame(frame: &Bytes, range: Range<usize>) -> Read<ProviderTunnelFrame> {
    let mut fields = FieldReader::of(frame, range);
    let (field, value) = fields.next()?.ok_or(Decline)?;
    let one = match field {
        TUNNEL_FRAME_BODY_FIELD => Frame::Body(frame.slice(value.bytes()?)),
        TUNNEL_FRAME_STATUS_FIELD => Frame::Status(status(frame, value.bytes()?)?),
        TUNNEL_FRAME_HEADERS_FIELD => Frame::Headers(headers(frame, value.bytes()?)?),
        TUNNEL_FRAME_END_FIELD => Frame::End(end(frame, value.bytes()?)?),
        TUNNEL_FRAME_USAGE_FIELD => Frame::Usage(usage(frame, value.bytes()?)?),
        TUNNEL_FRAME_BATCH_FIELD => Frame::Batch(Box::new(batch(frame, value.bytes()?)?)),
        _ => return Err(Decline),
    };
    if fields.next()?.is_some() {
        return Err(Decline);
    }
    Ok(ProviderTunnelFrame { frame: Some(one) })
}

/// A `TunnelBatch`: each of its messages at most once (prost would merge
/// a second), its body a slice of the frame.
fn batch(frame: &Bytes, range: Range<usize>) -> Read<TunnelBatch> {
    let mut out = TunnelBatch::default();
    let mut fields = FieldReader::of(frame, range);
    while let Some((field, value)) = fields.next()? {
        match field {
            TUNNEL_FRAME_STATUS_FIELD if out.status.is_none() => {
                out.status = Some(status(frame, value.bytes()?)?);
            }
            TUNNEL_FRAME_HEADERS_FIELD if out.headers.is_none() => {
                out.headers = Some(headers(frame, value.bytes()?)?);
            }
            TUNNEL_FRAME_END_FIELD if out.end.is_none() => {
                out.end = Some(end(frame, value.bytes()?)?);
            }
            TUNNEL_FRAME_BODY_FIELD => out.body = frame.slice(value.bytes()?),
            _ => return Err(Decline),
        }
    }
    Ok(out)
}

fn status(frame: &[u8], range: Range<usize>) -> Read<TunnelStatus> {
    let mut out = TunnelStatus::default();
    let mut fields = FieldReader::of(frame, range);
    while let Some((field, value)) = fields.next()? {
        match field {
            // prost keeps a uint32's low 32 bits.
            field::STATUS_CODE => out.code = value.varint()? as u32,
            _ => return Err(Decline),
        }
    }
    Ok(out)
}

fn headers(frame: &Bytes, range: Range<usize>) -> Read<TunnelHeaders> {
    let mut out = TunnelHeaders::default();
    let mut fields = FieldReader::of(frame, range);
    while let Some((field, value)) = fields.next()? {
        match field {
            TUNNEL_HEADERS_LIST_FIELD => out.headers.push(header(frame, value.bytes()?)?),
            _ => return Err(Decline),
        }
    }
    Ok(out)
}

fn header(frame: &Bytes, range: Range<usize>) -> Read<Header> {
    let mut out = Header::default();
    let mut fields = FieldReader::of(frame, range);
    while let Some((field, value)) = fields.next()? {
        match field {
            HEADER_NAME_FIELD => out.name = frame.slice(value.bytes()?),
            HEADER_VALUE_FIELD => out.value = frame.slice(value.bytes()?),
            _ => return Err(Decline),
        }
    }
    Ok(out)
}

fn end(frame: &[u8], range: Range<usize>) -> Read<TunnelEnd> {
    let mut out = TunnelEnd::default();
    let mut fields = FieldReader::of(frame, range);
    while let Some((field, value)) = fields.next()? {
        match field {
            field::END_USAGE if out.usage.is_none() => {
                out.usage = Some(usage(frame, value.bytes()?)?);
            }
            _ => return Err(Decline),
        }
    }
    Ok(out)
}

fn usage(frame: &[u8], range: Range<usize>) -> Read<Usage> {
    let mut out = Usage::default();
    let mut fields = FieldReader::of(frame, range);
    while let Some((field, value)) = fields.next()? {
        let value = value.varint()?;
        match field {
            field::USAGE_INPUT => out.input_tokens = value,
            field::USAGE_OUTPUT => out.output_tokens = value,
            field::USAGE_REASONING => out.reasoning_tokens = Some(value),
            field::USAGE_CACHED => out.cached_input_tokens = Some(value),
            _ => return Err(Decline),
        }
    }
    Ok(out)
}

fn tunnel_request(frame: &Bytes, range: Range<usize>) -> Read<ProviderTunnelRequest> {
    let mut out = ProviderTunnelRequest::default();
    let mut fields = FieldReader::of(frame, range);
    while let Some((field, value)) = fields.next()? {
        match field {
            field::REQUEST_TUNNEL_ID => out.tunnel_id = text(frame, value)?,
            field::REQUEST_ADAPTER => out.adapter = text(frame, value)?,
            field::REQUEST_TARGET => out.target = text(frame, value)?,
            field::REQUEST_METHOD => out.method = text(frame, value)?,
            field::REQUEST_PATH => out.path = text(frame, value)?,
            field::REQUEST_HEADERS => out.headers.push(header(frame, value.bytes()?)?),
            TUNNEL_REQUEST_BODY_FIELD => out.body = frame.slice(value.bytes()?),
            field::REQUEST_STALL_MS => out.response_stall_timeout_ms = value.varint()?,
            field::REQUEST_HARD_MS => out.hard_timeout_ms = value.varint()?,
            field::REQUEST_CREDENTIAL_LEASE => out.credential_lease = frame.slice(value.bytes()?),
            // prost keeps a uint32's low 32 bits, and reads a bool as "not 0".
            field::REQUEST_INITIAL_WINDOW => out.initial_window = value.varint()? as u32,
            field::REQUEST_EXTRACT_USAGE => out.extract_usage = value.varint()? != 0,
            field::REQUEST_STRIP_USAGE_EVENT => out.strip_usage_event = value.varint()? != 0,
            _ => return Err(Decline),
        }
    }
    Ok(out)
}

/// A `string` field's text, checked as UTF-8.
fn text(frame: &[u8], value: Value) -> Read<String> {
    let bytes = &frame[value.bytes()?];
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| Decline)
}
