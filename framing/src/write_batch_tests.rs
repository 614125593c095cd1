//! Tests of [`super::WriteBatch`] and [`super::WriteSlices`].

use super::*;
use crate::frame::FrameEncoder;
use proptest::prelude::*;

fn concat(slices: &[Bytes]) -> Vec<u8> {
    slices.iter().flat_map(|s| s.iter().copied()).collect()
}

fn wire(command: &Outgoing) -> Vec<u8> {
    match command {
        Outgoing::Frame(f) => f.to_vec(),
        Outgoing::Body(b) => {
            let mut wire = b.head.to_vec();
            b.parts().for_each(|p| wire.extend_from_slice(p));
            wire
        }
        Outgoing::Close | Outgoing::Withdraw => Vec::new(),
    }
}

fn parts_frame(stream: u64, parts: &[Vec<u8>]) -> BodyFrame {
    let mut parts = parts.iter().map(|p| Bytes::copy_from_slice(p));
    let body = parts.next().unwrap_or_default();
    FrameEncoder::default()
        .encode_tunnel_body_parts(stream, body, parts.collect())
        .unwrap()
}

fn body_frame(stream: u64, body: &[u8]) -> BodyFrame {
    FrameEncoder::default()
        .encode_tunnel_body(stream, Bytes::copy_from_slice(body))
        .unwrap()
}

#[test]
fn body_slices_are_the_callers_bytes() {
    let bodies: Vec<Bytes> = (0..3u8).map(|i| Bytes::from(vec![i; 100])).collect();
    let mut enc = FrameEncoder::default();
    let mut batch = WriteBatch::new();
    for body in &bodies {
        batch.push(Outgoing::Frame(Bytes::from_static(b"ctl")));
        batch.push(Outgoing::Body(
            enc.encode_tunnel_body(1, body.clone()).unwrap(),
        ));
    }
    let slices = batch.take();
    // [ctl+head] [body] three times.
    assert_eq!(slices.slices().len(), 6);
    for (i, body) in bodies.iter().enumerate() {
        let slice = &slices.slices()[2 * i + 1];
        assert_eq!(slice.as_ptr_range(), body.as_ptr_range(), "body {i} copied");
    }
}

#[test]
fn a_body_of_several_slices_is_one_frame_of_uncopied_slices() {
    let parts: Vec<Bytes> = (0..3u8).map(|i| Bytes::from(vec![i; 50])).collect();
    let mut enc = FrameEncoder::default();
    let frame = enc
        .encode_tunnel_body_parts(9, parts[0].clone(), parts[1..].to_vec())
        .unwrap();
    let one = enc
        .encode_tunnel_body(9, Bytes::from(parts.concat()))
        .unwrap();
    assert_eq!(frame.head, one.head, "the head counts every slice");
    assert_eq!(frame.len(), one.len());
    let mut batch = WriteBatch::new();
    batch.push(Outgoing::Body(frame));
    let slices = batch.take();
    // [head] then each slice.
    assert_eq!(slices.slices().len(), 4);
    for (slice, part) in slices.slices()[1..].iter().zip(&parts) {
        assert_eq!(
            slice.as_ptr_range(),
            part.as_ptr_range(),
            "a slice was copied"
        );
    }
    assert_eq!(concat(slices.slices()), concat(&[one.head, one.body]));
}

#[test]
fn a_batch_behind_a_slow_peer_stays_small_until_writes_go_whole() {
    let body = vec![7u8; 16 * 1024];
    let fill = |batch: &mut WriteBatch| {
        let mut frames = (0..200).map(|_| Outgoing::Body(body_frame(1, &body)));
        let first = frames.next().unwrap();
        batch.fill(first, || frames.next());
        batch.take().len()
    };
    let mut batch = WriteBatch::new();
    assert_eq!(batch.limit(), MAX_BATCH_BYTES);
    // A write the kernel did not take whole: the next batch stops at
    // the first frame that reaches the smaller limit.
    batch.paced(false);
    let taken = fill(&mut batch);
    assert!(
        (BEHIND_BATCH_BYTES..BEHIND_BATCH_BYTES + 17 * 1024).contains(&taken),
        "{taken}"
    );
    // Whole writes double it back, never past the maximum.
    let mut limits = vec![];
    for _ in 0..6 {
        batch.paced(true);
        limits.push(batch.limit() / 1024);
    }
    assert_eq!(limits, [128, 256, 512, 1024, 1024, 1024]);
    assert!(fill(&mut batch) >= MAX_BATCH_BYTES);
    batch.set_limit(0);
    assert_eq!(batch.limit(), 1, "at least a byte: a batch takes a command");
}

#[test]
fn a_frame_carries_at_most_max_body_parts_slices() {
    let mut enc = FrameEncoder::default();
    let part = Bytes::from_static(b"x");
    let more = vec![part.clone(); MAX_BODY_PARTS - 1];
    assert!(enc.encode_tunnel_body_parts(1, part.clone(), more).is_ok());
    let more = vec![part.clone(); MAX_BODY_PARTS];
    assert!(matches!(
        enc.encode_tunnel_body_parts(1, part, more),
        Err(crate::frame::FrameError::TooManyParts { parts, max })
            if parts == MAX_BODY_PARTS + 1 && max == MAX_BODY_PARTS
    ));
}

#[test]
fn large_frames_are_their_own_slice_and_close_stops() {
    let big = Bytes::from(vec![7u8; COPY_MAX + 1]);
    let mut queue = vec![
        Outgoing::Frame(big.clone()),
        Outgoing::Frame(Bytes::from_static(b"b")),
        Outgoing::Close,
        Outgoing::Frame(Bytes::from_static(b"never")),
    ]
    .into_iter();
    let mut batch = WriteBatch::new();
    assert!(batch.fill(Outgoing::Frame(Bytes::from_static(b"a")), || queue.next()));
    assert!(batch.is_closed());
    assert_eq!(
        queue.next(),
        Some(Outgoing::Frame(Bytes::from_static(b"never")))
    );
    assert!(!batch.push(Outgoing::Frame(Bytes::from_static(b"late"))));
    let slices = batch.take();
    assert_eq!(slices.slices().len(), 3);
    assert_eq!(slices.slices()[1].as_ptr(), big.as_ptr());
    assert_eq!(slices.len(), COPY_MAX + 3);
    assert!(batch.is_empty() && batch.is_closed());
}

#[test]
fn a_full_batch_leaves_the_rest_queued() {
    let body = Bytes::from(vec![1u8; 10]);
    let mut enc = FrameEncoder::default();
    let mut pulled = 0;
    let mut batch = WriteBatch::new();
    let first = Outgoing::Body(enc.encode_tunnel_body(1, body.clone()).unwrap());
    let closed = batch.fill(first, || {
        pulled += 1;
        Some(Outgoing::Body(
            enc.encode_tunnel_body(1, body.clone()).unwrap(),
        ))
    });
    assert!(!closed);
    assert!(batch.is_full());
    let slices = batch.take();
    assert!(slices.slices().len() <= MAX_IOVECS);
    let head = slices.slices()[0].len();
    assert_eq!(slices.len(), (pulled + 1) * (head + body.len()));
}

#[test]
fn written_batches_handed_back_lend_their_lists_and_let_their_slices_go() {
    let body = Bytes::from(vec![7u8; 100]);
    let mut batch = WriteBatch::new();
    batch.push(Outgoing::Body(body_frame(1, &body)));
    batch.push(Outgoing::Frame(Bytes::from_static(b"ping")));
    let mut first = batch.take();
    let shared = first.slices()[1].clone();
    let lists = (first.slices.as_ptr(), first.ends.as_ptr());
    first.advance(first.len());
    batch.recycle(first);
    assert!(shared.is_unique(), "the written slices are let go");

    // Two batches in turn, each handed back once written: the lists go
    // round, and each batch holds only its own frames.
    batch.push(Outgoing::Frame(Bytes::from_static(b"ping")));
    let second = batch.take();
    batch.recycle(second);
    batch.push(Outgoing::Frame(Bytes::from_static(b"pong")));
    batch.push(Outgoing::Body(body_frame(2, &body)));
    let third = batch.take();
    assert_eq!((third.slices.as_ptr(), third.ends.as_ptr()), lists);
    assert_eq!(third.ends.len(), 2);
    let mut expected = b"pong".to_vec();
    expected.extend(wire(&Outgoing::Body(body_frame(2, &body))));
    assert_eq!(concat(third.slices()), expected);
}

#[test]
fn advance_slices_without_copying() {
    let mut batch = WriteBatch::new();
    let body = Bytes::from(vec![9u8; 50]);
    batch.push(Outgoing::Body(
        FrameEncoder::default()
            .encode_tunnel_body(3, body.clone())
            .unwrap(),
    ));
    let mut slices = batch.take();
    let total = slices.len();
    let head = slices.slices()[0].len();
    slices.advance(head + 10);
    assert_eq!(slices.slices().len(), 1);
    assert_eq!(slices.slices()[0].as_ptr(), body[10..].as_ptr());
    assert_eq!(slices.len(), total - head - 10);
    assert_eq!(slices.io_slices().len(), 1);
    slices.advance(40);
    assert!(slices.is_empty() && slices.slices().is_empty());
    assert!(slices.into_vec().is_empty());
}

#[test]
fn slices_from_a_vec_drop_the_empty_ones_and_have_no_frame_ends() {
    let parts = vec![
        Bytes::from_static(b"ab"),
        Bytes::new(),
        Bytes::from_static(b"cde"),
    ];
    let mut slices = WriteSlices::from(parts);
    assert_eq!(slices.slices().len(), 2);
    assert_eq!(slices.len(), 5);
    slices.advance(3);
    assert_eq!(slices.frame_rest(), 0, "no frame to finish first");
    assert_eq!(concat(slices.slices()), b"de");
    assert!(WriteSlices::from(vec![Bytes::new()]).is_empty());
}

#[test]
fn a_partial_write_finishes_its_frame_before_another_goes_in_between() {
    let mut enc = FrameEncoder::default();
    let body = Bytes::from(vec![4u8; 100]);
    let mut batch = WriteBatch::new();
    batch.push(Outgoing::Frame(Bytes::from_static(b"ctl")));
    batch.push(Outgoing::Body(
        enc.encode_tunnel_body(1, body.clone()).unwrap(),
    ));
    batch.push(Outgoing::Frame(Bytes::from_static(b"next")));
    let mut slices = batch.take();
    let total = slices.len();
    assert_eq!(slices.frame_rest(), 0, "nothing written: between frames");
    slices.advance(2);
    assert_eq!(slices.frame_rest(), 1, "inside `ctl`");
    slices.advance(1);
    assert_eq!(slices.frame_rest(), 0, "`ctl` written whole");
    slices.advance(10);
    let rest = slices.frame_rest();
    assert_eq!(rest, total - 3 - 4 - 10, "the body frame's tail");
    let piece = slices.split_to(rest);
    let tail = piece.last().unwrap().as_ptr_range();
    assert_eq!(tail.end, body.as_ptr_range().end, "the body's own bytes");
    assert_eq!(slices.frame_rest(), 0);
    assert_eq!(concat(slices.slices()), b"next");
    assert_eq!(concat(&slices.split_to(2)), b"ne");
    assert_eq!(slices.frame_rest(), 2);
    slices.advance(2);
    assert!(slices.is_empty() && slices.frame_rest() == 0);
}

#[test]
fn urgent_frames_overtake_at_the_next_boundary_and_only_mid_batch() {
    let mut batch = WriteBatch::new();
    batch.push(Outgoing::Frame(Bytes::from_static(b"aaaa")));
    batch.push(Outgoing::Frame(Bytes::from_static(b"bbbb")));
    let mut slices = batch.take();
    assert_eq!(slices.overtake(None), None, "nothing urgent");
    slices.advance(2);
    let out = slices.overtake([Bytes::from_static(b"P1"), Bytes::from_static(b"P2")]);
    assert_eq!(
        concat(&out.unwrap()),
        b"aaP1P2",
        "the rest of `aaaa`, then both"
    );
    assert_eq!(concat(slices.slices()), b"bbbb");
    slices.advance(4);
    let mut polled = false;
    let urgent = std::iter::from_fn(|| {
        polled = true;
        None
    });
    assert_eq!(slices.overtake(urgent), None);
    assert!(!polled, "a finished batch leaves the urgent frames queued");
}

fn command() -> impl Strategy<Value = Outgoing> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(|v| Outgoing::Frame(Bytes::from(v))),
        (COPY_MAX - 2..COPY_MAX + 2).prop_map(|n| Outgoing::Frame(Bytes::from(vec![5u8; n]))),
        (
            1u64..1 << 40,
            proptest::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(s, b)| Outgoing::Body(body_frame(s, &b))),
        (
            1u64..1 << 40,
            proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..40),
                1..=MAX_BODY_PARTS
            )
        )
            .prop_map(|(s, parts)| Outgoing::Body(parts_frame(s, &parts))),
    ]
}

proptest! {
    #[test]
    fn concatenation_is_the_frames_in_order(
        commands in proptest::collection::vec(command(), 0..300),
        cut in any::<prop::sample::Index>(),
    ) {
        let expected: Vec<u8> = commands.iter().flat_map(wire).collect();
        let frame_ends: Vec<usize> = commands
            .iter()
            .scan(0, |end, c| {
                *end += wire(c).len();
                Some(*end)
            })
            .collect();
        let bodies: Vec<Bytes> = commands
            .iter()
            .filter_map(|c| match c {
                Outgoing::Body(b) => Some(b.parts().filter(|p| !p.is_empty()).cloned()),
                _ => None,
            })
            .flatten()
            .collect();
        let mut queue = commands.into_iter();
        let mut out = Vec::new();
        let mut all_slices = Vec::new();
        let mut batch = WriteBatch::new();
        while let Some(first) = queue.next() {
            batch.fill(first, || queue.next());
            let mut slices = batch.take();
            prop_assert!(slices.slices().len() <= MAX_IOVECS);
            prop_assert!(slices.slices().iter().all(|s| !s.is_empty()));
            let bytes = concat(slices.slices());
            prop_assert_eq!(bytes.len(), slices.len());
            all_slices.extend(slices.slices().iter().cloned());
            // A partial write at an arbitrary point, the rest of the
            // frame it stopped in (which must end on a frame boundary),
            // then the rest.
            let n = if bytes.is_empty() { 0 } else { cut.index(bytes.len()) };
            out.extend_from_slice(&bytes[..n]);
            slices.advance(n);
            let rest = slices.frame_rest();
            out.extend_from_slice(&concat(&slices.split_to(rest)));
            prop_assert_eq!(slices.frame_rest(), 0);
            // Nothing written yet is a boundary too (a cut at 0).
            prop_assert!(
                out.is_empty() || frame_ends.contains(&out.len()) || out.len() == expected.len(),
                "{} is not where a frame ends", out.len()
            );
            out.extend_from_slice(&concat(slices.slices()));
        }
        prop_assert_eq!(out, expected);
        // Every non-empty body went out as one of the slices, uncopied.
        for body in &bodies {
            prop_assert!(
                all_slices.iter().any(|s| s.as_ptr_range() == body.as_ptr_range()),
                "a body was copied"
            );
        }
    }
}
