//! The thread-per-core Node end to end: the real `iop-node` with
//! `--workers 2`, the Edge in-process and the mock provider — real sockets
//! everywhere (set-up in `support/stack.rs`). Which core served a run or a
//! command is read from the node's debug log (`run_started`,
//! `run_refused`, `run_ended`, `command_started`, each with `core`).

use std::collections::BTreeSet;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use edge_proxy::dispatch::RunStream;
use framing::io_driver::IoDriver;
use proto::v1::{
    FailureCode, NodeCommandKind, NodeCommandRequest, NodeCommandResponse, ProviderHealth,
    RunEventKind,
};
use serde_json::Value;

mod support;
use support::stack::*;

/// `steady` streams for minutes (until cancelled) and admits 8; `capped`
/// streams the same way but admits one; `bulk` streams 64 KiB events as
/// fast as they are taken (6 GiB: until cancelled); `oa` answers at once.
fn cores_config(mock: SocketAddr, _garbage: SocketAddr) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: oa
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "5"}}
      - id: steady
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        max_concurrency: 8
        headers: {{x-mock-tokens: "100000", x-mock-delay-ms: "20"}}
      - id: bulk
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "100000", x-mock-event-bytes: "65536"}}
      - id: capped
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        max_concurrency: 1
        headers: {{x-mock-tokens: "100000", x-mock-delay-ms: "20"}}
model_groups:
  - name: m
    providers: [oa]
"#
    )
}

/// The Edge and a two-core node (optionally dialing through `proxy`),
/// logging which core serves what; round-robin placement (no preference
/// for the link core), so two runs in a row land on both cores.
fn two_cores(driver: IoDriver, name: &str, proxy: Option<&CutProxy>) -> Stack {
    two_cores_with(driver, name, proxy, &["--link-core-slack", "0"])
}

/// [`two_cores`] with `args` for the node besides `--workers 2`.
fn two_cores_with(driver: IoDriver, name: &str, proxy: Option<&CutProxy>, args: &[&str]) -> Stack {
    let mut stack = Stack::start_edge(driver, name, cores_config);
    stack.node_args = ["--workers", "2"]
        .iter()
        .chain(args)
        .map(|arg| arg.to_string())
        .collect();
    stack.node_log_filter = Some("info,node_runner::runs=debug".into());
    if let Some(proxy) = proxy {
        stack.node_edge = Some(proxy.start(stack.edge.node_addr));
    }
    stack.start_node();
    let starting = stack.node_events("node_starting");
    assert_eq!(starting.len(), 1);
    assert_eq!(starting[0]["workers"], 2, "{starting:?}");
    assert_eq!(starting[0]["driver"], driver.as_str(), "{starting:?}");
    stack
}

/// The core that logged `event` for `run_id` (waits for the line).
fn core_of(stack: &Stack, event: &str, run_id: &str) -> u64 {
    let mut found = None;
    wait_until(&format!("{event} of {run_id}"), || {
        found = stack
            .node_events(event)
            .iter()
            .find(|r| r["run_id"] == run_id)
            .and_then(|r| r["core"].as_u64());
        found.is_some()
    });
    found.unwrap()
}

/// The `run_ended` record of `run_id` (waits for it).
fn ended(stack: &Stack, run_id: &str) -> Value {
    core_of(stack, "run_ended", run_id);
    stack
        .node_events("run_ended")
        .into_iter()
        .find(|r| r["run_id"] == run_id)
        .unwrap()
}

/// Submits a run on `adapter` and waits for its `start` and first delta.
async fn streaming(stack: &Stack, adapter: &str) -> RunStream {
    let mut stream = stack.submit(adapter).await;
    assert_eq!(
        within(stream.next()).await.unwrap().kind(),
        RunEventKind::Start
    );
    assert_eq!(
        within(stream.next()).await.unwrap().kind(),
        RunEventKind::Delta
    );
    stream
}

/// Cancels `stream` and returns the kind of its last event.
async fn cancel(mut stream: RunStream) -> RunEventKind {
    stream.cancel();
    let mut last = None;
    while let Some(event) = within(stream.next()).await {
        last = Some(event.kind());
    }
    last.expect("a terminal")
}

async fn command(
    stack: &Stack,
    kind: NodeCommandKind,
    adapter: &str,
    target: &str,
) -> NodeCommandResponse {
    let mut request = NodeCommandRequest {
        adapter: adapter.into(),
        target: target.into(),
        ..NodeCommandRequest::default()
    };
    request.set_kind(kind);
    let stream = within(stack.edge.dispatcher.node_command(Some("node-a"), request))
        .await
        .expect("command sent");
    let mut all = within(stream.collect()).await;
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

/// The core of the last `command_started` record.
fn last_command_core(stack: &Stack, count: usize) -> u64 {
    wait_until("the command_started line", || {
        stack.node_events("command_started").len() >= count
    });
    stack.node_events("command_started")[count - 1]["core"]
        .as_u64()
        .unwrap()
}

#[test]
fn runs_spread_over_both_cores_and_admission_is_global() {
    for driver in drivers() {
        let stack = two_cores(driver, "cores-spread", None);
        block_on(async {
            // One after the other: ties go round-robin over the cores.
            let mut cores = BTreeSet::new();
            for _ in 0..4 {
                let stream = stack.submit("oa").await;
                let run_id = stream.run_id().to_owned();
                let all = events(stream).await;
                assert_eq!(all.last().unwrap().kind(), RunEventKind::Complete);
                cores.insert(core_of(&stack, "run_started", &run_id));
            }
            assert_eq!(cores, BTreeSet::from([0, 1]), "{driver:?}");

            // max_concurrency 1 holds across cores: the second run lands on
            // the other core (fewest runs in flight) and is still refused.
            let first = streaming(&stack, "capped").await;
            let first_core = core_of(&stack, "run_started", first.run_id());
            let refused = stack.submit("capped").await;
            let refused_id = refused.run_id().to_owned();
            let all = events(refused).await;
            assert_eq!(kinds(&all), [RunEventKind::Error]);
            assert_eq!(error_code(&all), FailureCode::OverCapacity);
            let refused_core = core_of(&stack, "run_refused", &refused_id);
            assert_ne!(refused_core, first_core, "refused on the other core");

            // Its capacity comes back when it ends, whichever core asks.
            assert_eq!(cancel(first).await, RunEventKind::Cancelled);
            let again = streaming(&stack, "capped").await;
            assert_eq!(cancel(again).await, RunEventKind::Cancelled);
        });
    }
}

#[test]
fn a_cancel_reaches_the_core_that_owns_the_run() {
    let driver = *drivers().last().unwrap();
    let stack = two_cores(driver, "cores-cancel", None);
    let stats = stack.mock.stats();
    block_on(async {
        let gone_before = stats.streams_client_gone();
        let on_0 = streaming(&stack, "steady").await;
        let mut on_1 = streaming(&stack, "steady").await;
        let (id_0, id_1) = (on_0.run_id().to_owned(), on_1.run_id().to_owned());
        assert_eq!(core_of(&stack, "run_started", &id_0), 0);
        assert_eq!(core_of(&stack, "run_started", &id_1), 1);

        // Cancel the run on core 0 (the link core): only it ends.
        assert_eq!(cancel(on_0).await, RunEventKind::Cancelled);
        assert_eq!(ended(&stack, &id_0)["outcome"], "cancelled");
        assert_eq!(ended(&stack, &id_0)["core"], 0);
        wait_until("the provider to see one request closed", || {
            stats.streams_client_gone() > gone_before
        });
        assert_eq!(
            within(on_1.next()).await.unwrap().kind(),
            RunEventKind::Delta,
            "the other core's run still streams"
        );

        // Cancel the run on core 1: the cancel crosses to its core.
        assert_eq!(cancel(on_1).await, RunEventKind::Cancelled);
        assert_eq!(ended(&stack, &id_1)["outcome"], "cancelled");
        assert_eq!(ended(&stack, &id_1)["core"], 1);
        wait_until("the provider to see both requests closed", || {
            stats.streams_client_gone() > gone_before + 1
        });
    });
    wait_until("both runs stored as cancelled", || {
        let runs = stack.stored_runs();
        runs.iter().filter(|r| r["status"] == "cancelled").count() == 2
    });
}

/// The core a small run on `oa` ran on (it completes first).
async fn small_run_core(stack: &Stack) -> u64 {
    let stream = stack.submit("oa").await;
    let run_id = stream.run_id().to_owned();
    let all = events(stream).await;
    assert_eq!(all.last().unwrap().kind(), RunEventKind::Complete);
    core_of(stack, "run_started", &run_id)
}

/// With the default slack small runs stay on the link core, but once a
/// stream there turns bulk (the Edge grants it 1 MiB of window within
/// 100 ms, `node_runner::runs::cores::BULK_CREDIT`) new work goes to the
/// other core, until it ends. The placement itself is tested with a
/// manual clock (`runs::cores` tests); this shows the window updates of a
/// real stream reach it.
#[test]
fn a_bulk_stream_sends_new_work_off_the_link_core_until_it_ends() {
    let driver = *drivers().last().unwrap();
    let stack = two_cores_with(driver, "cores-bulk", None, &[]);
    block_on(async {
        assert_eq!(small_run_core(&stack).await, 0);
        let mut bulk = streaming(&stack, "bulk").await;
        let bulk_id = bulk.run_id().to_owned();
        assert_eq!(core_of(&stack, "run_started", &bulk_id), 0);
        // Take the stream a MiB at a time (each event taken grants its
        // window back); once it counts as bulk, a small run lands on core
        // 1. At the 10 MiB/s the threshold asks, 64 MiB leaves a wide
        // margin for a slow debug build on a loaded machine.
        let mut moved = false;
        for _ in 0..64 {
            for _ in 0..16 {
                let event = within(bulk.next()).await.expect("the bulk stream goes on");
                assert_eq!(event.kind(), RunEventKind::Delta);
            }
            if small_run_core(&stack).await == 1 {
                moved = true;
                break;
            }
        }
        assert!(moved, "{driver:?}: no small run left the link core");
        // The Node logged the one bulk run as such (a debug line).
        let bulk_runs: Vec<_> = stack
            .node_events("run_bulk")
            .iter()
            .map(|r| (r["run_id"].as_str().unwrap().to_owned(), r["core"].as_u64()))
            .collect();
        assert_eq!(bulk_runs, [(bulk_id.clone(), Some(0))]);
        assert_eq!(cancel(bulk).await, RunEventKind::Cancelled);
        assert_eq!(ended(&stack, &bulk_id)["core"], 0);
        assert_eq!(small_run_core(&stack).await, 0, "back on the link core");
    });
}

#[test]
fn node_commands_work_from_a_non_link_core() {
    let driver = *drivers().last().unwrap();
    let stack = two_cores(driver, "cores-commands", None);
    let generation = stack.generation();
    block_on(async {
        // A run on core 0 sends the next command to core 1.
        let run = streaming(&stack, "steady").await;
        assert_eq!(core_of(&stack, "run_started", run.run_id()), 0);
        let status = command(&stack, NodeCommandKind::TransportStatus, "", "").await;
        assert_eq!(last_command_core(&stack, 1), 1);
        assert!(status.ok, "{status:?}");
        let status = status.transport_status.expect("transport status");
        assert_eq!(status.generation, generation);
        assert_eq!(status.state, "ready");
        // The run on core 0, counted by core 1: the total over cores.
        assert_eq!(status.active_runs, 1);

        // CAPABILITIES from core 1: the run counted on its adapter, and a
        // probe stamped with the connection's health sequence.
        let caps = command(&stack, NodeCommandKind::Capabilities, "oa", "m").await;
        assert_eq!(last_command_core(&stack, 2), 1);
        let caps = caps.capabilities.expect("capabilities");
        let steady = caps
            .adapters
            .iter()
            .find(|a| a.adapter == "steady")
            .unwrap();
        assert_eq!(steady.active_runs, 1);
        let probe = caps.probe.expect("probe");
        assert_eq!(probe.status(), ProviderHealth::Available);
        assert_eq!(probe.health_observation_seq, 1);
        assert_eq!(cancel(run).await, RunEventKind::Cancelled);

        // With no run in flight the commands alternate; the sequence stays
        // one per connection, unique across the cores.
        let mut seqs = vec![1];
        let mut cores = BTreeSet::new();
        for n in 3..=4 {
            let caps = command(&stack, NodeCommandKind::Capabilities, "oa", "m").await;
            cores.insert(last_command_core(&stack, n));
            seqs.push(
                caps.capabilities
                    .unwrap()
                    .probe
                    .unwrap()
                    .health_observation_seq,
            );
        }
        assert_eq!(cores, BTreeSet::from([0, 1]));
        assert_eq!(seqs, [1, 2, 3]);
    });
}

#[test]
fn a_lost_connection_cancels_the_runs_of_every_core() {
    let driver = *drivers().last().unwrap();
    let proxy = CutProxy::default();
    let stack = two_cores(driver, "cores-cut", Some(&proxy));
    let stats = stack.mock.stats();
    let generation = stack.generation();
    let ids = block_on(async {
        let gone_before = stats.streams_client_gone();
        let on_0 = streaming(&stack, "steady").await;
        let on_1 = streaming(&stack, "steady").await;
        let ids = [on_0.run_id().to_owned(), on_1.run_id().to_owned()];
        assert_eq!(core_of(&stack, "run_started", &ids[0]), 0);
        assert_eq!(core_of(&stack, "run_started", &ids[1]), 1);

        // The link drops (the node process lives on).
        proxy.cut();
        for stream in [on_0, on_1] {
            let mut rest = Vec::new();
            let mut stream: RunStream = stream;
            while let Some(event) = within(stream.next()).await {
                rest.push(event);
            }
            assert_eq!(error_code(&rest), FailureCode::NodeDisconnected);
        }
        // Both cores stopped their run and its provider request.
        for (core, id) in ids.iter().enumerate() {
            let record = ended(&stack, id);
            assert_eq!(record["outcome"], "link_closed", "{record}");
            assert_eq!(record["core"], core as u64);
        }
        wait_until("the provider to see both requests closed", || {
            stats.streams_client_gone() >= gone_before + 2
        });
        ids
    });
    // The node links again, and both cores serve the new generation.
    wait_until("the node to reconnect", || stack.generation() > generation);
    block_on(async {
        let mut cores = BTreeSet::new();
        for _ in 0..2 {
            let stream = stack.submit("oa").await;
            let run_id = stream.run_id().to_owned();
            assert_eq!(
                events(stream).await.last().unwrap().kind(),
                RunEventKind::Complete
            );
            cores.insert(core_of(&stack, "run_started", &run_id));
        }
        assert_eq!(cores, BTreeSet::from([0, 1]));
    });
    wait_until("the cut runs stored as failed", || {
        stack
            .stored_runs()
            .iter()
            .filter(|r| ids.iter().any(|id| r["run_id"] == id.as_str()))
            .filter(|r| r["status"] == "failed")
            .count()
            == 2
    });
}

#[test]
fn a_set_provider_receive_buffer_serves_and_a_capped_one_says_so_at_start() {
    // Over any `net.core.rmem_max` a machine is likely to have: the kernel
    // caps the setting, and the node says so once, at start.
    let asked = 1u64 << 30;
    let rmem_max = node_runner::sockopt::receive_buffer_max().unwrap_or(212_992);
    for driver in drivers() {
        let stack = two_cores_with(
            driver,
            "cores-rcvbuf",
            None,
            &["--provider-receive-buffer", &asked.to_string()],
        );
        let capped = stack.node_events("provider_receive_buffer_capped");
        if rmem_max < asked {
            assert_eq!(capped.len(), 1, "{capped:?}");
            assert_eq!(capped[0]["asked"], asked, "{capped:?}");
            assert_eq!(capped[0]["rmem_max"], rmem_max, "{capped:?}");
        }
        // Runs on both cores still reach the provider and complete.
        block_on(async {
            for _ in 0..2 {
                let stream = stack.submit("oa").await;
                assert_eq!(
                    events(stream).await.last().unwrap().kind(),
                    RunEventKind::Complete
                );
            }
        });
    }
}

/// A TCP proxy in front of the Edge whose live connections can be cut,
/// so the node sees its link drop while its process lives on.
#[derive(Default)]
struct CutProxy {
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl CutProxy {
    /// Listens on a free loopback port, forwarding to `target`.
    fn start(&self, target: SocketAddr) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let live = Arc::clone(&self.live);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(upstream) = TcpStream::connect(target) else {
                    continue;
                };
                let mut kept = live.lock().unwrap();
                kept.push(client.try_clone().unwrap());
                kept.push(upstream.try_clone().unwrap());
                drop(kept);
                pipe(client.try_clone().unwrap(), upstream.try_clone().unwrap());
                pipe(upstream, client);
            }
        });
        addr
    }

    /// Closes every live connection, both ways.
    fn cut(&self) {
        for stream in self.live.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// Copies `from` into `to` on a thread until either side ends.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match read_some(&mut from, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
