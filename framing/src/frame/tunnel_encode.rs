//! A tunnel's request and small answer frames encoded without prost.
//!
//! prost writes a `Bytes` field by cloning it into the buffer and dropping
//! the clone (two reference-count operations), and each nested message
//! through its own measuring pass: ~1.85k instructions for a small chat's
//! `ProviderTunnelRequest` on the Edge, ~550 for each of a tunnel's
//! `status` and `end` frames on the Node (`bench-results/profiles.md`,
//! round 38). [`FrameEncoder::encode`](super::FrameEncoder::encode) writes
//! these from borrowed slices instead, byte-identical to prost
//! (property-tested). Each message is described once ([`Fields`]) and run
//! twice: through a length counter, then into the frame.

use bytes::BytesMut;
use prost::encoding::{WireType, encoded_len_varint, key_len};
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{
    Header, ProviderTunnelRequest, TunnelBatch, TunnelEnd, TunnelHeaders, TunnelStatus, Usage,
};
use proto::{
    HEADER_NAME_FIELD, HEADER_VALUE_FIELD, TUNNEL_FRAME_BATCH_FIELD, TUNNEL_FRAME_END_FIELD,
    TUNNEL_FRAME_HEADERS_FIELD, TUNNEL_FRAME_STATUS_FIELD, TUNNEL_FRAME_USAGE_FIELD,
    TUNNEL_HEADERS_LIST_FIELD, TUNNEL_REQUEST_BODY_FIELD,
};

use super::encode::put_key_varint;
use super::tunnel_batch::{BatchBody, BatchFields};

/// Field numbers of the messages read and written here besides those
/// `proto` names, as `runtime.proto` numbers them (a wrong one fails the
/// property tests against prost).
pub(super) mod field {
    /// `TunnelStatus.code`.
    pub(in super::super) const STATUS_CODE: u32 = 1;
    /// `TunnelEnd.usage`.
    pub(in super::super) const END_USAGE: u32 = 1;
    /// `Usage`'s counts.
    pub(in super::super) const USAGE_INPUT: u32 = 1;
    pub(in super::super) const USAGE_OUTPUT: u32 = 2;
    pub(in super::super) const USAGE_REASONING: u32 = 3;
    pub(in super::super) const USAGE_CACHED: u32 = 4;
    /// `ProviderTunnelRequest`'s fields but its body.
    pub(in super::super) const REQUEST_TUNNEL_ID: u32 = 1;
    pub(in super::super) const REQUEST_ADAPTER: u32 = 2;
    pub(in super::super) const REQUEST_TARGET: u32 = 3;
    pub(in super::super) const REQUEST_METHOD: u32 = 4;
    pub(in super::super) const REQUEST_PATH: u32 = 5;
    pub(in super::super) const REQUEST_HEADERS: u32 = 6;
    pub(in super::super) const REQUEST_STALL_MS: u32 = 8;
    pub(in super::super) const REQUEST_HARD_MS: u32 = 9;
    pub(in super::super) const REQUEST_CREDENTIAL_LEASE: u32 = 10;
    pub(in super::super) const REQUEST_INITIAL_WINDOW: u32 = 11;
    pub(in super::super) const REQUEST_EXTRACT_USAGE: u32 = 12;
    pub(in super::super) const REQUEST_STRIP_USAGE_EVENT: u32 = 13;
}

/// A message's fields, in field order, written to an [`Out`].
pub(super) trait Fields {
    fn fields<O: Out>(&self, out: &mut O);
}

/// Where fields go: a length counter or a frame.
pub(super) trait Out: Sized {
    /// A varint field, written even when 0 (an `optional` one, or a oneof's).
    fn varint_present(&mut self, field: u32, value: u64);
    /// A length-delimited field, written even when empty.
    fn bytes_present(&mut self, field: u32, bytes: &[u8]);
    /// A nested message, always written.
    fn message(&mut self, field: u32, message: &impl Fields);
    /// A length-delimited field of `len` bytes whose bytes are not written
    /// here: they follow the frame's head as their own slices. So it is the
    /// last field of its message, and that message the last of the frame.
    fn trailing(&mut self, field: u32, len: usize);
    /// Fields already encoded, as they are.
    fn raw(&mut self, fields: &[u8]);

    /// A proto3 varint: left out when 0, as prost leaves it out.
    fn varint(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.varint_present(field, value);
        }
    }

    /// A proto3 `bytes` or `string`: left out when empty.
    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.bytes_present(field, bytes);
        }
    }

    /// An `optional` varint: written when set, even to 0.
    fn optional(&mut self, field: u32, value: Option<u64>) {
        if let Some(value) = value {
            self.varint_present(field, value);
        }
    }
}

/// A message's encoded length.
pub(super) fn len_of(message: &impl Fields) -> usize {
    let mut len = Len(0);
    message.fields(&mut len);
    len.0
}

struct Len(usize);

impl Out for Len {
    fn varint_present(&mut self, field: u32, value: u64) {
        self.0 += key_len(field) + encoded_len_varint(value);
    }

    fn bytes_present(&mut self, field: u32, bytes: &[u8]) {
        self.0 += key_len(field) + encoded_len_varint(bytes.len() as u64) + bytes.len();
    }

    fn message(&mut self, field: u32, message: &impl Fields) {
        let len = len_of(message);
        self.0 += key_len(field) + encoded_len_varint(len as u64) + len;
    }

    fn trailing(&mut self, field: u32, len: usize) {
        self.0 += key_len(field) + encoded_len_varint(len as u64) + len;
    }

    fn raw(&mut self, fields: &[u8]) {
        self.0 += fields.len();
    }
}

impl Out for BytesMut {
    fn varint_present(&mut self, field: u32, value: u64) {
        put_key_varint(self, field, WireType::Varint, value);
    }

    fn bytes_present(&mut self, field: u32, bytes: &[u8]) {
        put_key_varint(self, field, WireType::LengthDelimited, bytes.len() as u64);
        self.extend_from_slice(bytes);
    }

    fn message(&mut self, field: u32, message: &impl Fields) {
        put_key_varint(
            self,
            field,
            WireType::LengthDelimited,
            len_of(message) as u64,
        );
        message.fields(self);
    }

    fn trailing(&mut self, field: u32, len: usize) {
        put_key_varint(self, field, WireType::LengthDelimited, len as u64);
    }

    fn raw(&mut self, fields: &[u8]) {
        self.extend_from_slice(fields);
    }
}

impl Fields for Header {
    fn fields<O: Out>(&self, out: &mut O) {
        HeaderPair(&self.name, &self.value).fields(out);
    }
}

impl Fields for ProviderTunnelRequest {
    fn fields<O: Out>(&self, out: &mut O) {
        request_fields!(self, false).fields(out);
    }
}

/// The [`RequestFields`] of `$request`, anything with a
/// `ProviderTunnelRequest`'s fields by name (the prost message, a
/// [`TunnelOpen`](super::TunnelOpen)), its body last when `$body_last`.
macro_rules! request_fields {
    ($request:expr, $body_last:expr) => {{
        let request = $request;
        RequestFields {
            tunnel_id: &request.tunnel_id,
            adapter: &request.adapter,
            target: &request.target,
            method: &request.method,
            path: &request.path,
            headers: &request.headers,
            body: &request.body,
            body_last: $body_last,
            response_stall_timeout_ms: request.response_stall_timeout_ms,
            hard_timeout_ms: request.hard_timeout_ms,
            credential_lease: &request.credential_lease,
            initial_window: request.initial_window,
            extract_usage: request.extract_usage,
            strip_usage_event: request.strip_usage_event,
        }
    }};
}
pub(super) use request_fields;

/// A `ProviderTunnelRequest`'s fields, borrowed from the prost message or
/// from a [`TunnelOpen`](super::TunnelOpen): one field list for both.
pub(super) struct RequestFields<'a> {
    pub(super) tunnel_id: &'a str,
    pub(super) adapter: &'a str,
    pub(super) target: &'a str,
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    pub(super) headers: &'a [Header],
    pub(super) body: &'a [u8],
    /// The body goes after every other field, as a trailing field
    /// ([`Out::trailing`]: its bytes are the caller's slice), instead of in
    /// field order.
    pub(super) body_last: bool,
    pub(super) response_stall_timeout_ms: u64,
    pub(super) hard_timeout_ms: u64,
    pub(super) credential_lease: &'a [u8],
    pub(super) initial_window: u32,
    pub(super) extract_usage: bool,
    pub(super) strip_usage_event: bool,
}

impl Fields for RequestFields<'_> {
    fn fields<O: Out>(&self, out: &mut O) {
        out.bytes(field::REQUEST_TUNNEL_ID, self.tunnel_id.as_bytes());
        out.bytes(field::REQUEST_ADAPTER, self.adapter.as_bytes());
        out.bytes(field::REQUEST_TARGET, self.target.as_bytes());
        out.bytes(field::REQUEST_METHOD, self.method.as_bytes());
        out.bytes(field::REQUEST_PATH, self.path.as_bytes());
        for header in self.headers {
            out.message(field::REQUEST_HEADERS, header);
        }
        if !self.body_last {
            out.bytes(TUNNEL_REQUEST_BODY_FIELD, self.body);
        }
        out.varint(field::REQUEST_STALL_MS, self.response_stall_timeout_ms);
        out.varint(field::REQUEST_HARD_MS, self.hard_timeout_ms);
        out.bytes(field::REQUEST_CREDENTIAL_LEASE, self.credential_lease);
        out.varint(
            field::REQUEST_INITIAL_WINDOW,
            u64::from(self.initial_window),
        );
        out.varint(field::REQUEST_EXTRACT_USAGE, u64::from(self.extract_usage));
        out.varint(
            field::REQUEST_STRIP_USAGE_EVENT,
            u64::from(self.strip_usage_event),
        );
        if self.body_last {
            out.trailing(TUNNEL_REQUEST_BODY_FIELD, self.body.len());
        }
    }
}

impl Fields for TunnelStatus {
    fn fields<O: Out>(&self, out: &mut O) {
        out.varint(field::STATUS_CODE, u64::from(self.code));
    }
}

impl Fields for TunnelHeaders {
    fn fields<O: Out>(&self, out: &mut O) {
        for header in &self.headers {
            out.message(TUNNEL_HEADERS_LIST_FIELD, header);
        }
    }
}

impl Fields for Usage {
    fn fields<O: Out>(&self, out: &mut O) {
        out.varint(field::USAGE_INPUT, self.input_tokens);
        out.varint(field::USAGE_OUTPUT, self.output_tokens);
        out.optional(field::USAGE_REASONING, self.reasoning_tokens);
        out.optional(field::USAGE_CACHED, self.cached_input_tokens);
    }
}

impl Fields for TunnelEnd {
    fn fields<O: Out>(&self, out: &mut O) {
        if let Some(usage) = &self.usage {
            out.message(field::END_USAGE, usage);
        }
    }
}

/// A `ProviderTunnelFrame` of one of the variants written here: its one
/// field. `None` for a body (written by `encode_tunnel_body`'s own head)
/// or an error (left to prost).
pub(super) fn frame_fields(frame: &Frame) -> Option<OneOf<'_>> {
    Some(match frame {
        Frame::Status(status) => OneOf::Status(status),
        Frame::Headers(headers) => OneOf::Headers(headers),
        Frame::End(end) => OneOf::End(end),
        Frame::Usage(usage) => OneOf::Usage(usage),
        Frame::Batch(batch) => OneOf::Batch(batch),
        Frame::Body(_) | Frame::Error(_) => return None,
    })
}

/// See [`frame_fields`].
pub(super) enum OneOf<'a> {
    Status(&'a TunnelStatus),
    Headers(&'a TunnelHeaders),
    /// `headers` of borrowed `(name, value)` pairs, no `Header` built.
    HeaderPairs(&'a [(&'a [u8], &'a [u8])]),
    End(&'a TunnelEnd),
    Usage(&'a Usage),
    /// A whole batch, its body copied into the frame.
    Batch(&'a TunnelBatch),
}

/// One borrowed `(name, value)` pair as a `Header`.
pub(super) struct HeaderPair<'a>(pub(super) &'a [u8], pub(super) &'a [u8]);

impl Fields for HeaderPair<'_> {
    fn fields<O: Out>(&self, out: &mut O) {
        out.bytes(HEADER_NAME_FIELD, self.0);
        out.bytes(HEADER_VALUE_FIELD, self.1);
    }
}

/// Borrowed pairs as a `TunnelHeaders`.
pub(super) struct HeaderPairs<'a>(pub(super) &'a [(&'a [u8], &'a [u8])]);

impl Fields for HeaderPairs<'_> {
    fn fields<O: Out>(&self, out: &mut O) {
        for &(name, value) in self.0 {
            out.message(TUNNEL_HEADERS_LIST_FIELD, &HeaderPair(name, value));
        }
    }
}

impl Fields for OneOf<'_> {
    fn fields<O: Out>(&self, out: &mut O) {
        // A oneof's message is written whatever it holds.
        match self {
            OneOf::Status(status) => out.message(TUNNEL_FRAME_STATUS_FIELD, *status),
            OneOf::Headers(headers) => out.message(TUNNEL_FRAME_HEADERS_FIELD, *headers),
            OneOf::HeaderPairs(pairs) => {
                out.message(TUNNEL_FRAME_HEADERS_FIELD, &HeaderPairs(pairs));
            }
            OneOf::End(end) => out.message(TUNNEL_FRAME_END_FIELD, *end),
            OneOf::Usage(usage) => out.message(TUNNEL_FRAME_USAGE_FIELD, *usage),
            OneOf::Batch(batch) => out.message(
                TUNNEL_FRAME_BATCH_FIELD,
                &BatchFields {
                    status: batch.status.as_ref().map(|s| s.code),
                    headers: batch.headers.as_ref(),
                    head: &[],
                    end: batch.end.as_ref(),
                    body: BatchBody::Inline(&batch.body),
                },
            ),
        }
    }
}
