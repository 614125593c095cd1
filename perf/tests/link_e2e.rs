//! The Edge–Node link end to end: the real Edge server and the real Node
//! link client (in-process, on a shared manual clock), and the real
//! `iop-edge` / `iop-node` binaries as processes for SIGKILL.

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use edge_proxy::config::EdgeConfig;
use edge_proxy::events::LifecycleEvent;
use edge_proxy::server::{EdgeServer, StartOptions};
use framing::frame::{FrameDecoder, FrameEncoder};
use framing::io_driver::IoDriver;
use framing::link::{CloseReason, HeartbeatConfig};
use framing::timer::{ClockSource, SharedManualClock};
use node_runner::link::LinkClientConfig;
use node_runner::link::session::NodeSessionConfig;
use node_runner::link::supervisor::{SupervisorExit, supervise};
use proto::Envelope;
use proto::v1::{HeartbeatPong, NodeReadyRequest, RegisterRequest, envelope::Msg};
use tokio::sync::broadcast;

mod support;
use support::process::{PATIENCE, Process, bin, spawn_logged, wait_for_line};

const CONFIG: &str = r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: prov-a
        kind: openai_compat
        base_url: http://127.0.0.1:8000
        targets: [m]
model_groups:
  - name: m
    providers: [prov-a]
"#;

fn drivers() -> Vec<IoDriver> {
    let mut all = vec![IoDriver::Epoll];
    if monoio::utils::detect_uring() {
        all.push(IoDriver::Uring);
    }
    all
}

fn start_edge(
    driver: IoDriver,
    clock: &SharedManualClock,
) -> (EdgeServer, broadcast::Receiver<LifecycleEvent>) {
    start_edge_with(driver, clock, CONFIG)
}

fn start_edge_with(
    driver: IoDriver,
    clock: &SharedManualClock,
    yaml: &str,
) -> (EdgeServer, broadcast::Receiver<LifecycleEvent>) {
    let config = EdgeConfig::from_yaml_str(yaml, "e2e.yaml").expect("valid config");
    let mut options = StartOptions::new(driver);
    options.workers = 2;
    options.clock = ClockSource::Manual(clock.clone());
    options.tick_ms = 5;
    let server = EdgeServer::start(config, options).expect("edge starts");
    let events = server.bus.subscribe();
    (server, events)
}

fn next_event(events: &mut broadcast::Receiver<LifecycleEvent>) -> LifecycleEvent {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match events.try_recv() {
            Ok(event) => return event,
            Err(broadcast::error::TryRecvError::Empty) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("no lifecycle event: {e:?}"),
        }
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The real node link client, supervised, on its own runtime thread.
fn start_node(
    driver: IoDriver,
    edge: &EdgeServer,
    clock: &SharedManualClock,
    token: &str,
) -> mpsc::Receiver<SupervisorExit> {
    let config = LinkClientConfig {
        tls: None,
        edge: edge.node_addr,
        session: NodeSessionConfig {
            token: token.into(),
            instance_id: "e2e".into(),
            max_frame_len: 1 << 20,
            handshake_timeout_ms: 10_000,
            heartbeat: HeartbeatConfig::default(),
        },
        tick_ms: 5,
        clock: ClockSource::Manual(clock.clone()),
        runner: Default::default(),
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let exit = edge_proxy::runtime::block_on(driver, async move {
            supervise(&config, Some(1), |_| {}).await
        })
        .expect("node runtime");
        let _ = tx.send(exit);
    });
    rx
}

#[test]
fn a_linked_node_stays_up_for_ten_simulated_minutes() {
    for driver in drivers() {
        let clock = SharedManualClock::new(0);
        let (edge, mut events) = start_edge(driver, &clock);
        let node_exit = start_node(driver, &edge, &clock, "tok-a");
        assert!(matches!(
            next_event(&mut events),
            LifecycleEvent::Registered { generation: 1, .. }
        ));
        assert!(matches!(
            next_event(&mut events),
            LifecycleEvent::Ready { generation: 1, .. }
        ));

        // Twenty heartbeat intervals: both sides ping, both answer.
        clock.advance(30_000);
        wait_until("the first heartbeat round trip", || {
            edge.registry
                .status()
                .first()
                .is_some_and(|s| s.last_heartbeat_rtt_us.is_some())
        });
        for step in 2..=20u64 {
            clock.advance(30_000);
            std::thread::sleep(Duration::from_millis(15)); // let pings and pongs cross
            assert!(
                edge.registry.dispatchable("node-a").is_some(),
                "{driver:?} step {step}"
            );
        }
        assert!(
            events.try_recv().is_err(),
            "no lifecycle event: the link never dropped"
        );
        assert!(node_exit.try_recv().is_err(), "the node is still linked");
    }
}

#[test]
fn a_busy_node_that_answers_within_the_wait_is_never_closed() {
    // A fake node that is "busy" (a long prefill stand-in) and answers the
    // Edge's ping only after 44 s of silence: within the 45 s wait.
    for driver in drivers() {
        let clock = SharedManualClock::new(0);
        let (edge, mut events) = start_edge(driver, &clock);
        let mut stream = TcpStream::connect(edge.node_addr).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut enc = FrameEncoder::default();
        let mut dec = FrameDecoder::default();
        let mut buf = bytes::BytesMut::new();
        let mut send = |stream: &mut TcpStream, msg: Msg| {
            stream
                .write_all(
                    &enc.encode(&Envelope {
                        stream_id: 0,
                        msg: Some(msg),
                    })
                    .unwrap(),
                )
                .unwrap();
        };
        // The next envelope, or `None` if none arrives within `wait`.
        let mut recv_within = |stream: &mut TcpStream, wait: Duration| -> Option<Envelope> {
            stream.set_read_timeout(Some(wait)).unwrap();
            loop {
                if let Some(env) = dec.decode(&mut buf).unwrap() {
                    return Some(env);
                }
                let mut chunk = [0u8; 4096];
                match std::io::Read::read(stream, &mut chunk) {
                    Ok(n) => {
                        assert!(n > 0, "the edge closed a busy but live node");
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        return None;
                    }
                    Err(e) => panic!("edge is alive: {e}"),
                }
            }
        };
        send(
            &mut stream,
            Msg::RegisterRequest(Box::new(RegisterRequest {
                token: "tok-a".into(),
                ..Default::default()
            })),
        );
        assert!(
            matches!(recv_within(&mut stream, PATIENCE).expect("an envelope from the edge").msg, Some(Msg::RegisterResponse(r)) if r.accepted)
        );
        send(
            &mut stream,
            Msg::NodeReadyRequest(NodeReadyRequest::default()),
        );
        recv_within(&mut stream, PATIENCE).expect("an envelope from the edge");
        next_event(&mut events);
        next_event(&mut events);

        for round in 0..8 {
            // The next ping: answering the last one late (44 s) already
            // made the next one due, so it may be on its way; otherwise
            // the 30 s interval brings it.
            let envelope = match recv_within(&mut stream, Duration::from_millis(300)) {
                Some(envelope) => envelope,
                None => {
                    clock.advance(30_000);
                    recv_within(&mut stream, PATIENCE).expect("a ping")
                }
            };
            let Some(Msg::HeartbeatPing(ping)) = envelope.msg else {
                panic!("expected a ping")
            };
            clock.advance(44_000); // busy: no answer for 44 s
            std::thread::sleep(Duration::from_millis(20));
            send(
                &mut stream,
                Msg::HeartbeatPong(HeartbeatPong { seq: ping.seq }),
            );
            wait_until("the pong to land", || {
                edge.registry
                    .status()
                    .first()
                    .is_some_and(|s| s.last_heartbeat_rtt_us.is_some())
            });
            assert!(
                edge.registry.dispatchable("node-a").is_some(),
                "{driver:?} round {round}"
            );
        }
        assert!(events.try_recv().is_err(), "never disconnected");
    }
}

#[test]
fn an_unknown_token_stops_the_node_instead_of_retrying() {
    for driver in drivers() {
        let clock = SharedManualClock::new(0);
        let (edge, _events) = start_edge(driver, &clock);
        let exit = start_node(driver, &edge, &clock, "wrong")
            .recv_timeout(PATIENCE)
            .expect("node stops");
        assert!(
            matches!(exit, SupervisorExit::PermanentRejection { .. }),
            "{exit:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Real processes
// ---------------------------------------------------------------------------

/// Starts `iop-edge` (JSON logs) on a kernel-chosen port, so parallel tests
/// cannot race for it; returns the process, its log lines, the node socket
/// address it reported and its `edge_started` line.
fn start_edge_process(
    dir: &std::path::Path,
    driver: Option<IoDriver>,
    workers: &str,
) -> (Process, mpsc::Receiver<String>, String, String) {
    std::fs::create_dir_all(dir).unwrap();
    let config = dir.join("edge.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut cmd = Command::new(bin("iop-edge"));
    cmd.args([
        "--config",
        config.to_str().unwrap(),
        "--workers",
        workers,
        "--log-format",
        "json",
    ]);
    if let Some(driver) = driver {
        cmd.env("IOP_IO_DRIVER", driver.as_str());
    }
    let (edge, log) = spawn_logged(cmd);
    let started = wait_for_line(&log, "edge_started");
    let fields: serde_json::Value = serde_json::from_str(&started).expect("JSON log line");
    let addr = fields["node_socket"]
        .as_str()
        .expect("node_socket field")
        .to_owned();
    (edge, log, addr, started)
}

/// The `iop-node` command for `edge_addr` with `token`, under `driver`.
fn node_command(
    edge_addr: &str,
    data_dir: &std::path::Path,
    token: &str,
    driver: Option<IoDriver>,
) -> Command {
    let mut cmd = Command::new(bin("iop-node"));
    cmd.args([
        "--edge",
        edge_addr,
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    cmd.env("IOP_NODE_TOKEN", token);
    if let Some(driver) = driver {
        cmd.env("IOP_IO_DRIVER", driver.as_str());
    }
    cmd
}

#[test]
fn sigkill_of_the_node_process_is_seen_as_a_disconnect() {
    for driver in drivers() {
        let dir = std::env::temp_dir().join(format!(
            "iop-e2e-{}-{}",
            std::process::id(),
            driver.as_str()
        ));
        let (_edge, edge_log, addr, started) = start_edge_process(&dir, Some(driver), "2");
        assert!(
            started.contains(&format!("\"driver\":\"{}\"", driver.as_str())),
            "{started}"
        );

        let node_dir = dir.join("node");
        let (mut node, _node_log) =
            spawn_logged(node_command(&addr, &node_dir, "tok-a", Some(driver)));
        let ready = wait_for_line(&edge_log, "node_ready");
        assert!(ready.contains("\"node_id\":\"node-a\""), "{ready}");

        node.0.kill().expect("SIGKILL the node");
        let gone = wait_for_line(&edge_log, "node_disconnected");
        assert!(
            gone.contains(CloseReason::PeerClosed.as_str())
                || gone.contains(CloseReason::IoError.as_str()),
            "{gone}"
        );

        // A new node process gets the next generation.
        let (_node2, _log2) = spawn_logged(node_command(&addr, &node_dir, "tok-a", Some(driver)));
        let ready = wait_for_line(&edge_log, "node_ready");
        assert!(ready.contains("\"generation\":2"), "{ready}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_rejected_node_process_exits_non_zero_with_a_clear_message() {
    let dir = std::env::temp_dir().join(format!("iop-e2e-rej-{}", std::process::id()));
    let (_edge, _edge_log, addr, _) = start_edge_process(&dir, None, "1");

    let output = node_command(&addr, &dir.join("n"), "not-a-token", None)
        .output()
        .expect("run iop-node");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown_token"), "{stderr}");
    assert!(
        !stderr.contains("not-a-token"),
        "the token must never be logged: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node played by the test over a raw socket: registered and ready,
/// reading the Edge's frames one by one (pieces not gathered).
struct FakeNode {
    stream: TcpStream,
    decoder: FrameDecoder,
    buf: bytes::BytesMut,
}

impl FakeNode {
    /// Registers as `node-a` (saying whether it gathers pieces) and waits
    /// until the Edge can dispatch to it.
    fn ready(edge: &EdgeServer, gathers: bool) -> Self {
        Self::ready_as(
            edge,
            RegisterRequest {
                reassembles_pieces: gathers,
                ..Default::default()
            },
        )
    }

    /// Registers as `node-a` with `register` (its token set here) and
    /// waits until the Edge can dispatch to it.
    fn ready_as(edge: &EdgeServer, register: RegisterRequest) -> Self {
        let mut node = Self {
            stream: TcpStream::connect(edge.node_addr).unwrap(),
            decoder: FrameDecoder::default(),
            buf: bytes::BytesMut::new(),
        };
        node.stream.set_read_timeout(Some(PATIENCE)).unwrap();
        node.send(Msg::RegisterRequest(Box::new(RegisterRequest {
            token: "tok-a".into(),
            ..register
        })));
        node.next_frame();
        node.send(Msg::NodeReadyRequest(NodeReadyRequest::default()));
        node.next_frame();
        wait_until("the node to be ready", || {
            edge.registry.dispatchable("node-a").is_some()
        });
        node
    }

    fn send(&mut self, msg: Msg) {
        let frame = FrameEncoder::default().encode(&Envelope {
            stream_id: 0,
            msg: Some(msg),
        });
        self.stream.write_all(&frame.unwrap()).unwrap();
    }

    /// The next frame as the Edge sent it.
    fn next_frame(&mut self) -> Envelope {
        loop {
            if let Some(frame) = self.decoder.decode_frame(&mut self.buf).unwrap() {
                return <Envelope as prost::Message>::decode(frame).unwrap();
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = std::io::Read::read(&mut self.stream, &mut chunk).expect("a frame");
            assert!(n > 0, "the edge closed the link");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A run on `node-a` whose prompt is `prompt` bytes.
fn long_run(prompt: usize) -> edge_proxy::dispatch::SubmitRun {
    use proto::v1::{ChatMessage, RunInput};
    edge_proxy::dispatch::SubmitRun {
        adapter: "prov-a".into(),
        target: "m".into(),
        input: RunInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "p".repeat(prompt).into(),
                ..ChatMessage::default()
            }],
            ..RunInput::default()
        },
        node: Some("node-a".into()),
        ..Default::default()
    }
}

#[test]
fn a_long_request_goes_in_pieces_only_to_a_node_that_gathers_them() {
    use proto::v1::RunRequest;
    use support::stack::block_on;

    const PROMPT: usize = 200_000;
    const PIECE: usize = 64 * 1024; // link.max_body_chunk's default
    for gathers in [false, true] {
        let clock = SharedManualClock::new(0);
        let (edge, _events) = start_edge(IoDriver::Epoll, &clock);
        let mut node = FakeNode::ready(&edge, gathers);
        let _run = block_on(edge.dispatcher.submit_run(long_run(PROMPT))).expect("submitted");
        let mut pieces = Vec::new();
        let mut gathered = Vec::new();
        let request: RunRequest = loop {
            let envelope = node.next_frame();
            match envelope.msg {
                Some(Msg::EnvelopePiece(piece)) => {
                    pieces.push(piece.bytes.len());
                    gathered.extend_from_slice(&piece.bytes);
                    if piece.last {
                        let whole = <Envelope as prost::Message>::decode(&gathered[..]).unwrap();
                        assert_eq!(whole.stream_id, envelope.stream_id);
                        match whole.msg {
                            Some(Msg::RunRequest(request)) => break *request,
                            other => panic!("the pieces make {other:?}"),
                        }
                    }
                }
                Some(Msg::RunRequest(request)) => break *request,
                Some(Msg::HeartbeatPing(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(request.input.unwrap().messages[0].content.len(), PROMPT);
        if gathers {
            assert_eq!(pieces.len(), PROMPT.div_ceil(PIECE), "{pieces:?}");
            assert!(pieces.iter().all(|&len| len <= PIECE), "{pieces:?}");
        } else {
            assert!(pieces.is_empty(), "a node that did not say gets one frame");
        }
    }
}

#[test]
fn escaped_texts_go_as_they_are_only_to_a_node_that_pastes_them() {
    use proto::v1::RunRequest;
    use support::stack::block_on;

    let escaped = r#"say \"hi\"\n\u00e9"#;
    for pastes in [false, true] {
        let clock = SharedManualClock::new(0);
        let (edge, _events) = start_edge(IoDriver::Epoll, &clock);
        let mut node = FakeNode::ready_as(
            &edge,
            RegisterRequest {
                pastes_escaped_content: pastes,
                ..Default::default()
            },
        );
        let mut run = long_run(0);
        run.input.messages[0].content = escaped.into();
        run.input.escaped_content = true;
        let _run = block_on(edge.dispatcher.submit_run(run)).expect("submitted");
        let request: RunRequest = loop {
            match node.next_frame().msg {
                Some(Msg::RunRequest(request)) => break *request,
                Some(Msg::HeartbeatPing(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        };
        let input = request.input.unwrap();
        assert_eq!(input.escaped_content, pastes);
        let expected = if pastes { escaped } else { "say \"hi\"\né" };
        assert_eq!(input.messages[0].content, expected.as_bytes());
    }
}

#[test]
fn a_run_cancelled_before_its_request_was_sent_whole_ends_at_the_edge() {
    use proto::v1::RunEventKind;
    use support::stack::{block_on, within};

    // The node reads nothing: the link's socket buffers fill with the
    // first pieces of a 24 MB prompt and the rest waits in the Edge's
    // writer. The run is cancelled: those pieces are dropped, the node
    // never gets the request whole (so would answer the cancel with
    // NOT_FOUND and nothing else), and the run ends at the Edge at once,
    // `cancelled`, without an answer from the node.
    //
    // The prompt is far more than the kernel holds for a reader that reads
    // nothing (a send buffer of at most `net.ipv4.tcp_wmem`'s 4 MiB here,
    // and the reader's unopened window): with 3 MB, an Edge that got to
    // write before the cancel came could hand the kernel the whole request,
    // and a loaded machine sometimes did.
    let config = format!("{CONFIG}link:\n  max_frame_len: 33554432\n");
    for driver in drivers() {
        let clock = SharedManualClock::new(0);
        let (edge, _events) = start_edge_with(driver, &clock, &config);
        let _node = FakeNode::ready(&edge, true);
        let mut run =
            block_on(edge.dispatcher.submit_run(long_run(24_000_000))).expect("submitted");
        run.cancel();
        let events = block_on(within(async {
            let mut events = Vec::new();
            while let Some(event) = run.next().await {
                events.push(event.kind());
            }
            events
        }));
        assert_eq!(events, [RunEventKind::Cancelled], "{driver:?}");
    }
}
