//! The Node's commands (`node_runner::commands`, F14, F25) against the real
//! mock provider (in-process, its own thread), under both monoio drivers:
//! the exact-target probe (per adapter kind, and its fail-closed mapping:
//! `node_runner::adapter::probe`), and the Ollama API tunnel's calls,
//! errors and bounds. Lookups and validation without a provider are unit tests in
//! `node-runner/src/commands/tests.rs`.

use std::cell::Cell;
use std::time::Duration;

use node_runner::adapter::{AdapterConfig, AnyAdapter, OllamaAdapter, OpenAiAdapter, OpenAiFlavor};
use node_runner::commands::{CommandContext, CommandLimits, NamedAdapter, run_command};
use node_runner::provider_http::{BaseUrl, ProviderClient, ProviderClientConfig};
use perf::mock_provider::Route;
use proto::v1::{
    FailureCode, FailureSide, NodeCommandKind, NodeCommandRequest, NodeCommandResponse,
    OllamaApiCall, OllamaApiRequest, ProviderHealth, TransportStatusResult,
};
use serde_json::{Value, json};

mod support;
use support::stack::start_garbage_provider;
use support::{each_driver, start};

fn client() -> ProviderClient {
    ProviderClient::new(ProviderClientConfig::default())
}

/// An ollama adapter `llm` serving `m`, with `x-mock-*` knob headers.
fn ollama_adapter(base: &BaseUrl, knobs: &[(&str, &str)]) -> NamedAdapter {
    let mut config = AdapterConfig::new("llm", base.clone());
    config.targets = vec!["m".into()];
    config.headers = knobs
        .iter()
        .map(|(k, v)| (format!("x-mock-{k}").into(), v.to_string().into()))
        .collect();
    NamedAdapter::new(AnyAdapter::Ollama(OllamaAdapter::new(config, client())))
}

/// Runs `request` with `limits` and checks the response contract.
async fn run(
    adapters: &[NamedAdapter],
    seq: &Cell<u64>,
    limits: CommandLimits,
    request: NodeCommandRequest,
) -> Vec<NodeCommandResponse> {
    let next_seq = || {
        seq.set(seq.get() + 1);
        seq.get()
    };
    let ctx = CommandContext {
        adapters,
        active_runs: &|_| 0,
        transport: TransportStatusResult::default(),
        next_health_seq: &next_seq,
        client: client(),
        limits,
    };
    let kind = request.kind;
    let mut out = Vec::new();
    run_command(&ctx, request, &mut |r| out.push(r)).await;
    let finals = out.iter().filter(|r| r.r#final).count();
    assert_eq!(finals, 1, "{out:?}");
    assert!(out.last().is_some_and(|r| r.r#final), "{out:?}");
    assert!(out.iter().all(|r| r.kind == kind), "{out:?}");
    out
}

fn probe(adapter: &str, target: &str) -> NodeCommandRequest {
    let mut request = NodeCommandRequest {
        adapter: adapter.into(),
        target: target.into(),
        ..NodeCommandRequest::default()
    };
    request.set_kind(NodeCommandKind::Capabilities);
    request
}

fn ollama(call: OllamaApiCall, body: Value) -> NodeCommandRequest {
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let mut api = OllamaApiRequest {
        body_json: body.into(),
        ..OllamaApiRequest::default()
    };
    api.set_call(call);
    let mut request = NodeCommandRequest {
        ollama: Some(api),
        ..NodeCommandRequest::default()
    };
    request.set_kind(NodeCommandKind::OllamaApi);
    request
}

/// The single final response's provider status and JSON body.
fn answer(out: &[NodeCommandResponse]) -> (u32, Value) {
    let api = out
        .last()
        .unwrap()
        .ollama
        .clone()
        .expect("an Ollama answer");
    let body = if api.body_json.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&api.body_json).unwrap()
    };
    (api.http_status, body)
}

fn failure_of(out: &[NodeCommandResponse]) -> (FailureCode, FailureSide, u32) {
    let last = out.last().unwrap();
    assert!(!last.ok, "{last:?}");
    let f = last.failure.as_ref().expect("a failure");
    (f.code(), f.side(), f.http_status)
}

#[test]
fn exact_target_probe_available_then_unavailable_with_increasing_seq() {
    each_driver(|| async {
        let (mock, base) = start();
        let adapters = [ollama_adapter(&base, &[])];
        let seq = Cell::new(0);
        let status = |out: &[NodeCommandResponse]| {
            let probe = out[0].capabilities.clone().unwrap().probe.unwrap();
            assert_eq!(
                (probe.adapter.as_str(), probe.target.as_str()),
                ("llm", "m")
            );
            (probe.status(), probe.health_observation_seq)
        };
        let limits = CommandLimits::default();
        let out = run(&adapters, &seq, limits, probe("llm", "m")).await;
        assert_eq!(status(&out), (ProviderHealth::Available, 1));
        assert_eq!(
            mock.stats().requests(Route::OllamaTags),
            1,
            "probed /api/tags"
        );
        mock.shutdown();
        let out = run(&adapters, &seq, limits, probe("llm", "m")).await;
        assert_eq!(status(&out), (ProviderHealth::Unavailable, 2));
    });
}

/// An adapter of `kind` named `name` on `base`, serving `targets` (none:
/// any), probed with `health_path` within `timeout_ms`, with knob headers.
fn probed(
    name: &str,
    kind: &str,
    base: &BaseUrl,
    targets: &[&str],
    health_path: &str,
    timeout_ms: u64,
    knobs: &[(&str, &str)],
) -> NamedAdapter {
    let mut config = AdapterConfig::new(name, base.clone());
    config.targets = targets.iter().map(|t| t.to_string()).collect();
    config.health_path = health_path.into();
    config.health_timeout_ms = timeout_ms;
    config.headers = knobs
        .iter()
        .map(|(k, v)| (format!("x-mock-{k}").into(), v.to_string().into()))
        .collect();
    NamedAdapter::new(match kind {
        "ollama" => AnyAdapter::Ollama(OllamaAdapter::new(config, client())),
        "vllm" => AnyAdapter::OpenAi(OpenAiAdapter::new(config, OpenAiFlavor::Vllm, client())),
        _ => AnyAdapter::OpenAi(OpenAiAdapter::new(
            config,
            OpenAiFlavor::OpenAiCompat,
            client(),
        )),
    })
}

/// The probe's status and sequence, checking it names `adapter`/`target`.
async fn probe_status(
    adapters: &[NamedAdapter],
    seq: &Cell<u64>,
    adapter: &str,
    target: &str,
) -> (ProviderHealth, u64) {
    let out = run(
        adapters,
        seq,
        CommandLimits::default(),
        probe(adapter, target),
    )
    .await;
    assert!(out[0].ok, "{out:?}");
    let probe = out[0].capabilities.clone().unwrap().probe.unwrap();
    assert_eq!(
        (probe.adapter.as_str(), probe.target.as_str()),
        (adapter, target)
    );
    (probe.status(), probe.health_observation_seq)
}

#[test]
fn exact_target_probe_per_kind_needs_the_target_listed() {
    each_driver(|| async {
        let (mock, base) = start();
        let stats = mock.stats();
        // As the Edge configures them: each kind with its default path.
        let adapters = [
            probed("oa", "openai_compat", &base, &[], "/v1/models", 0, &[]),
            probed("vl", "vllm", &base, &[], "/health", 0, &[]),
            probed("ol", "ollama", &base, &[], "/api/tags", 0, &[]),
        ];
        let seq = Cell::new(0);
        use ProviderHealth::*;
        let mut want_seq = 0;
        let mut expect = |got: (ProviderHealth, u64), health: ProviderHealth, what: &str| {
            want_seq += 1;
            assert_eq!(got, (health, want_seq), "{what}");
        };
        // Listed targets are available; `m` is `m:latest` to Ollama.
        for name in ["oa", "vl", "ol"] {
            for target in ["m", "mock-model"] {
                let got = probe_status(&adapters, &seq, name, target).await;
                expect(got, Available, &format!("{name} {target}"));
            }
        }
        let got = probe_status(&adapters, &seq, "ol", "m:latest").await;
        expect(got, Available, "ollama with its tag");
        // What each kind asked: openai_compat and ollama their list only,
        // vllm /health and the list.
        assert_eq!(stats.requests(Route::Health), 2, "vllm only");
        assert_eq!(stats.requests(Route::Models), 4);
        assert_eq!(stats.requests(Route::OllamaTags), 3);
        // A target the provider does not list is unavailable, on every kind.
        for name in ["oa", "vl", "ol"] {
            let got = probe_status(&adapters, &seq, name, "not-pulled").await;
            expect(got, Unavailable, name);
        }
        let got = probe_status(&adapters, &seq, "ol", "m:7b").await;
        expect(got, Unavailable, "another tag of a listed model");
        // A provider toggled down fails its health and its lists.
        stats.set_healthy(false);
        for name in ["oa", "vl", "ol"] {
            let got = probe_status(&adapters, &seq, name, "m").await;
            expect(got, Unavailable, name);
        }
        stats.set_healthy(true);
        let got = probe_status(&adapters, &seq, "vl", "m").await;
        expect(got, Available, "up again");
        mock.shutdown();
    });
}

#[test]
fn probe_failures_map_fail_closed() {
    each_driver(|| async {
        let (mock, base) = start();
        let dead = BaseUrl::parse("http://127.0.0.1:1").unwrap();
        let garbage = BaseUrl::parse(&format!("http://{}", start_garbage_provider())).unwrap();
        let m = &["m"][..];
        let adapters = [
            probed("refused", "vllm", &dead, m, "", 0, &[]),
            probed(
                "5xx",
                "openai_compat",
                &base,
                m,
                "",
                0,
                &[("status", "503")],
            ),
            probed(
                "401",
                "openai_compat",
                &base,
                m,
                "",
                0,
                &[("status", "401")],
            ),
            probed(
                "slow",
                "ollama",
                &base,
                m,
                "",
                100,
                &[("headers-delay-ms", "2000")],
            ),
            probed("garbage", "openai_compat", &garbage, m, "", 0, &[]),
            probed("garbage-ol", "ollama", &garbage, m, "", 0, &[]),
            // vllm: /health answers 200 but the list is not JSON.
            probed("half", "vllm", &garbage, m, "/health", 0, &[]),
        ];
        let seq = Cell::new(0);
        use ProviderHealth::*;
        let cases = [
            ("refused", Unavailable),
            ("5xx", Unavailable),
            ("401", Unknown),
            ("slow", Unknown),
            ("garbage", Unknown),
            ("garbage-ol", Unknown),
            ("half", Unknown),
            // The provider would answer (and list `m`) after 2 s: only the
            // 100 ms bound makes this unknown.
            ("slow", Unknown),
        ];
        for (i, (name, health)) in cases.into_iter().enumerate() {
            let got = probe_status(&adapters, &seq, name, "m").await;
            assert_eq!(got, (health, i as u64 + 1), "{name}");
        }
        mock.shutdown();
    });
}

#[test]
fn probe_lookups_fail_typed_without_a_provider_call() {
    each_driver(|| async {
        let (mock, base) = start();
        let stats = mock.stats();
        let adapters = [probed("oa", "openai_compat", &base, &["m"], "", 0, &[])];
        let seq = Cell::new(0);
        let limits = CommandLimits::default();
        let cases = [
            ("nope", "m", FailureCode::UnknownAdapter),
            ("oa", "other", FailureCode::UnknownTarget),
            ("oa", "", FailureCode::InvalidRequest),
            ("", "m", FailureCode::InvalidRequest),
        ];
        for (adapter, target, code) in cases {
            let out = run(&adapters, &seq, limits, probe(adapter, target)).await;
            assert_eq!(failure_of(&out).0, code, "{adapter}/{target}");
            assert_eq!(failure_of(&out).1, FailureSide::Client);
        }
        assert_eq!(seq.get(), 0, "no probe, no sequence number");
        assert_eq!(stats.requests(Route::Models), 0, "no provider call");
        mock.shutdown();
    });
}

#[test]
fn tags_show_ps() {
    each_driver(|| async {
        let (mock, base) = start();
        let adapters = [ollama_adapter(&base, &[])];
        let seq = Cell::new(0);
        let limits = CommandLimits::default();
        let out = run(
            &adapters,
            &seq,
            limits,
            ollama(OllamaApiCall::Tags, Value::Null),
        )
        .await;
        assert_eq!(out.len(), 1);
        assert!(out[0].ok);
        let (status, tags) = answer(&out);
        assert_eq!(status, 200);
        assert_eq!(tags["models"][0]["name"], "mock-model:latest");
        let out = run(
            &adapters,
            &seq,
            limits,
            ollama(OllamaApiCall::Ps, json!({})),
        )
        .await;
        assert!(out[0].ok);
        assert!(answer(&out).1["models"][0]["expires_at"].is_string());
        let show = ollama(OllamaApiCall::Show, json!({"model": "mock-model"}));
        let out = run(&adapters, &seq, limits, show).await;
        assert!(out[0].ok);
        let (_, show) = answer(&out);
        assert!(
            show["modelfile"]
                .as_str()
                .unwrap()
                .contains("mock-model:latest")
        );
        // The provider refuses a show without a model: its status and error.
        let out = run(
            &adapters,
            &seq,
            limits,
            ollama(OllamaApiCall::Show, json!({})),
        )
        .await;
        assert_eq!(
            failure_of(&out),
            (FailureCode::ProviderHttpStatus, FailureSide::Client, 400)
        );
        let (status, error) = answer(&out);
        assert_eq!(status, 400);
        assert!(error["error"].is_string());
        assert_eq!(seq.get(), 0, "commands other than a probe take no seq");
        mock.shutdown();
    });
}

#[test]
fn provider_errors_and_bounds_are_typed() {
    each_driver(|| async {
        let (mock, base) = start();
        let seq = Cell::new(0);
        let tags = || ollama(OllamaApiCall::Tags, Value::Null);
        let limits = CommandLimits::default();
        let down = [ollama_adapter(&base, &[("status", "503")])];
        let out = run(&down, &seq, limits, tags()).await;
        assert_eq!(
            failure_of(&out),
            (FailureCode::ProviderHttpStatus, FailureSide::Provider, 503)
        );
        assert_eq!(answer(&out).0, 503);
        let adapters = [ollama_adapter(&base, &[])];
        let small = CommandLimits {
            max_response_body: 16,
            ..limits
        };
        let out = run(&adapters, &seq, small, tags()).await;
        assert_eq!(failure_of(&out).0, FailureCode::ProviderMalformed);
        let slow = [ollama_adapter(&base, &[("headers-delay-ms", "2000")])];
        let quick = CommandLimits {
            call_timeout: Duration::from_millis(100),
            ..limits
        };
        let out = run(&slow, &seq, quick, tags()).await;
        assert_eq!(failure_of(&out).0, FailureCode::HardTimeout);
        mock.shutdown();
    });
}

/// The progress lines of a pull (every response but the final one).
fn progress(out: &[NodeCommandResponse]) -> Vec<Value> {
    out[..out.len() - 1]
        .iter()
        .map(|r| {
            assert!(r.ok && !r.r#final, "{r:?}");
            let api = r.ollama.as_ref().unwrap();
            assert_eq!(api.http_status, 200);
            serde_json::from_slice(&api.body_json).unwrap()
        })
        .collect()
}

#[test]
fn pull_streams_progress_then_a_final_response() {
    each_driver(|| async {
        let (mock, base) = start();
        let adapters = [ollama_adapter(&base, &[("tokens", "4"), ("delay-ms", "2")])];
        let pull = ollama(
            OllamaApiCall::Pull,
            json!({"model": "mock-model", "stream": false}),
        );
        let out = run(&adapters, &Cell::new(0), CommandLimits::default(), pull).await;
        let lines = progress(&out);
        let statuses: Vec<&str> = lines
            .iter()
            .map(|l| l["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses.len(), 8, "{statuses:?}");
        assert_eq!(statuses[0], "pulling manifest");
        assert!(statuses[1..5].iter().all(|s| s.starts_with("pulling ")));
        assert_eq!(
            statuses[5..],
            ["verifying sha256 digest", "writing manifest", "success"]
        );
        let completed: Vec<u64> = lines[1..5]
            .iter()
            .map(|l| l["completed"].as_u64().unwrap())
            .collect();
        assert!(completed.windows(2).all(|w| w[0] < w[1]), "{completed:?}");
        assert_eq!(Some(completed[3]), lines[4]["total"].as_u64());
        let last = out.last().unwrap();
        assert!(last.ok);
        assert_eq!(answer(&out), (200, Value::Null));
        assert_eq!(mock.stats().requests(Route::OllamaPull), 1);
        mock.shutdown();
    });
}

#[test]
fn pull_failures_are_typed() {
    each_driver(|| async {
        let (mock, base) = start();
        let seq = Cell::new(0);
        let limits = CommandLimits::default();
        let pull = |model: &str| ollama(OllamaApiCall::Pull, json!({"model": model}));
        // Not in the registry: the provider's 404 and its error.
        let adapters = [ollama_adapter(&base, &[])];
        let out = run(&adapters, &seq, limits, pull("unknown-model")).await;
        assert_eq!(out.len(), 1);
        assert_eq!(
            failure_of(&out),
            (FailureCode::ProviderHttpStatus, FailureSide::Client, 404)
        );
        let (status, error) = answer(&out);
        assert_eq!(status, 404);
        assert!(error["error"].as_str().unwrap().contains("does not exist"));
        // No progress within the idle bound: a stall after what did arrive.
        let stalls = [ollama_adapter(
            &base,
            &[("tokens", "4"), ("stall-after", "2")],
        )];
        let idle = CommandLimits {
            pull_idle_timeout: Duration::from_millis(200),
            ..limits
        };
        let out = run(&stalls, &seq, idle, pull("mock-model")).await;
        assert_eq!(progress(&out).len(), 3, "manifest + 2 lines");
        let (code, side, _) = failure_of(&out);
        assert_eq!(
            (code, side),
            (FailureCode::ResponseStalled, FailureSide::Provider)
        );
        let f = out.last().unwrap().failure.clone().unwrap();
        assert_eq!(f.stall_timeout_ms, 200);
        assert_eq!(f.health_observation_seq, None);
        // A body cut before success.
        let aborts = [ollama_adapter(
            &base,
            &[("tokens", "4"), ("abort-after", "1")],
        )];
        let out = run(&aborts, &seq, limits, pull("mock-model")).await;
        assert_eq!(progress(&out).len(), 2, "manifest + 1 line");
        assert_eq!(failure_of(&out).0, FailureCode::ProviderUnreachable);
        mock.shutdown();
    });
}
