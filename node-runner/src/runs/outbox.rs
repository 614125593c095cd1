//! The connection's outgoing frames, from any core: encoded on the core
//! that produces them, moved to the connection's single writer as `Bytes`.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use framing::frame::{FrameEncoder, FrameError, TunnelHead};
use framing::link::Outgoing;
use proto::Envelope;
use proto::v1::envelope::Msg;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{RunEvent, TunnelEnd};

/// The connection writer's queue: `Send`, so every core can feed it. Each
/// command names its stream (0: the link's own), so that the writer can take
/// the streams in turn (`framing::fair_queue`).
pub type FrameTx = tokio::sync::mpsc::UnboundedSender<(u64, Outgoing)>;

/// Frames to the Edge on one connection, from one core: encodes on this
/// core (one encoder per core and connection) and queues the frame for the
/// connection's writer, which may live on another core. Cheap to clone
/// (within the core).
#[derive(Clone)]
pub struct Outbox {
    tx: FrameTx,
    encoder: Rc<RefCell<FrameEncoder>>,
    max_frame_len: usize,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").finish_non_exhaustive()
    }
}

impl Outbox {
    /// An outbox onto `tx`, encoding frames of at most `max_frame_len`.
    pub fn new(tx: FrameTx, max_frame_len: usize) -> Self {
        Self {
            tx,
            encoder: Rc::new(RefCell::new(FrameEncoder::new(max_frame_len))),
            max_frame_len,
        }
    }

    /// The largest frame it encodes.
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// Queues `envelope`; false if it could not be encoded or the writer is
    /// gone.
    pub fn send(&self, envelope: &Envelope) -> bool {
        self.encode(envelope)
            .is_some_and(|frame| self.send_frame(envelope.stream_id, frame))
    }

    /// `envelope` encoded as a frame; `None` (logged) if it cannot be.
    pub fn encode(&self, envelope: &Envelope) -> Option<Bytes> {
        let frame = self.encoder.borrow_mut().encode(envelope);
        logged(frame, envelope.stream_id, "frame")
    }

    /// Queues an encoded frame of `stream_id`.
    pub fn send_frame(&self, stream_id: u64, frame: Bytes) -> bool {
        self.tx.send((stream_id, Outgoing::Frame(frame))).is_ok()
    }

    /// Queues a tunnel's `headers` frame, encoded from the borrowed
    /// fields (no `Header` built).
    pub fn send_tunnel_headers(&self, stream_id: u64, headers: &[(&[u8], &[u8])]) -> bool {
        let frame = self
            .encoder
            .borrow_mut()
            .encode_tunnel_headers(stream_id, headers);
        logged(frame, stream_id, "tunnel headers frame")
            .is_some_and(|frame| self.send_frame(stream_id, frame))
    }

    /// A tunnel's `status` and `headers`, encoded for a batch frame
    /// ([`send_tunnel_batch`](Self::send_tunnel_batch)) from the borrowed
    /// fields.
    pub fn tunnel_head(&self, code: u32, headers: &[(&[u8], &[u8])]) -> TunnelHead {
        self.encoder.borrow_mut().tunnel_head(code, headers)
    }

    /// Queues one `batch` frame of a tunnel's `head`, `body` (`body` then
    /// each of `more`, uncopied) and `end`, each when given (for an Edge
    /// that takes batches). What would make the frame too long goes apart,
    /// in order: the head first, then the body, then the end (a body frame
    /// is sized to fit alone, not with a head or an end's usage).
    pub fn send_tunnel_batch(
        &self,
        stream_id: u64,
        head: Option<&TunnelHead>,
        body: Option<(Bytes, Vec<Bytes>)>,
        end: Option<&TunnelEnd>,
    ) -> bool {
        let fits = |head: Option<&TunnelHead>, body: Option<&(Bytes, Vec<Bytes>)>, end| {
            self.encoder
                .borrow()
                .tunnel_batch_fits(stream_id, head, body, end)
        };
        let send_batch = |head, body, end| {
            let frame = self
                .encoder
                .borrow_mut()
                .encode_tunnel_batch(stream_id, head, body, end);
            logged(frame, stream_id, "tunnel batch").is_some_and(|frame| {
                if frame.body.is_empty() && frame.more.is_empty() {
                    self.send_frame(stream_id, frame.head)
                } else {
                    self.tx.send((stream_id, Outgoing::Body(frame))).is_ok()
                }
            })
        };
        if fits(head, body.as_ref(), end) {
            return send_batch(head, body, end);
        }
        if let Some(head) = head
            && !send_batch(Some(head), None, None)
        {
            return false;
        }
        match (body, end) {
            (Some(body), Some(end)) if fits(None, Some(&body), Some(end)) => {
                send_batch(None, Some(body), Some(end))
            }
            (body, end) => {
                body.is_none_or(|(body, more)| self.send_body(stream_id, body, more))
                    && end.is_none_or(|end| {
                        let end = crate::tunnel::frame(Frame::End(*end));
                        self.send_msg(stream_id, Msg::ProviderTunnelFrame(end))
                    })
            }
        }
    }

    /// Queues a tunnel body frame whose body is `body` then each of `more`:
    /// its head is encoded here, the slices go to the writer as they are,
    /// never copied.
    pub fn send_body(&self, stream_id: u64, body: Bytes, more: Vec<Bytes>) -> bool {
        let frame = self
            .encoder
            .borrow_mut()
            .encode_tunnel_body_parts(stream_id, body, more);
        logged(frame, stream_id, "tunnel body")
            .is_some_and(|frame| self.tx.send((stream_id, Outgoing::Body(frame))).is_ok())
    }

    /// Queues a run's event on `stream_id`, encoded from the borrowed
    /// event (no `Envelope` built, so no box for its variant); false if it
    /// could not be encoded or the writer is gone.
    ///
    /// A text of `TEXT_AS_OWN_SLICE` bytes or more goes to the writer as
    /// its own slice after the frame's head, like a tunnel body, instead of
    /// being copied into the frame (~6 % of the Node's CPU relaying 64 KiB
    /// normalized events). The Edge decodes the same event either way.
    pub fn send_run_event(&self, stream_id: u64, event: &RunEvent) -> bool {
        if event.text.len() >= TEXT_AS_OWN_SLICE {
            let head = RunEvent {
                text: Bytes::new(),
                ..event.clone()
            };
            let frame = self.encoder.borrow_mut().encode_with_trailing_bytes(
                stream_id,
                proto::ENVELOPE_RUN_EVENT_FIELD,
                &head,
                proto::RUN_EVENT_TEXT_FIELD,
                event.text.clone(),
            );
            return logged(frame, stream_id, "run event")
                .is_some_and(|frame| self.tx.send((stream_id, Outgoing::Body(frame))).is_ok());
        }
        let frame = self.encoder.borrow_mut().encode_message(
            stream_id,
            proto::ENVELOPE_RUN_EVENT_FIELD,
            event,
        );
        logged(frame, stream_id, "run event").is_some_and(|frame| self.send_frame(stream_id, frame))
    }

    /// Asks the writer to flush and close the connection.
    pub fn close(&self) {
        let _ = self.tx.send((0, Outgoing::Close));
    }

    pub(crate) fn send_msg(&self, stream_id: u64, msg: Msg) -> bool {
        self.send(&Envelope {
            stream_id,
            msg: Some(msg),
        })
    }
}

/// The shortest event text [`Outbox::send_run_event`] writes as its own
/// slice: below it, a copy into the frame costs less than another iovec.
pub(crate) const TEXT_AS_OWN_SLICE: usize = 4 * 1024;

/// The encoded frame, or `None` with the error logged: what failed to
/// encode (`what`) is dropped, never sent half-made.
fn logged<T>(encoded: Result<T, FrameError>, stream_id: u64, what: &str) -> Option<T> {
    encoded
        .inspect_err(|error| {
            tracing::error!(%error, stream_id, "could not encode a {what} for the edge");
        })
        .ok()
}

#[cfg(test)]
pub(super) mod tests {
    use bytes::{Bytes, BytesMut};
    use framing::frame::FrameDecoder;
    use framing::link::Outgoing;
    use proto::v1::{RunEvent, RunEventKind};

    use super::{Outbox, TEXT_AS_OWN_SLICE};

    /// What the writer gets for `event`, joined and decoded as the Edge
    /// decodes it, and whether its text went as its own slice.
    fn sent(event: &RunEvent) -> (proto::Envelope, bool) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let outbox = Outbox::new(tx, framing::frame::DEFAULT_MAX_FRAME_LEN);
        assert!(outbox.send_run_event(9, event));
        let (stream_id, outgoing) = rx.try_recv().unwrap();
        assert_eq!(stream_id, 9);
        let (wire, own_slice) = match outgoing {
            Outgoing::Frame(frame) => (BytesMut::from(&frame[..]), false),
            Outgoing::Body(frame) => {
                assert_eq!(frame.body.as_ptr(), event.text.as_ptr(), "not copied");
                let mut wire = BytesMut::from(&frame.head[..]);
                frame.parts().for_each(|part| wire.extend_from_slice(part));
                (wire, true)
            }
            other => panic!("{other:?}"),
        };
        let mut wire = wire;
        let envelope = FrameDecoder::default().decode(&mut wire).unwrap().unwrap();
        assert!(wire.is_empty());
        (envelope, own_slice)
    }

    /// The tunnel frames the writer was given so far, each with its stream
    /// id, as the Edge decodes them (frames of at most `max_frame_len`).
    pub(in crate::runs) fn tunnel_frames(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<(u64, Outgoing)>,
        max_frame_len: usize,
    ) -> Vec<(u64, proto::v1::provider_tunnel_frame::Frame)> {
        use proto::v1::ProviderTunnelFrame;
        let mut wire = wire(rx);
        let mut decoder = FrameDecoder::new(max_frame_len);
        let mut frames = Vec::new();
        while let Some(envelope) = decoder.decode(&mut wire).expect("well framed") {
            let Some(proto::Msg::ProviderTunnelFrame(ProviderTunnelFrame { frame: Some(frame) })) =
                envelope.msg
            else {
                panic!("not a tunnel frame: {envelope:?}");
            };
            frames.push((envelope.stream_id, frame));
        }
        assert!(wire.is_empty());
        frames
    }

    /// What the writer was given so far, joined as it writes it.
    pub(in crate::runs) fn wire(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<(u64, Outgoing)>,
    ) -> BytesMut {
        let mut wire = BytesMut::new();
        while let Ok((_, outgoing)) = rx.try_recv() {
            match outgoing {
                Outgoing::Frame(frame) => wire.extend_from_slice(&frame),
                Outgoing::Body(frame) => {
                    wire.extend_from_slice(&frame.head);
                    frame.parts().for_each(|part| wire.extend_from_slice(part));
                }
                other => panic!("{other:?}"),
            }
        }
        wire
    }

    #[test]
    fn a_head_that_would_make_its_batch_too_long_goes_first_alone() {
        use proto::v1::TunnelEnd;
        use proto::v1::provider_tunnel_frame::Frame;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let outbox = Outbox::new(tx, 1024);
        let value = vec![b'v'; 300];
        let end = TunnelEnd::default();
        let send = |body_len: usize| {
            let head = outbox.tunnel_head(200, &[(b"x-long", &value[..])]);
            let body = Bytes::from(vec![b'b'; body_len]);
            assert!(outbox.send_tunnel_batch(3, Some(&head), Some((body, vec![])), Some(&end)));
        };
        let batches = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<_>| {
            tunnel_frames(rx, 1024)
                .into_iter()
                .map(|(_, frame)| {
                    let Frame::Batch(batch) = frame else {
                        panic!("not a batch");
                    };
                    (
                        batch.status.is_some(),
                        batch.body.len(),
                        batch.end.is_some(),
                    )
                })
                .collect::<Vec<_>>()
        };
        send(100);
        assert_eq!(batches(&mut rx), [(true, 100, true)], "one frame");
        send(700);
        assert_eq!(
            batches(&mut rx),
            [(true, 0, false), (false, 700, true)],
            "the head alone, then the body with the end"
        );
    }

    #[test]
    fn a_full_body_frame_and_an_end_with_usage_go_apart() {
        use proto::v1::provider_tunnel_frame::Frame;
        use proto::v1::{TunnelEnd, Usage};
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let outbox = Outbox::new(tx, 1024);
        let end = TunnelEnd {
            usage: Some(Usage {
                input_tokens: u64::MAX,
                output_tokens: u64::MAX,
                reasoning_tokens: Some(u64::MAX),
                cached_input_tokens: Some(u64::MAX),
            }),
        };
        // As long as a body frame may be (`tunnel::BODY_FRAME_OVERHEAD`).
        let body = Bytes::from(vec![b'b'; 1024 - 64]);
        assert!(outbox.send_tunnel_batch(u64::MAX, None, Some((body, vec![])), Some(&end)));
        let frames: Vec<Frame> = tunnel_frames(&mut rx, 1024)
            .into_iter()
            .map(|(_, frame)| frame)
            .collect();
        assert!(
            matches!(&frames[..], [Frame::Body(body), Frame::End(e)] if body.len() == 960 && *e == end),
            "{frames:?}"
        );
    }

    #[test]
    fn a_long_text_goes_as_its_own_slice_and_decodes_the_same() {
        for (len, own_slice) in [
            (5, false),
            (TEXT_AS_OWN_SLICE - 1, false),
            (TEXT_AS_OWN_SLICE, true),
            (70_000, true),
        ] {
            let mut event = RunEvent {
                seq: 4,
                text: Bytes::from("é".repeat(len / 2) + &"x".repeat(len % 2)),
                ..RunEvent::default()
            };
            event.set_kind(RunEventKind::Delta);
            let (envelope, went_alone) = sent(&event);
            assert_eq!(went_alone, own_slice, "{len} bytes");
            assert_eq!(envelope.stream_id, 9);
            assert_eq!(envelope.msg, Some(proto::Msg::RunEvent(Box::new(event))));
        }
    }
}
