//! The simulated nodes: each one connects, registers, declares itself ready,
//! then only answers the Edge's heartbeat pings.
//!
//! ```text
//!  connect ─▶ RegisterRequest ─▶ RegisterResponse ─▶ NodeReadyRequest ─▶ NodeReadyResponse
//!                                                      (handshake permit released here)
//!  idle:  read ─▶ HeartbeatPing{seq} ─▶ HeartbeatPong{seq} ─▶ read …
//! ```
//!
//! Nodes run as monoio tasks on [`ClientConfig::threads`] runtime threads
//! (node `i` on thread `i % threads`), two tasks per node (reader and
//! writer). At most [`ClientConfig::concurrency`] handshakes are in flight,
//! so the Edge's accept backlog never overflows into SYN retransmits.
//! Nothing here panics on a refused or broken connection: every failure is
//! counted under a short reason in [`Fleet::errors`].

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use framing::frame::{FrameDecoder, FrameEncoder};
use framing::io_driver::IoDriver;
use framing::link::reject_reason_name;
use local_sync::mpsc::unbounded;
use local_sync::semaphore::{OwnedSemaphorePermit, Semaphore};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt, OwnedWriteHalf, Splitable};
use monoio::net::TcpStream;
use proto::Envelope;
use proto::v1::{
    HeartbeatPong, NodeReadyRequest, RegisterRejectReason, RegisterRequest, envelope::Msg,
};

use super::edge_config::node_name;

/// Receive buffer of a simulated node: the Edge's control frames are tens to
/// hundreds of bytes, and the decoder reserves more for a longer one.
const READ_CHUNK: usize = 512;

/// How the simulated fleet runs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The Edge's node socket.
    pub edge: SocketAddr,
    /// Number of simulated nodes.
    pub nodes: usize,
    /// Index of the first node (`load-node-<first>`).
    pub first: usize,
    /// Runtime threads.
    pub threads: usize,
    /// Most handshakes (connect → NodeReadyResponse) in flight, over all threads.
    pub concurrency: usize,
    /// Deadline of one connect, and of one register + ready exchange.
    pub handshake_timeout: Duration,
    /// The clients' own I/O driver.
    pub driver: IoDriver,
    /// Largest frame the simulated nodes accept (announced at registration).
    pub max_frame_len: u32,
    /// When > 0, keep a writer handle per node so [`Fleet::warm`] can make
    /// every node send one tunnel body frame of this many bytes.
    pub warm_bytes: usize,
}

impl ClientConfig {
    /// `nodes` nodes against `edge`, one epoll thread, 256 handshakes in flight.
    pub fn new(edge: SocketAddr, nodes: usize) -> Self {
        Self {
            edge,
            nodes,
            first: 0,
            threads: 1,
            concurrency: 256,
            handshake_timeout: Duration::from_secs(30),
            driver: IoDriver::Epoll,
            max_frame_len: 1 << 20,
            warm_bytes: 0,
        }
    }
}

/// Counters of the whole fleet, updated by every thread.
#[derive(Debug, Default)]
pub struct Counters {
    /// TCP connections established.
    pub connected: AtomicU64,
    /// Registrations accepted.
    pub registered: AtomicU64,
    /// Nodes that completed NodeReady.
    pub ready: AtomicU64,
    /// Nodes that failed before ready (connect error, rejection, timeout, …).
    pub failed: AtomicU64,
    /// Registrations the Edge refused.
    pub rejected: AtomicU64,
    /// Ready nodes whose connection the Edge closed.
    pub closed_by_edge: AtomicU64,
    /// Ready nodes whose connection failed (read or write error).
    pub io_errors: AtomicU64,
    /// Heartbeat pings received.
    pub pings: AtomicU64,
    /// Heartbeat pongs queued in answer.
    pub pongs: AtomicU64,
    /// Frames other than pings received after ready.
    pub unexpected: AtomicU64,
    /// Warm frames written.
    pub warm_sent: AtomicU64,
}

/// A running simulated fleet.
#[derive(Debug)]
pub struct Fleet {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    config: ClientConfig,
    counters: Counters,
    errors: Mutex<BTreeMap<String, u64>>,
    /// Handshake latencies (connect start → NodeReadyResponse), µs.
    handshake_us: Mutex<Vec<u32>>,
    origin: Instant,
    /// µs since `origin` of the first and last accepted registration and of
    /// the last readiness.
    first_registered_us: AtomicU64,
    last_registered_us: AtomicU64,
    last_ready_us: AtomicU64,
    warm: AtomicBool,
    stop: AtomicBool,
}

impl Fleet {
    /// Starts the fleet's threads; nodes begin connecting at once.
    pub fn start(config: ClientConfig) -> std::io::Result<Self> {
        let threads = config.threads.max(1);
        let shared = Arc::new(Shared {
            config,
            counters: Counters::default(),
            errors: Mutex::new(BTreeMap::new()),
            handshake_us: Mutex::new(Vec::new()),
            origin: Instant::now(),
            first_registered_us: AtomicU64::new(u64::MAX),
            last_registered_us: AtomicU64::new(0),
            last_ready_us: AtomicU64::new(0),
            warm: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let mut handles = Vec::with_capacity(threads);
        for t in 0..threads {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("link-load-{t}"))
                .spawn(move || {
                    let driver = shared.config.driver;
                    let run = edge_proxy::runtime::block_on(
                        driver,
                        thread_main(t, threads, Arc::clone(&shared)),
                    );
                    if let Err(error) = run {
                        shared.error(format!("runtime: {error}"));
                    }
                })?;
            handles.push(handle);
        }
        Ok(Self {
            shared,
            threads: handles,
        })
    }

    /// The live counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Failures by reason (`connect: Connection refused (os error 111)`, …).
    pub fn errors(&self) -> BTreeMap<String, u64> {
        self.shared
            .errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Handshake latencies so far (connect start → ready), µs, unsorted.
    pub fn handshake_latencies_us(&self) -> Vec<u32> {
        self.shared
            .handshake_us
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// When the fleet started.
    pub fn origin(&self) -> Instant {
        self.shared.origin
    }

    /// When the first registration was accepted.
    pub fn first_registered(&self) -> Option<Instant> {
        self.instant(&self.shared.first_registered_us, u64::MAX)
    }

    /// When the last registration was accepted.
    pub fn last_registered(&self) -> Option<Instant> {
        self.instant(&self.shared.last_registered_us, 0)
    }

    /// When the last node became ready.
    pub fn last_ready(&self) -> Option<Instant> {
        self.instant(&self.shared.last_ready_us, 0)
    }

    fn instant(&self, us: &AtomicU64, unset: u64) -> Option<Instant> {
        let us = us.load(Ordering::Relaxed);
        (us != unset).then(|| self.shared.origin + Duration::from_micros(us))
    }

    /// Whether every node has either become ready or failed.
    pub fn settled(&self) -> bool {
        let c = &self.shared.counters;
        let done = c.ready.load(Ordering::Relaxed) + c.failed.load(Ordering::Relaxed);
        done >= self.shared.config.nodes as u64
    }

    /// Makes every ready node send one tunnel body frame of
    /// [`ClientConfig::warm_bytes`] (no-op when that is 0). Watch
    /// [`Counters::warm_sent`] for completion.
    pub fn warm(&self) {
        self.shared.warm.store(true, Ordering::Relaxed);
    }

    /// Closes every connection and joins the threads.
    pub fn stop(self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for handle in self.threads {
            let _ = handle.join();
        }
    }
}

impl Shared {
    fn error(&self, reason: String) {
        *self
            .errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(reason)
            .or_default() += 1;
    }

    fn fail(&self, reason: String) {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        self.error(reason);
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX - 1)
    }
}

/// What one runtime thread shares between its node tasks.
struct ThreadCtx {
    shared: Arc<Shared>,
    /// One encoder for every node of the thread: frames are cut from its
    /// scratch blocks, so idle nodes hold no encode buffer.
    encoder: RefCell<FrameEncoder>,
    /// Write queues of ready nodes, kept only for the warm phase.
    writers: RefCell<Vec<unbounded::Tx<Outgoing>>>,
}

/// What a node's writer task writes.
enum Outgoing {
    /// A control frame (a pong).
    Frame(Bytes),
    /// A tunnel body frame: head, then body.
    Warm(Bytes, Bytes),
}

async fn thread_main(thread: usize, threads: usize, shared: Arc<Shared>) {
    let config = &shared.config;
    let per_thread = config.concurrency.div_ceil(threads).max(1);
    let ctx = Rc::new(ThreadCtx {
        encoder: RefCell::new(FrameEncoder::new(framing::frame::DEFAULT_MAX_FRAME_LEN)),
        writers: RefCell::new(Vec::new()),
        shared: Arc::clone(&shared),
    });
    let permits = Rc::new(Semaphore::new(per_thread));
    let indices: Vec<usize> = (config.first..config.first + config.nodes)
        .skip(thread)
        .step_by(threads)
        .collect();
    monoio::spawn(spawn_nodes(Rc::clone(&ctx), permits, indices));
    let mut warmed = false;
    while !shared.stop.load(Ordering::Relaxed) {
        monoio::time::sleep(Duration::from_millis(50)).await;
        if !warmed && shared.warm.load(Ordering::Relaxed) {
            warmed = true;
            send_warm_frames(&ctx);
        }
    }
}

async fn spawn_nodes(ctx: Rc<ThreadCtx>, permits: Rc<Semaphore>, indices: Vec<usize>) {
    for index in indices {
        if ctx.shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(permit) = Rc::clone(&permits).acquire_owned().await else {
            return;
        };
        monoio::spawn(run_node(Rc::clone(&ctx), index, permit));
    }
}

fn send_warm_frames(ctx: &ThreadCtx) {
    let size = ctx.shared.config.warm_bytes;
    if size == 0 {
        return;
    }
    let body = Bytes::from(vec![b'w'; size]);
    let writers = ctx.writers.borrow();
    for tx in writers.iter() {
        match ctx.encoder.borrow_mut().encode_tunnel_body(1, body.clone()) {
            Ok(frame) => {
                let _ = tx.send(Outgoing::Warm(frame.head, frame.body));
            }
            Err(error) => ctx.shared.error(format!("warm frame: {error}")),
        }
    }
}

/// How a handshake ended.
enum Handshake {
    Ready,
    Rejected(String),
    Failed(String),
}

async fn run_node(ctx: Rc<ThreadCtx>, index: usize, permit: OwnedSemaphorePermit) {
    // The handshake's futures are several times larger than the idle loop's:
    // boxed, they are freed once the node is ready instead of sizing the
    // task for its whole life.
    let Some((stream, mut decoder, mut buf)) = Box::pin(connect(&ctx, index)).await else {
        return;
    };
    drop(permit);
    let shared = &ctx.shared;
    let config = &shared.config;
    let (mut read_half, write_half) = stream.into_split();
    let (tx, rx) = unbounded::channel();
    if config.warm_bytes > 0 {
        ctx.writers.borrow_mut().push(tx.clone());
    }
    monoio::spawn(write_loop(Rc::clone(&ctx), write_half, rx));
    loop {
        match read_envelope(&mut read_half, &mut decoder, &mut buf).await {
            Ok(Some(Envelope {
                msg: Some(Msg::HeartbeatPing(ping)),
                ..
            })) => {
                shared.counters.pings.fetch_add(1, Ordering::Relaxed);
                let pong = Msg::HeartbeatPong(HeartbeatPong { seq: ping.seq });
                match encode(&ctx, pong) {
                    Ok(frame) => {
                        if tx.send(Outgoing::Frame(frame)).is_err() {
                            // The writer failed and counted why.
                            return;
                        }
                        shared.counters.pongs.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => shared.error(error),
                }
            }
            Ok(Some(_)) => {
                shared.counters.unexpected.fetch_add(1, Ordering::Relaxed);
            }
            Ok(None) => {
                shared
                    .counters
                    .closed_by_edge
                    .fetch_add(1, Ordering::Relaxed);
                return shared.error("idle: closed by the edge".to_owned());
            }
            Err(error) => {
                shared.counters.io_errors.fetch_add(1, Ordering::Relaxed);
                return shared.error(format!("idle: {error}"));
            }
        }
    }
}

/// Connects, registers and declares node `index` ready; counts a failure
/// and returns `None` otherwise.
async fn connect(ctx: &ThreadCtx, index: usize) -> Option<(TcpStream, FrameDecoder, BytesMut)> {
    let shared = &ctx.shared;
    let config = &shared.config;
    let started = Instant::now();
    let stream = match monoio::time::timeout(
        config.handshake_timeout,
        TcpStream::connect_addr(config.edge),
    )
    .await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            shared.fail(format!("connect: {error}"));
            return None;
        }
        Err(_) => {
            shared.fail("connect: timed out".to_owned());
            return None;
        }
    };
    let _ = stream.set_nodelay(true);
    shared.counters.connected.fetch_add(1, Ordering::Relaxed);

    let mut stream = stream;
    let mut decoder = FrameDecoder::new(config.max_frame_len as usize);
    let mut buf = BytesMut::new();
    let outcome = monoio::time::timeout(
        config.handshake_timeout,
        handshake(ctx, index, &mut stream, &mut decoder, &mut buf),
    )
    .await
    .unwrap_or_else(|_| Handshake::Failed("handshake: timed out".to_owned()));
    match outcome {
        Handshake::Ready => {}
        Handshake::Rejected(reason) => {
            shared.counters.rejected.fetch_add(1, Ordering::Relaxed);
            shared.fail(format!("rejected: {reason}"));
            return None;
        }
        Handshake::Failed(reason) => {
            shared.fail(reason);
            return None;
        }
    }
    let latency = u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX);
    shared
        .handshake_us
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(latency);
    shared
        .last_ready_us
        .fetch_max(shared.now_us(), Ordering::Relaxed);
    shared.counters.ready.fetch_add(1, Ordering::Relaxed);
    Some((stream, decoder, buf))
}

async fn handshake(
    ctx: &ThreadCtx,
    index: usize,
    stream: &mut TcpStream,
    decoder: &mut FrameDecoder,
    buf: &mut BytesMut,
) -> Handshake {
    let shared = &ctx.shared;
    let register = Msg::RegisterRequest(Box::new(RegisterRequest {
        token: node_name(index),
        node_version: concat!("iop-link-load/", env!("CARGO_PKG_VERSION")).to_owned(),
        instance_id: format!("link-load-{index}"),
        max_frame_len: shared.config.max_frame_len,
        ..RegisterRequest::default()
    }));
    if let Err(error) = send(ctx, stream, register).await {
        return Handshake::Failed(format!("register: {error}"));
    }
    let revision = match expect_reply(ctx, stream, decoder, buf).await {
        Ok(Msg::RegisterResponse(response)) if response.accepted => {
            let now = shared.now_us();
            shared.first_registered_us.fetch_min(now, Ordering::Relaxed);
            shared.last_registered_us.fetch_max(now, Ordering::Relaxed);
            shared.counters.registered.fetch_add(1, Ordering::Relaxed);
            response.config.map_or(0, |c| c.revision)
        }
        Ok(Msg::RegisterResponse(response)) => {
            let reason = RegisterRejectReason::try_from(response.reject_reason)
                .unwrap_or(RegisterRejectReason::Unspecified);
            return Handshake::Rejected(reject_reason_name(reason).to_owned());
        }
        Ok(other) => {
            return Handshake::Failed(format!("register: unexpected {}", msg_name(&other)));
        }
        Err(error) => return Handshake::Failed(format!("register: {error}")),
    };
    let ready = Msg::NodeReadyRequest(NodeReadyRequest {
        config_revision: revision,
    });
    if let Err(error) = send(ctx, stream, ready).await {
        return Handshake::Failed(format!("ready: {error}"));
    }
    match expect_reply(ctx, stream, decoder, buf).await {
        Ok(Msg::NodeReadyResponse(response)) if response.accepted => Handshake::Ready,
        Ok(Msg::NodeReadyResponse(_)) => Handshake::Rejected("ready refused".to_owned()),
        Ok(other) => Handshake::Failed(format!("ready: unexpected {}", msg_name(&other))),
        Err(error) => Handshake::Failed(format!("ready: {error}")),
    }
}

/// The next message that is not a heartbeat ping (pings are answered).
async fn expect_reply(
    ctx: &ThreadCtx,
    stream: &mut TcpStream,
    decoder: &mut FrameDecoder,
    buf: &mut BytesMut,
) -> Result<Msg, String> {
    loop {
        match read_envelope(stream, decoder, buf).await? {
            None => return Err("closed by the edge".to_owned()),
            Some(Envelope {
                msg: Some(Msg::HeartbeatPing(ping)),
                ..
            }) => {
                let pong = Msg::HeartbeatPong(HeartbeatPong { seq: ping.seq });
                send(ctx, stream, pong).await?;
            }
            Some(Envelope { msg: Some(msg), .. }) => return Ok(msg),
            Some(Envelope { msg: None, .. }) => return Err("empty envelope".to_owned()),
        }
    }
}

fn encode(ctx: &ThreadCtx, msg: Msg) -> Result<Bytes, String> {
    ctx.encoder
        .borrow_mut()
        .encode(&Envelope {
            stream_id: 0,
            msg: Some(msg),
        })
        .map_err(|e| format!("encode: {e}"))
}

async fn send(ctx: &ThreadCtx, stream: &mut TcpStream, msg: Msg) -> Result<(), String> {
    let frame = encode(ctx, msg)?;
    let (result, _) = stream.write_all(frame).await;
    result.map(|_| ()).map_err(|e| format!("write: {e}"))
}

/// Reads until one whole envelope is decoded; `Ok(None)` on a clean close.
async fn read_envelope<R: AsyncReadRent>(
    reader: &mut R,
    decoder: &mut FrameDecoder,
    buf: &mut BytesMut,
) -> Result<Option<Envelope>, String> {
    loop {
        if let Some(envelope) = decoder.decode(buf).map_err(|e| format!("frame: {e}"))? {
            return Ok(Some(envelope));
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        // Into the spare capacity: monoio reads into a `BytesMut` at its
        // start, which would overwrite a partial frame.
        let owned = std::mem::take(buf);
        let (len, capacity) = (owned.len(), owned.capacity());
        let (result, returned) = reader
            .read(monoio::buf::IoBufMut::slice_mut(owned, len..capacity))
            .await;
        *buf = returned.into_inner();
        match result {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(error) => return Err(format!("read: {error}")),
        }
    }
}

async fn write_loop(
    ctx: Rc<ThreadCtx>,
    mut write_half: OwnedWriteHalf<TcpStream>,
    mut rx: unbounded::Rx<Outgoing>,
) {
    while let Some(out) = rx.recv().await {
        let (result, warm) = match out {
            Outgoing::Frame(frame) => (write_half.write_all(frame).await.0, false),
            Outgoing::Warm(head, body) => match write_half.write_all(head).await.0 {
                Ok(_) => (write_half.write_all(body).await.0, true),
                Err(error) => (Err(error), true),
            },
        };
        if let Err(error) = result {
            ctx.shared
                .counters
                .io_errors
                .fetch_add(1, Ordering::Relaxed);
            ctx.shared.error(format!("write: {error}"));
            return;
        }
        if warm {
            ctx.shared
                .counters
                .warm_sent
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn msg_name(msg: &Msg) -> &'static str {
    match msg {
        Msg::RegisterRequest(_) => "register_request",
        Msg::RegisterResponse(_) => "register_response",
        Msg::NodeReadyRequest(_) => "node_ready_request",
        Msg::NodeReadyResponse(_) => "node_ready_response",
        Msg::HeartbeatPing(_) => "heartbeat_ping",
        Msg::HeartbeatPong(_) => "heartbeat_pong",
        _ => "work frame",
    }
}
