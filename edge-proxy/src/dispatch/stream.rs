//! The caller's end of a stream opened on a node: ordered items, exactly
//! one end, and cleanup when dropped.

use std::sync::Arc;

use proto::v1::{
    CancelKind, CancelRequest, CancelResponse, CancelStatus, ExecutionFailure, FailureCode,
    FailureSide, NodeCommandKind, NodeCommandResponse, RunEvent, RunEventKind, WindowUpdate,
    envelope::Msg,
};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::mpsc::error::TryRecvError;

use crate::link::inbox::{CoreMsg, Opening};
use crate::link::streams::{StreamItem, StreamReceiver};

/// One open stream on one node connection, from the caller's side. Dropping
/// it before its end tells the owning core to forget the stream (and to
/// cancel a run).
#[derive(Debug)]
pub(crate) struct StreamHandle {
    pub(crate) node_id: Arc<str>,
    pub(crate) generation: u64,
    pub(crate) stream_id: u64,
    pub(crate) rx: StreamReceiver,
    pub(crate) inbox: UnboundedSender<CoreMsg>,
    pub(crate) ended: bool,
    /// Credit taken (run events handed out, tunnel body written) and not
    /// granted back to the node yet; see [`grant_taken`](Self::grant_taken).
    pub(crate) taken: u32,
    /// The credit given back in one update ([`grant_threshold_of`] the
    /// stream's open).
    pub(crate) grant_at: u32,
}

impl StreamHandle {
    /// The next queued item without waiting: `None` while nothing is
    /// queued, `Some(None)` once the channel has ended (the callers turn
    /// that into the synthesized terminal).
    pub(crate) fn try_item(&mut self) -> Option<Option<StreamItem>> {
        match self.rx.try_recv() {
            Ok(item) => Some(Some(item)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(None),
        }
    }

    /// Records `n` more bytes of credit taken on this stream.
    pub(crate) fn take_credit(&mut self, n: u32) {
        self.taken = self.taken.saturating_add(n);
    }

    /// Grants the node the credit taken so far once it adds up to the
    /// stream's [`grant_threshold`] (nothing after the terminal: the stream
    /// is over).
    pub(crate) fn grant_taken(&mut self) {
        if let Some(increment) = grant_due(&mut self.taken, 0, self.grant_at)
            && !self.ended
        {
            self.send(Msg::WindowUpdate(WindowUpdate { increment }));
        }
    }

    pub(crate) fn send(&self, msg: Msg) {
        let _ = self.inbox.send(CoreMsg::Send {
            node_id: self.node_id.clone(),
            generation: self.generation,
            stream_id: self.stream_id,
            msg,
        });
    }
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.inbox.send(CoreMsg::Close {
                node_id: Arc::clone(&self.node_id),
                generation: self.generation,
                stream_id: self.stream_id,
            });
        }
    }
}

/// The failure the Edge reports for a stream that ends without its
/// terminal, `NODE_DISCONNECTED`: `item` is what came instead of a frame
/// (`None`: the channel ended).
pub(crate) fn ended_early(item: Option<StreamItem>) -> ExecutionFailure {
    let mut failure = ExecutionFailure {
        message: match item {
            Some(StreamItem::NotSent) => {
                "the node's connection closed before the request was sent".into()
            }
            Some(StreamItem::Lost(reason)) => {
                format!("the node's link closed ({})", reason.as_str())
            }
            Some(StreamItem::Frame(_)) | None => "the node's link closed".into(),
        },
        ..ExecutionFailure::default()
    };
    failure.set_code(FailureCode::NodeDisconnected);
    failure.set_side(FailureSide::Edge);
    failure
}

/// The events of one run (F8, F10), in the node's order, ending with exactly
/// one terminal (`complete`, `error` or `cancelled`); then `None`.
///
/// If the node's link ends first, the terminal is an `error` with code
/// `NODE_DISCONNECTED`, made by the Edge. Dropping the stream before its
/// terminal cancels the run on the node (F12).
///
/// # Flow control
/// The node sends a run's events only while the run has credit
/// (`RunRequest.initial_window`). The stream gives back the credit of the
/// events it handed out (`proto::run_event_credit`) when it is asked for
/// more ([`next`](Self::next)): a caller that writes each batch of events
/// to its client before it asks again so grants as its client drains, and
/// a client that stops reading pauses only its own run.
#[derive(Debug)]
pub struct RunStream {
    pub(crate) handle: StreamHandle,
    pub(crate) run_id: Arc<str>,
    pub(crate) last_seq: u64,
}

impl RunStream {
    /// The Edge-assigned run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The node running it, and that connection's generation.
    pub fn node(&self) -> (&str, u64) {
        (&self.handle.node_id, self.handle.generation)
    }

    /// The next event; `None` after the terminal. Grants the node the
    /// credit of the events handed out before (see the type's docs).
    pub async fn next(&mut self) -> Option<RunEvent> {
        self.handle.grant_taken();
        while !self.handle.ended {
            let item = self.handle.rx.recv().await;
            if let Some(event) = self.event_of(item) {
                return Some(event);
            }
        }
        None
    }

    /// The next event if one is already queued, without waiting (to batch
    /// what is ready into one client write); `None` when nothing is queued
    /// or after the terminal. Grants nothing: the batch is not written yet.
    pub fn try_next(&mut self) -> Option<RunEvent> {
        while !self.handle.ended {
            let item = self.handle.try_item()?;
            if let Some(event) = self.event_of(item) {
                return Some(event);
            }
        }
        None
    }

    /// The event an item carries (`None`: an item to skip); the channel's
    /// end or a lost connection becomes the synthesized terminal.
    fn event_of(&mut self, item: Option<StreamItem>) -> Option<RunEvent> {
        let event = match item {
            Some(StreamItem::Frame(msg)) => match msg {
                Msg::RunEvent(event) => {
                    self.handle.take_credit(proto::run_event_credit(&event));
                    match text_error(&event) {
                        None => *event,
                        Some(error) => {
                            // The run goes on at the node: stop it there.
                            self.cancel();
                            error
                        }
                    }
                }
                // The node's answer to our cancel: the terminal follows.
                _ => return None,
            },
            other => self.synthesized(other),
        };
        self.last_seq = event.seq;
        if is_terminal(&event) {
            self.handle.ended = true;
        }
        Some(event)
    }

    /// Asks the node to cancel the run (F12). The stream then ends with the
    /// node's terminal — `cancelled`, or whatever ended the run first.
    pub fn cancel(&self) {
        if self.handle.ended {
            return;
        }
        let mut request = CancelRequest {
            run_id: String::from(&*self.run_id),
            ..CancelRequest::default()
        };
        request.set_kind(CancelKind::CancelRun);
        self.handle.send(Msg::CancelRequest(Box::new(request)));
    }

    fn synthesized(&self, item: Option<StreamItem>) -> RunEvent {
        let mut event = RunEvent {
            seq: self.last_seq + 1,
            failure: Some(ended_early(item)),
            ..RunEvent::default()
        };
        event.set_kind(RunEventKind::Error);
        event
    }
}

/// The `error` terminal that takes `event`'s place when its text is not
/// UTF-8. The text crosses the link as bytes and is decoded as a slice of
/// the frame (decoded as a `string`, it was copied and checked by core's
/// check: ~14 % of the Edge's CPU relaying 64 KiB normalized events). It
/// is checked here, as the stream hands the event out, so that
/// [`run_event_text`] always reads it whole.
fn text_error(event: &RunEvent) -> Option<RunEvent> {
    if simdutf8::basic::from_utf8(&event.text).is_ok() {
        return None;
    }
    let mut failure = ExecutionFailure {
        message: "the node sent a delta whose text is not UTF-8".into(),
        ..ExecutionFailure::default()
    };
    failure.set_code(FailureCode::Internal);
    failure.set_side(FailureSide::Node);
    let mut error = RunEvent {
        seq: event.seq,
        failure: Some(failure),
        ..RunEvent::default()
    };
    error.set_kind(RunEventKind::Error);
    Some(error)
}

/// The text of an event a [`RunStream`] handed out, as a `str` (checked
/// there to be UTF-8; `simdutf8` checks it again here, without a copy).
pub fn run_event_text(event: &RunEvent) -> &str {
    simdutf8::basic::from_utf8(&event.text).unwrap_or_default()
}

/// The least credit a stream grants in one `WindowUpdate`: half the
/// smallest window a link may configure (`link.initial_stream_window`,
/// 1 KiB). A stream whose window the Edge does not know (0) grants in
/// updates of this size, which suits any window.
pub(crate) const GRANT_AT_LEAST: u32 = (crate::config::MIN_INITIAL_STREAM_WINDOW / 2) as u32;

/// The credit a run of `window` bytes gives back in one `WindowUpdate`:
/// a quarter of its window, at least [`GRANT_AT_LEAST`]. A token run's
/// small events then cost one update per quarter window, and a bulk run's
/// one per few client writes, not one per write (each update is a link
/// write and a wake-up of the Node).
///
/// The bound that keeps a waiting node from being starved: a node that took
/// its whole window back from the Edge sees `window − (ungranted <
/// threshold)` of credit, and it resumes at a tunnel's first byte or at a
/// quarter of a run's window (`node_runner::tunnel::Credit::resume_point`),
/// so the threshold must stay at most ¾ of the window: a quarter is, and
/// 512 bytes is for the smallest window (1 KiB).
pub(crate) fn grant_threshold(window: u32) -> u32 {
    (window / 4).max(GRANT_AT_LEAST)
}

/// The credit a tunnel of `window` bytes gives back in one `WindowUpdate`:
/// half its window, at least [`GRANT_AT_LEAST`]. A tunnel reads its
/// provider again at its first byte of credit, so any threshold under the
/// window keeps it going; half a window a wake-up of the Node (which then
/// sends half a window at once) took 7–15 % off Edge + Node CPU a bulk
/// stream with io_uring, epoll's unchanged (`bench-results/profiles.md`,
/// round 43). Runs keep [`grant_threshold`]: with half, their bulk
/// streams did no better.
pub(crate) fn tunnel_grant_threshold(window: u32) -> u32 {
    (window / 2).max(GRANT_AT_LEAST)
}

/// The grant threshold of the stream `open` starts: a run's
/// [`grant_threshold`], a tunnel's [`tunnel_grant_threshold`], of the
/// window it names; [`GRANT_AT_LEAST`] for any other stream.
pub(crate) fn grant_threshold_of(open: &Opening) -> u32 {
    match open {
        Opening::Msg(Msg::RunRequest(request)) => grant_threshold(request.initial_window),
        Opening::Tunnel(request) => tunnel_grant_threshold(request.initial_window),
        Opening::Msg(Msg::ProviderTunnelRequest(request)) => {
            tunnel_grant_threshold(request.initial_window)
        }
        Opening::Msg(_) => GRANT_AT_LEAST,
    }
}

/// Adds `more` to the credit `pending` grant; returns it (and starts over)
/// once it is at least `at_least`.
pub(crate) fn grant_due(pending: &mut u32, more: u32, at_least: u32) -> Option<u32> {
    *pending = pending.saturating_add(more);
    if *pending < at_least {
        return None;
    }
    Some(std::mem::take(pending))
}

/// Whether `event` ends its run.
pub fn is_terminal(event: &RunEvent) -> bool {
    matches!(
        event.kind(),
        RunEventKind::Complete | RunEventKind::Error | RunEventKind::Cancelled
    )
}

/// The responses of one node command (F14): one or more, the last with
/// `final = true`; then `None`. A link that ends first yields a final
/// `ok = false` response with code `NODE_DISCONNECTED`.
#[derive(Debug)]
pub struct CommandStream {
    pub(crate) handle: StreamHandle,
    pub(crate) kind: NodeCommandKind,
}

impl CommandStream {
    /// The node the command went to, and that connection's generation.
    pub fn node(&self) -> (&str, u64) {
        (&self.handle.node_id, self.handle.generation)
    }

    /// The next response; `None` after the final one.
    pub async fn next(&mut self) -> Option<NodeCommandResponse> {
        while !self.handle.ended {
            let response = match self.handle.rx.recv().await {
                Some(StreamItem::Frame(msg)) => match msg {
                    Msg::NodeCommandResponse(response) => *response,
                    _ => continue,
                },
                other => self.lost(other),
            };
            if response.r#final {
                self.handle.ended = true;
            }
            return Some(response);
        }
        None
    }

    /// Every response up to and including the final one.
    pub async fn collect(mut self) -> Vec<NodeCommandResponse> {
        let mut all = Vec::new();
        while let Some(response) = self.next().await {
            all.push(response);
        }
        all
    }

    fn lost(&self, item: Option<StreamItem>) -> NodeCommandResponse {
        let mut response = NodeCommandResponse {
            ok: false,
            failure: Some(ended_early(item)),
            r#final: true,
            ..NodeCommandResponse::default()
        };
        response.set_kind(self.kind);
        response
    }
}

/// Waits for the one `CancelResponse` of a session-terminate stream.
pub(crate) async fn cancel_answer(mut handle: StreamHandle) -> CancelResponse {
    let answer = loop {
        match handle.rx.recv().await {
            Some(StreamItem::Frame(msg)) => match msg {
                Msg::CancelResponse(response) => break response,
                _ => continue,
            },
            other => break failed_cancel(other),
        }
    };
    handle.ended = true;
    answer
}

fn failed_cancel(item: Option<StreamItem>) -> CancelResponse {
    let mut response = CancelResponse {
        message: ended_early(item).message,
        ..CancelResponse::default()
    };
    response.set_kind(CancelKind::TerminateSession);
    response.set_status(CancelStatus::Failed);
    response
}
