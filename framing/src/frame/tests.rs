use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use prost::Message;
use proto::Envelope;
use proto::v1::{
    Header, HeartbeatPing, ProviderTunnelFrame, ProviderTunnelRequest, RunEvent, RunEventKind,
    TunnelStatus, Usage, envelope::Msg, provider_tunnel_frame::Frame,
};

use super::*;

fn body_envelope(stream_id: u64, body: Bytes) -> Envelope {
    Envelope {
        stream_id,
        msg: Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
            frame: Some(Frame::Body(body)),
        })),
    }
}

fn ping(seq: u64) -> Envelope {
    Envelope {
        stream_id: 0,
        msg: Some(Msg::HeartbeatPing(HeartbeatPing { seq })),
    }
}

fn body_of(envelope: &Envelope) -> &Bytes {
    match &envelope.msg {
        Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
            frame: Some(Frame::Body(body)),
        })) => body,
        other => panic!("not a body frame: {other:?}"),
    }
}

#[test]
fn control_frame_round_trips() {
    let mut enc = FrameEncoder::default();
    let mut dec = FrameDecoder::default();
    let wire = enc.encode(&ping(42)).unwrap();
    assert_eq!(&wire[..4], &(wire.len() as u32 - 4).to_be_bytes());
    let mut rx = BytesMut::from(&wire[..]);
    assert_eq!(dec.decode(&mut rx).unwrap(), Some(ping(42)));
    assert!(rx.is_empty());
    assert_eq!(dec.decode(&mut rx).unwrap(), None);
}

#[test]
fn decoded_body_shares_memory_with_the_receive_buffer() {
    let mut enc = FrameEncoder::default();
    let body = Bytes::from(vec![0xAB; 64 * 1024]);
    let frame = enc.encode_tunnel_body(7, body.clone()).unwrap();

    let mut rx = BytesMut::with_capacity(frame.len() + 16);
    rx.put_slice(&frame.head);
    rx.put_slice(&frame.body);
    let region = rx.as_ptr() as usize..rx.as_ptr() as usize + rx.capacity();

    let envelope = FrameDecoder::default().decode(&mut rx).unwrap().unwrap();
    let got = body_of(&envelope);
    assert_eq!(got, &body);
    let (start, end) = (got.as_ptr() as usize, got.as_ptr() as usize + got.len());
    assert!(
        region.contains(&start) && end <= region.end,
        "body {start:#x}..{end:#x} is not inside the receive buffer {region:x?}: it was copied"
    );
}

/// `msg` framed, then decoded from a receive buffer: what came out, and
/// the buffer's address range (a decoded field inside it was not copied).
fn received(msg: Msg) -> (Msg, std::ops::Range<usize>) {
    let envelope = Envelope {
        stream_id: 3,
        msg: Some(msg),
    };
    let wire = FrameEncoder::default().encode(&envelope).unwrap();
    let mut rx = BytesMut::from(&wire[..]);
    let region = rx.as_ptr() as usize..rx.as_ptr() as usize + rx.capacity();
    let decoded = FrameDecoder::default().decode(&mut rx).unwrap().unwrap();
    (decoded.msg.unwrap(), region)
}

#[test]
fn a_runs_message_text_shares_memory_with_the_receive_buffer() {
    use proto::v1::{ChatMessage, RunInput, RunRequest};
    let text = Bytes::from(vec![b'p'; 64 * 1024]);
    let request = RunRequest {
        input: Some(RunInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: text.clone(),
                ..ChatMessage::default()
            }],
            ..RunInput::default()
        }),
        ..RunRequest::default()
    };
    let (msg, region) = received(Msg::RunRequest(Box::new(request)));
    let Msg::RunRequest(got) = msg else {
        panic!("not a run request");
    };
    let content = &got.input.unwrap().messages[0].content;
    assert_eq!(content, &text);
    assert!(
        region.contains(&(content.as_ptr() as usize)),
        "the text was copied out of the receive buffer"
    );
}

#[test]
fn a_tunnels_header_names_and_values_share_memory_with_the_receive_buffer() {
    use proto::v1::{Header, ProviderTunnelFrame, TunnelHeaders, provider_tunnel_frame::Frame};
    let frame = ProviderTunnelFrame {
        frame: Some(Frame::Headers(TunnelHeaders {
            headers: vec![Header {
                name: Bytes::from_static(b"content-type"),
                value: Bytes::from_static(b"application/json"),
            }],
        })),
    };
    let (msg, region) = received(Msg::ProviderTunnelFrame(frame));
    let Msg::ProviderTunnelFrame(got) = msg else {
        panic!("not a tunnel frame");
    };
    let Some(Frame::Headers(got)) = got.frame else {
        panic!("not the headers");
    };
    let header = &got.headers[0];
    assert_eq!(&header.name[..], b"content-type");
    assert_eq!(&header.value[..], b"application/json");
    for field in [&header.name, &header.value] {
        assert!(
            region.contains(&(field.as_ptr() as usize)),
            "a header field was copied out of the receive buffer"
        );
    }
}

#[test]
fn encoded_body_frame_keeps_the_callers_body() {
    let body = Bytes::from(vec![1u8; 4096]);
    let frame = FrameEncoder::default()
        .encode_tunnel_body(1, body.clone())
        .unwrap();
    assert_eq!(
        frame.body.as_ptr(),
        body.as_ptr(),
        "the body must be the caller's slice"
    );
    assert!(frame.head.len() < 16);
}

#[test]
fn a_request_with_its_body_last_decodes_as_the_whole_request() {
    let body = Bytes::from(vec![b'x'; 100_000]);
    let request = ProviderTunnelRequest {
        tunnel_id: "t-1".into(),
        adapter: "openai".into(),
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        headers: vec![Header {
            name: "content-type".into(),
            value: Bytes::from_static(b"application/json"),
        }],
        body: body.clone(),
        hard_timeout_ms: 9_000,
        initial_window: 1 << 20,
        extract_usage: true,
        ..ProviderTunnelRequest::default()
    };
    let whole = Envelope {
        stream_id: 300,
        msg: Some(Msg::ProviderTunnelRequest(Box::new(request.clone()))),
    };
    let without_body = ProviderTunnelRequest {
        body: Bytes::new(),
        ..request
    };
    let frame = FrameEncoder::default()
        .encode_with_trailing_bytes(
            300,
            proto::ENVELOPE_TUNNEL_REQUEST_FIELD,
            &without_body,
            proto::TUNNEL_REQUEST_BODY_FIELD,
            body.clone(),
        )
        .unwrap();
    assert_eq!(frame.body.as_ptr(), body.as_ptr(), "the body is not copied");
    assert_eq!(frame.len(), LENGTH_PREFIX_LEN + whole.encoded_len());

    let mut rx = BytesMut::new();
    rx.put_slice(&frame.head);
    rx.put_slice(&frame.body);
    assert_eq!(
        FrameDecoder::default().decode(&mut rx).unwrap(),
        Some(whole)
    );
    assert!(rx.is_empty());
}

#[test]
fn the_last_piece_of_a_long_frame_does_not_move_it() {
    let mut enc = FrameEncoder::default();
    let frame = enc
        .encode_tunnel_body(9, Bytes::from(vec![3u8; 1 << 20]))
        .unwrap();
    let wire = [&frame.head[..], &frame.body[..]].concat();
    let mut dec = FrameDecoder::default();
    let mut rx = BytesMut::with_capacity(64 * 1024);
    // The prefix and a first read arrive: the decoder reserves the rest of
    // the frame, exactly.
    rx.put_slice(&wire[..64 * 1024]);
    assert_eq!(dec.decode(&mut rx).unwrap(), None);
    let at = rx.as_ptr();
    // All but the last 1,000 bytes: what is free is just what is missing.
    rx.put_slice(&wire[64 * 1024..wire.len() - 1000]);
    assert_eq!(dec.decode(&mut rx).unwrap(), None);
    assert_eq!(rx.as_ptr(), at);
    assert_eq!(rx.capacity() - rx.len(), 1000);
    // A caller that wants 16 KiB free before each read leaves it be.
    dec.reserve_read(&mut rx, 16 * 1024, 64 * 1024);
    assert_eq!(rx.as_ptr(), at, "the frame was moved");
    rx.put_slice(&wire[wire.len() - 1000..]);
    assert_eq!(rx.as_ptr(), at);
    assert_eq!(
        body_of(&dec.decode(&mut rx).unwrap().unwrap()).len(),
        1 << 20
    );
    // Between frames it reserves as asked.
    dec.reserve_read(&mut rx, 16 * 1024, 64 * 1024);
    assert!(rx.capacity() - rx.len() >= 64 * 1024);
}

#[test]
fn read_ahead_leaves_room_for_the_frames_after_a_long_one() {
    let mut enc = FrameEncoder::default();
    let frame = enc
        .encode_tunnel_body(9, Bytes::from(vec![3u8; 100_000]))
        .unwrap();
    let wire = [&frame.head[..], &frame.body[..]].concat();
    let mut dec = FrameDecoder::default();
    dec.set_read_ahead(128 * 1024);
    let mut rx = BytesMut::with_capacity(64 * 1024);
    rx.put_slice(&wire[..60_000]);
    assert_eq!(dec.decode(&mut rx).unwrap(), None);
    let missing = wire.len() - 60_000;
    assert!(rx.capacity() - rx.len() >= missing + 128 * 1024);
    // Room that already fits the rest is left as it is.
    let mut dec = FrameDecoder::default();
    dec.set_read_ahead(128 * 1024);
    let mut rx = BytesMut::with_capacity(256 * 1024);
    rx.put_slice(&wire[..60_000]);
    let end = rx.as_ptr() as usize + rx.capacity();
    assert_eq!(dec.decode(&mut rx).unwrap(), None);
    assert_eq!(
        rx.as_ptr() as usize + rx.capacity(),
        end,
        "the frame was moved"
    );
    rx.put_slice(&wire[60_000..]);
    assert_eq!(
        body_of(&dec.decode(&mut rx).unwrap().unwrap()).len(),
        100_000
    );
}

#[test]
fn oversize_prefix_is_refused_and_buffer_left_alone() {
    let mut dec = FrameDecoder::new(1024);
    let mut rx = BytesMut::new();
    rx.put_u32(1025);
    rx.put_slice(b"junk");
    let before = (rx.len(), rx.capacity());
    assert_eq!(
        dec.decode(&mut rx),
        Err(FrameError::TooLarge {
            len: 1025,
            max: 1024
        })
    );
    assert_eq!((rx.len(), rx.capacity()), before);
}

#[test]
fn frame_exactly_at_the_limit_is_accepted_one_past_is_not() {
    let body = Bytes::from(vec![9u8; 1000]);
    let wire_len = FrameEncoder::default()
        .encode_tunnel_body(5, body.clone())
        .unwrap()
        .len();
    let envelope_len = wire_len - LENGTH_PREFIX_LEN;

    let at = FrameEncoder::new(envelope_len)
        .encode_tunnel_body(5, body.clone())
        .unwrap();
    let mut rx = BytesMut::new();
    rx.put_slice(&at.head);
    rx.put_slice(&at.body);
    let decoded = FrameDecoder::new(envelope_len)
        .decode(&mut rx)
        .unwrap()
        .unwrap();
    assert_eq!(body_of(&decoded), &body);

    assert_eq!(
        FrameEncoder::new(envelope_len - 1).encode_tunnel_body(5, body.clone()),
        Err(FrameError::TooLarge {
            len: envelope_len as u64,
            max: envelope_len - 1
        })
    );
    let mut rx = BytesMut::new();
    rx.put_slice(&at.head);
    rx.put_slice(&at.body);
    assert!(matches!(
        FrameDecoder::new(envelope_len - 1).decode(&mut rx),
        Err(FrameError::TooLarge { .. })
    ));
}

#[test]
fn encoder_refuses_oversize_control_frames() {
    let env = Envelope {
        stream_id: 1,
        msg: Some(Msg::RunEvent(Box::new(RunEvent {
            text: "x".repeat(200).into(),
            ..Default::default()
        }))),
    };
    assert!(matches!(
        FrameEncoder::new(100).encode(&env),
        Err(FrameError::TooLarge { max: 100, .. })
    ));
    let Some(Msg::RunEvent(event)) = &env.msg else {
        unreachable!("built above")
    };
    assert!(matches!(
        FrameEncoder::new(100).encode_message(1, proto::ENVELOPE_RUN_EVENT_FIELD, &**event),
        Err(FrameError::TooLarge { max: 100, .. })
    ));
}

#[test]
fn malformed_and_empty_envelopes_are_typed_errors() {
    let mut dec = FrameDecoder::default();
    // A length-delimited field whose length runs past the frame.
    let mut rx = BytesMut::new();
    rx.put_u32(3);
    rx.put_slice(&[0xFA, 0x01, 0x7F]);
    assert!(matches!(dec.decode(&mut rx), Err(FrameError::Malformed(_))));

    let mut dec = FrameDecoder::default();
    let mut rx = BytesMut::new();
    rx.put_u32(2);
    rx.put_slice(&[0x08, 0x05]); // stream_id = 5, no message
    assert_eq!(
        dec.decode(&mut rx),
        Err(FrameError::MissingMessage { stream_id: 5 })
    );

    let mut dec = FrameDecoder::default();
    let mut rx = BytesMut::new();
    rx.put_u32(0);
    assert_eq!(
        dec.decode(&mut rx),
        Err(FrameError::MissingMessage { stream_id: 0 })
    );
}

#[test]
fn eof_inside_a_frame_is_truncated() {
    let wire = FrameEncoder::default().encode(&ping(1)).unwrap();
    for cut in 1..wire.len() {
        let mut dec = FrameDecoder::default();
        let mut rx = BytesMut::from(&wire[..cut]);
        let err = dec.decode_eof(&mut rx).unwrap_err();
        assert!(
            matches!(err, FrameError::Truncated { expected, .. } if expected == 4 || expected == wire.len())
        );
    }
    let mut rx = BytesMut::new();
    assert_eq!(FrameDecoder::default().decode_eof(&mut rx), Ok(None));
}

#[test]
fn decoder_reserves_the_announced_frame_once_the_prefix_is_in() {
    let mut dec = FrameDecoder::new(1 << 20);
    let mut rx = BytesMut::new();
    rx.put_u32(100_000);
    assert_eq!(dec.decode(&mut rx), Ok(None));
    assert!(rx.capacity() >= 100_000);
}

#[test]
fn stream_id_zero_body_frame_matches_prost() {
    let frame = FrameEncoder::default()
        .encode_tunnel_body(0, Bytes::new())
        .unwrap();
    let expected = body_envelope(0, Bytes::new()).encode_to_vec();
    assert_eq!(&frame.head[4..], &expected[..]);
}

fn arb_envelope() -> impl Strategy<Value = Envelope> {
    prop_oneof![
        (
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..2048)
        )
            .prop_map(|(id, body)| body_envelope(id, Bytes::from(body))),
        any::<u64>().prop_map(ping),
        (
            any::<u64>(),
            ".{0,64}",
            any::<u64>(),
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(id, text, out, reasoning)| Envelope {
                stream_id: id,
                msg: Some(Msg::RunEvent(Box::new(RunEvent {
                    kind: RunEventKind::Delta as i32,
                    seq: out,
                    text: text.into(),
                    usage: Some(Usage {
                        input_tokens: 1,
                        output_tokens: out,
                        reasoning_tokens: reasoning,
                        cached_input_tokens: None,
                    }),
                    ..Default::default()
                }))),
            }),
        (any::<u64>(), 100u32..600).prop_map(|(id, code)| Envelope {
            stream_id: id,
            msg: Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
                frame: Some(Frame::Status(TunnelStatus { code })),
            })),
        }),
    ]
}

/// Encodes the way a sender would: bodies as head + body, the rest whole.
fn encode_all(envelopes: &[Envelope]) -> Vec<u8> {
    let mut enc = FrameEncoder::default();
    let mut wire = Vec::new();
    for env in envelopes {
        match &env.msg {
            Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
                frame: Some(Frame::Body(body)),
            })) => {
                let frame = enc.encode_tunnel_body(env.stream_id, body.clone()).unwrap();
                wire.extend_from_slice(&frame.head);
                wire.extend_from_slice(&frame.body);
            }
            _ => wire.extend_from_slice(&enc.encode(env).unwrap()),
        }
    }
    wire
}

proptest! {
    #[test]
    fn a_borrowed_message_encodes_like_its_envelope(
        id in prop_oneof![Just(0u64), any::<u64>()],
        text in ".{0,300}",
        seq in any::<u64>(),
        reasoning in proptest::option::of(any::<u64>()),
    ) {
        let event = RunEvent {
            kind: RunEventKind::Delta as i32,
            seq,
            text: text.into(),
            usage: Some(Usage {
                input_tokens: 1,
                output_tokens: seq,
                reasoning_tokens: reasoning,
                cached_input_tokens: None,
            }),
            ..Default::default()
        };
        let mut enc = FrameEncoder::default();
        let borrowed = enc
            .encode_message(id, proto::ENVELOPE_RUN_EVENT_FIELD, &event)
            .unwrap();
        let envelope = Envelope {
            stream_id: id,
            msg: Some(Msg::RunEvent(Box::new(event))),
        };
        prop_assert_eq!(borrowed, enc.encode(&envelope).unwrap());
    }

    #[test]
    fn body_frame_is_byte_identical_to_prost(id in any::<u64>(), body in proptest::collection::vec(any::<u8>(), 0..70_000)) {
        let body = Bytes::from(body);
        let frame = FrameEncoder::default().encode_tunnel_body(id, body.clone()).unwrap();
        let mut wire = frame.head.to_vec();
        wire.extend_from_slice(&frame.body);
        let expected = body_envelope(id, body).encode_to_vec();
        prop_assert_eq!(&wire[..4], &(expected.len() as u32).to_be_bytes()[..]);
        prop_assert_eq!(&wire[4..], &expected[..]);
    }

    #[test]
    fn frames_round_trip_under_any_split(
        envelopes in proptest::collection::vec(arb_envelope(), 1..12),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..16),
    ) {
        let wire = encode_all(&envelopes);
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
        points.push(wire.len());
        points.sort_unstable();

        let mut dec = FrameDecoder::default();
        let mut rx = BytesMut::new();
        let mut got = Vec::new();
        let mut from = 0;
        for to in points {
            rx.extend_from_slice(&wire[from..to]);
            from = to;
            while let Some(env) = dec.decode(&mut rx).unwrap() {
                got.push(env);
            }
        }
        prop_assert_eq!(dec.decode_eof(&mut rx), Ok(None));
        prop_assert_eq!(got, envelopes);
    }

    #[test]
    fn arbitrary_bytes_never_panic_or_overreserve(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let max = 1024;
        let mut dec = FrameDecoder::new(max);
        let mut rx = BytesMut::from(&data[..]);
        while let Ok(Some(_)) = dec.decode(&mut rx) {}
        prop_assert!(rx.capacity() <= data.len().max(max + 8));
    }
}

#[test]
fn a_key_and_varint_are_written_as_prost_writes_them() {
    use prost::encoding::{WireType, encode_key, encode_varint};
    let values = [
        0,
        1,
        0x7f,
        0x80,
        0x3fff,
        0x4000,
        0x1f_ffff,
        0x20_0000,
        u64::from(u32::MAX),
        u64::MAX,
    ];
    for field in [1, 2, 15, 16, 2047, (1 << 29) - 1] {
        for wire_type in [WireType::Varint, WireType::LengthDelimited] {
            for value in values {
                let mut ours = BytesMut::from(&b"x"[..]);
                encode::put_key_varint(&mut ours, field, wire_type, value);
                let mut prosts = BytesMut::from(&b"x"[..]);
                encode_key(field, wire_type, &mut prosts);
                encode_varint(value, &mut prosts);
                assert_eq!(
                    ours, prosts,
                    "field {field}, {wire_type:?}, value {value:#x}"
                );
            }
        }
    }
}

proptest! {
    #[test]
    fn any_key_and_varint_are_written_as_prost_writes_them(
        field in 1u32..(1 << 29),
        length_delimited in any::<bool>(),
        value in prop_oneof![0u64..0x30_0000, any::<u64>()],
    ) {
        use prost::encoding::{WireType, encode_key, encode_varint};
        let wire_type = if length_delimited { WireType::LengthDelimited } else { WireType::Varint };
        let mut ours = BytesMut::new();
        encode::put_key_varint(&mut ours, field, wire_type, value);
        let mut prosts = BytesMut::new();
        encode_key(field, wire_type, &mut prosts);
        encode_varint(value, &mut prosts);
        prop_assert_eq!(ours, prosts);
    }
}
