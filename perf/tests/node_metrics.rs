//! The Node's admin port and F30 observability, end to end: a real
//! `iop-node` (`--admin-addr 127.0.0.1:0`) linked to an in-process Edge,
//! the mock provider's `stall-after` knob for real stalls, and real
//! `/metrics` scrapes over loopback.
//!
//! Shows: the metric names and their closed label sets are all listed at
//! zero before the first event; a stalled run and a stalled tunnel count
//! under their evidence labels and write one `node_response_stall_observation`
//! log event each; and sentinel secrets (a provider API key, the node token)
//! and prompt text appear in neither `/metrics` nor the node's logs.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use edge_proxy::dispatch::SubmitRun;
use proto::v1::{ChatMessage, FailureCode, RunInput};

mod support;
use support::stack::*;

/// Stall timeout of the stalling provider, ms.
const STALL_MS: u64 = 300;
/// Prompt text that must never leave the data path.
const PROMPT_SENTINEL: &str = "PROMPT-SENTINEL-a9c3e1";
/// The provider API key: configured, sent to the provider, never shown.
const KEY_SENTINEL: &str = "sk-KEY-SENTINEL-5d2b77";

fn config(mock: SocketAddr, _garbage: SocketAddr) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: stalls
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        response_stall_timeout_ms: {STALL_MS}
        health_probe: {{path: /v1/models}}
        headers: {{authorization: "Bearer {KEY_SENTINEL}", x-mock-tokens: "10", x-mock-stall-after: "2"}}
model_groups:
  - name: stalls
    target: m
    providers: [stalls]
"#
    )
}

/// The Edge, the mock and a node with its admin port on a free port.
fn start(driver: framing::io_driver::IoDriver, name: &str) -> (Stack, SocketAddr) {
    let mut stack = Stack::start_edge(driver, name, config);
    stack.node_args = vec!["--admin-addr".into(), "127.0.0.1:0".into()];
    stack.start_node();
    let listening = stack.node_events("admin_listening");
    let addr = listening
        .first()
        .and_then(|e| e["addr"].as_str())
        .expect("an admin_listening event with the bound address");
    let addr = addr.parse().expect("a socket address");
    (stack, addr)
}

/// `GET path` on the admin port: (status line, body).
fn get(admin: SocketAddr, path: &str) -> (String, String) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    let response = http_exchange(admin, request.as_bytes());
    let response = String::from_utf8(response).expect("utf-8");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head");
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, body.to_owned())
}

/// One sample line: name, labels (sorted `k=v`), value.
type Sample = (String, BTreeSet<(String, String)>, f64);

fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            let value: f64 = value.parse().expect("a number");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("k=v");
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels, value)
        })
        .collect()
}

/// The value of `name` with exactly `labels` (`le` excluded unless given).
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeSet<_> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let found: Vec<_> = samples
        .iter()
        .filter(|(n, l, _)| n == name && *l == want)
        .collect();
    assert_eq!(found.len(), 1, "one {name}{labels:?}");
    found[0].2
}

const STALLS: &str = "iop_node_response_stalls_total";
const DURATION: &str = "iop_node_response_stall_duration_seconds";
const KINDS: [&str; 2] = ["run", "tunnel"];
const HEALTHS: [&str; 3] = ["available", "unavailable", "unknown"];
const RETRYABLE: [&str; 2] = ["true", "false"];

/// Every label set of the closed product, as `(kind, health, retryable)`.
fn closed_product() -> Vec<[&'static str; 3]> {
    let mut all = Vec::new();
    for kind in KINDS {
        for health in HEALTHS {
            for retryable in RETRYABLE {
                all.push([kind, health, retryable]);
            }
        }
    }
    all
}

fn labels(combo: [&str; 3]) -> [(&'static str, &str); 3] {
    [
        ("kind", combo[0]),
        ("provider_health", combo[1]),
        ("retryable", combo[2]),
    ]
}

/// Sum of `name` over `retryable` for `kind` and `health`.
fn stalls(samples: &[Sample], kind: &str, health: &str) -> f64 {
    RETRYABLE
        .iter()
        .map(|r| value(samples, STALLS, &labels([kind, health, r])))
        .sum()
}

async fn stalled_run(stack: &Stack) {
    let run = SubmitRun {
        adapter: "stalls".into(),
        target: "m".into(),
        input: RunInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: format!("please repeat {PROMPT_SENTINEL}").into(),
                ..ChatMessage::default()
            }],
            ..RunInput::default()
        },
        node: Some("node-a".into()),
        response_stall_timeout_ms: STALL_MS,
        ..SubmitRun::default()
    };
    let stream = within(stack.edge.dispatcher.submit_run(run))
        .await
        .expect("submitted");
    let events = events(stream).await;
    assert_eq!(
        error_code(&events),
        FailureCode::ResponseStalled,
        "{events:?}"
    );
}

/// A streamed chat completion through the Edge's front door (the raw
/// tunnel to `stalls`); the whole response.
fn tunnel_chat(stack: &Stack) -> String {
    let body = serde_json::json!({
        "model": "stalls",
        "stream": true,
        "messages": [{"role": "user", "content": PROMPT_SENTINEL}],
    });
    post_chat(stack.edge.ingress_addr, &body.to_string())
}

#[test]
fn every_closed_series_is_listed_at_zero_before_the_first_event() {
    for driver in drivers() {
        let (_stack, admin) = start(driver, "metrics-zero");
        let (status, text) = get(admin, "/metrics");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        let (store, all): (Vec<_>, Vec<_>) = samples(&text)
            .into_iter()
            .partition(|(n, _, _)| n.starts_with("iop_node_run_store_"));
        // The run store's counters (F15) are listed too, at 0 before any run.
        let store_names: BTreeSet<_> = store.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            store_names,
            BTreeSet::from([
                "iop_node_run_store_commits_total",
                "iop_node_run_store_updates_total",
                "iop_node_run_store_waiting",
            ])
        );
        assert!(store.iter().all(|(_, _, v)| *v == 0.0), "{store:?}");
        let names: BTreeSet<_> = all.iter().map(|(n, _, _)| n.as_str()).collect();
        let want: BTreeSet<_> = [
            STALLS.to_owned(),
            format!("{DURATION}_bucket"),
            format!("{DURATION}_sum"),
            format!("{DURATION}_count"),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            names,
            want.iter().map(String::as_str).collect(),
            "exactly the F30 metric names besides the run store's"
        );
        assert!(text.contains(&format!("# TYPE {STALLS} counter")));
        assert!(text.contains(&format!("# TYPE {DURATION} histogram")));
        // Every label set is one of the closed product, and every member of
        // the product is there.
        let mut seen = BTreeSet::new();
        for (name, set, v) in &all {
            assert_eq!(*v, 0.0, "{name}{set:?} before any stall");
            let keys: Vec<_> = set.iter().map(|(k, _)| k.as_str()).collect();
            let get = |key: &str| {
                set.iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .unwrap()
            };
            if name.ends_with("_bucket") {
                assert_eq!(keys, ["kind", "le", "provider_health", "retryable"]);
            } else {
                assert_eq!(keys, ["kind", "provider_health", "retryable"]);
            }
            assert!(KINDS.contains(&get("kind").as_str()));
            assert!(HEALTHS.contains(&get("provider_health").as_str()));
            assert!(RETRYABLE.contains(&get("retryable").as_str()));
            seen.insert((get("kind"), get("provider_health"), get("retryable")));
        }
        assert_eq!(seen.len(), closed_product().len());
        for combo in closed_product() {
            assert_eq!(value(&all, STALLS, &labels(combo)), 0.0);
            assert_eq!(
                value(&all, &format!("{DURATION}_count"), &labels(combo)),
                0.0
            );
        }
        let (status, body) = get(admin, "/healthz");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert_eq!(body, "ok\n");
        let (status, _) = get(admin, "/runs");
        assert!(status.starts_with("HTTP/1.1 404"), "{status}");
    }
}

#[test]
fn real_stalls_count_and_log_under_closed_labels_without_secrets() {
    for driver in drivers() {
        let (stack, admin) = start(driver, "metrics-stall");
        // A run that stalls while its provider is healthy: available.
        block_on(stalled_run(&stack));
        // A run that stalls while the provider is down at probe time.
        stack.mock.stats().set_healthy(false);
        block_on(stalled_run(&stack));
        stack.mock.stats().set_healthy(true);
        // A tunnel through the front door that stalls after its head.
        let response = tunnel_chat(&stack);
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        wait_until("the tunnel's stall logged", || {
            stack.node_events("node_response_stall_observation").len() == 3
        });

        let (_, text) = get(admin, "/metrics");
        let all = samples(&text);
        assert_eq!(stalls(&all, "run", "available"), 1.0);
        assert_eq!(stalls(&all, "run", "unavailable"), 1.0);
        assert_eq!(stalls(&all, "tunnel", "available"), 1.0);
        let total: f64 = closed_product()
            .into_iter()
            .map(|combo| value(&all, STALLS, &labels(combo)))
            .sum();
        assert_eq!(total, 3.0, "nothing else counted");
        let count: f64 = closed_product()
            .into_iter()
            .map(|combo| value(&all, &format!("{DURATION}_count"), &labels(combo)))
            .sum();
        assert_eq!(count, 3.0);
        // Each stall was silent for at least its timeout.
        let sum: f64 = closed_product()
            .into_iter()
            .map(|combo| value(&all, &format!("{DURATION}_sum"), &labels(combo)))
            .sum();
        // Whole milliseconds, summed as f64 seconds: three stalls of exactly
        // the timeout sum to 0.8999999999999999, not 0.9.
        assert!((sum * 1e3).round() >= (3 * STALL_MS) as f64, "{sum}");

        // The log events: closed values and numbers only.
        let logged = stack.node_events("node_response_stall_observation");
        let mut kinds = Vec::new();
        for (i, event) in logged.iter().enumerate() {
            kinds.push((
                event["kind"].as_str().unwrap().to_owned(),
                event["provider_health"].as_str().unwrap().to_owned(),
            ));
            // F22's fail-closed pairs.
            let pair = match event["provider_health"].as_str().unwrap() {
                "available" => "request_stalled",
                "unavailable" => "provider_unhealthy",
                _ => "health_unknown",
            };
            assert_eq!(event["liveness_classification"], pair, "{event}");
            assert_eq!(event["stall_timeout_ms"], STALL_MS, "{event}");
            assert!(
                event["duration_ms"].as_u64().unwrap() >= STALL_MS,
                "{event}"
            );
            assert!(event["retryable"].is_boolean(), "{event}");
            // One connection: its sequence counts the observations.
            assert_eq!(event["health_observation_seq"], i as u64 + 1, "{event}");
            let keys: BTreeSet<_> = event.as_object().unwrap().keys().cloned().collect();
            for key in &keys {
                assert!(
                    [
                        "timestamp",
                        "level",
                        "target",
                        "message",
                        "event",
                        "kind",
                        "provider_health",
                        "liveness_classification",
                        "retryable",
                        "stall_timeout_ms",
                        "duration_ms",
                        "health_observation_seq",
                    ]
                    .contains(&key.as_str()),
                    "unexpected log field {key}: {event}"
                );
            }
        }
        let want = [
            ("run", "available"),
            ("run", "unavailable"),
            ("tunnel", "available"),
        ];
        assert_eq!(
            kinds,
            want.map(|(k, h)| (k.to_owned(), h.to_owned())),
            "{logged:?}"
        );

        // No sentinel anywhere an operator looks.
        let log = stack.node_log.lock().unwrap().join("\n");
        for sentinel in [PROMPT_SENTINEL, KEY_SENTINEL, "tok-a"] {
            assert!(!text.contains(sentinel), "{sentinel} in /metrics");
            assert!(!log.contains(sentinel), "{sentinel} in the node's log");
        }
    }
}
