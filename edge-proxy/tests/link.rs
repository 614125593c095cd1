//! The Edge's node socket over real loopback sockets, under both I/O drivers.
//!
//! The node side is a deliberately dumb fake built from `framing` on blocking
//! std sockets, so each test controls every byte. Time on the Edge is a
//! shared manual clock: no test sleeps for a timer to fire; it moves the clock
//! and waits (bounded) for the effect.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use edge_proxy::config::EdgeConfig;
use edge_proxy::events::LifecycleEvent;
use edge_proxy::runtime::IoDriver;
use edge_proxy::server::{EdgeServer, StartOptions};
use framing::frame::{FrameDecoder, FrameEncoder};
use framing::link::{CloseReason, HeartbeatConfig};
use framing::timer::{ClockSource, SharedManualClock};
use proto::Envelope;
use proto::v1::{
    HeartbeatPong, NodeReadyRequest, RegisterRejectReason, RegisterRequest, RegisterResponse,
    envelope::Msg,
};
use tokio::sync::broadcast;

const CONFIG: &str = r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
link:
  register_timeout_ms: 10000
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: prov-a
        kind: openai_compat
        base_url: http://127.0.0.1:8000
        targets: [m]
  - id: node-b
    token: tok-b
    providers:
      - id: prov-b
        kind: ollama
        base_url: http://127.0.0.1:8001
        targets: [m2]
model_groups:
  - name: m
    providers: [prov-a]
"#;

/// How long a test waits for an effect before failing. Generous: the
/// machine is shared and noisy; passing tests never wait this long.
const PATIENCE: Duration = Duration::from_secs(10);

fn drivers() -> Vec<IoDriver> {
    let mut all = vec![IoDriver::Epoll];
    if monoio::utils::detect_uring() {
        all.push(IoDriver::Uring);
    }
    all
}

struct Edge {
    server: EdgeServer,
    clock: SharedManualClock,
    events: broadcast::Receiver<LifecycleEvent>,
}

fn start(driver: IoDriver) -> Edge {
    let clock = SharedManualClock::new(0);
    let mut options = StartOptions::new(driver);
    options.clock = ClockSource::Manual(clock.clone());
    options.tick_ms = 5;
    start_with(options, clock)
}

fn start_with(mut options: StartOptions, clock: SharedManualClock) -> Edge {
    let config = EdgeConfig::from_yaml_str(CONFIG, "test.yaml").expect("test config is valid");
    options.workers = 2;
    let server = EdgeServer::start(config, options).expect("edge starts");
    let events = server.bus.subscribe();
    Edge {
        server,
        clock,
        events,
    }
}

impl Edge {
    /// The next lifecycle event, waiting up to PATIENCE.
    fn next_event(&mut self) -> LifecycleEvent {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.events.try_recv() {
                Ok(event) => return event,
                Err(broadcast::error::TryRecvError::Empty) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => panic!("no lifecycle event: {e:?}"),
            }
        }
    }

    fn wait_until(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// A fake node: blocking socket plus the frame codec.
struct FakeNode {
    stream: TcpStream,
    decoder: FrameDecoder,
    encoder: FrameEncoder,
    buf: BytesMut,
}

impl FakeNode {
    fn connect(edge: &Edge) -> Self {
        let stream = TcpStream::connect(edge.server.node_addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        Self {
            stream,
            decoder: FrameDecoder::default(),
            encoder: FrameEncoder::default(),
            buf: BytesMut::new(),
        }
    }

    /// A node registered and ready, its two lifecycle events consumed.
    fn linked(edge: &mut Edge, token: &str) -> Self {
        let mut node = Self::connect(edge);
        assert!(node.register(token).accepted);
        node.ready();
        edge.next_event();
        edge.next_event();
        node
    }

    fn send(&mut self, stream_id: u64, msg: Msg) {
        let frame = self
            .encoder
            .encode(&Envelope {
                stream_id,
                msg: Some(msg),
            })
            .unwrap();
        self.stream.write_all(&frame).unwrap();
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next envelope, or None when the Edge closed the connection.
    fn recv(&mut self) -> Option<Envelope> {
        loop {
            if let Some(env) = self
                .decoder
                .decode(&mut self.buf)
                .expect("edge sends valid frames")
            {
                return Some(env);
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.put_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("read from edge: {e}"),
            }
        }
    }

    /// Reads until the Edge closes the connection; returns what came first.
    fn recv_until_closed(&mut self) -> Vec<Envelope> {
        std::iter::from_fn(|| self.recv()).collect()
    }

    fn send_register(&mut self, token: &str) {
        self.send(
            0,
            Msg::RegisterRequest(Box::new(RegisterRequest {
                token: token.into(),
                max_frame_len: 1 << 20,
                ..Default::default()
            })),
        );
    }

    fn send_ready(&mut self) {
        self.send(
            0,
            Msg::NodeReadyRequest(NodeReadyRequest { config_revision: 1 }),
        );
    }

    fn register(&mut self, token: &str) -> RegisterResponse {
        self.send_register(token);
        match self.recv().and_then(|e| e.msg) {
            Some(Msg::RegisterResponse(r)) => *r,
            other => panic!("expected RegisterResponse, got {other:?}"),
        }
    }

    fn ready(&mut self) {
        self.send_ready();
        match self.recv().and_then(|e| e.msg) {
            Some(Msg::NodeReadyResponse(r)) => assert!(r.accepted),
            other => panic!("expected NodeReadyResponse, got {other:?}"),
        }
    }
}

#[test]
fn happy_handshake_and_ready_gating() {
    for driver in drivers() {
        let mut edge = start(driver);
        let mut node = FakeNode::connect(&edge);
        let response = node.register("tok-a");
        assert!(response.accepted, "{driver:?}");
        assert_eq!(
            (response.node_id.as_str(), response.generation),
            ("node-a", 1)
        );
        let config = response.config.expect("config payload");
        assert_eq!(config.providers.len(), 1);
        assert_eq!(config.providers[0].provider_id, "prov-a");
        assert!(config.providers[0].supports_tunnel);
        assert_eq!(
            edge.next_event(),
            LifecycleEvent::Registered {
                node_id: "node-a".into(),
                generation: 1
            }
        );
        assert_eq!(
            edge.server.registry.dispatchable("node-a"),
            None,
            "no dispatch before NodeReady"
        );
        node.ready();
        assert_eq!(
            edge.next_event(),
            LifecycleEvent::Ready {
                node_id: "node-a".into(),
                generation: 1
            }
        );
        assert!(edge.server.registry.dispatchable("node-a").is_some());
        assert_eq!(edge.server.registry.status()[0].state, "ready");
    }
}

#[test]
fn unknown_token_is_rejected_and_leaves_nothing_behind() {
    for driver in drivers() {
        let mut edge = start(driver);
        let mut node = FakeNode::connect(&edge);
        let response = node.register("tok-nope");
        assert!(!response.accepted);
        assert_eq!(
            response.reject_reason,
            RegisterRejectReason::UnknownToken as i32
        );
        assert!(
            !response.message.contains("tok-nope"),
            "the token must not be echoed"
        );
        assert!(
            node.recv_until_closed().is_empty(),
            "the edge closes after rejecting"
        );
        assert_eq!(
            edge.next_event(),
            LifecycleEvent::Rejected {
                node_id: None,
                reason: RegisterRejectReason::UnknownToken
            }
        );
        assert_eq!(edge.server.registry.live_count(), 0, "{driver:?}");
    }
}

#[test]
fn duplicate_connection_is_rejected_and_the_first_stays() {
    for driver in drivers() {
        let edge = start(driver);
        let mut first = FakeNode::connect(&edge);
        assert!(first.register("tok-a").accepted);
        first.ready();
        let mut second = FakeNode::connect(&edge);
        let response = second.register("tok-a");
        assert_eq!(
            response.reject_reason,
            RegisterRejectReason::DuplicateConnection as i32
        );
        assert!(second.recv_until_closed().is_empty());
        // The first connection still works: it answers a ping with a pong.
        first.send(0, Msg::HeartbeatPing(proto::v1::HeartbeatPing { seq: 77 }));
        assert!(matches!(
            first.recv().and_then(|e| e.msg),
            Some(Msg::HeartbeatPong(HeartbeatPong { seq: 77 }))
        ));
        assert_eq!(
            edge.server.registry.dispatchable("node-a").map(|(g, _)| g),
            Some(1)
        );
    }
}

#[test]
fn config_that_does_not_fit_the_nodes_frame_limit_is_rejected() {
    for driver in drivers() {
        let edge = start(driver);
        let mut node = FakeNode::connect(&edge);
        node.send(
            0,
            Msg::RegisterRequest(Box::new(RegisterRequest {
                token: "tok-a".into(),
                max_frame_len: 16, // far too small for any config payload
                ..Default::default()
            })),
        );
        let Some(Msg::RegisterResponse(response)) = node.recv().and_then(|e| e.msg) else {
            panic!("no response")
        };
        assert_eq!(
            response.reject_reason,
            RegisterRejectReason::ConfigBuildFailed as i32
        );
        assert!(node.recv_until_closed().is_empty());
        assert_eq!(edge.server.registry.live_count(), 0);
    }
}

/// What a node-a link of generation 1 closed by its heartbeat wait reports.
fn heartbeat_timeout_of_node_a() -> LifecycleEvent {
    LifecycleEvent::Disconnected {
        node_id: "node-a".into(),
        generation: 1,
        reason: CloseReason::HeartbeatTimeout,
    }
}

#[test]
fn heartbeat_timeout_on_the_manual_clock_closes_with_heartbeat_timeout() {
    for driver in drivers() {
        let mut edge = start(driver);
        let mut node = FakeNode::linked(&mut edge, "tok-a");

        edge.clock.advance(30_000);
        let ping = node.recv().expect("a ping after 30 s");
        assert!(matches!(ping.msg, Some(Msg::HeartbeatPing(_))), "{ping:?}");
        // The fake node never answers. 44.999 s later the link still stands…
        edge.clock.advance(44_999);
        std::thread::sleep(Duration::from_millis(30)); // let a tick pass; nothing may happen
        assert!(edge.server.registry.dispatchable("node-a").is_some());
        // …and at 45 s it is closed.
        edge.clock.advance(1);
        assert_eq!(edge.next_event(), heartbeat_timeout_of_node_a());
        assert!(node.recv_until_closed().is_empty());
        assert_eq!(edge.server.registry.live_count(), 0, "{driver:?}");
    }
}

/// A node that stays silent and keeps its end open leaves the Edge's reader
/// parked on the socket after the link closed: the writer's close signal
/// must end that read, so that the Edge lets go of the socket entirely.
#[test]
fn a_closed_link_lets_go_of_a_silent_nodes_socket() {
    for driver in drivers() {
        let mut edge = start(driver);
        let mut node = FakeNode::linked(&mut edge, "tok-a");
        let (edge_port, node_port) = (
            edge.server.node_addr.port(),
            node.stream.local_addr().unwrap().port(),
        );
        assert!(socket_held(edge_port, node_port), "{driver:?}: linked");
        edge.clock.advance(30_000);
        assert!(node.recv().is_some(), "a ping after 30 s");
        edge.clock.advance(45_000);
        assert_eq!(edge.next_event(), heartbeat_timeout_of_node_a());
        // The writer's shutdown: the node reads the end of the stream, and
        // writes nothing (a write would wake the reader by itself).
        assert!(node.recv_until_closed().is_empty());
        let deadline = Instant::now() + PATIENCE;
        while socket_held(edge_port, node_port) {
            assert!(
                Instant::now() < deadline,
                "{driver:?}: the Edge still holds the socket"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether a process holds the loopback TCP socket from `local` to `remote`
/// (ports): a socket in `/proc/net/tcp` with an inode. One its process has
/// closed lingers there without one (or is gone).
fn socket_held(local: u16, remote: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port = |address: &str| {
        let hex = address.rsplit(':').next().unwrap_or_default();
        u16::from_str_radix(hex, 16).ok()
    };
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() > 9
            && port(fields[1]) == Some(local)
            && port(fields[2]) == Some(remote)
            && fields[9] != "0"
    })
}

/// On the production clock a core's ticker sleeps until its wheel's next
/// expiry (`framing::timer::TickerPace`): the heartbeat armed at registration
/// must still wake it, to ping and then to close. Real time, short timings;
/// only that it happens is asserted, not when.
#[test]
fn a_silent_node_is_pinged_and_closed_on_the_production_clock() {
    for driver in drivers() {
        let mut options = StartOptions::new(driver);
        options.heartbeat = HeartbeatConfig {
            interval_ms: 100,
            wait_ms: 200,
        };
        let mut edge = start_with(options, SharedManualClock::new(0));
        let mut node = FakeNode::connect(&edge);
        node.send_register("tok-a");
        node.send_ready();
        // Everything up to the close, in whatever order a slow box gives it.
        let seen = node.recv_until_closed();
        let pinged = seen
            .iter()
            .any(|e| matches!(e.msg, Some(Msg::HeartbeatPing(_))));
        assert!(pinged, "{driver:?}: {seen:?}");
        assert!(matches!(
            edge.next_event(),
            LifecycleEvent::Registered { .. }
        ));
        assert!(matches!(edge.next_event(), LifecycleEvent::Ready { .. }));
        assert_eq!(
            edge.next_event(),
            heartbeat_timeout_of_node_a(),
            "{driver:?}"
        );
    }
}

#[test]
fn clean_close_is_seen_at_once_and_reconnect_gets_the_next_generation() {
    for driver in drivers() {
        let mut edge = start(driver);
        let node = FakeNode::linked(&mut edge, "tok-a");
        drop(node); // clean close: FIN, no clock movement needed
        assert_eq!(
            edge.next_event(),
            LifecycleEvent::Disconnected {
                node_id: "node-a".into(),
                generation: 1,
                reason: CloseReason::PeerClosed
            }
        );

        eprintln!("reconnecting under {driver:?}");
        let mut again = FakeNode::connect(&edge);
        let response = again.register("tok-a");
        assert_eq!(response.generation, 2, "{driver:?}");
        again.ready();
        assert_eq!(
            edge.server.registry.dispatchable("node-a").map(|(g, _)| g),
            Some(2)
        );
        // Anything bound to generation 1 is fenced: releasing it is a no-op.
        edge.server.registry.release("node-a", 1);
        assert_eq!(
            edge.server.registry.dispatchable("node-a").map(|(g, _)| g),
            Some(2)
        );
    }
}

#[test]
fn hostile_input_is_closed_and_leaves_no_state() {
    for driver in drivers() {
        let edge = start(driver);

        // Garbage bytes: not a frame length that fits, or not an envelope.
        let mut node = FakeNode::connect(&edge);
        node.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            node.recv_until_closed().is_empty(),
            "garbage closes the connection"
        );

        // A frame over the maximum (announces 64 MiB + 1).
        let mut node = FakeNode::connect(&edge);
        node.send_raw(&((64 << 20) as u32 + 1).to_be_bytes());
        assert!(node.recv_until_closed().is_empty());

        // A valid frame of the wrong type before Register.
        let mut node = FakeNode::connect(&edge);
        node.send(5, Msg::RunEvent(Box::default()));
        assert!(node.recv_until_closed().is_empty());

        // A truncated frame, then the node goes away.
        let mut node = FakeNode::connect(&edge);
        node.send_raw(&[0, 0, 0, 50, 1, 2, 3]);
        drop(node);

        // A registered node that sends garbage is disconnected and fenced.
        let mut node = FakeNode::connect(&edge);
        assert!(node.register("tok-b").accepted);
        node.send_raw(&[0, 0, 0, 2, 0xff, 0xff]);
        assert!(node.recv_until_closed().is_empty());
        edge.wait_until("node-b fenced", || edge.server.registry.live_count() == 0);
    }
}

#[test]
fn connections_that_never_register_are_closed_at_the_deadline() {
    for driver in drivers() {
        let edge = start(driver);
        let mut flood: Vec<_> = (0..64).map(|_| FakeNode::connect(&edge)).collect();
        std::thread::sleep(Duration::from_millis(30)); // let the edge accept them
        edge.clock.advance(10_000);
        for node in &mut flood {
            assert!(node.recv_until_closed().is_empty(), "{driver:?}");
        }
        assert_eq!(edge.server.registry.live_count(), 0);
        // The edge still serves after the flood.
        let mut node = FakeNode::connect(&edge);
        assert!(node.register("tok-a").accepted);
    }
}
