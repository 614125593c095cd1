//! The driver of one link connection: dial, run the session over the socket,
//! report how it ended.
//!
//! Two tasks on the Node's link core: the reader (decode → session) and the
//! writer (session outputs → socket, coalescing what is queued). The
//! handshake deadline and the heartbeat are one entry on the core's timer
//! wheel ([`CoreTimers`]), re-armed at the session's `poll_timeout()` after
//! every input. The session is a `RefCell` borrowed only between awaits.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use framing::frame::FrameDecoder;
use framing::link::{CloseReason, Outgoing, coalesce};
use framing::timer::{ClockSource, TimerKey};
use monoio::io::{
    AsyncWriteRent, AsyncWriteRentExt, CancelableAsyncReadRent, Canceller, Splitable,
};
use monoio::net::TcpStream;
use proto::v1::{NodeConfigPayload, RegisterRejectReason};

use super::session::{NodeOutput, NodeSession, NodeSessionConfig};
use super::timers::{CoreTimers, OnTimer};
use crate::provider_http::ProviderClient;
use crate::runs::{LinkIdentity, Outbox, RunManager, RunnerConfig};

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
    runner: RunnerConfig,
    client: ProviderClient,
    runs: RefCell<Option<Rc<RunManager>>>,
    connected_since_unix_ms: u64,
    canceller: RefCell<Canceller>,
    closing: Cell<bool>,
    end: RefCell<ConnectionEnd>,
}

/// Dials the Edge and runs one connection to its end, its timers on
/// `timers` (whose ticker the caller runs). Call inside a monoio runtime. A
/// failed dial is reported as an `io_error` end.
pub async fn run_connection(config: &LinkClientConfig, timers: &Rc<CoreTimers>) -> ConnectionEnd {
    let mut end = ConnectionEnd {
        reason: CloseReason::IoError,
        registered: None,
        was_ready: false,
        rejected: None,
        config: None,
    };
    let stream = match monoio::time::timeout(
        Duration::from_millis(config.session.handshake_timeout_ms.max(1)),
        TcpStream::connect(config.edge),
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
    let _ = stream.set_nodelay(true);
    let now = timers.now();
    let (tx, rx) = local_sync::mpsc::unbounded::channel();
    let max_frame_len = config.session.max_frame_len as usize;
    let link = Rc::new(Link {
        session: RefCell::new(NodeSession::new(config.session.clone(), now)),
        outbox: Outbox::new(tx, max_frame_len),
        timers: Rc::clone(timers),
        timer: Cell::new(None),
        client: ProviderClient::new(config.runner.provider.clone()),
        runner: config.runner.clone(),
        runs: RefCell::new(None),
        connected_since_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        canceller: RefCell::new(Canceller::new()),
        closing: Cell::new(false),
        end: RefCell::new(end),
    });
    link.pump();
    link.rearm();
    let (read_half, write_half) = stream.into_split();
    let writer = monoio::spawn(Rc::clone(&link).write_loop(write_half, rx));
    Rc::clone(&link).read_loop(read_half, max_frame_len).await;
    writer.await;
    // Drop the timer entry (it holds an Rc of this link).
    let key = link.timer.take();
    link.timers
        .arm(key, None, || Rc::clone(&link) as Rc<dyn OnTimer>);
    // Runs of this connection cannot reach the Edge any more: stop them.
    if let Some(runs) = link.runs.borrow_mut().take() {
        runs.shutdown();
    }
    link.end.borrow().clone()
}

impl Link {
    async fn read_loop(
        self: Rc<Self>,
        mut read_half: monoio::io::OwnedReadHalf<TcpStream>,
        max_frame_len: usize,
    ) {
        let mut decoder = FrameDecoder::new(max_frame_len);
        let mut buf = BytesMut::with_capacity(READ_RESERVE);
        // Stop reading as soon as the session has closed (the writer flushes
        // and shuts the socket down); a closed socket's read returns at once,
        // and looping on it would starve the core.
        while !self.closing.get() && !self.session.borrow().is_closed() {
            if buf.capacity() - buf.len() < READ_RESERVE / 4 {
                buf.reserve(READ_RESERVE);
            }
            let handle = self.canceller.borrow().handle();
            // Read into the spare capacity: monoio reads into a `BytesMut`
            // at its start, which would overwrite a partial frame.
            let (len, capacity) = (buf.len(), buf.capacity());
            let (result, returned) = read_half
                .cancelable_read(monoio::buf::IoBufMut::slice_mut(buf, len..capacity), handle)
                .await;
            buf = returned.into_inner();
            let now = self.timers.now();
            match result {
                Ok(0) => self
                    .session
                    .borrow_mut()
                    .handle_closed(CloseReason::PeerClosed),
                Err(_) if self.closing.get() => {}
                Err(_) => self
                    .session
                    .borrow_mut()
                    .handle_closed(CloseReason::IoError),
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

    async fn write_loop(
        self: Rc<Self>,
        mut write_half: monoio::io::OwnedWriteHalf<TcpStream>,
        mut rx: local_sync::mpsc::unbounded::Rx<Outgoing>,
    ) {
        let mut batch = BytesMut::new();
        while let Some(cmd) = rx.recv().await {
            // Whatever else is already queued goes out in the same write.
            let close = coalesce(&mut batch, cmd, || rx.try_recv().ok());
            if !batch.is_empty() {
                let (result, returned) = write_half.write_all(batch).await;
                batch = returned;
                batch.clear();
                if result.is_err() {
                    self.session
                        .borrow_mut()
                        .handle_closed(CloseReason::IoError);
                    self.pump();
                    self.rearm();
                    break;
                }
            }
            if close {
                break;
            }
        }
        let _ = write_half.shutdown().await;
        self.closing.set(true);
        let canceller = self.canceller.replace(Canceller::new());
        drop(canceller.cancel());
    }

    /// Moves this link's wheel entry to the session's next deadline.
    fn rearm(self: &Rc<Self>) {
        let deadline = self.session.borrow().poll_timeout();
        let key = self.timers.arm(self.timer.take(), deadline, || {
            Rc::clone(self) as Rc<dyn OnTimer>
        });
        self.timer.set(key);
    }

    /// Hands the last heartbeat round trip to the run manager, for
    /// `TRANSPORT_STATUS`.
    fn publish_rtt(&self) {
        let rtt_ms = self.session.borrow().last_rtt_ms();
        if let (Some(rtt_ms), Some(runs)) = (rtt_ms, self.runs.borrow().as_ref()) {
            runs.set_heartbeat_rtt_us(rtt_ms.saturating_mul(1000));
        }
    }

    fn pump(&self) {
        loop {
            let Some(output) = self.session.borrow_mut().poll_output() else {
                break;
            };
            match output {
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
                    *self.runs.borrow_mut() = Some(RunManager::new(
                        &config,
                        identity,
                        &self.client,
                        self.runner.store.clone(),
                        self.outbox.clone(),
                    ));
                    let mut end = self.end.borrow_mut();
                    end.registered = Some((node_id, generation));
                    end.config = Some(config);
                }
                NodeOutput::Ready => {
                    if let Some(runs) = self.runs.borrow().as_ref() {
                        runs.set_ready();
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
                NodeOutput::Deliver(envelope) => {
                    let runs = self.runs.borrow().clone();
                    match runs {
                        Some(runs) => runs.handle(envelope),
                        None => tracing::warn!(
                            stream_id = envelope.stream_id,
                            "work frame before registration dropped"
                        ),
                    }
                }
                NodeOutput::Close(reason) => {
                    self.end.borrow_mut().reason = reason;
                    if let Some(runs) = self.runs.borrow().as_ref() {
                        runs.shutdown();
                    }
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
