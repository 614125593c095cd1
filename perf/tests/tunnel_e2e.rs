//! The raw provider tunnel through the front door (F16, F18): an OpenAI
//! client → the Edge's ingress → the real `iop-node` → the mock provider,
//! compared with the mock answering directly.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::stack::*;

/// A streamed request, written raw; returns the socket after the head.
fn open_stream(addr: SocketAddr, path: &str, body: &Value, headers: &str) -> TcpStream {
    let body = body.to_string();
    let mut socket = TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    write!(
        socket,
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    socket
}

/// The whole response (the server closes after it).
fn read_all(mut socket: TcpStream) -> String {
    let mut out = Vec::new();
    let _ = socket.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Replaces the fields the mock varies per request (`id`, `created`).
fn normalized(body: &str) -> String {
    let id = regex_like(body, "\"id\":\"", "\"");
    let created = regex_like(body, "\"created\":", ",");
    let mut out = body.to_owned();
    for (old, new) in [(id, "ID"), (created, "T")] {
        if let Some(old) = old {
            out = out.replace(&old, new);
        }
    }
    out
}

fn regex_like(text: &str, start: &str, end: &str) -> Option<String> {
    let from = text.find(start)? + start.len();
    let to = from + text[from..].find(end)?;
    Some(text[from..to].to_owned())
}

fn chat(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hello"}]})
}

#[test]
fn a_tunnelled_stream_is_the_providers_own_bytes() {
    for driver in drivers() {
        let stack = Stack::start(driver, "tunnel-bytes");
        let edge = stack.edge.ingress_addr;
        let mock = stack.mock.local_addr();
        // The `oa` provider adds `x-mock-tokens: 5`; ask the mock the same.
        let direct_headers = "x-mock-tokens: 5\r\n";
        for (body, with_usage) in [
            (chat("chat", true), false),
            (
                {
                    let mut b = chat("chat", true);
                    b["stream_options"] = json!({"include_usage": true});
                    b
                },
                true,
            ),
            (chat("chat", false), true),
            // A long prompt (its body goes to the Node as its own slice of
            // the link write): the mock counts its bytes in prompt_tokens.
            (
                {
                    let mut b = chat("chat", false);
                    b["messages"][0]["content"] = json!("long prompt ".repeat(5_000));
                    b
                },
                true,
            ),
        ] {
            let through = read_all(open_stream(edge, "/v1/chat/completions", &body, ""));
            let mut direct_body = body.clone();
            direct_body["model"] = json!("m");
            let direct = read_all(open_stream(
                mock,
                "/v1/chat/completions",
                &direct_body,
                direct_headers,
            ));
            assert!(through.starts_with("HTTP/1.1 200"), "{through}");
            // A streamed answer is chunked by the Edge; a whole one keeps
            // the length the provider gave it, so its client reads it as
            // the provider framed it.
            let head = through
                .split("\r\n\r\n")
                .next()
                .unwrap()
                .to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map(|n| n.parse::<usize>().unwrap());
            if body["stream"] == json!(true) {
                assert!(head.contains("transfer-encoding: chunked"), "{head}");
                assert_eq!(length, None, "{head}");
            } else {
                assert!(!head.contains("transfer-encoding"), "{head}");
                assert!(!head.contains("cache-control"), "no stream's hints: {head}");
                assert_eq!(length, Some(http_body(&through).len()), "{head}");
            }
            let (through, direct) = (http_body(&through), http_body(&direct));
            // The Edge forwards the client's model name; the provider's
            // target here is `m`: compare with the model normalized too.
            let through = normalized(&through).replace("\"model\":\"chat\"", "\"model\":\"m\"");
            let direct = normalized(&direct);
            assert_eq!(through, direct, "byte-for-byte, {body}");
            assert_eq!(through.contains("\"usage\""), with_usage, "{through}");
        }
        // Usage was accounted for all four, also when the client did not
        // ask (the Edge asked, and the node cut that event out).
        let metrics = read_all({
            let mut s = TcpStream::connect(edge).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .unwrap();
            s
        });
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("iop_tokens_total{model=\"chat\",provider=\"oa\",kind=\"output\"}")
            })
            .expect("output tokens");
        assert!(line.ends_with(" 20"), "5 tokens × 4 requests: {line}");
        // The Node recorded each tunnel as a run, under the id the Edge gave
        // the tunnel.
        wait_until("four completed tunnels in the run store", || {
            let runs = stack.stored_runs();
            runs.len() == 4
                && runs.iter().all(|r| {
                    r["status"] == "completed"
                        && r["target"] == "m"
                        && r["run_id"]
                            .as_str()
                            .is_some_and(|id| id.starts_with("run-"))
                })
        });
    }
}

#[test]
fn a_slow_reader_pauses_only_its_own_stream() {
    let driver = *drivers().last().unwrap();
    let stack = Stack::start(driver, "tunnel-slow");
    let edge = stack.edge.ingress_addr;
    let stats = std::sync::Arc::clone(stack.mock.stats());
    let completed = || stats.to_json()["streams_completed"].as_u64().unwrap_or(0);
    // A ~300 MB stream whose client reads its head and then stops.
    let mut slow = open_stream(edge, "/v1/chat/completions", &chat("big", true), "");
    let mut head = [0u8; 4096];
    let n = read_some(&mut slow, &mut head).unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    let completed_before = completed();
    // Another stream on the same node runs to its end meanwhile.
    let started = Instant::now();
    let other = read_all(open_stream(
        edge,
        "/v1/chat/completions",
        &chat("chat", true),
        "",
    ));
    assert!(other.contains("data: [DONE]"), "{other}");
    assert!(started.elapsed() < Duration::from_secs(15));
    std::thread::sleep(Duration::from_millis(500));
    // The slow stream is paused, not finished, and the node holds only its
    // window of it: its memory stays small although the provider could
    // send ~300 MB.
    assert_eq!(
        completed(),
        completed_before + 1,
        "only the other stream ended"
    );
    let pid = stack.node.as_ref().expect("node").0.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .expect("VmRSS");
    assert!(
        rss_kb < 64 * 1024,
        "node RSS {rss_kb} kB while a stream is paused"
    );
    // Leaving ends it at the provider, and frees the lease.
    let gone_before = stats.streams_client_gone();
    drop(slow);
    wait_until("the provider to see the slow stream closed", || {
        stats.streams_client_gone() > gone_before
    });
    wait_until("every lease released", || {
        stack.edge.pools.outstanding() == 0
    });
}

#[test]
fn a_node_killed_mid_tunnel_cuts_the_client_stream_and_frees_the_lease() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start(driver, "tunnel-kill");
    let edge = stack.edge.ingress_addr;
    let mut stream = open_stream(edge, "/v1/chat/completions", &chat("big", true), "");
    let mut head = [0u8; 4096];
    let n = read_some(&mut stream, &mut head).unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    stack.kill_node();
    // The Edge cuts the body (no last chunk) and closes: the client sees a
    // truncated stream, never a clean end.
    let rest = read_all(stream);
    assert!(
        !rest.ends_with("0\r\n\r\n"),
        "no clean end after the node died"
    );
    wait_until("the lease released", || stack.edge.pools.outstanding() == 0);
}

#[test]
fn a_mixed_pool_picks_the_wire_by_the_chosen_providers_kind() {
    // `mixed-big` lists an OpenAI-compatible provider (raw tunnel) and an
    // Ollama one (normalized run). The pool picks the least loaded; the
    // chosen provider's kind alone decides the wire (F17).
    let driver = *drivers().last().unwrap();
    let stack = Stack::start(driver, "tunnel-mixed");
    let edge = stack.edge.ingress_addr;
    let mut first = open_stream(edge, "/v1/chat/completions", &chat("mixed-big", true), "");
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("data: ") {
        let mut buf = [0u8; 4096];
        let n = read_some(&mut first, &mut buf).unwrap();
        assert!(n > 0, "the first stream ended early");
        seen.extend_from_slice(&buf[..n]);
    }
    // Tie → config order: the tunnel, whose bytes are the mock's own.
    assert!(String::from_utf8_lossy(&seen).contains("\"id\":\"chatcmpl-mock-"));
    // The tunnel holds a lease, so the next request goes to the Ollama
    // provider, normalized by the Edge (its ids are the Edge's run ids).
    let second = read_all(open_stream(
        edge,
        "/v1/chat/completions",
        &chat("mixed-big", false),
        "",
    ));
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(second.contains("\"id\":\"chatcmpl-run-"), "{second}");
    drop(first);
    wait_until("every lease released", || {
        stack.edge.pools.outstanding() == 0
    });
}

/// The default config with link frames of 128 KiB.
fn small_frames(mock: SocketAddr, garbage: SocketAddr) -> String {
    format!(
        "{}\nlink:\n  max_frame_len: 131072\n",
        config(mock, garbage)
    )
}

#[test]
fn a_body_that_cannot_fit_a_link_frame_is_refused_before_it_is_read() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start_edge_with(driver, "tunnel-frame-fit", small_frames, |options| {
        options.ingress_limits.max_body_bytes = 4 * 1024 * 1024;
    });
    stack.start_node();
    let edge = stack.edge.ingress_addr;
    // 128 KiB frames, 16 KiB heads and 16 KiB beside them: 96 KiB of body.
    let answer = |len: usize| {
        let mut body = chat("chat", false);
        body["messages"][0]["content"] = json!("p".repeat(len));
        read_all(open_stream(edge, "/v1/chat/completions", &body, ""))
    };
    let over = answer(100_000);
    assert!(over.starts_with("HTTP/1.1 413"), "{over}");
    assert!(over.contains("larger than 98304 bytes"), "{over}");
    // Just under the limit: sent to the Node (in two pieces of at most
    // 64 KiB, which it gathers), answered by the provider, which counts a
    // token each 4 bytes of the prompt it got.
    let under = answer(90_000);
    assert!(under.starts_with("HTTP/1.1 200"), "{under}");
    assert!(under.contains("\"prompt_tokens\":22500"), "{under}");
}
