//! The StreamGate end to end (F27, F32): the Edge (in-process) with its
//! OpenAI front door, the real `iop-node`, and the mock provider's stall
//! knobs. Each model group pairs a provider that stalls with one that
//! answers; selection takes the first in config order when both are idle,
//! so the first attempt stalls.
//!
//! - A stall before the first byte (`prefill-ms` far past the stall
//!   timeout) recovers on the other provider: the client sees one clean,
//!   complete answer — tunnel and normalized, Chat and Responses, streaming
//!   and not.
//! - A stall after the first byte (`stall-after`) ends with one OpenAI
//!   error event and a clean end of the stream, never `[DONE]`.
//! - Every lease is released; `/metrics` lists the F32 counters with their
//!   closed labels from the start and counts the recoveries; a sentinel
//!   prompt and key never reach `/metrics` or the Edge log.
//! - A 6 s prefill and a long stream under a 1 s / 1.5 s heartbeat on both sides
//!   never close the link and never fire the watchdog.
//!
//! Nothing here asserts a duration.

use std::io::Write;
use std::sync::{Mutex, Once};
use std::time::Duration;

use edge_proxy::ingress::Api;
use edge_proxy::ingress::gate::{Eligibility, Path, RecoveryResult};
use serde_json::{Value, json};

mod support;
use support::stack::*;

/// Stall timeout of the stalling providers, in ms.
const STALL_MS: u64 = 300;

fn config(mock: std::net::SocketAddr, _garbage: std::net::SocketAddr) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: oa-stall
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        health_probe: {{path: /health}}
        headers: {{x-mock-tokens: "5", x-mock-prefill-ms: "600000"}}
      - id: oa-good
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        health_probe: {{path: /health}}
        headers: {{x-mock-tokens: "5"}}
      - id: oa-stall-2
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        health_probe: {{path: /health}}
        headers: {{x-mock-tokens: "5", x-mock-prefill-ms: "600000"}}
      - id: ol-stall
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        headers: {{x-mock-tokens: "5", x-mock-prefill-ms: "600000"}}
      - id: ol-good
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        headers: {{x-mock-tokens: "5"}}
      - id: oa-mid
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        health_probe: {{path: /health}}
        headers: {{x-mock-tokens: "10", x-mock-stall-after: "2"}}
      - id: ol-mid
        kind: ollama
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        headers: {{x-mock-tokens: "10", x-mock-stall-after: "2"}}
      - id: oa-prefill
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: 10000
        headers: {{x-mock-tokens: "5", x-mock-prefill-ms: "6000"}}
      - id: oa-long
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: 1000
        headers: {{x-mock-tokens: "200", x-mock-delay-ms: "30"}}
model_groups:
  - name: tunnel-stall
    target: m
    providers: [oa-stall, oa-good]
  - name: normalized-stall
    target: m
    providers: [ol-stall, ol-good]
  - name: all-stall
    target: m
    providers: [oa-stall, oa-stall-2]
  - name: mixed-stall
    target: m
    providers: [ol-stall, oa-good]
  - name: tunnel-mid
    target: m
    providers: [oa-mid]
  - name: normalized-mid
    target: m
    providers: [ol-mid]
  - name: prefill
    target: m
    providers: [oa-prefill]
  - name: long
    target: m
    providers: [oa-long]
"#
    )
}

/// Sentinels that must never reach `/metrics` or the Edge log.
const SENTINEL_PROMPT: &str = "SENTINEL-PROMPT-9c1e77";
const SENTINEL_KEY: &str = "sk-SENTINEL-KEY-41d0aa";

/// Every log line of this test process (the Edge runs in it).
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Capture;

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_writer(|| Capture)
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .try_init();
    });
}

fn edge_log() -> String {
    String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned()
}

fn start(driver: framing::io_driver::IoDriver, name: &str) -> Stack {
    capture_logs();
    let mut stack = Stack::start_edge(driver, name, config);
    stack.start_node();
    stack
}

/// One HTTP answer of the Edge's ingress.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// The body, de-chunked.
    body: String,
    /// A chunked body ended with its last chunk (a clean end).
    clean_end: bool,
}

/// Sends one request with `connection: close` and reads the whole answer.
fn http(stack: &Stack, method: &str, path: &str, body: &str) -> Answer {
    let mut socket = std::net::TcpStream::connect(stack.edge.ingress_addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        socket,
        "{method} {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {SENTINEL_KEY}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match read_some(&mut socket, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    parse_answer(&raw)
}

fn parse_answer(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head: {}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head[9..12].parse().expect("a status code");
    let mut rest = &raw[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return Answer {
            status,
            body: String::from_utf8_lossy(rest).into_owned(),
            clean_end: true,
        };
    }
    let mut body = Vec::new();
    let mut clean_end = false;
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&rest[..line_end]).into_owned();
        let Ok(size) = usize::from_str_radix(size_text.trim(), 16) else {
            break;
        };
        rest = &rest[line_end + 2..];
        if size == 0 {
            clean_end = rest.starts_with(b"\r\n");
            break;
        }
        if rest.len() < size + 2 {
            body.extend_from_slice(rest);
            break;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
    Answer {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
        clean_end,
    }
}

fn request_body(api: Api, model: &str, stream: bool) -> String {
    let prompt = format!("say hello {SENTINEL_PROMPT}");
    match api {
        Api::Chat => json!({"model": model, "stream": stream,
            "messages": [{"role": "user", "content": prompt}]}),
        Api::Responses => json!({"model": model, "stream": stream, "input": prompt}),
    }
    .to_string()
}

fn ask(stack: &Stack, api: Api, model: &str, stream: bool) -> Answer {
    http(stack, "POST", api.path(), &request_body(api, model, stream))
}

/// The SSE `data:` payloads of a body, in order.
fn sse_data(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

fn error_events(body: &str) -> usize {
    sse_data(body)
        .iter()
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter(|data| data.get("error").is_some_and(|e| !e.is_null()))
        .count()
}

/// Asserts one clean, complete answer of `api`.
fn assert_complete(api: Api, stream: bool, answer: &Answer) {
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.clean_end, "{answer:?}");
    assert_eq!(error_events(&answer.body), 0, "{answer:?}");
    match (api, stream) {
        (Api::Chat, true) => {
            let data = sse_data(&answer.body);
            assert_eq!(
                data.last().map(String::as_str),
                Some("[DONE]"),
                "{answer:?}"
            );
            let text: String = data
                .iter()
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .filter_map(|d| {
                    d["choices"][0]["delta"]["content"]
                        .as_str()
                        .map(str::to_owned)
                })
                .collect();
            assert!(!text.is_empty(), "{answer:?}");
            // One answer: a single role chunk opened it.
            assert_eq!(answer.body.matches(r#""role":"assistant""#).count(), 1);
        }
        (Api::Chat, false) => {
            let body: Value = serde_json::from_str(&answer.body).expect("JSON");
            assert!(
                body["choices"][0]["message"]["content"]
                    .as_str()
                    .is_some_and(|t| !t.is_empty()),
                "{answer:?}"
            );
        }
        (Api::Responses, true) => {
            assert_eq!(
                answer.body.matches("event: response.completed").count(),
                1,
                "{answer:?}"
            );
            assert_eq!(answer.body.matches("event: response.created").count(), 1);
        }
        (Api::Responses, false) => {
            let body: Value = serde_json::from_str(&answer.body).expect("JSON");
            assert_eq!(body["status"], "completed", "{answer:?}");
        }
    }
}

fn metrics(stack: &Stack) -> String {
    http(stack, "GET", "/metrics", "").body
}

fn counter(text: &str, name: &str, labels: &str) -> u64 {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{prefix} missing:\n{text}"))
        .parse()
        .unwrap()
}

const ELIGIBILITY: &str = "iop_edge_liveness_recovery_eligibility_total";
const RESULTS: &str = "iop_edge_liveness_recovery_results_total";

fn labels(api: Api, path: Path, key: &str, value: &str) -> String {
    format!(
        "api=\"{}\",path=\"{}\",{key}=\"{value}\"",
        api.label(),
        path.label()
    )
}

fn released(stack: &Stack) {
    wait_until("every lease released", || {
        stack.edge.pools.outstanding() == 0
    });
}

#[test]
fn a_stall_before_the_first_byte_recovers_on_the_other_provider() {
    for driver in drivers() {
        let stack = start(driver, "gate-recover");
        for (model, path) in [
            ("tunnel-stall", Path::Tunnel),
            ("normalized-stall", Path::Normalized),
        ] {
            for api in [Api::Chat, Api::Responses] {
                for stream in [true, false] {
                    let answer = ask(&stack, api, model, stream);
                    assert_complete(api, stream, &answer);
                    released(&stack);
                }
                let text = metrics(&stack);
                let eligible = labels(api, path, "eligibility", Eligibility::Eligible.label());
                assert_eq!(counter(&text, ELIGIBILITY, &eligible), 2, "{model} {api:?}");
                let recovered = labels(api, path, "result", RecoveryResult::Recovered.label());
                assert_eq!(counter(&text, RESULTS, &recovered), 2, "{model} {api:?}");
            }
        }
        assert_eq!(stack.edge.pools.outstanding(), 0);
    }
}

#[test]
fn a_recovery_may_change_path_and_the_budget_is_shared() {
    for driver in drivers() {
        let stack = start(driver, "gate-budget");
        // A normalized attempt stalls; the new attempt is a tunnel.
        assert_complete(
            Api::Chat,
            true,
            &ask(&stack, Api::Chat, "mixed-stall", true),
        );
        released(&stack);
        // Both providers stall: the second stall finds the budget spent and
        // the client gets the stall's 504, once.
        let answer = ask(&stack, Api::Responses, "all-stall", true);
        assert_eq!(answer.status, 504, "{answer:?}");
        let error: Value = serde_json::from_str(&answer.body).expect("JSON error");
        assert_eq!(error["error"]["code"], "upstream_timeout", "{answer:?}");
        released(&stack);
        let text = metrics(&stack);
        let chat = |path, key, value: &str| {
            counter(
                &text,
                if key == "result" {
                    RESULTS
                } else {
                    ELIGIBILITY
                },
                &labels(Api::Chat, path, key, value),
            )
        };
        assert_eq!(chat(Path::Normalized, "eligibility", "eligible"), 1);
        assert_eq!(chat(Path::Normalized, "result", "recovered"), 1);
        let responses = |key, value: &str| {
            let name = if key == "result" {
                RESULTS
            } else {
                ELIGIBILITY
            };
            counter(
                &text,
                name,
                &labels(Api::Responses, Path::Tunnel, key, value),
            )
        };
        assert_eq!(responses("eligibility", "eligible"), 1);
        assert_eq!(responses("eligibility", "budget_exhausted"), 1);
        assert_eq!(responses("result", "stalled"), 1);
    }
}

#[test]
fn a_stall_after_the_first_byte_ends_with_one_clean_error_event() {
    for driver in drivers() {
        let stack = start(driver, "gate-committed");
        for (model, path) in [
            ("tunnel-mid", Path::Tunnel),
            ("normalized-mid", Path::Normalized),
        ] {
            for api in [Api::Chat, Api::Responses] {
                let answer = ask(&stack, api, model, true);
                assert_eq!(answer.status, 200, "{answer:?}");
                assert!(answer.body.contains("data: "), "{answer:?}");
                assert_eq!(error_events(&answer.body), 1, "{model} {api:?}: {answer:?}");
                assert!(!answer.body.contains("[DONE]"), "{answer:?}");
                assert!(answer.clean_end, "a clean end, not a cut: {answer:?}");
                released(&stack);
                let text = metrics(&stack);
                let committed = labels(api, path, "eligibility", Eligibility::Committed.label());
                assert_eq!(
                    counter(&text, ELIGIBILITY, &committed),
                    1,
                    "{model} {api:?}"
                );
            }
        }
    }
}

#[test]
fn metrics_list_the_recovery_counters_from_the_start_and_no_sentinel_leaks() {
    let driver = drivers()[0];
    let stack = start(driver, "gate-metrics");
    let before = metrics(&stack);
    for name in [ELIGIBILITY, RESULTS] {
        assert!(
            before.contains(&format!("# TYPE {name} counter")),
            "{before}"
        );
    }
    let mut combinations = 0;
    for api in [Api::Chat, Api::Responses] {
        for path in Path::ALL {
            for value in Eligibility::ALL {
                let l = labels(api, path, "eligibility", value.label());
                assert_eq!(counter(&before, ELIGIBILITY, &l), 0);
                combinations += 1;
            }
            for value in RecoveryResult::ALL {
                let l = labels(api, path, "result", value.label());
                assert_eq!(counter(&before, RESULTS, &l), 0);
                combinations += 1;
            }
        }
    }
    // The label sets are closed: no other line of these counters.
    let lines = before
        .lines()
        .filter(|l| l.starts_with(ELIGIBILITY) || l.starts_with(RESULTS))
        .count();
    assert_eq!(lines, combinations);

    assert_complete(
        Api::Chat,
        true,
        &ask(&stack, Api::Chat, "tunnel-stall", true),
    );
    released(&stack);
    let after = metrics(&stack);
    let eligible = labels(Api::Chat, Path::Tunnel, "eligibility", "eligible");
    assert_eq!(counter(&after, ELIGIBILITY, &eligible), 1);
    let recovered = labels(Api::Chat, Path::Tunnel, "result", "recovered");
    assert_eq!(counter(&after, RESULTS, &recovered), 1);
    for text in [&after, &edge_log()] {
        assert!(!text.contains(SENTINEL_PROMPT));
        assert!(!text.contains(SENTINEL_KEY));
    }
    let log = edge_log();
    let observations: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("edge_liveness_recovery_observation"))
        .collect();
    assert!(
        observations.len() >= 2,
        "the gate logs its eligibility and its result"
    );
    for line in observations {
        // Closed values only: no run/tunnel id, node or provider id.
        for id in ["run-", "node-a", "oa-stall", "oa-good", "tok-a"] {
            assert!(!line.contains(id), "{id} in {line}");
        }
        // (Other tests of this binary log too: any closed `api` value.)
        assert!(
            line.contains("api=\"chat_completions\"") || line.contains("api=\"responses\""),
            "{line}"
        );
    }
}

#[test]
fn a_long_prefill_and_a_long_stream_keep_the_link_under_a_short_heartbeat() {
    for driver in drivers() {
        capture_logs();
        let mut stack = Stack::start_edge_with(driver, "gate-heartbeat", config, |options| {
            options.heartbeat.interval_ms = 1000;
            options.heartbeat.wait_ms = 1500;
        });
        // The same short profile on the node's side of the link.
        stack.node_args = [
            "--heartbeat-interval-ms",
            "1000",
            "--heartbeat-wait-ms",
            "1500",
        ]
        .map(String::from)
        .to_vec();
        stack.start_node();
        let generation = stack.generation();
        let stack = &stack;
        let (prefill, long) = std::thread::scope(|scope| {
            let prefill = scope.spawn(|| ask(stack, Api::Chat, "prefill", true));
            let long = scope.spawn(|| ask(stack, Api::Chat, "long", true));
            (prefill.join().unwrap(), long.join().unwrap())
        });
        assert_complete(Api::Chat, true, &prefill);
        assert_complete(Api::Chat, true, &long);
        let tokens = sse_data(&long.body)
            .iter()
            .filter(|d| d.contains(r#""content":"#) && !d.contains(r#""content":"""#))
            .count();
        assert_eq!(tokens, 200, "every token of the long stream");
        assert_eq!(stack.generation(), generation, "the link never closed");
        // The short profile was in force: the Edge's pings were answered.
        assert!(
            stack
                .edge
                .registry
                .status()
                .iter()
                .any(|s| s.last_heartbeat_rtt_us.is_some()),
            "a heartbeat round trip during the requests"
        );
        released(stack);
        let node_log = stack.node_log.lock().unwrap().join("\n");
        assert!(!node_log.contains("heartbeat_timeout"), "{node_log}");
        assert!(!node_log.to_ascii_lowercase().contains("response_stalled"));
        let text = metrics(stack);
        for api in [Api::Chat, Api::Responses] {
            for path in Path::ALL {
                for value in Eligibility::ALL {
                    let l = labels(api, path, "eligibility", value.label());
                    assert_eq!(counter(&text, ELIGIBILITY, &l), 0, "no stall: {l}");
                }
            }
        }
    }
}
