//! Operations end to end, with real processes: a real `iop-edge` and real
//! `iop-node`s in front of the mock provider, driven by signals
//! (`docs/operations.md`).
//!
//! - Edge drain: SIGTERM mid-stream (the stream completes, new connections
//!   are refused, exit 0 within the grace); open keep-alive connections get
//!   503 + close, `/readyz` says draining; past the grace a normalized
//!   stream ends with an error event and a tunnel body is cut (SIGINT).
//! - Node drain: SIGTERM mid-run (the run completes, new work goes to the
//!   other node, the node deregisters, exit 0); past its grace; a node that
//!   cannot reach its Edge (SIGINT); a node whose Edge goes silent dials
//!   again.
//! - Reload (SIGHUP): a new model group serves without a node reconnect; an
//!   invalid file is rejected and the old config serves; a removed node is
//!   disconnected; a changed provider setting reaches the node on its live
//!   link while a 1 MiB stream in flight finishes on its old adapter; a
//!   node whose provider set changed re-registers.
//!
//! Timing: only bounded polls on process state and log lines.

mod operations;
mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use operations::*;

#[test]
fn sigterm_mid_stream_finishes_the_stream_refuses_new_connections_and_exits_0() {
    let mut ops = Ops::start("drain", 10_000);
    let mut stream = send_chat(ops.ingress, "m", true);
    read_until(&mut stream, "data: ");
    let signalled = Instant::now();
    ops.edge.signal("TERM");
    let draining = json_line(&ops.edge.wait_line("\"edge_draining\""));
    assert_eq!(draining["in_flight"], 1, "{draining}");
    // New connections are refused while the stream keeps flowing.
    wait_refused(ops.ingress);
    let rest = read_to_close(&mut stream);
    assert!(
        rest.contains("data: [DONE]"),
        "the stream completes: {rest}"
    );
    assert!(!rest.contains("\"error\""), "{rest}");
    assert_eq!(ops.edge.exit_code(PATIENCE), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "within the grace"
    );
    let drained = json_line(&ops.edge.wait_line("\"edge_drained\""));
    assert_eq!(drained["in_flight_at_start"], 1, "{drained}");
    assert_eq!(drained["in_flight"], 0, "{drained}");
    assert_eq!(drained["grace_exceeded"], false, "{drained}");
    assert_eq!(drained["links_closed"], 1, "{drained}");
    let closed = json_line(&ops.edge.wait_line("\"node_disconnected\""));
    assert_eq!(closed["reason"], "shutdown", "{closed}");
}

#[test]
fn sigterm_past_the_grace_ends_a_normalized_stream_with_an_error_event_and_exits_0() {
    let mut ops = Ops::start("grace", 300);
    let mut stream = send_chat(ops.ingress, "endless-ol", true);
    read_until(&mut stream, "data: ");
    ops.edge.signal("TERM");
    let rest = read_to_close(&mut stream);
    let tail = &rest[rest.len().saturating_sub(600)..];
    assert!(rest.contains("\"error\""), "a terminal error event: {tail}");
    assert!(
        rest.ends_with("0\r\n\r\n"),
        "the chunked body ends cleanly: {tail:?}"
    );
    assert_eq!(ops.edge.exit_code(PATIENCE), Some(0));
    let drained = json_line(&ops.edge.wait_line("\"edge_drained\""));
    assert_eq!(drained["grace_exceeded"], true, "{drained}");
    assert_eq!(drained["in_flight_at_close"], 1, "{drained}");
    assert_eq!(drained["in_flight"], 0, "{drained}");
}

/// A raw tunnel's body is the provider's own bytes: past the grace it is
/// cut (no last chunk), the documented ending of any non-stall failure
/// after commit, so the client sees the truncation.
#[test]
fn sigint_past_the_grace_cuts_a_tunnel_body_and_exits_0() {
    // The flag overrides edge.yaml's 60 s.
    let mut ops = Ops::start_flagged("grace-tunnel", 60_000, 300);
    let mut stream = send_chat(ops.ingress, "endless", true);
    read_until(&mut stream, "data: ");
    // SIGINT (Ctrl-C) drains exactly as SIGTERM does.
    ops.edge.signal("INT");
    let rest = read_to_close(&mut stream);
    assert!(!rest.ends_with("0\r\n\r\n"), "no clean end");
    assert!(!rest.contains("[DONE]"));
    assert_eq!(ops.edge.exit_code(PATIENCE), Some(0));
    let drained = json_line(&ops.edge.wait_line("\"edge_drained\""));
    assert_eq!(drained["grace_exceeded"], true, "{drained}");
    assert_eq!(drained["in_flight"], 0, "{drained}");
}

#[test]
fn a_draining_edge_answers_open_connections_503_and_readyz_draining() {
    let mut ops = Ops::start("keepalive", 10_000);
    // An idle keep-alive connection opened before the drain.
    let mut idle = TcpStream::connect(ops.ingress).unwrap();
    idle.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut watcher = TcpStream::connect(ops.ingress).unwrap();
    watcher.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut stream = send_chat(ops.ingress, "m", true);
    read_until(&mut stream, "data: ");
    ops.edge.signal("TERM");
    ops.edge.wait_line("\"edge_draining\"");
    idle.write_all(b"GET /readyz HTTP/1.1\r\nhost: edge\r\n\r\n")
        .unwrap();
    let readyz = read_to_close(&mut idle);
    assert_eq!(status_of(&readyz), 503, "{readyz}");
    assert!(readyz.to_ascii_lowercase().contains("connection: close"));
    assert!(readyz.contains("draining"), "{readyz}");
    // An open connection still reaches /metrics, which says so.
    watcher
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: edge\r\nconnection: close\r\n\r\n")
        .unwrap();
    let metrics = read_to_close(&mut watcher);
    assert_eq!(status_of(&metrics), 200, "{metrics}");
    assert!(metrics.contains("iop_edge_draining 1"), "{metrics}");
    read_to_close(&mut stream);
    assert_eq!(ops.edge.exit_code(PATIENCE), Some(0));
}

#[test]
fn sighup_adds_a_model_group_without_a_node_reconnect() {
    let ops = Ops::start("reload-add", 10_000);
    let before = read_to_close(&mut send_chat(ops.ingress, "m2", false));
    assert_eq!(status_of(&before), 404, "{before}");
    ops.write_config(&edge_yaml(
        ops.mock,
        "  - name: m2\n    target: m\n    providers: [oa]\n",
        true,
    ));
    ops.edge.signal("HUP");
    let reloaded = json_line(&ops.edge.wait_line("\"edge_config_reloaded\""));
    assert_eq!(reloaded["groups_added"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_removed"], 0, "{reloaded}");
    let after = read_to_close(&mut send_chat(ops.ingress, "m2", false));
    assert_eq!(status_of(&after), 200, "{after}");
    // /metrics follows: the new group's tokens are counted, the reload too.
    let metrics = get(ops.ingress, "/metrics");
    assert!(
        metrics.contains(r#"iop_tokens_total{model="m2",provider="oa",kind="output"} 40"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"iop_edge_config_reloads_total{result="applied"} 1"#));
    assert!(metrics.contains("iop_edge_draining 0"));
    // One registration, one generation: the node never reconnected.
    assert_eq!(ops.edge.count("\"node_registered\""), 1);
    assert_eq!(ops.edge.count("\"node_disconnected\""), 0);
    let node = ops.node.as_ref().unwrap();
    assert_eq!(node.count("node_ready"), 1);
}

#[test]
fn sighup_with_an_invalid_file_keeps_the_old_config() {
    let ops = Ops::start("reload-bad", 10_000);
    ops.write_config(&edge_yaml(
        ops.mock,
        "  - name: broken\n    target: m\n    providers: [no-such-provider]\n",
        true,
    ));
    ops.edge.signal("HUP");
    let rejected = json_line(&ops.edge.wait_line("\"edge_config_reload_rejected\""));
    let error = rejected["error"].as_str().unwrap();
    assert!(
        error.contains("no-such-provider"),
        "names the field: {error}"
    );
    let response = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&response), 200, "{response}");
    let broken = read_to_close(&mut send_chat(ops.ingress, "broken", false));
    assert_eq!(status_of(&broken), 404, "{broken}");
    assert_eq!(ops.edge.count("edge_config_reloaded"), 0);
    let metrics = get(ops.ingress, "/metrics");
    assert!(metrics.contains(r#"iop_edge_config_reloads_total{result="rejected"} 1"#));
    assert!(metrics.contains(r#"iop_edge_config_reloads_total{result="applied"} 0"#));
}

#[test]
fn sighup_removing_a_node_disconnects_it() {
    let mut ops = Ops::start("reload-remove", 10_000);
    ops.write_config(&edge_yaml(ops.mock, "", false));
    ops.edge.signal("HUP");
    let reloaded = json_line(&ops.edge.wait_line("\"edge_config_reloaded\""));
    assert_eq!(reloaded["nodes_removed"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_disconnected"], 1, "{reloaded}");
    let closed = json_line(&ops.edge.wait_line("\"node_disconnected\""));
    assert_eq!(closed["reason"], "shutdown", "{closed}");
    // Its token is gone too: the node's next registration is refused for
    // good, and it exits with its "rejected" code.
    let node = ops.node.as_mut().unwrap();
    assert_eq!(node.exit_code(PATIENCE), Some(2));
    let gone = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&gone), 404, "{gone}");
}

#[test]
fn sigterm_on_the_node_mid_run_finishes_the_run_sends_new_work_elsewhere_and_exits_0() {
    let mut ops = Ops::start("node-drain", 10_000);
    let node_b = ops.start_node("tok-b");
    let mut stream = send_chat(ops.ingress, "m", true);
    read_until(&mut stream, "data: ");
    let node = ops.node.as_mut().unwrap();
    node.signal("TERM");
    let draining = json_line(&node.wait_line("\"node_draining\""));
    assert_eq!(draining["in_flight"], 1, "{draining}");
    // The Edge took the notice: new work goes to the other node, and a
    // model only the draining node serves has no provider now.
    let notice = json_line(&ops.edge.wait_line("\"node_draining\""));
    assert_eq!(notice["node_id"], "node-a", "{notice}");
    for _ in 0..3 {
        let elsewhere = read_to_close(&mut send_chat(ops.ingress, "both", false));
        assert_eq!(status_of(&elsewhere), 200, "{elsewhere}");
    }
    let only_a = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&only_a), 503, "{only_a}");
    // The run in flight completes.
    let rest = read_to_close(&mut stream);
    assert!(rest.contains("data: [DONE]"), "the run completes: {rest}");
    assert!(!rest.contains("\"error\""), "{rest}");
    let node = ops.node.as_mut().unwrap();
    assert_eq!(node.exit_code(PATIENCE), Some(0));
    let drained = json_line(&node.wait_line("\"node_drained\""));
    assert_eq!(drained["in_flight"], 0, "{drained}");
    assert_eq!(drained["grace_exceeded"], false, "{drained}");
    // It deregistered: the Edge saw it leave, and it did not come back.
    ops.edge.wait_line("\"node_disconnected\"");
    assert_eq!(node.count("node_reconnecting"), 0);
    assert_eq!(
        ops.edge.count("\"node_registered\""),
        2,
        "node-a and node-b once each"
    );
    // Node B served the requests that went elsewhere.
    assert_eq!(node_b.count("node_draining"), 0);
}

#[test]
fn sighup_changing_a_provider_setting_reaches_the_node_without_a_reconnect() {
    let ops = Ops::start("reload-change", 10_000);
    let before = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&before), 200, "{before}");
    assert_eq!(tokens(&before), 40, "{before}");
    let yaml = edge_yaml(ops.mock, "", true).replace(
        r#"x-mock-tokens: "40", x-mock-delay-ms: "25""#,
        r#"x-mock-tokens: "3""#,
    );
    ops.write_config(&yaml);
    ops.edge.signal("HUP");
    let reloaded = json_line(&ops.edge.wait_line("\"edge_config_reloaded\""));
    assert_eq!(reloaded["nodes_changed"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_refreshed"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_disconnected"], 0, "{reloaded}");
    let node = ops.node.as_ref().unwrap();
    let refreshed = json_line(&node.wait_line("\"node_config_refreshed\""));
    assert_eq!(refreshed["generation"], 1, "{refreshed}");
    let after = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(status_of(&after), 200, "{after}");
    assert_eq!(
        tokens(&after),
        3,
        "the new header reached the node: {after}"
    );
    // Same connection, same generation.
    assert_eq!(ops.edge.count("\"node_registered\""), 1);
    assert_eq!(ops.edge.count("\"node_disconnected\""), 0);
    assert_eq!(node.count("node_ready"), 1);
}

/// A 1 MiB stream (past the tunnel's credit window, so its window updates
/// must reach the retired run manager) in flight across a refresh.
#[test]
fn sighup_mid_stream_keeps_the_running_stream_on_its_old_adapter() {
    let ops = Ops::start("reload-inflight", 10_000);
    let mut stream = send_chat(ops.ingress, "big", true);
    let first = read_until(&mut stream, "data: ");
    let yaml = edge_yaml(ops.mock, "", true).replace(
        r#"x-mock-tokens: "40", x-mock-delay-ms: "25""#,
        r#"x-mock-tokens: "3""#,
    );
    ops.write_config(&yaml);
    ops.edge.signal("HUP");
    ops.node
        .as_ref()
        .unwrap()
        .wait_line("\"node_config_refreshed\"");
    let rest = read_to_close(&mut stream);
    assert!(
        rest.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n"),
        "ends cleanly"
    );
    let whole = format!("{first}{rest}");
    // Whole: the mock's 64 token events plus its opening and closing chunks.
    assert_eq!(whole.matches("chat.completion.chunk").count(), 64 + 2);
    let after = read_to_close(&mut send_chat(ops.ingress, "m", false));
    assert_eq!(tokens(&after), 3, "{after}");
}

#[test]
fn sighup_adding_a_provider_to_a_node_re_registers_it() {
    let ops = Ops::start("reload-reshape", 10_000);
    let yaml = edge_yaml(
        ops.mock,
        "  - name: extra\n    target: m\n    providers: [oa-2]\n",
        true,
    )
    .replace(
        "      - id: endless-ol\n",
        &format!(
            "      - id: oa-2\n        kind: openai_compat\n        base_url: http://{}\n        \
                 targets: [m]\n      - id: endless-ol\n",
            ops.mock
        ),
    );
    ops.write_config(&yaml);
    ops.edge.signal("HUP");
    let reloaded = json_line(&ops.edge.wait_line("\"edge_config_reloaded\""));
    assert_eq!(reloaded["nodes_changed"], 1, "{reloaded}");
    assert_eq!(reloaded["nodes_disconnected"], 1, "{reloaded}");
    let closed = json_line(&ops.edge.wait_line("\"node_disconnected\""));
    assert_eq!(closed["reason"], "shutdown", "{closed}");
    // It re-registers with the new payload and the new provider serves.
    let deadline = Instant::now() + PATIENCE;
    while ops.edge.count("\"node_ready\"") < 2 {
        assert!(Instant::now() < deadline, "the node re-registers");
        std::thread::sleep(Duration::from_millis(10));
    }
    let extra = read_to_close(&mut send_chat(ops.ingress, "extra", false));
    assert_eq!(status_of(&extra), 200, "{extra}");
}

#[test]
fn sigterm_on_the_node_past_its_grace_ends_the_run_and_exits_0() {
    let mut ops = Ops::start_with("node-grace", 10_000, 300);
    let mut stream = send_chat(ops.ingress, "endless-ol", true);
    read_until(&mut stream, "data: ");
    let node = ops.node.as_mut().unwrap();
    node.signal("TERM");
    assert_eq!(node.exit_code(PATIENCE), Some(0));
    let drained = json_line(&node.wait_line("\"node_drained\""));
    assert_eq!(drained["grace_exceeded"], true, "{drained}");
    assert_eq!(drained["in_flight_at_start"], 1, "{drained}");
    // The Edge ends the client's stream with its terminal error event.
    let rest = read_to_close(&mut stream);
    let tail = &rest[rest.len().saturating_sub(400)..];
    assert!(rest.contains("\"error\""), "{tail}");
    assert!(rest.ends_with("0\r\n\r\n"), "{tail:?}");
}

#[test]
fn sigint_on_a_node_that_cannot_reach_its_edge_exits_0() {
    let ops = Ops::start("node-offline", 10_000);
    let mut cmd = std::process::Command::new(operations::node_bin());
    cmd.args([
        "--edge",
        "127.0.0.1:1",
        "--workers",
        "1",
        "--admin-addr",
        "off",
    ])
    .args(["--data-dir", ops.dir.join("offline").to_str().unwrap()])
    .args(["--log-format", "json"])
    .env("IOP_NODE_TOKEN", "tok-b");
    let mut node = Logged::spawn(cmd);
    node.wait_line("node_reconnecting");
    node.signal("INT");
    assert_eq!(node.exit_code(PATIENCE), Some(0));
}

/// An Edge that takes the Node's connection and then says nothing, its end
/// left open: the registration wait (10 s) ends the link, and the Node must
/// let go of the socket its reader is parked on and dial again, though no
/// byte and no close ever arrives on it.
#[test]
fn a_node_whose_edge_goes_silent_dials_again() {
    let ops = Ops::start("node-silent-edge", 10_000);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let edge = silent.local_addr().unwrap().to_string();
    let mut cmd = std::process::Command::new(operations::node_bin());
    cmd.args(["--edge", &edge, "--workers", "1", "--admin-addr", "off"])
        .args(["--data-dir", ops.dir.join("silent").to_str().unwrap()])
        .args(["--log-format", "json"])
        .env("IOP_NODE_TOKEN", "tok-b");
    let mut node = Logged::spawn(cmd);
    let (_held, _) = silent.accept().unwrap();
    // Past the registration wait, with room for a slow box.
    let deadline = Instant::now() + Duration::from_secs(40);
    while node.count("node_reconnecting") == 0 {
        assert!(
            Instant::now() < deadline,
            "the node never dialled again; log:\n{}",
            node.lines().join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    node.signal("INT");
    assert_eq!(node.exit_code(PATIENCE), Some(0));
}

/// A client that leaves a run started before a refresh: its cancel reaches
/// the retired run manager that holds the run, which stops it.
#[test]
fn a_cancel_after_a_refresh_reaches_the_run_on_its_old_adapter() {
    let ops = Ops::start("reload-cancel", 10_000);
    let mut stream = send_chat(ops.ingress, "endless-ol", true);
    read_until(&mut stream, "data: ");
    let yaml = edge_yaml(ops.mock, "", true).replace(
        r#"x-mock-tokens: "40", x-mock-delay-ms: "25""#,
        r#"x-mock-tokens: "3""#,
    );
    ops.write_config(&yaml);
    ops.edge.signal("HUP");
    ops.node
        .as_ref()
        .unwrap()
        .wait_line("\"node_config_refreshed\"");
    drop(stream);
    let data_dir = ops.dir.join("tok-a");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let runs = support::stack::stored_runs(&data_dir);
        if runs.iter().any(|r| r["status"] == "cancelled") {
            break;
        }
        assert!(Instant::now() < deadline, "the run is cancelled: {runs:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
