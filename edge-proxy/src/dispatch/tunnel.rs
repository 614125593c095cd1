//! The caller's end of a raw provider tunnel (F16): the node's frames in
//! order — `status`, `headers`, `body`…, `usage` candidates — ending with
//! exactly one `end` or `error`.

use std::sync::Arc;

use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{CancelKind, CancelRequest, ProviderTunnelFrame, envelope::Msg};

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
