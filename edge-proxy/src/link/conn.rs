//! The driver of one node connection: a reader task that decodes frames into
//! the session, and a writer task that drains the session's outbound frames.
//!
//! ```text
//!   socket ──read──▶ FrameDecoder ──▶ EdgeSession ──outputs──▶ writer queue ──write──▶ socket
//!                                         ▲   │ events ─▶ log + event bus
//!                   core ticker ──timer───┘   └ close ─▶ writer flushes, shuts down, signals the reader
//! ```
//!
//! Both tasks live on the connection's home core; the session is a
//! `RefCell` touched only between awaits, so no borrow spans a suspension.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use framing::close::CloseSignal;
use framing::frame::{FrameDecoder, FrameError};
use framing::link::{CloseReason, Outgoing, jumps_the_queue, reject_reason_name};
use framing::outbound::Outbound;
use framing::timer::{OnTimer, TimerKey};
use proto::Envelope;
use proto::v1::{CancelKind, CancelRequest, envelope::Msg};

mod opening;

use super::core::Core;
use super::inbox::Opening;
use super::session::{EdgeSession, Output};
use super::streams::{Delivered, StreamKind, StreamSink, StreamTable};
use super::tls::IdentityRegistrar;
use super::transport::{LinkReader, LinkStream, LinkWriter};
use crate::events::{LifecycleEvent, RunBusEvent};
use crate::registry::{ConnRegistrar, NodeDirectory};

/// Free space guaranteed in the receive buffer before a read on a quiet
/// link. Small, so an idle link costs little; a large frame grows the buffer
/// to its size (the decoder reserves it once the length prefix is in).
const READ_MIN: usize = 4 * 1024;
/// Most free space reserved before a read on a busy link (see
/// [`next_read_size`]).
const READ_MAX: usize = 128 * 1024;
/// A drained receive buffer larger than this is dropped after a small read
/// (a read of less than [`READ_MIN`] bytes: the link has gone quiet), so one
/// large frame does not pin its memory for the connection's life, while a
/// busy link, whose reads are large, keeps its buffer.
const READ_SHRINK_ABOVE: usize = 16 * 1024;

/// One node connection on its home core.
pub(crate) struct Conn<D> {
    core: Rc<Core<D>>,
    peer: SocketAddr,
    connected_unix_ms: u64,
    session: RefCell<EdgeSession>,
    /// Commands for the writer, each with its stream (0: the link's own).
    tx: local_sync::mpsc::unbounded::Tx<(u64, Outgoing)>,
    /// Heartbeat frames, which the writer puts ahead of queued ones.
    urgent: local_sync::mpsc::unbounded::Tx<Bytes>,
    timer: Cell<Option<TimerKey>>,
    /// Given by the writer when it has ended the session: the reader
    /// parked on the socket stops.
    closing: CloseSignal,
    registered: Cell<bool>,
    last_rtt_ms: Cell<Option<u64>>,
    streams: RefCell<StreamTable>,
    /// The node id its certificate proves (mTLS only).
    identity: Option<String>,
}

impl<D: NodeDirectory + 'static> Conn<D> {
    /// Serves `stream` until the session closes; the registration deadline
    /// runs from `accepted_at` (so a TLS handshake counts against it).
    pub(crate) async fn serve(
        core: Rc<Core<D>>,
        stream: LinkStream,
        peer: SocketAddr,
        identity: Option<String>,
        accepted_at: u64,
    ) {
        let tcp = stream.tcp();
        let _ = tcp.set_nodelay(true);
        if let Err(error) = super::transport::limit_unsent(tcp) {
            tracing::debug!(%peer, %error, "could not bound the link's unsent queue");
        }
        let now = accepted_at;
        let config = core.shared.config;
        let (tx, rx) = local_sync::mpsc::unbounded::channel();
        let (urgent, urgent_rx) = local_sync::mpsc::unbounded::channel();
        let conn = Rc::new(Self {
            peer,
            connected_unix_ms: unix_ms(),
            session: RefCell::new(EdgeSession::new(config.session, now)),
            tx,
            urgent,
            timer: Cell::new(None),
            closing: CloseSignal::new(),
            registered: Cell::new(false),
            last_rtt_ms: Cell::new(None),
            streams: RefCell::new(StreamTable::new()),
            identity,
            core,
        });
        conn.rearm();
        let (read_half, write_half) = stream.into_split();
        let writer = monoio::spawn(Rc::clone(&conn).write_loop(write_half, rx, urgent_rx));
        Rc::clone(&conn).read_loop(read_half).await;
        writer.await;
        // Drop the timer entry (it holds an Rc of this connection).
        let key = conn.timer.take();
        conn.core.arm(&conn, key, None);
    }

    /// The registered generation, if any.
    pub(crate) fn generation(&self) -> Option<u64> {
        self.session
            .borrow()
            .node()
            .map(|(_, generation)| generation)
    }

    /// Opens stream `stream_id` with first frame `msg`. Refused, with the
    /// sink given back, unless the session is ready and not closing (or
    /// when the id is in use, or `msg` does not fit a frame).
    pub(crate) fn open_stream(
        &self,
        stream_id: u64,
        kind: StreamKind,
        run_id: Option<std::sync::Arc<str>>,
        msg: Opening,
        sink: StreamSink,
    ) -> Result<(), StreamSink> {
        if self.closing.is_closing() || !self.session.borrow().is_ready() {
            return Err(sink);
        }
        // Encoded before the stream opens: a request that does not fit a
        // frame is not sent, and its sink hears so at once (never a stream
        // that waits for an answer to nothing).
        let frames = match self.encode_open(stream_id, msg) {
            Ok(frames) => frames,
            Err(error) => {
                self.not_encoded(&error);
                return Err(sink);
            }
        };
        self.streams
            .borrow_mut()
            .open(stream_id, kind, sink, run_id)?;
        for frame in frames.into_frames() {
            let _ = self.tx.send((stream_id, frame));
        }
        Ok(())
    }

    /// Sends `msg` on an open stream (a stream that ended is skipped).
    pub(crate) fn send_on(&self, stream_id: u64, msg: Msg) {
        // F29: lease revocations go on stream 0, which is never "open".
        // An edge.yaml reload's refreshed payload goes there too.
        let connection_level =
            stream_id == 0 && matches!(msg, Msg::LeaseRevocations(_) | Msg::NodeConfigUpdate(_));
        if (connection_level || self.streams.borrow().is_open(stream_id))
            && self.session.borrow().is_ready()
        {
            if matches!(msg, Msg::CancelRequest(_)) {
                // What the writer still holds of the stream goes no further
                // (see `end_withdrawn`).
                let _ = self.tx.send((stream_id, Outgoing::Withdraw));
            }
            self.send_envelope(&Envelope {
                stream_id,
                msg: Some(msg),
            });
        }
    }

    /// The receiver of a stream is gone: forget the stream, and cancel its
    /// run on the node if the run had not ended (F12).
    pub(crate) fn close_stream(&self, stream_id: u64) {
        let closed = self.streams.borrow_mut().close(stream_id);
        if let Some((StreamKind::Run | StreamKind::Tunnel, run_id)) = closed {
            let _ = self.tx.send((stream_id, Outgoing::Withdraw));
            let mut cancel = CancelRequest {
                run_id: run_id.as_deref().unwrap_or_default().to_owned(),
                ..CancelRequest::default()
            };
            cancel.set_kind(CancelKind::CancelRun);
            if self.session.borrow().is_ready() {
                self.send_envelope(&Envelope {
                    stream_id,
                    msg: Some(Msg::CancelRequest(Box::new(cancel))),
                });
            }
        }
    }

    /// Ends the connection from this side with `reason` (operator drain, a
    /// node removed by a reload): the session fences the generation, fails
    /// its open streams once each, and the writer closes the socket.
    pub(crate) fn disconnect(self: &Rc<Self>, reason: CloseReason) {
        self.session
            .borrow_mut()
            .handle_closed(reason, &self.registrar());
        self.pump();
    }

    fn send_envelope(&self, envelope: &Envelope) {
        match self.core.encoder.borrow_mut().encode(envelope) {
            Ok(frame) if envelope.msg.as_ref().is_some_and(jumps_the_queue) => {
                let _ = self.urgent.send(frame);
            }
            Ok(frame) => {
                let _ = self.tx.send((envelope.stream_id, Outgoing::Frame(frame)));
            }
            Err(error) => self.not_encoded(&error),
        }
    }

    fn not_encoded(&self, error: &FrameError) {
        tracing::error!(peer = %self.peer, %error, "could not encode a frame for a node");
    }

    /// Hands a work frame to its stream (and a run event to the bus).
    fn deliver(&self, envelope: Envelope) {
        let stream_id = envelope.stream_id;
        let bus = &self.core.shared.bus;
        let copy = match &envelope.msg {
            Some(Msg::RunEvent(event)) if bus.wants_run_events() => Some(event.clone()),
            _ => None,
        };
        let delivered = self.streams.borrow_mut().deliver(envelope);
        match delivered {
            Delivered::Open { run_id } | Delivered::Terminal { run_id } => {
                if let (Some(run_id), Some(event), Some((node_id, generation))) =
                    (run_id, copy, self.session.borrow().node())
                {
                    bus.publish_run(RunBusEvent {
                        run_id,
                        node_id: node_id.to_owned(),
                        generation,
                        event: *event,
                    });
                }
            }
            // A stream that ended (or was cancelled) may still see frames
            // the node sent before it learned: dropped, by design.
            Delivered::UnknownStream => {
                tracing::debug!(peer = %self.peer, stream_id, "frame for a closed stream dropped")
            }
            Delivered::WrongType => {
                tracing::warn!(peer = %self.peer, stream_id, "frame of the wrong type for its stream dropped")
            }
        }
    }

    fn registrar(&self) -> IdentityRegistrar<'_, D> {
        IdentityRegistrar {
            inner: ConnRegistrar {
                registry: &self.core.shared.registry,
                home_core: self.core.id,
                connected_since_unix_ms: self.connected_unix_ms,
            },
            identity: self.identity.as_deref(),
            registry: &self.core.shared.registry,
        }
    }

    async fn read_loop(self: Rc<Self>, mut read_half: LinkReader) {
        let mut decoder = FrameDecoder::new(self.core.shared.config.max_frame_len);
        let mut buf = BytesMut::new();
        let mut want = READ_MIN;
        // Stop reading as soon as the session has closed (the writer flushes
        // and shuts the socket down); a closed socket's read returns at once,
        // and looping on it would starve the core.
        while !self.closing.is_closing() && !self.session.borrow().is_closed() {
            decoder.reserve_read(&mut buf, want, want);
            // A large frame's last piece comes with what follows it.
            decoder.set_read_ahead(want);
            let room = buf.capacity() - buf.len();
            // Appends after a partial frame (see `transport`).
            // The writer's close signal drops a read under way: it ends as
            // a read that failed while closing.
            let (result, returned) = self.closing.read_or_close(read_half.read(buf)).await;
            buf = returned;
            let now = self.core.timers.now();
            let small_read = matches!(result, Ok(n) if n < READ_MIN);
            if let Ok(n) = result {
                want = next_read_size(want, room, n);
            }
            match result {
                Ok(0) => self
                    .session
                    .borrow_mut()
                    .handle_closed(CloseReason::PeerClosed, &self.registrar()),
                Err(_) if self.closing.is_closing() => {}
                Err(_) => self
                    .session
                    .borrow_mut()
                    .handle_closed(CloseReason::IoError, &self.registrar()),
                Ok(_) => loop {
                    match decoder.decode(&mut buf) {
                        Ok(Some(envelope)) => {
                            self.session.borrow_mut().handle_envelope(
                                envelope,
                                now,
                                &self.registrar(),
                            );
                        }
                        Ok(None) => break,
                        Err(error) => {
                            tracing::warn!(peer = %self.peer, %error, "refused frame from node socket");
                            self.session
                                .borrow_mut()
                                .handle_frame_error(&error, &self.registrar());
                            break;
                        }
                    }
                    if self.session.borrow().is_closed() {
                        break;
                    }
                },
            }
            if small_read && buf.is_empty() && buf.capacity() > READ_SHRINK_ABOVE {
                buf = BytesMut::new();
            }
            self.pump();
            self.rearm();
            self.publish_rtt();
        }
    }

    /// Copies a new heartbeat round trip into the registry's status.
    fn publish_rtt(&self) {
        let session = self.session.borrow();
        let (Some(rtt_ms), Some((node_id, generation))) = (session.last_rtt_ms(), session.node())
        else {
            return;
        };
        if self.last_rtt_ms.replace(Some(rtt_ms)) != Some(rtt_ms) {
            self.core
                .shared
                .registry
                .record_rtt(node_id, generation, rtt_ms.saturating_mul(1000));
        }
    }

    /// The link's single writer, in [`Outbound`]'s order (as the Node's):
    /// heartbeats first, arrival order while the writer keeps up, the
    /// streams in turn for what a full batch leaves, so a request or a
    /// stream's credit does not wait behind another stream's long prompt.
    async fn write_loop(
        self: Rc<Self>,
        mut write_half: LinkWriter,
        mut rx: local_sync::mpsc::unbounded::Rx<(u64, Outgoing)>,
        mut urgent: local_sync::mpsc::unbounded::Rx<Bytes>,
    ) {
        let mut outbound = Outbound::new();
        let mut open = true;
        loop {
            let mut waited = None;
            if !outbound.has_waiting() {
                if !open {
                    break;
                }
                monoio::select! {
                    biased;
                    Some(frame) = urgent.recv() => waited = Some(Outgoing::Frame(frame)),
                    cmd = rx.recv() => match cmd {
                        Some((_, cmd)) => waited = Some(cmd),
                        None => open = false,
                    },
                }
            }
            let close = outbound.fill(waited, || urgent.try_recv().ok(), || rx.try_recv().ok());
            self.end_withdrawn(&mut outbound);
            if let Some(mut batch) = outbound.take() {
                // Commands that come while the write is under way wait their
                // turn; a withdrawal among them ends its stream now, not when
                // a stalled peer lets the write finish.
                let written = {
                    let write = write_half.write_overtaking(&mut batch, &mut urgent);
                    let mut write = std::pin::pin!(write);
                    loop {
                        monoio::select! {
                            biased;
                            written = &mut write => break written,
                            cmd = rx.recv(), if open => match cmd {
                                Some((stream_id, cmd)) => outbound.hold(stream_id, cmd),
                                None => open = false,
                            },
                        }
                        self.end_withdrawn(&mut outbound);
                    }
                };
                outbound.recycle(batch);
                match written {
                    Ok(whole) => outbound.paced(whole),
                    Err(_) => {
                        self.session
                            .borrow_mut()
                            .handle_closed(CloseReason::IoError, &self.registrar());
                        self.pump();
                        break;
                    }
                }
            }
            if close {
                break;
            }
        }
        let _ = write_half.shutdown().await;
        self.closing.signal();
    }

    fn rearm(self: &Rc<Self>) {
        let deadline = self.session.borrow().poll_timeout();
        let key = self.core.arm(self, self.timer.take(), deadline);
        self.timer.set(key);
    }

    /// Carries out the session's outputs.
    fn pump(self: &Rc<Self>) {
        loop {
            let Some(output) = self.session.borrow_mut().poll_output() else {
                break;
            };
            match output {
                Output::Send(envelope) => self.send_envelope(&envelope),
                Output::Event(event) => {
                    match &event {
                        LifecycleEvent::Registered { .. } => self.registered.set(true),
                        LifecycleEvent::Ready { node_id, .. } => self.core.add_ready(node_id, self),
                        LifecycleEvent::Disconnected {
                            node_id,
                            generation,
                            ..
                        } => self.core.remove_ready(node_id, *generation),
                        LifecycleEvent::Rejected { .. } => {}
                    }
                    self.log_event(&event);
                    self.core.shared.bus.publish(event);
                }
                Output::Deliver(envelope) => self.deliver(envelope),
                Output::Close(reason) => {
                    // Every stream still open ends now, exactly once.
                    self.streams.borrow_mut().fail_all(reason);
                    // Registered connections already logged `node_disconnected`
                    // and rejected ones `node_rejected`; say why the rest end.
                    if !self.registered.get() && reason != CloseReason::Rejected {
                        tracing::info!(
                            event = "node_connection_closed",
                            peer = %self.peer,
                            reason = reason.as_str(),
                            "node_connection_closed"
                        );
                    }
                    let _ = self.tx.send((0, Outgoing::Close));
                }
            }
        }
    }

    fn log_event(&self, event: &LifecycleEvent) {
        let name = event.name();
        match event {
            LifecycleEvent::Registered {
                node_id,
                generation,
            }
            | LifecycleEvent::Ready {
                node_id,
                generation,
            } => {
                tracing::info!(event = name, node_id = %node_id, generation, core = self.core.id, peer = %self.peer, "{name}");
            }
            LifecycleEvent::Rejected { node_id, reason } => {
                tracing::warn!(
                    event = name,
                    node_id = node_id.as_deref().unwrap_or(""),
                    reason = reject_reason_name(*reason),
                    peer = %self.peer,
                    "{name}"
                );
            }
            LifecycleEvent::Disconnected {
                node_id,
                generation,
                reason,
            } => {
                tracing::info!(event = name, node_id = %node_id, generation, reason = reason.as_str(), peer = %self.peer, "{name}");
            }
        }
    }
}

impl<D: NodeDirectory + 'static> OnTimer for Conn<D> {
    /// The session's deadline passed (the core's ticker fired its entry).
    fn on_timer(self: Rc<Self>, now: u64) {
        self.timer.set(None);
        self.session
            .borrow_mut()
            .handle_timeout(now, &self.registrar());
        self.pump();
        self.rearm();
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The free space to reserve before the next read, after a read of `read`
/// bytes into `room` bytes of space when `want` were asked for: a read that
/// filled its room means more is waiting, so the next one may take twice as
/// much (up to [`READ_MAX`]); a small read (the link went quiet) goes back to
/// [`READ_MIN`]. Body frames are slices of this buffer, so the buffer is not
/// reused while they are in flight and each reservation is a fresh
/// allocation of about this size: on a busy link, 4 KiB reads cost one
/// read and one allocation per 4 KiB relayed.
fn next_read_size(want: usize, room: usize, read: usize) -> usize {
    if read >= room {
        (want.max(room) * 2).min(READ_MAX)
    } else if read < READ_MIN {
        READ_MIN
    } else {
        want
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_grow_while_they_fill_and_fall_back_when_the_link_goes_quiet() {
        let mut want = READ_MIN;
        let mut sizes = Vec::new();
        for _ in 0..8 {
            want = next_read_size(want, want, want);
            sizes.push(want / 1024);
        }
        assert_eq!(sizes, [8, 16, 32, 64, 128, 128, 128, 128]);
        // A read that did not fill its room but was not small keeps the size.
        assert_eq!(next_read_size(READ_MAX, READ_MAX, 20 * 1024), READ_MAX);
        // A small read: the link went quiet.
        assert_eq!(next_read_size(READ_MAX, READ_MAX, 100), READ_MIN);
        // Room larger than asked (a partial frame's reservation) that filled.
        assert_eq!(next_read_size(READ_MIN, 40 * 1024, 40 * 1024), 80 * 1024);
    }
}
