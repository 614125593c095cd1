//! The driver of one link connection: dial, run the session over the socket,
//! report how it ended.
//!
//! Tasks on the Node's link core (core 0): the reader (decode → session →
//! work routed to the cores), the writer (frames from every core → socket,
//! coalescing what is queued) and the done listener (cores report finished
//! run streams, so cancels find their core). The handshake deadline and the
//! heartbeat are one entry on the core's timer wheel ([`CoreTimers`]),
//! re-armed at the session's `poll_timeout()` after every input. The
//! session is a `RefCell` borrowed only between awaits.
//!
//! The runs themselves live on the cores ([`crate::runs::cores`]): on
//! registration every core is configured for the generation; work frames go
//! to the core a [`Router`] picks; when the connection ends every core shuts
//! the generation down. The writer's queue is a `Send` channel fed by all
//! cores.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use framing::close::CloseSignal;
use framing::frame::FrameDecoder;
use framing::link::{CloseReason, Outgoing};
use framing::outbound::Outbound;
use framing::timer::{ClockSource, TimerKey};
use monoio::net::TcpStream;
use proto::v1::{
    CancelKind, CancelResponse, CancelStatus, NodeConfigPayload, RegisterRejectReason,
    envelope::Msg,
};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::session::{NodeOutput, NodeSession, NodeSessionConfig};
use super::tls::LinkTls;
use super::transport::{LinkReader, LinkStream, LinkWriter};
use crate::runs::cores::{Configure, Route, Router};
use crate::runs::{CoreMsg, Cores, GenShared, LinkIdentity, Outbox, RunnerConfig};
use framing::timer::{CoreTimers, OnTimer};

mod ops;

use self::ops::drain_watch;

/// Bytes reserved in the receive buffer before each read.
const READ_RESERVE: usize = 64 * 1024;

/// Settings of one connection attempt.
#[derive(Debug, Clone)]
pub struct LinkClientConfig {
    /// The Edge's node socket.
    pub edge: SocketAddr,
    /// Identity, limits and timings.
    pub session: NodeSessionConfig,
    /// Longest the core's timer ticker sleeps between clock reads, in ms.
    pub tick_ms: u64,
    /// The clock to read.
    pub clock: ClockSource,
    /// Run store and provider client settings for the runs.
    pub runner: RunnerConfig,
    /// mTLS to the Edge (F28); `None` is plain TCP.
    pub tls: Option<LinkTls>,
}

/// How a connection ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionEnd {
    /// Why it closed.
    pub reason: CloseReason,
    /// The node id and generation, if registration was accepted.
    pub registered: Option<(String, u64)>,
    /// Whether readiness completed.
    pub was_ready: bool,
    /// The rejection, if the Edge refused the registration.
    pub rejected: Option<Rejected>,
    /// The config the Edge sent, if any.
    pub config: Option<NodeConfigPayload>,
}

/// A refused registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The closed-set reason.
    pub reason: RegisterRejectReason,
    /// The Edge's detail.
    pub message: String,
    /// Whether retrying cannot help.
    pub permanent: bool,
}

struct Link {
    session: RefCell<NodeSession>,
    outbox: Outbox,
    timers: Rc<CoreTimers>,
    timer: Cell<Option<TimerKey>>,
    cores: Cores,
    max_frame_len: usize,
    frames: crate::runs::FrameTx,
    /// Heartbeat frames, which the writer puts ahead of queued ones.
    urgent: local_sync::mpsc::unbounded::Tx<Bytes>,
    done: crate::runs::DoneTx,
    /// Shared with the done listener, which must not hold the link (it
    /// outlives it until every core has let go of the connection).
    router: Rc<RefCell<Router>>,
    /// The registered generation's shared state.
    shared: RefCell<Option<Arc<GenShared>>>,
    connected_since_unix_ms: u64,
    /// Given by the writer when it has ended the session: the reader
    /// parked on the socket stops.
    closing: CloseSignal,
    /// F29: where lease revocations from the Edge go.
    leases: Option<Arc<crate::lease::LeaseOpener>>,
    end: RefCell<ConnectionEnd>,
}

/// Dials the Edge and runs one connection to its end, its timers on
/// `timers` (whose ticker the caller runs) and its work on `cores` (whose
/// inboxes the caller serves). Call inside a monoio runtime: the link core.
/// A failed dial is reported as an `io_error` end.
pub async fn run_connection(
    config: &LinkClientConfig,
    timers: &Rc<CoreTimers>,
    cores: &Cores,
) -> ConnectionEnd {
    let mut end = ConnectionEnd {
        reason: CloseReason::IoError,
        registered: None,
        was_ready: false,
        rejected: None,
        config: None,
    };
    // The dial and the TLS handshake share the handshake deadline.
    let stream = match monoio::time::timeout(
        Duration::from_millis(config.session.handshake_timeout_ms.max(1)),
        dial(config),
    )
    .await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(edge = %config.edge, %error, "dial failed");
            return end;
        }
        Err(_) => {
            end.reason = CloseReason::RegisterTimeout;
            return end;
        }
    };
    let now = timers.now();
    let (tx, rx) = unbounded_channel();
    let (urgent, urgent_rx) = local_sync::mpsc::unbounded::channel();
    let (done, done_rx) = unbounded_channel();
    let max_frame_len = config.session.max_frame_len as usize;
    let link = Rc::new(Link {
        session: RefCell::new(NodeSession::with_lease_key(
            config.session.clone(),
            now,
            config.runner.leases.as_ref().map(|l| l.public_key()),
        )),
        leases: config.runner.leases.clone(),
        outbox: Outbox::new(tx.clone(), max_frame_len),
        timers: Rc::clone(timers),
        timer: Cell::new(None),
        cores: cores.clone(),
        max_frame_len,
        frames: tx,
        urgent,
        done,
        router: Rc::new(RefCell::new(Router::new(cores.len(), cores.link_slack()))),
        shared: RefCell::new(None),
        connected_since_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        closing: CloseSignal::new(),
        end: RefCell::new(end),
    });
    link.pump();
    link.rearm();
    let (read_half, write_half) = stream.into_split();
    let writer = monoio::spawn(Rc::clone(&link).write_loop(write_half, rx, urgent_rx));
    // Detached: ends once the link and every core have dropped this
    // connection's sender.
    monoio::spawn(done_loop(Rc::clone(&link.router), done_rx));
    // Drains this connection if the operator asks (ends with it otherwise).
    let (ended, ended_rx) = local_sync::oneshot::channel::<()>();
    monoio::spawn(drain_watch(Rc::downgrade(&link), ended_rx));
    Rc::clone(&link).read_loop(read_half, max_frame_len).await;
    writer.await;
    drop(ended);
    // Drop the timer entry (it holds an Rc of this link).
    let key = link.timer.take();
    link.timers
        .arm(key, None, || Rc::clone(&link) as Rc<dyn OnTimer>);
    // Runs of this connection cannot reach the Edge any more: every core
    // stops them (already asked on close; generation-tagged, so twice is
    // harmless).
    link.shutdown_cores();
    link.end.borrow().clone()
}

/// Connects to the Edge and, in managed mode, completes the mTLS handshake
/// (a failure is logged as `node_tls_failed` with its reason).
async fn dial(config: &LinkClientConfig) -> std::io::Result<LinkStream> {
    let mut stream = TcpStream::connect(config.edge).await?;
    let _ = stream.set_nodelay(true);
    if let Err(error) = super::transport::limit_unsent(&stream) {
        tracing::debug!(%error, "could not bound the link's unsent queue");
    }
    let Some(tls) = &config.tls else {
        return Ok(LinkStream::Plain(stream));
    };
    let mut session = super::tls::session(tls)?;
    if let Err(error) = crate::tls_io::handshake(&mut stream, &mut session).await {
        tracing::warn!(
            event = "node_tls_failed",
            edge = %config.edge,
            reason = super::tls::handshake_failure(&error),
            detail = %error,
            "node_tls_failed"
        );
        return Err(error);
    }
    Ok(LinkStream::Tls(stream, Box::new(session)))
}

/// Cores report each finished run stream: forget its owner.
async fn done_loop(router: Rc<RefCell<Router>>, mut done: UnboundedReceiver<u64>) {
    while let Some(stream_id) = done.recv().await {
        router.borrow_mut().stream_done(stream_id);
    }
}

impl Link {
    async fn read_loop(self: Rc<Self>, mut read_half: LinkReader, max_frame_len: usize) {
        let mut decoder = FrameDecoder::new(max_frame_len);
        let mut buf = BytesMut::with_capacity(READ_RESERVE);
        // Stop reading as soon as the session has closed (the writer flushes
        // and shuts the socket down); a closed socket's read returns at once,
        // and looping on it would starve the core.
        while !self.closing.is_closing() && !self.session.borrow().is_closed() {
            decoder.reserve_read(&mut buf, READ_RESERVE / 4, READ_RESERVE);
            // Appends after a partial frame (see `transport`).
            // The writer's close signal drops a read under way: it ends as
            // a read that failed while closing.
            let (result, returned) = self.closing.read_or_close(read_half.read(buf)).await;
            buf = returned;
            let now = self.timers.now();
            match result {
                Ok(0) => self
                    .session
                    .borrow_mut()
                    .handle_closed(CloseReason::PeerClosed),
                Err(_) if self.closing.is_closing() => {}
                Err(error) => {
                    // Under TLS 1.3 the Edge checks this node's certificate
                    // after the node's side of the handshake is done: its
                    // refusal arrives here, as an alert.
                    if super::tls::is_tls_error(&error) {
                        tracing::warn!(
                            event = "node_tls_failed",
                            reason = super::tls::handshake_failure(&error),
                            detail = %error,
                            "node_tls_failed"
                        );
                    }
                    self.session
                        .borrow_mut()
                        .handle_closed(CloseReason::IoError);
                }
                Ok(_) => loop {
                    match decoder.decode(&mut buf) {
                        Ok(Some(envelope)) => {
                            self.session.borrow_mut().handle_envelope(envelope, now)
                        }
                        Ok(None) => break,
                        Err(error) => {
                            tracing::warn!(%error, "refused frame from the edge");
                            self.session.borrow_mut().handle_frame_error(&error);
                            break;
                        }
                    }
                    if self.session.borrow().is_closed() {
                        break;
                    }
                },
            }
            self.pump();
            self.rearm();
            self.publish_rtt();
        }
    }

    /// The link's single writer, in [`Outbound`]'s order: heartbeats first,
    /// arrival order while the writer keeps up, the streams in turn for
    /// what a full batch leaves, so a stream's first frame does not wait
    /// behind other streams' windows; batches small while the Edge reads
    /// slower than the Node writes.
    async fn write_loop(
        self: Rc<Self>,
        mut write_half: LinkWriter,
        mut rx: UnboundedReceiver<(u64, Outgoing)>,
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
            // Small frames copied together, tunnel bodies as their own
            // slices, all in one `writev` (zero copy for bodies).
            let close = outbound.fill(waited, || urgent.try_recv().ok(), || rx.try_recv().ok());
            if let Some(mut batch) = outbound.take() {
                let written = write_half.write_overtaking(&mut batch, &mut urgent).await;
                outbound.recycle(batch);
                match written {
                    Ok(whole) => outbound.paced(whole),
                    Err(_) => {
                        self.session
                            .borrow_mut()
                            .handle_closed(CloseReason::IoError);
                        self.pump();
                        self.rearm();
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

    /// Moves this link's wheel entry to the session's next deadline.
    fn rearm(self: &Rc<Self>) {
        let deadline = self.session.borrow().poll_timeout();
        let key = self.timers.arm(self.timer.take(), deadline, || {
            Rc::clone(self) as Rc<dyn OnTimer>
        });
        self.timer.set(key);
    }

    /// Publishes the last heartbeat round trip, for `TRANSPORT_STATUS`.
    fn publish_rtt(&self) {
        let rtt_ms = self.session.borrow().last_rtt_ms();
        if let (Some(rtt_ms), Some(shared)) = (rtt_ms, self.shared.borrow().as_ref()) {
            shared.set_heartbeat_rtt_us(rtt_ms.saturating_mul(1000));
        }
    }

    /// Every core drops the registered generation (cancel its runs, send
    /// nothing more).
    fn shutdown_cores(&self) {
        if let Some(shared) = self.shared.borrow().as_ref() {
            let generation = shared.generation();
            self.cores.broadcast(|| CoreMsg::Shutdown { generation });
        }
    }

    /// Hands a work frame to the core the router picks.
    fn route(&self, envelope: proto::Envelope) {
        // A drain refuses new work that crossed its notice, typed, at once.
        if crate::drain::node_drain().is_draining()
            && let Some(refusal) = envelope.msg.as_ref().and_then(crate::drain::refusal)
        {
            self.outbox.send_msg(envelope.stream_id, refusal);
            return;
        }
        // F29: revocations apply here, on the link core, in frame order:
        // a request after a revocation is checked against it.
        if let Some(Msg::LeaseRevocations(update)) = &envelope.msg {
            if let Some(leases) = &self.leases {
                leases.revoke(&update.revocations);
            }
            return;
        }
        if let Some(Msg::NodeConfigUpdate(update)) = envelope.msg {
            if let Some(config) = update.config {
                self.refresh(config);
            }
            return;
        }
        let Some(generation) = self.shared.borrow().as_ref().map(|s| s.generation()) else {
            return tracing::warn!(
                stream_id = envelope.stream_id,
                "work frame before registration dropped"
            );
        };
        let route = self
            .router
            .borrow_mut()
            .route(&envelope, || self.timers.coarse_now());
        match route {
            Route::Core(core) => {
                let stream_id = envelope.stream_id;
                if !self.cores.send(
                    core,
                    CoreMsg::Work {
                        generation,
                        envelope,
                    },
                ) {
                    tracing::error!(core, stream_id, "a node core has stopped; work dropped");
                }
            }
            Route::CancelNotFound => {
                let mut response = CancelResponse::default();
                response.set_kind(CancelKind::CancelRun);
                response.set_status(CancelStatus::NotFound);
                self.outbox
                    .send_msg(envelope.stream_id, Msg::CancelResponse(response));
            }
            Route::Drop => {}
        }
    }

    fn pump(&self) {
        loop {
            let Some(output) = self.session.borrow_mut().poll_output() else {
                break;
            };
            match output {
                NodeOutput::Send(envelope)
                    if envelope
                        .msg
                        .as_ref()
                        .is_some_and(framing::link::jumps_the_queue) =>
                {
                    if let Some(frame) = self.outbox.encode(&envelope) {
                        let _ = self.urgent.send(frame);
                    }
                }
                NodeOutput::Send(envelope) => {
                    self.outbox.send(&envelope);
                }
                NodeOutput::Registered {
                    node_id,
                    generation,
                    config,
                } => {
                    tracing::info!(
                        event = "node_registered",
                        node_id = %node_id,
                        generation,
                        providers = config.providers.len(),
                        "node_registered"
                    );
                    let identity = LinkIdentity {
                        node_id: node_id.clone(),
                        generation,
                        connected_since_unix_ms: self.connected_since_unix_ms,
                    };
                    // Every core serves this generation with its own
                    // adapters; they share admission and the health
                    // sequence through `shared`.
                    if let Some(leases) = &self.leases {
                        leases.revoke(&config.lease_revocations);
                    }
                    let shared = GenShared::new(identity, &config);
                    let payload = Arc::new(config.clone());
                    self.cores.broadcast(|| {
                        CoreMsg::Configure(Box::new(Configure {
                            shared: Arc::clone(&shared),
                            payload: Arc::clone(&payload),
                            frames: self.frames.clone(),
                            max_frame_len: self.max_frame_len,
                            done: self.done.clone(),
                        }))
                    });
                    *self.shared.borrow_mut() = Some(shared);
                    let mut end = self.end.borrow_mut();
                    end.registered = Some((node_id, generation));
                    end.config = Some(config);
                }
                NodeOutput::Ready => {
                    if let Some(shared) = self.shared.borrow().as_ref() {
                        shared.set_ready();
                    }
                    let mut end = self.end.borrow_mut();
                    end.was_ready = true;
                    let (node_id, generation) = end.registered.clone().unwrap_or_default();
                    tracing::info!(event = "node_ready", node_id = %node_id, generation, "node_ready");
                }
                NodeOutput::Rejected {
                    reason,
                    message,
                    permanent,
                } => {
                    self.end.borrow_mut().rejected = Some(Rejected {
                        reason,
                        message,
                        permanent,
                    });
                }
                NodeOutput::Deliver(envelope) => self.route(envelope),
                NodeOutput::Close(reason) => {
                    self.end.borrow_mut().reason = reason;
                    self.shutdown_cores();
                    self.outbox.close();
                }
            }
        }
    }
}

impl OnTimer for Link {
    fn on_timer(self: Rc<Self>, now: u64) {
        self.timer.set(None);
        self.session.borrow_mut().handle_timeout(now);
        self.pump();
        self.rearm();
    }
}
