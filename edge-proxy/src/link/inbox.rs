//! Messages to a core about the streams of the node connections it owns.
//!
//! A node connection lives on its home core; whoever wants to open a stream
//! on it (an ingress request on another core, a test on a plain thread)
//! sends a [`CoreMsg`] to that core's inbox. Every message names the
//! `(node_id, generation)` it is for: a core acts only if that exact
//! generation is its current ready connection, so nothing reaches a fenced
//! connection (F6).
//!
//! The same inbox carries health evidence to the node's home core, the only
//! writer of its providers' runtime overlay ([`CoreMsg::Health`],
//! [`InboxRoute`]; see [`crate::health::shard`]).

use std::sync::Arc;

use framing::frame::TunnelOpen;
use proto::v1::envelope::Msg;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::mpsc::error::SendError;

use super::streams::{StreamKind, StreamSink};
use crate::health::EvidenceOutcome;
use crate::health::shard::{HealthUpdate, OverlayRoute};
use crate::registry::{NodeDirectory, NodeRegistry, NodeState};

/// The request that opens a stream ([`CoreMsg::Open`]).
#[derive(Debug)]
pub enum Opening {
    /// A message prost writes: a run's request, a command, a cancel. (The
    /// dispatcher opens every tunnel with [`Opening::Tunnel`]; a prost
    /// tunnel request here is still written whole, its body copied.)
    Msg(Msg),
    /// A tunnel's request, built without a `String` a field (see
    /// [`TunnelOpen`]).
    Tunnel(TunnelOpen),
}

/// A request to the core that owns a node connection.
#[derive(Debug)]
pub enum CoreMsg {
    /// Open stream `stream_id` with first frame `msg`; its frames go to
    /// `sink`. No answer comes back when it opens (the opener chose the id
    /// and waits for frames anyway); when it cannot, `sink` gets
    /// [`StreamItem::NotSent`](super::streams::StreamItem::NotSent).
    Open {
        /// The node.
        node_id: Arc<str>,
        /// Its generation, as selected.
        generation: u64,
        /// The stream's id, from the process's
        /// [`StreamIds`](super::streams::StreamIds).
        stream_id: u64,
        /// What the stream is.
        kind: StreamKind,
        /// The run id, for run streams (event bus, cancel on drop).
        run_id: Option<Arc<str>>,
        /// The request that opens the stream.
        msg: Opening,
        /// Where the stream's frames go.
        sink: StreamSink,
    },
    /// Send `msg` on an open stream (a cancel, a window update).
    Send {
        /// The node.
        node_id: Arc<str>,
        /// Its generation.
        generation: u64,
        /// The stream.
        stream_id: u64,
        /// The frame.
        msg: Msg,
    },
    /// The stream's receiver is gone: forget it, and cancel a run that has
    /// not ended.
    Close {
        /// The node.
        node_id: Arc<str>,
        /// Its generation.
        generation: u64,
        /// The stream.
        stream_id: u64,
    },
    /// Close the node's connection of `generation` (operator drain, a node
    /// removed by a reload) with `reason`; its open streams end with it.
    Disconnect {
        /// The node.
        node_id: String,
        /// Its generation.
        generation: u64,
        /// Why (`shutdown`).
        reason: framing::link::CloseReason,
    },
    /// Apply validated health evidence to the overlay of a provider homed
    /// here. The update names `(node_id, generation)`: a core that does not
    /// hold exactly that generation drops it (`stale_generation`).
    Health(HealthUpdate),
}

/// The Edge's [`OverlayRoute`]: sends each update to the inbox of its
/// node's home core, as the registry knows it. An update whose generation
/// is not the node's ready one is dropped at once (`stale_generation`).
pub struct InboxRoute<D> {
    registry: Arc<NodeRegistry<D>>,
    inboxes: Vec<UnboundedSender<CoreMsg>>,
}

impl<D> std::fmt::Debug for InboxRoute<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxRoute")
            .field("cores", &self.inboxes.len())
            .finish()
    }
}

impl<D> InboxRoute<D> {
    /// Routes through `inboxes[core]` to the home core `registry` names.
    pub fn new(registry: Arc<NodeRegistry<D>>, inboxes: Vec<UnboundedSender<CoreMsg>>) -> Self {
        Self { registry, inboxes }
    }
}

impl<D: NodeDirectory> OverlayRoute for InboxRoute<D> {
    fn route(&self, update: HealthUpdate) -> Option<EvidenceOutcome> {
        let home = match self.registry.node_state(update.node_id()) {
            NodeState::Ready { generation, core } if generation == update.generation => {
                self.inboxes.get(core)
            }
            _ => None,
        };
        let unsent = match home {
            Some(inbox) => match inbox.send(CoreMsg::Health(update)) {
                Ok(()) => return None,
                Err(SendError(CoreMsg::Health(update))) => update,
                Err(_) => return Some(EvidenceOutcome::StaleGeneration),
            },
            None => update,
        };
        unsent.record(EvidenceOutcome::StaleGeneration);
        Some(EvidenceOutcome::StaleGeneration)
    }
}
