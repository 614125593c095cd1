//! The caller's end of a raw provider tunnel (F16): the node's frames in
//! order — `status`, `headers`, `body`…, `usage` candidates — ending with
//! exactly one `end` or `error`. A `batch` frame (several frames the Node
//! had ready together) is handed out as the frames it holds, so the caller
//! never sees one.

use std::sync::Arc;

use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{CancelKind, CancelRequest, ProviderTunnelFrame, TunnelBatch, envelope::Msg};

use super::stream::{StreamHandle, ended_early};
use crate::link::streams::StreamItem;

/// One tunnel's frames (see the module docs). Body frames carry `Bytes`
/// that are slices of the node connection's receive buffer: never copied.
///
/// If the link ends first, the last frame is an `error` with code
/// `NODE_DISCONNECTED`, made by the Edge. Dropping the stream before its end
/// cancels the tunnel (and the provider request) on the node.
#[derive(Debug)]
pub struct TunnelStream {
    pub(crate) handle: StreamHandle,
    /// Shared with the stream table's entry (one allocation for both).
    pub(crate) tunnel_id: Arc<str>,
    /// What is left of the last batch frame, handed out frame by frame.
    pub(crate) batch: Option<Box<TunnelBatch>>,
}

impl TunnelStream {
    /// The Edge-assigned tunnel id.
    pub fn tunnel_id(&self) -> &str {
        &self.tunnel_id
    }

    /// The node serving it, and that connection's generation (the
    /// reception a stall terminal is validated against, F24).
    pub fn node(&self) -> (&str, u64) {
        (&self.handle.node_id, self.handle.generation)
    }

    /// The next frame; `None` after the terminal.
    pub async fn next(&mut self) -> Option<Frame> {
        if let Some(frame) = self.next_of_batch() {
            return Some(frame);
        }
        while !self.handle.ended {
            let item = self.handle.rx.recv().await;
            if let Some(frame) = self.frame_of(item) {
                return Some(frame);
            }
        }
        None
    }

    /// The next frame if one has already arrived (never waits): lets the
    /// caller write every frame that is ready in one go.
    pub fn try_next(&mut self) -> Option<Frame> {
        if let Some(frame) = self.next_of_batch() {
            return Some(frame);
        }
        while !self.handle.ended {
            let item = self.handle.try_item()?;
            if let Some(frame) = self.frame_of(item) {
                return Some(frame);
            }
        }
        None
    }

    /// The frame an item carries (`None`: an item to skip); the channel's
    /// end, a lost link or an open refused becomes the synthesized `error`
    /// terminal.
    fn frame_of(&mut self, item: Option<StreamItem>) -> Option<Frame> {
        let frame = match item {
            Some(StreamItem::Frame(msg)) => match msg {
                Msg::ProviderTunnelFrame(ProviderTunnelFrame {
                    frame: Some(Frame::Batch(batch)),
                }) => {
                    self.batch = Some(batch);
                    return self.next_of_batch();
                }
                Msg::ProviderTunnelFrame(ProviderTunnelFrame { frame: Some(frame) }) => frame,
                _ => return None,
            },
            other => Frame::Error(ended_early(other)),
        };
        if matches!(frame, Frame::End(_) | Frame::Error(_)) {
            self.handle.ended = true;
        }
        Some(frame)
    }

    /// The next frame the last batch holds, in the order they would have
    /// come apart: `status`, `headers`, `body` (when not empty), `end` (the
    /// terminal). `None` once it holds none (an empty batch is skipped).
    fn next_of_batch(&mut self) -> Option<Frame> {
        let batch = self.batch.as_deref_mut()?;
        let frame = if let Some(status) = batch.status.take() {
            Some(Frame::Status(status))
        } else if let Some(headers) = batch.headers.take() {
            Some(Frame::Headers(headers))
        } else if !batch.body.is_empty() {
            Some(Frame::Body(std::mem::take(&mut batch.body)))
        } else if let Some(end) = batch.end.take() {
            self.handle.ended = true;
            Some(Frame::End(end))
        } else {
            None
        };
        let spent = batch.status.is_none()
            && batch.headers.is_none()
            && batch.body.is_empty()
            && batch.end.is_none();
        if spent {
            self.batch = None;
        }
        frame
    }

    /// Gives the node `bytes` more credit for this stream's body (the
    /// client socket drained that much), in updates of half its window
    /// (`tunnel_grant_threshold`): a node whose window is spent has always
    /// been granted again.
    pub fn grant(&mut self, bytes: u32) {
        self.handle.take_credit(bytes);
        self.handle.grant_taken();
    }

    /// Asks the node to stop the tunnel and its provider request.
    pub fn cancel(&self) {
        if self.handle.ended {
            return;
        }
        let mut request = CancelRequest {
            run_id: String::from(&*self.tunnel_id),
            ..CancelRequest::default()
        };
        request.set_kind(CancelKind::CancelRun);
        self.handle.send(Msg::CancelRequest(Box::new(request)));
    }
}
