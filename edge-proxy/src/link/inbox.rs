//! Messages to a core about the streams of the node connections it owns.
//!
//! A node connection lives on its home core; whoever wants to open a stream
//! on it (an ingress request on another core, a test on a plain thread)
//! sends a [`CoreMsg`] to that core's inbox. Every message names the
//! `(node_id, generation)` it is for: a core acts only if that exact
//! generation is its current ready connection, so nothing reaches a fenced
//! connection (F6).

use std::sync::Arc;

use proto::v1::envelope::Msg;
use tokio::sync::oneshot;

use super::streams::{StreamKind, StreamSink};

/// Why a stream could not be opened on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The named generation is not this core's ready connection any more
    /// (it closed, or a newer generation replaced it).
    #[error("the node's connection is no longer current or ready")]
    NotCurrent,
}

/// A request to the core that owns a node connection.
#[derive(Debug)]
pub enum CoreMsg {
    /// Open a stream with first frame `msg`; its frames go to `sink`.
    Open {
        /// The node.
        node_id: String,
        /// Its generation, as selected.
        generation: u64,
        /// What the stream is.
        kind: StreamKind,
        /// The run id, for run streams (event bus, cancel on drop).
        run_id: Option<Arc<str>>,
        /// The request that opens the stream.
        msg: Msg,
        /// Where the stream's frames go.
        sink: StreamSink,
        /// The stream id, or why not.
        reply: oneshot::Sender<Result<u64, OpenError>>,
    },
    /// Send `msg` on an open stream (a cancel, a window update).
    Send {
        /// The node.
        node_id: String,
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
        node_id: String,
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
}
