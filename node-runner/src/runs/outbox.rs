//! The connection's outgoing frames, from any core: encoded on the core
//! that produces them, moved to the connection's single writer as `Bytes`.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use framing::frame::{FrameEncoder, FrameError};
use framing::link::Outgoing;
use proto::Envelope;
use proto::v1::RunEvent;
use proto::v1::envelope::Msg;

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
    pub fn send_run_event(&self, stream_id: u64, event: &RunEvent) -> bool {
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

/// The encoded frame, or `None` with the error logged: what failed to
/// encode (`what`) is dropped, never sent half-made.
fn logged<T>(encoded: Result<T, FrameError>, stream_id: u64, what: &str) -> Option<T> {
    encoded
        .inspect_err(|error| {
            tracing::error!(%error, stream_id, "could not encode a {what} for the edge");
        })
        .ok()
}
