//! Node commands without a live provider: listing, lookups, validation and
//! a provider that is down. The calls against the mock provider are in
//! `perf/tests/node_commands.rs`.

use std::cell::Cell;
use std::future::Future;

use proto::v1::{
    AdapterKind, FailureCode, NodeCommandKind, NodeCommandRequest, NodeCommandResponse,
    OllamaApiCall, OllamaApiRequest, ProviderConfig, ProviderHealth, TransportStatusResult,
};

use super::{
    CommandContext, CommandLimits, NamedAdapter, OpenProbeLease, ProbeLease, run_command,
    run_command_leased,
};
use crate::adapter::AnyAdapter;
use crate::provider_http::{ProviderClient, ProviderClientConfig};

fn block_on<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("runtime")
        .block_on(test());
}

/// A loopback URL nothing listens on.
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

fn adapter(name: &str, kind: AdapterKind, targets: &[&str], base: &str) -> NamedAdapter {
    let mut provider = ProviderConfig {
        provider_id: format!("p-{name}"),
        adapter: name.into(),
        base_url: base.into(),
        targets: targets.iter().map(|t| t.to_string()).collect(),
        max_concurrency: 3,
        supports_tunnel: kind != AdapterKind::Ollama,
        ..ProviderConfig::default()
    };
    provider.set_kind(kind);
    let client = ProviderClient::new(ProviderClientConfig::default());
    NamedAdapter::new(AnyAdapter::from_provider(&provider, client).unwrap())
}

/// `llm` (ollama, target `m`) and `chat` (vllm, any target), both down.
fn adapters() -> Vec<NamedAdapter> {
    let base = closed_url();
    vec![
        adapter("llm", AdapterKind::Ollama, &["m"], &base),
        adapter("chat", AdapterKind::Vllm, &[], &base),
    ]
}

fn transport() -> TransportStatusResult {
    TransportStatusResult {
        node_id: "n1".into(),
        generation: 7,
        state: "ready".into(),
        connected_since_unix_ms: 1_000,
        last_heartbeat_rtt_us: 250,
        active_runs: 0,
        active_tunnels: 2,
    }
}

/// Runs `request` and checks the response contract: at least one response,
/// exactly the last final, every `kind` echoed.
async fn run(
    adapters: &[NamedAdapter],
    seq: &Cell<u64>,
    request: NodeCommandRequest,
) -> Vec<NodeCommandResponse> {
    run_with(adapters, seq, None, request).await
}

/// [`run`] through [`run_command_leased`] when `open_lease` is set.
async fn run_with(
    adapters: &[NamedAdapter],
    seq: &Cell<u64>,
    open_lease: Option<OpenProbeLease<'_>>,
    request: NodeCommandRequest,
) -> Vec<NodeCommandResponse> {
    let active = |name: &str| if name == "llm" { 2 } else { 1 };
    let next_seq = || {
        seq.set(seq.get() + 1);
        seq.get()
    };
    let ctx = CommandContext {
        adapters,
        active_runs: &active,
        transport: transport(),
        next_health_seq: &next_seq,
        client: ProviderClient::new(ProviderClientConfig::default()),
        limits: CommandLimits::default(),
    };
    let kind = request.kind;
    let mut out = Vec::new();
    match open_lease {
        Some(open_lease) => {
            run_command_leased(&ctx, open_lease, request, &mut |r| out.push(r)).await;
        }
        None => run_command(&ctx, request, &mut |r| out.push(r)).await,
    }
    assert!(!out.is_empty());
    let finals: Vec<bool> = out.iter().map(|r| r.r#final).collect();
    assert_eq!(finals.iter().filter(|f| **f).count(), 1, "{out:?}");
    assert!(finals.last().copied().unwrap_or(false), "{out:?}");
    assert!(out.iter().all(|r| r.kind == kind), "{out:?}");
    for r in &out {
        assert_eq!(r.ok, r.failure.is_none(), "{r:?}");
    }
    out
}

fn capabilities(adapter: &str, target: &str) -> NodeCommandRequest {
    let mut request = NodeCommandRequest {
        adapter: adapter.into(),
        target: target.into(),
        ..NodeCommandRequest::default()
    };
    request.set_kind(NodeCommandKind::Capabilities);
    request
}

fn ollama(adapter: &str, call: OllamaApiCall, body: &[u8]) -> NodeCommandRequest {
    let mut api = OllamaApiRequest {
        body_json: body.to_vec().into(),
        ..OllamaApiRequest::default()
    };
    api.set_call(call);
    let mut request = NodeCommandRequest {
        adapter: adapter.into(),
        ollama: Some(api),
        ..NodeCommandRequest::default()
    };
    request.set_kind(NodeCommandKind::OllamaApi);
    request
}

fn only(out: Vec<NodeCommandResponse>) -> NodeCommandResponse {
    assert_eq!(out.len(), 1, "{out:?}");
    out.into_iter().next().unwrap()
}

fn code(response: &NodeCommandResponse) -> FailureCode {
    response.failure.as_ref().expect("a failure").code()
}

#[test]
fn capabilities_lists_every_adapter_without_probing() {
    block_on(|| async {
        let seq = Cell::new(0);
        let r = only(run(&adapters(), &seq, capabilities("", "")).await);
        assert!(r.ok);
        let caps = r.capabilities.unwrap();
        assert_eq!(caps.probe, None);
        assert_eq!(caps.adapters.len(), 2);
        let llm = &caps.adapters[0];
        assert_eq!(
            (llm.adapter.as_str(), llm.kind(), llm.targets.clone()),
            ("llm", AdapterKind::Ollama, vec!["m".to_string()])
        );
        assert_eq!(llm.max_concurrency, 3);
        assert!(!llm.supports_tunnel);
        assert!(llm.supports_terminate_session);
        assert_eq!(llm.active_runs, 2);
        let chat = &caps.adapters[1];
        assert_eq!(
            (chat.adapter.as_str(), chat.kind()),
            ("chat", AdapterKind::Vllm)
        );
        assert!(chat.targets.is_empty());
        assert!(chat.supports_tunnel);
        assert!(!chat.supports_terminate_session);
        assert_eq!(chat.active_runs, 1);
        assert_eq!(seq.get(), 0, "no probe, no sequence number");
    });
}

#[test]
fn probe_of_a_down_provider_is_unavailable_with_increasing_seq() {
    block_on(|| async {
        let adapters = adapters();
        let seq = Cell::new(0);
        for (expected, (name, target)) in [(1, ("llm", "m")), (2, ("chat", "anything"))] {
            let r = only(run(&adapters, &seq, capabilities(name, target)).await);
            assert!(r.ok, "{r:?}");
            let probe = r.capabilities.unwrap().probe.unwrap();
            assert_eq!(
                (probe.adapter.as_str(), probe.target.as_str()),
                (name, target)
            );
            assert_eq!(probe.status(), ProviderHealth::Unavailable);
            assert_eq!(probe.health_observation_seq, expected);
        }
    });
}

#[test]
fn probe_lookups_fail_typed_and_take_no_seq() {
    block_on(|| async {
        let adapters = adapters();
        let seq = Cell::new(0);
        for (adapter, target, expected) in [
            ("nope", "m", FailureCode::UnknownAdapter),
            ("llm", "other", FailureCode::UnknownTarget),
            ("llm", "", FailureCode::InvalidRequest),
            ("", "m", FailureCode::InvalidRequest),
        ] {
            let r = only(run(&adapters, &seq, capabilities(adapter, target)).await);
            assert!(!r.ok);
            assert_eq!(code(&r), expected, "{adapter}/{target}");
            assert_eq!(r.capabilities, None);
        }
        assert_eq!(seq.get(), 0);
    });
}

#[test]
fn transport_status_is_the_snapshot_with_active_runs() {
    block_on(|| async {
        let mut request = NodeCommandRequest::default();
        request.set_kind(NodeCommandKind::TransportStatus);
        let r = only(run(&adapters(), &Cell::new(0), request).await);
        assert!(r.ok);
        let expected = TransportStatusResult {
            active_runs: 3,
            ..transport()
        };
        assert_eq!(r.transport_status, Some(expected));
    });
}

#[test]
fn unknown_command_kinds_are_refused() {
    block_on(|| async {
        for kind in [0, 99] {
            let request = NodeCommandRequest {
                kind,
                ..NodeCommandRequest::default()
            };
            let r = only(run(&adapters(), &Cell::new(0), request).await);
            assert_eq!(code(&r), FailureCode::InvalidRequest);
        }
    });
}

#[test]
fn ollama_api_refuses_before_any_provider_call() {
    block_on(|| async {
        let adapters = adapters();
        let seq = Cell::new(0);
        let big = format!("{{\"model\":\"{}\"}}", "x".repeat(64 * 1024));
        let cases: Vec<(NodeCommandRequest, FailureCode)> = vec![
            (
                ollama("chat", OllamaApiCall::Tags, b""),
                FailureCode::InvalidRequest,
            ),
            (
                ollama("nope", OllamaApiCall::Tags, b""),
                FailureCode::UnknownAdapter,
            ),
            (
                ollama("llm", OllamaApiCall::Unspecified, b""),
                FailureCode::InvalidRequest,
            ),
            (
                ollama("llm", OllamaApiCall::Show, b""),
                FailureCode::InvalidRequest,
            ),
            (
                ollama("llm", OllamaApiCall::Pull, b"[1]"),
                FailureCode::InvalidRequest,
            ),
            (
                ollama("llm", OllamaApiCall::Show, b"{nope"),
                FailureCode::InvalidRequest,
            ),
            (
                ollama("llm", OllamaApiCall::Tags, b"\"s\""),
                FailureCode::InvalidRequest,
            ),
            (
                ollama("llm", OllamaApiCall::Pull, big.as_bytes()),
                FailureCode::InvalidRequest,
            ),
            (
                NodeCommandRequest {
                    ollama: None,
                    ..ollama("llm", OllamaApiCall::Tags, b"")
                },
                FailureCode::InvalidRequest,
            ),
        ];
        for (request, expected) in cases {
            let what = format!("{request:?}");
            let r = only(run(&adapters, &seq, request).await);
            assert_eq!(code(&r), expected, "{what:.200}");
            assert_eq!(r.ollama, None);
        }
        let r = only(run(&adapters, &seq, ollama("chat", OllamaApiCall::Tags, b"")).await);
        assert_eq!(r.failure.unwrap().message, "adapter is not ollama");
    });
}

#[test]
fn ollama_api_picks_the_only_ollama_adapter() {
    block_on(|| async {
        let base = closed_url();
        let seq = Cell::new(0);
        // The only ollama adapter is used: its provider is down.
        let one = adapters();
        let r = only(run(&one, &seq, ollama("", OllamaApiCall::Ps, b"{}")).await);
        assert_eq!(code(&r), FailureCode::ProviderUnreachable);
        // None, or several: refused without a call.
        let none = vec![adapter("chat", AdapterKind::OpenaiCompat, &[], &base)];
        let r = only(run(&none, &seq, ollama("", OllamaApiCall::Tags, b"")).await);
        assert_eq!(code(&r), FailureCode::UnknownAdapter);
        let two = vec![
            adapter("a", AdapterKind::Ollama, &[], &base),
            adapter("b", AdapterKind::Ollama, &[], &base),
        ];
        let r = only(run(&two, &seq, ollama("", OllamaApiCall::Tags, b"")).await);
        assert_eq!(code(&r), FailureCode::InvalidRequest);
        let r = only(run(&two, &seq, ollama("b", OllamaApiCall::Tags, b"")).await);
        assert_eq!(code(&r), FailureCode::ProviderUnreachable);
        let r = only(
            run(
                &two,
                &seq,
                ollama("b", OllamaApiCall::Pull, b"{\"model\":\"m\"}"),
            )
            .await,
        );
        assert_eq!(code(&r), FailureCode::ProviderUnreachable);
    });
}

fn leased_probe(adapter: &str, target: &str) -> NodeCommandRequest {
    NodeCommandRequest {
        credential_lease: bytes::Bytes::from_static(b"sealed"),
        probe_id: "probe-3".into(),
        ..capabilities(adapter, target)
    }
}

#[test]
fn a_refused_probe_lease_fails_closed_before_any_probe() {
    block_on(|| async {
        let adapters = adapters();
        let seq = Cell::new(0);
        let seen = std::cell::RefCell::new(Vec::new());
        let refuse = |probe: &ProbeLease<'_>| {
            seen.borrow_mut().push((
                probe.adapter.to_owned(),
                probe.target.to_owned(),
                probe.slot.to_owned(),
                probe.sealed.to_vec(),
            ));
            Err(crate::lease::LeaseRejection::new(
                FailureCode::CredentialLeaseRevoked,
                "the lease is revoked",
            )
            .into_failure())
        };
        let out = run_with(&adapters, &seq, Some(&refuse), leased_probe("chat", "m")).await;
        let r = only(out);
        assert_eq!(code(&r), FailureCode::CredentialLeaseRevoked);
        assert_eq!(r.capabilities, None);
        assert_eq!(seq.get(), 0, "no probe ran, no sequence number");
        assert_eq!(
            *seen.borrow(),
            [(
                "chat".into(),
                "m".into(),
                "probe-3".into(),
                b"sealed".to_vec()
            )]
        );
        // Lookups come first: an unknown target never reaches the opener.
        let out = run_with(&adapters, &seq, Some(&refuse), leased_probe("llm", "x")).await;
        assert_eq!(code(&only(out)), FailureCode::UnknownTarget);
        assert_eq!(seen.borrow().len(), 1);
    });
}

#[test]
fn an_opened_or_absent_probe_lease_runs_the_probe() {
    block_on(|| async {
        let adapters = adapters();
        let seq = Cell::new(0);
        let none = |_: &ProbeLease<'_>| Ok(None);
        let out = run_with(&adapters, &seq, Some(&none), capabilities("chat", "m")).await;
        let probe = only(out).capabilities.unwrap().probe.unwrap();
        assert_eq!(probe.status(), ProviderHealth::Unavailable);
        assert_eq!(seq.get(), 1);
    });
}

#[test]
fn without_an_opener_a_probe_lease_is_refused() {
    block_on(|| async {
        let seq = Cell::new(0);
        let out = run(&adapters(), &seq, leased_probe("chat", "m")).await;
        assert_eq!(code(&only(out)), FailureCode::CredentialLeaseWrongRecipient);
        assert_eq!(seq.get(), 0);
    });
}
