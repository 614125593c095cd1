//! The Node's adapters (`node_runner::adapter`) against the real mock
//! provider (hyper, in-process on its own thread), under both monoio
//! drivers. Knobs travel as `x-mock-*` headers through the adapter config.

use std::time::Duration;

use node_runner::adapter::{
    Adapter, AdapterConfig, EventStream, ExecuteSpec, OllamaAdapter, OpenAiAdapter, OpenAiFlavor,
    RuntimeEvent, TerminateError,
};
use node_runner::provider_http::{BaseUrl, ProviderClient, ProviderClientConfig};
use proto::v1::{ChatMessage, FailureCode, FailureSide, ProviderHealth, RunInput, Usage};

mod support;
use support::{each_driver, start};

const PROBE: Duration = Duration::from_secs(2);

fn config(base: &BaseUrl, knobs: &[(&str, &str)]) -> AdapterConfig {
    let mut config = AdapterConfig::new("a", base.clone());
    config.targets = vec!["m".into()];
    config.max_concurrency = 4;
    config.headers = knobs
        .iter()
        .map(|(k, v)| (format!("x-mock-{k}").into(), v.to_string().into()))
        .collect();
    config
}

fn client() -> ProviderClient {
    ProviderClient::new(ProviderClientConfig::default())
}

fn openai(base: &BaseUrl, flavor: OpenAiFlavor, knobs: &[(&str, &str)]) -> OpenAiAdapter {
    OpenAiAdapter::new(config(base, knobs), flavor, client())
}

fn ollama(base: &BaseUrl, knobs: &[(&str, &str)]) -> OllamaAdapter {
    OllamaAdapter::new(config(base, knobs), client())
}

fn spec() -> ExecuteSpec {
    ExecuteSpec {
        target: "m".into(),
        input: RunInput {
            // 8 bytes → prompt_tokens = 2.
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "hi there".into(),
                extra_json: Vec::new().into(),
            }],
            parameters_json: b"{\"temperature\":0.5}".to_vec().into(),
            escaped_content: false,
            parameters_index: Vec::new(),
        },
        session_id: "s".into(),
        stall_timeout_ms: 0,
        credential: None,
    }
}

/// Every event, checking the stream contract: `Start` first, exactly one
/// terminal, last, and `None` after it.
async fn collect(mut stream: EventStream) -> Vec<RuntimeEvent> {
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
        assert!(events.len() < 10_000, "runaway stream");
    }
    assert!(stream.next().await.is_none(), "nothing after the end");
    assert_eq!(events.first(), Some(&RuntimeEvent::Start), "{events:?}");
    let terminals = events.iter().filter(|e| e.is_terminal()).count();
    assert_eq!(terminals, 1, "{events:?}");
    assert!(events.last().unwrap().is_terminal(), "{events:?}");
    events
}

fn text(events: &[RuntimeEvent], reasoning: bool) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            RuntimeEvent::Delta(t) if !reasoning => Some(t.as_str()),
            RuntimeEvent::ReasoningDelta(t) if reasoning => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn terminal(events: &[RuntimeEvent]) -> &RuntimeEvent {
    events.last().unwrap()
}

fn error_of(events: &[RuntimeEvent]) -> (FailureCode, FailureSide, u32) {
    match terminal(events) {
        RuntimeEvent::Error(f) => (f.code(), f.side(), f.http_status),
        other => panic!("not an error: {other:?}"),
    }
}

#[test]
fn openai_streams_deltas_reasoning_and_usage() {
    each_driver(|| async {
        let (mock, base) = start();
        for flavor in [OpenAiFlavor::OpenAiCompat, OpenAiFlavor::Vllm] {
            let knobs = [
                ("tokens", "3"),
                ("reasoning-tokens", "2"),
                ("delay-us", "200"),
            ];
            let adapter = openai(&base, flavor, &knobs);
            let events = collect(adapter.execute(spec()).await).await;
            assert_eq!(text(&events, false), "tok tok tok ");
            assert_eq!(text(&events, true), "hmm hmm ");
            // Reasoning comes before content, as the provider sent it.
            let first_delta = events
                .iter()
                .position(|e| matches!(e, RuntimeEvent::Delta(_)));
            let last_reasoning = events
                .iter()
                .rposition(|e| matches!(e, RuntimeEvent::ReasoningDelta(_)));
            assert!(last_reasoning < first_delta, "{events:?}");
            assert_eq!(
                terminal(&events),
                &RuntimeEvent::Complete {
                    finish_reason: "stop".into(),
                    usage: Some(Usage {
                        input_tokens: 2,
                        output_tokens: 5,
                        reasoning_tokens: Some(2),
                        cached_input_tokens: Some(0),
                    }),
                }
            );
        }
        mock.shutdown();
    });
}

#[test]
fn vllm_reports_cached_tokens_only_as_the_provider_does() {
    each_driver(|| async {
        let (mock, base) = start();
        let adapter = openai(&base, OpenAiFlavor::Vllm, &[("cached-tokens", "1")]);
        let events = collect(adapter.execute(spec()).await).await;
        let RuntimeEvent::Complete { usage, .. } = terminal(&events) else {
            panic!("{events:?}");
        };
        let usage = usage.unwrap();
        assert_eq!(usage.cached_input_tokens, Some(1));
        assert_eq!(usage.reasoning_tokens, Some(0), "reported as 0, kept");
        assert_eq!(usage.output_tokens, 16);
        mock.shutdown();
    });
}

#[test]
fn max_tokens_gives_finish_reason_length() {
    each_driver(|| async {
        let (mock, base) = start();
        let adapter = openai(&base, OpenAiFlavor::OpenAiCompat, &[]);
        let mut s = spec();
        s.input.parameters_json = b"{\"max_tokens\":2}".to_vec().into();
        let events = collect(adapter.execute(s.clone()).await).await;
        assert!(
            matches!(terminal(&events), RuntimeEvent::Complete { finish_reason, .. } if finish_reason == "length")
        );
        let events = collect(ollama(&base, &[]).execute(s).await).await;
        assert!(
            matches!(terminal(&events), RuntimeEvent::Complete { finish_reason, .. } if finish_reason == "length")
        );
        mock.shutdown();
    });
}

#[test]
fn ollama_streams_thinking_content_and_counts() {
    each_driver(|| async {
        let (mock, base) = start();
        let knobs = [
            ("tokens", "4"),
            ("reasoning-tokens", "1"),
            ("delay-us", "200"),
        ];
        let events = collect(ollama(&base, &knobs).execute(spec()).await).await;
        assert_eq!(text(&events, false), "tok tok tok tok ");
        assert_eq!(text(&events, true), "hmm ");
        assert_eq!(
            terminal(&events),
            &RuntimeEvent::Complete {
                finish_reason: "stop".into(),
                usage: Some(Usage {
                    input_tokens: 2,
                    output_tokens: 5,
                    reasoning_tokens: None,
                    cached_input_tokens: None,
                }),
            }
        );
        mock.shutdown();
    });
}

/// A caller of the whole answer: the deltas a read brings (the mock batches
/// an unpaced answer into a write or two) come out as one event, the text
/// unchanged; without merging, one event a token.
#[test]
fn held_deltas_merge_into_one_event_for_a_whole_answer() {
    fn count(events: &[RuntimeEvent], reasoning: bool) -> usize {
        events
            .iter()
            .filter(|e| match e {
                RuntimeEvent::Delta(_) => !reasoning,
                RuntimeEvent::ReasoningDelta(_) => reasoning,
                _ => false,
            })
            .count()
    }
    async fn apart_and_merged(adapter: &impl Adapter) {
        let apart = collect(adapter.execute(spec()).await).await;
        let merged = collect(adapter.execute(spec()).await.merging_deltas(true)).await;
        assert_eq!((count(&apart, false), count(&apart, true)), (12, 3));
        // One event a mock write (it batches an unpaced answer), not a token.
        assert!(count(&merged, false) < 12, "{merged:?}");
        assert!(count(&merged, true) < 3, "{merged:?}");
        assert_eq!(text(&merged, false), text(&apart, false));
        assert_eq!(text(&merged, true), text(&apart, true));
        assert_eq!(terminal(&merged), terminal(&apart));
    }
    each_driver(|| async {
        let (mock, base) = start();
        let knobs = [("tokens", "12"), ("reasoning-tokens", "3")];
        apart_and_merged(&ollama(&base, &knobs)).await;
        apart_and_merged(&openai(&base, OpenAiFlavor::Vllm, &knobs)).await;
        mock.shutdown();
    });
}

#[test]
fn http_error_status_is_typed_by_side() {
    each_driver(|| async {
        let (mock, base) = start();
        for (status, side) in [("500", FailureSide::Provider), ("400", FailureSide::Client)] {
            let knobs = [("status", status)];
            let a = collect(
                openai(&base, OpenAiFlavor::Vllm, &knobs)
                    .execute(spec())
                    .await,
            )
            .await;
            let o = collect(ollama(&base, &knobs).execute(spec()).await).await;
            for events in [a, o] {
                assert_eq!(events.len(), 2, "{events:?}");
                let expected = (
                    FailureCode::ProviderHttpStatus,
                    side,
                    status.parse().unwrap(),
                );
                assert_eq!(error_of(&events), expected);
            }
        }
        mock.shutdown();
    });
}

#[test]
fn truncated_stream_is_an_error() {
    each_driver(|| async {
        let (mock, base) = start();
        let knobs = [("tokens", "5"), ("abort-after", "2"), ("delay-us", "200")];
        let a = collect(
            openai(&base, OpenAiFlavor::OpenAiCompat, &knobs)
                .execute(spec())
                .await,
        )
        .await;
        let o = collect(ollama(&base, &knobs).execute(spec()).await).await;
        for events in [a, o] {
            assert_eq!(text(&events, false), "tok tok ", "{events:?}");
            let (code, side, _) = error_of(&events);
            assert_eq!(code, FailureCode::ProviderUnreachable);
            assert_eq!(side, FailureSide::Provider);
        }
        mock.shutdown();
    });
}

#[test]
fn refused_connection_and_unknown_target() {
    each_driver(|| async {
        let (mock, base) = start();
        let dead = BaseUrl::parse("http://127.0.0.1:1").unwrap();
        let events = collect(ollama(&dead, &[]).execute(spec()).await).await;
        assert_eq!(error_of(&events).0, FailureCode::ProviderUnreachable);
        let mut s = spec();
        s.target = "other".into();
        let events = collect(openai(&base, OpenAiFlavor::Vllm, &[]).execute(s).await).await;
        assert_eq!(error_of(&events).0, FailureCode::UnknownTarget);
        let mut s = spec();
        s.input.parameters_json = b"[1]".to_vec().into();
        let events = collect(openai(&base, OpenAiFlavor::Vllm, &[]).execute(s).await).await;
        assert_eq!(
            error_of(&events),
            (FailureCode::InvalidRequest, FailureSide::Client, 0)
        );
        mock.shutdown();
    });
}

#[test]
fn terminate_session_only_on_ollama() {
    each_driver(|| async {
        let (mock, base) = start();
        let o = ollama(&base, &[]);
        assert!(o.capabilities().supports_session_terminate);
        o.terminate_session("m", "s").await.unwrap();
        let a = openai(&base, OpenAiFlavor::Vllm, &[]);
        assert!(!a.capabilities().supports_session_terminate);
        assert_eq!(
            a.terminate_session("m", "s").await,
            Err(TerminateError::Unsupported)
        );
        let caps = a.capabilities();
        assert_eq!(
            (caps.max_concurrency, caps.targets),
            (4, vec!["m".to_string()])
        );
        mock.shutdown();
    });
}

#[test]
fn probe_health_available_unavailable_refused() {
    each_driver(|| async {
        let (mock, base) = start();
        let a = openai(&base, OpenAiFlavor::OpenAiCompat, &[]);
        let o = ollama(&base, &[]);
        assert_eq!(
            a.probe_health("m", PROBE, None).await,
            ProviderHealth::Available
        );
        assert_eq!(
            o.probe_health("m", PROBE, None).await,
            ProviderHealth::Available
        );
        // Toggle the mock's /health down.
        let down = ProviderClient::new(ProviderClientConfig::default());
        let request = node_runner::provider_http::ProviderRequest::new(
            "POST",
            base.clone(),
            "/mock/health?status=down",
        );
        let mut response = down.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        while response.next_chunk().await.is_some() {}
        assert_eq!(
            a.probe_health("m", PROBE, None).await,
            ProviderHealth::Unavailable
        );
        let dead = BaseUrl::parse("http://127.0.0.1:1").unwrap();
        let refused = openai(&dead, OpenAiFlavor::Vllm, &[]);
        assert_eq!(
            refused.probe_health("m", PROBE, None).await,
            ProviderHealth::Unavailable
        );
        // A provider that answers too late is Unknown.
        let slow = openai(&base, OpenAiFlavor::Vllm, &[("headers-delay-ms", "500")]);
        assert_eq!(
            slow.probe_health("m", Duration::from_millis(50), None)
                .await,
            ProviderHealth::Unknown
        );
        mock.shutdown();
    });
}

#[test]
fn completed_runs_reuse_the_connection() {
    each_driver(|| async {
        let (mock, base) = start();
        let client = client();
        let a = OpenAiAdapter::new(config(&base, &[]), OpenAiFlavor::Vllm, client.clone());
        let o = OllamaAdapter::new(config(&base, &[]), client.clone());
        for _ in 0..2 {
            collect(a.execute(spec()).await).await;
            collect(o.execute(spec()).await).await;
        }
        assert_eq!(client.stats().connects, 1, "{:?}", client.stats());
        assert_eq!(client.idle_connections(&base), 1);
        // An error terminal closes the connection instead.
        let failing = OpenAiAdapter::new(
            config(&base, &[("tokens", "3"), ("abort-after", "1")]),
            OpenAiFlavor::Vllm,
            client.clone(),
        );
        collect(failing.execute(spec()).await).await;
        assert_eq!(client.idle_connections(&base), 0);
        mock.shutdown();
    });
}

#[test]
fn any_adapter_from_provider_config() {
    use node_runner::adapter::{AdapterConfigError, AnyAdapter};
    use proto::v1::{AdapterKind, Header, HealthProbeConfig, ProviderConfig};
    each_driver(|| async {
        let (mock, base) = start();
        let mut provider = ProviderConfig {
            provider_id: "p1".into(),
            adapter: "local-ollama".into(),
            base_url: base.to_string(),
            targets: vec!["m".into()],
            max_concurrency: 2,
            headers: vec![Header {
                name: "x-mock-tokens".into(),
                value: b"2".to_vec().into(),
            }],
            health_probe: Some(HealthProbeConfig {
                path: "/health".into(),
                timeout_ms: 0,
            }),
            ..ProviderConfig::default()
        };
        assert!(matches!(
            AnyAdapter::from_provider(&provider, client()),
            Err(AdapterConfigError::UnknownKind(_))
        ));
        for kind in [
            AdapterKind::Ollama,
            AdapterKind::Vllm,
            AdapterKind::OpenaiCompat,
        ] {
            provider.set_kind(kind);
            let adapter = AnyAdapter::from_provider(&provider, client()).unwrap();
            let caps = adapter.capabilities();
            assert_eq!(caps.max_concurrency, 2);
            assert_eq!(caps.supports_session_terminate, kind == AdapterKind::Ollama);
            let events = collect(adapter.execute(spec()).await).await;
            assert_eq!(text(&events, false), "tok tok ", "{kind:?}");
            assert_eq!(
                adapter.probe_health("m", PROBE, None).await,
                ProviderHealth::Available
            );
        }
        // A base URL the client refuses (a query string) is a typed error.
        provider.base_url = "http://example.com/?q=1".into();
        assert!(matches!(
            AnyAdapter::from_provider(&provider, client()),
            Err(AdapterConfigError::BaseUrl(..))
        ));
        mock.shutdown();
    });
}
