//! The tunnel's own codec (`tunnel_decode.rs`, `tunnel_encode.rs`) held to
//! prost's: what it reads, prost reads the same; what it writes is prost's
//! bytes.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use prost::Message;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{
    ExecutionFailure, Header, HeartbeatPing, ProviderTunnelFrame, ProviderTunnelRequest,
    TunnelBatch, TunnelEnd, TunnelHeaders, TunnelStatus, Usage,
};
use proto::{Envelope, Msg};

use super::tunnel_decode::decode;
use super::{BodyFrame, FrameDecoder, FrameEncoder, FrameError};

fn bytes_of(envelope: &Envelope) -> Bytes {
    Bytes::from(envelope.encode_to_vec())
}

fn by_prost(frame: &Bytes) -> Option<Envelope> {
    Envelope::decode(frame.clone()).ok()
}

/// The frame prost writes of `envelope`: its length, then its bytes.
pub(super) fn frame_by_prost(envelope: &Envelope) -> Bytes {
    let mut out = (envelope.encoded_len() as u32).to_be_bytes().to_vec();
    envelope.encode(&mut out).unwrap();
    Bytes::from(out)
}

/// A frame's head and slices, joined as the writer sends them.
pub(super) fn joined(frame: &BodyFrame) -> Bytes {
    let mut wire = BytesMut::from(&frame.head[..]);
    frame.parts().for_each(|part| wire.extend_from_slice(part));
    wire.freeze()
}

/// The one envelope `wire` holds, read by the frame decoder to its end.
pub(super) fn decoded(wire: &Bytes) -> Envelope {
    let mut buf = BytesMut::from(&wire[..]);
    let envelope = FrameDecoder::new(1 << 20)
        .decode(&mut buf)
        .unwrap()
        .unwrap();
    assert!(buf.is_empty());
    envelope
}

fn on(stream_id: u64, msg: Msg) -> Envelope {
    Envelope {
        stream_id,
        msg: Some(msg),
    }
}

fn tunnel_frame(frame: Frame) -> Msg {
    Msg::ProviderTunnelFrame(ProviderTunnelFrame { frame: Some(frame) })
}

fn header(name: &'static str, value: &'static str) -> Header {
    Header {
        name: Bytes::from_static(name.as_bytes()),
        value: Bytes::from_static(value.as_bytes()),
    }
}

fn request() -> ProviderTunnelRequest {
    ProviderTunnelRequest {
        tunnel_id: "t-1".into(),
        adapter: "openai_compat".into(),
        target: "mock".into(),
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        headers: vec![header("content-type", "application/json")],
        body: Bytes::from_static(br#"{"model":"m"}"#),
        response_stall_timeout_ms: 300_000,
        hard_timeout_ms: 0,
        credential_lease: Bytes::from_static(b"lease"),
        initial_window: 1 << 20,
        extract_usage: true,
        strip_usage_event: false,
    }
}

/// What each tunnel message reads as, through both readers, and what it
/// is written as, by both writers.
#[test]
fn a_tunnels_messages_read_and_write_as_prosts() {
    let usage = Usage {
        input_tokens: 3,
        output_tokens: 16,
        reasoning_tokens: Some(0),
        cached_input_tokens: None,
    };
    let cases = [
        on(7, Msg::ProviderTunnelRequest(Box::new(request()))),
        on(7, Msg::ProviderTunnelRequest(Box::default())),
        on(7, tunnel_frame(Frame::Status(TunnelStatus { code: 200 }))),
        on(7, tunnel_frame(Frame::Status(TunnelStatus { code: 0 }))),
        on(
            7,
            tunnel_frame(Frame::Headers(TunnelHeaders {
                headers: vec![header("content-type", "text/event-stream"), header("", "")],
            })),
        ),
        on(7, tunnel_frame(Frame::Headers(TunnelHeaders::default()))),
        on(
            0,
            tunnel_frame(Frame::Body(Bytes::from_static(b"data: {}\n\n"))),
        ),
        on(u64::MAX, tunnel_frame(Frame::Body(Bytes::new()))),
        on(
            7,
            tunnel_frame(Frame::End(TunnelEnd { usage: Some(usage) })),
        ),
        on(7, tunnel_frame(Frame::End(TunnelEnd::default()))),
        on(7, tunnel_frame(Frame::Usage(usage))),
        on(7, tunnel_frame(Frame::Usage(Usage::default()))),
        on(
            7,
            tunnel_frame(Frame::Batch(Box::new(TunnelBatch {
                status: Some(TunnelStatus { code: 200 }),
                headers: Some(TunnelHeaders {
                    headers: vec![header("content-type", "application/json")],
                }),
                end: Some(TunnelEnd { usage: Some(usage) }),
                body: Bytes::from_static(b"{}"),
            }))),
        ),
        on(7, tunnel_frame(Frame::Batch(Box::default()))),
    ];
    let mut encoder = FrameEncoder::default();
    for envelope in cases {
        let frame = bytes_of(&envelope);
        assert_eq!(decode(&frame).as_ref(), Some(&envelope), "{envelope:?}");
        let written = encoder.encode(&envelope).unwrap();
        assert_eq!(written, frame_by_prost(&envelope), "{envelope:?}");
    }
}

#[test]
fn bytes_fields_are_slices_of_the_frame() {
    let frame = bytes_of(&on(
        3,
        tunnel_frame(Frame::Body(Bytes::from_static(b"0123456789"))),
    ));
    let Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
        frame: Some(Frame::Body(body)),
    })) = decode(&frame).unwrap().msg
    else {
        panic!("not a body");
    };
    let inside = frame.as_ptr_range();
    assert!(inside.contains(&body.as_ptr()), "the body is a copy");
}

/// Anything else is prost's to read: it may read it, or refuse it.
#[test]
fn other_frames_are_declined() {
    let failure = on(
        7,
        tunnel_frame(Frame::Error(ExecutionFailure {
            message: "boom".into(),
            ..ExecutionFailure::default()
        })),
    );
    let ping = on(0, Msg::HeartbeatPing(HeartbeatPing { seq: 1 }));
    for envelope in [failure, ping, Envelope::default()] {
        assert_eq!(decode(&bytes_of(&envelope)), None, "{envelope:?}");
    }
    let mut status = BytesMut::new();
    status.put_slice(&bytes_of(&on(
        7,
        tunnel_frame(Frame::Status(TunnelStatus { code: 200 })),
    )));
    let declined: [&[u8]; 8] = [
        // An unknown field after a known message.
        &[&status[..], &[0x98, 0x06, 0x01]].concat(),
        // The message field twice (prost merges the two).
        &[&status[..], &status[2..]].concat(),
        // A frame's `ProviderTunnelFrame` with two variants.
        &[0x08, 0x07, 0xfa, 0x01, 0x04, 0x0a, 0x00, 0x12, 0x00],
        // A string that is not UTF-8 (`tunnel_id`).
        &[0xf2, 0x01, 0x03, 0x0a, 0x01, 0xff],
        // A length past the message's end.
        &[0xfa, 0x01, 0x02, 0x7a, 0x05, 0x00],
        // A varint that does not end, and one past 2^64.
        &[0x08, 0xff, 0xff],
        &[
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
        ],
        // A fixed64 field.
        &[0x09, 1, 2, 3, 4, 5, 6, 7, 8],
    ];
    for bytes in declined {
        assert_eq!(decode(&Bytes::copy_from_slice(bytes)), None, "{bytes:x?}");
    }
}

#[test]
fn a_tunnel_request_over_the_limit_is_refused() {
    let envelope = on(
        1,
        Msg::ProviderTunnelRequest(Box::new(ProviderTunnelRequest {
            body: Bytes::from(vec![b'x'; 2048]),
            ..ProviderTunnelRequest::default()
        })),
    );
    assert!(matches!(
        FrameEncoder::new(1024).encode(&envelope),
        Err(FrameError::TooLarge { .. })
    ));
}

/// A scalar given twice keeps the last, as prost does.
#[test]
fn a_scalar_given_twice_keeps_the_last() {
    // stream_id 1, a status frame of code 200 then 404, stream_id 9.
    let frame = Bytes::from_static(&[
        0x08, 0x01, 0xfa, 0x01, 0x08, 0x0a, 0x06, 0x08, 0xc8, 0x01, 0x08, 0x94, 0x03, 0x08, 0x09,
    ]);
    let ours = decode(&frame).unwrap();
    assert_eq!(Some(&ours), by_prost(&frame).as_ref());
    assert_eq!(
        ours,
        on(9, tunnel_frame(Frame::Status(TunnelStatus { code: 404 })))
    );
}

fn any_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z/_.-]{1,24}", any::<String>()]
}

fn any_header() -> impl Strategy<Value = Header> {
    (any_bytes(24), any_bytes(64)).prop_map(|(name, value)| Header { name, value })
}

pub(super) fn any_usage() -> impl Strategy<Value = Usage> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<Option<u64>>(),
        any::<Option<u64>>(),
    )
        .prop_map(|(input, output, reasoning, cached)| Usage {
            input_tokens: input,
            output_tokens: output,
            reasoning_tokens: reasoning,
            cached_input_tokens: cached,
        })
}

prop_compose! {
    pub(super) fn any_request()(
        texts in proptest::array::uniform5(any_text()),
        headers in proptest::collection::vec(any_header(), 0..6),
        body in any_bytes(256),
        timeouts in any::<(u64, u64)>(),
        credential_lease in any_bytes(32),
        initial_window in any::<u32>(),
        flags in any::<(bool, bool)>(),
    ) -> ProviderTunnelRequest {
        let [tunnel_id, adapter, target, method, path] = texts;
        ProviderTunnelRequest {
            tunnel_id, adapter, target, method, path, headers, body,
            response_stall_timeout_ms: timeouts.0,
            hard_timeout_ms: timeouts.1,
            credential_lease,
            initial_window,
            extract_usage: flags.0,
            strip_usage_event: flags.1,
        }
    }
}

fn any_tunnel_msg() -> impl Strategy<Value = Msg> {
    prop_oneof![
        any_request().prop_map(|r| Msg::ProviderTunnelRequest(Box::new(r))),
        any::<u32>().prop_map(|code| tunnel_frame(Frame::Status(TunnelStatus { code }))),
        proptest::collection::vec(any_header(), 0..8)
            .prop_map(|headers| tunnel_frame(Frame::Headers(TunnelHeaders { headers }))),
        any_bytes(512).prop_map(|body| tunnel_frame(Frame::Body(body))),
        proptest::option::of(any_usage())
            .prop_map(|usage| tunnel_frame(Frame::End(TunnelEnd { usage }))),
        any_usage().prop_map(|usage| tunnel_frame(Frame::Usage(usage))),
        any_batch().prop_map(|batch| tunnel_frame(Frame::Batch(Box::new(batch)))),
    ]
}

prop_compose! {
    fn any_batch()(
        code in proptest::option::of(any::<u32>()),
        headers in proptest::option::of(proptest::collection::vec(any_header(), 0..4)),
        end in proptest::option::of(proptest::option::of(any_usage())),
        body in any_bytes(256),
    ) -> TunnelBatch {
        TunnelBatch {
            status: code.map(|code| TunnelStatus { code }),
            headers: headers.map(|headers| TunnelHeaders { headers }),
            end: end.map(|usage| TunnelEnd { usage }),
            body,
        }
    }
}

proptest! {
    /// Every tunnel message prost writes reads back whole.
    #[test]
    fn any_tunnel_message_reads_back(stream_id in any::<u64>(), msg in any_tunnel_msg()) {
        let envelope = on(stream_id, msg);
        prop_assert_eq!(decode(&bytes_of(&envelope)), Some(envelope));
    }

    /// Every tunnel message is written as prost writes it.
    #[test]
    fn any_tunnel_message_is_written_as_prost_writes_it(
        stream_id in any::<u64>(),
        msg in any_tunnel_msg(),
    ) {
        let envelope = on(stream_id, msg);
        let written = FrameEncoder::default().encode(&envelope).unwrap();
        prop_assert_eq!(written, frame_by_prost(&envelope));
    }

    /// Whatever it reads, damaged or not, prost reads the same.
    #[test]
    fn what_it_reads_prost_reads_the_same(
        msg in any_tunnel_msg(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        to in any::<u8>(),
    ) {
        let frame = bytes_of(&on(5, msg)).to_vec();
        let mut damaged = frame.clone();
        if !damaged.is_empty() {
            let at = flip.index(damaged.len());
            damaged[at] = to;
        }
        let short = frame[..cut.index(frame.len() + 1)].to_vec();
        for bytes in [damaged, short] {
            let bytes = Bytes::from(bytes);
            if let Some(ours) = decode(&bytes) {
                prop_assert_eq!(Some(ours), by_prost(&bytes));
            }
        }
    }

    #[test]
    fn arbitrary_bytes_are_read_as_prost_reads_them_or_declined(bytes in any_bytes(64)) {
        if let Some(ours) = decode(&bytes) {
            prop_assert_eq!(Some(ours), by_prost(&bytes));
        }
    }
}
