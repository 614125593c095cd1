//! Opening a stream: the frames of its request, whole or in pieces, and
//! the end of a stream whose request the writer dropped unfinished.

use bytes::Bytes;
use framing::frame::{FrameError, has_long_texts, unescape_content};
use framing::link::Outgoing;
use framing::outbound::Outbound;
use framing::write_batch::COPY_MAX;
use proto::Envelope;
use proto::v1::provider_tunnel_frame::Frame as TunnelFrame;
use proto::v1::{
    ExecutionFailure, FailureCode, FailureSide, ProviderTunnelFrame, RunEvent, RunEventKind,
    envelope::Msg,
};

use super::Conn;
use crate::config::TUNNEL_FRAME_OVERHEAD;
use crate::link::inbox::Opening;
use crate::link::streams::StreamKind;
use crate::registry::NodeDirectory;

impl<D: NodeDirectory + 'static> Conn<D> {
    /// The frames that open stream `stream_id` with `msg`: one, or, for a
    /// node that gathers pieces, a long request in pieces of
    /// `link.max_body_chunk`, so that it does not hold the link (other
    /// streams' requests and credit, the heartbeat) until its last byte. A
    /// run's JSON-escaped texts are made plain for a node that did not say
    /// it takes them.
    pub(super) fn encode_open(
        &self,
        stream_id: u64,
        mut msg: Opening,
    ) -> Result<OpenFrames, FrameError> {
        if let Opening::Msg(Msg::RunRequest(request)) = &mut msg
            && let Some(input) = request.input.as_mut()
            && !self.session.borrow().pastes_escaped_content()
        {
            unescape_content(input)?;
        }
        let whole = self.encode_whole(stream_id, msg)?;
        let Some(peer_max) = self.session.borrow().gathers_pieces_up_to() else {
            return Ok(OpenFrames::Whole(whole));
        };
        // A piece's own head fits the room a body frame keeps for its head.
        let room = usize::try_from(TUNNEL_FRAME_OVERHEAD).unwrap_or(usize::MAX);
        let piece_len = (self.core.shared.config.piece_len).min(peer_max.saturating_sub(room));
        let frame: Vec<Bytes> = match &whole {
            Outgoing::Frame(frame) if frame.len() > piece_len => vec![frame.clone()],
            Outgoing::Body(frame) if frame.len() > piece_len => std::iter::once(&frame.head)
                .chain(frame.parts())
                .cloned()
                .collect(),
            _ => return Ok(OpenFrames::Whole(whole)),
        };
        let pieces = self
            .core
            .encoder
            .borrow_mut()
            .encode_pieces(stream_id, frame, piece_len)?;
        Ok(OpenFrames::Pieces(
            pieces.into_iter().map(Outgoing::Body).collect(),
        ))
    }

    /// The one frame that opens stream `stream_id` with `msg`. A long prompt
    /// is not copied into it: a tunnel request's body goes last, as its own
    /// slice of the write (as the Node's response bodies do), and so do a
    /// run's long message texts and long parameters (an agent's tools).
    fn encode_whole(&self, stream_id: u64, msg: Opening) -> Result<Outgoing, FrameError> {
        let mut encoder = self.core.encoder.borrow_mut();
        match msg {
            Opening::Tunnel(request) if request.body.len() > COPY_MAX => encoder
                .encode_tunnel_open_sliced(stream_id, &request)
                .map(Outgoing::Body),
            Opening::Tunnel(request) => encoder
                .encode_tunnel_open(stream_id, &request)
                .map(Outgoing::Frame),
            Opening::Msg(Msg::RunRequest(request)) if has_long_texts(&request) => encoder
                .encode_run_request(stream_id, *request)
                .map(Outgoing::Body),
            Opening::Msg(msg) => encoder
                .encode(&Envelope {
                    stream_id,
                    msg: Some(msg),
                })
                .map(Outgoing::Frame),
        }
    }

    /// Ends each cancelled stream whose request `outbound` dropped
    /// unfinished ([`Outbound::take_withdrawn`]).
    pub(super) fn end_withdrawn(&self, outbound: &mut Outbound) {
        for stream_id in outbound.take_withdrawn() {
            self.end_unsent(stream_id);
        }
    }

    /// A cancelled stream whose request the writer had not finished
    /// sending (it, or pieces of it, were dropped, not written): the node never
    /// gets it whole, so never runs it, and would answer the cancel only
    /// with `NOT_FOUND`. The stream ends here, with the terminal the node
    /// gives a cancelled run or tunnel, so its lease is released now. The
    /// cancel still goes: it makes the node drop the pieces it gathered.
    fn end_unsent(&self, stream_id: u64) {
        let kind = self.streams.borrow().kind(stream_id);
        let msg = match kind {
            Some(StreamKind::Tunnel) => Msg::ProviderTunnelFrame(ProviderTunnelFrame {
                frame: Some(TunnelFrame::Error(ExecutionFailure {
                    code: FailureCode::Cancelled as i32,
                    side: FailureSide::Edge as i32,
                    message: "cancelled before the request had reached the node".into(),
                    ..ExecutionFailure::default()
                })),
            }),
            Some(StreamKind::Run) => {
                let mut event = RunEvent::default();
                event.set_kind(RunEventKind::Cancelled);
                Msg::RunEvent(Box::new(event))
            }
            _ => return,
        };
        tracing::debug!(peer = %self.peer, stream_id, "a cancelled request was not sent whole");
        self.deliver(Envelope {
            stream_id,
            msg: Some(msg),
        });
    }
}

/// The frames that open a stream: its request whole (no allocation for
/// the list), or in pieces.
pub(super) enum OpenFrames {
    /// One frame.
    Whole(Outgoing),
    /// The request's pieces, in order.
    Pieces(Vec<Outgoing>),
}

impl OpenFrames {
    /// The frames in the order they are written.
    pub(super) fn into_frames(self) -> impl Iterator<Item = Outgoing> {
        let (whole, pieces) = match self {
            Self::Whole(frame) => (Some(frame), Vec::new()),
            Self::Pieces(pieces) => (None, pieces),
        };
        whole.into_iter().chain(pieces)
    }
}
