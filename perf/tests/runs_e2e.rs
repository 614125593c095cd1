//! Normalized runs end to end (F8–F15): the Edge in-process (its
//! `Dispatcher` is the `SubmitRun` surface), the real `iop-node` binary as a
//! process, and the mock provider on loopback — real sockets everywhere
//! (set-up in `support/stack.rs`).

use edge_proxy::dispatch::{SubmitError, SubmitRun, is_terminal};
use perf::mock_provider::Route;
use proto::v1::{CancelStatus, FailureCode, FailureSide, RunEvent, RunEventKind};

mod support;
use support::stack::*;

#[test]
fn each_adapter_streams_ordered_events_ending_in_one_terminal() {
    for driver in drivers() {
        let stack = Stack::start(driver, "adapters");
        let mut bus = stack.edge.bus.subscribe_runs();
        block_on(async {
            // openai_compat: deltas and usage. The mock reports the
            // breakdown (as vLLM does), zeros included, so it is present.
            let stream = stack.submit("oa").await;
            let run_id = stream.run_id().to_owned();
            let all = events(stream).await;
            assert_eq!(all[0].kind(), RunEventKind::Start);
            assert_eq!(all.last().unwrap().kind(), RunEventKind::Complete);
            assert!(!text(&all, RunEventKind::Delta).is_empty());
            assert!(text(&all, RunEventKind::ReasoningDelta).is_empty());
            let usage = all.last().unwrap().usage.expect("usage on complete");
            assert_eq!(usage.output_tokens, 5);
            assert_eq!(usage.reasoning_tokens, Some(0));
            // The bus saw the same run, in order (published on the edge
            // core right after the stream got each event).
            for expected in &all {
                let event = within(bus.recv()).await.expect("bus event");
                assert_eq!(&*event.run_id, run_id);
                assert_eq!(&event.event, expected);
            }

            // vllm: reasoning deltas, and the breakdown it reported.
            let all = events(stack.submit("vl").await).await;
            assert!(!text(&all, RunEventKind::ReasoningDelta).is_empty());
            let usage = all.last().unwrap().usage.expect("usage");
            assert_eq!(usage.reasoning_tokens, Some(3));
            assert_eq!(usage.cached_input_tokens, Some(2));

            // ollama: message.thinking becomes reasoning deltas.
            let all = events(stack.submit("ol").await).await;
            assert_eq!(all.last().unwrap().kind(), RunEventKind::Complete);
            assert!(!text(&all, RunEventKind::ReasoningDelta).is_empty());
            assert!(!text(&all, RunEventKind::Delta).is_empty());
            // Ollama reports no breakdown: nothing is estimated (F18).
            let usage = all.last().unwrap().usage.expect("usage");
            assert!(usage.output_tokens > 0);
            assert_eq!(usage.reasoning_tokens, None);
            assert_eq!(usage.cached_input_tokens, None);
        });
        // Every run is in the node's store as completed.
        wait_until("three completed runs in the store", || {
            stack
                .stored_runs()
                .iter()
                .filter(|r| r["status"] == "completed")
                .count()
                == 3
        });
    }
}

#[test]
fn over_capacity_is_refused_at_once_and_cancel_stops_the_provider_request() {
    for driver in drivers() {
        let stack = Stack::start(driver, "capacity");
        let stats = stack.mock.stats();
        block_on(async {
            let gone_before = stats.streams_client_gone();
            let mut first = stack.submit("slow").await;
            assert_eq!(
                within(first.next()).await.unwrap().kind(),
                RunEventKind::Start
            );
            assert_eq!(
                within(first.next()).await.unwrap().kind(),
                RunEventKind::Delta
            );

            // max_concurrency 1: the second is refused at once, typed.
            let refused = events(stack.submit("slow").await).await;
            assert_eq!(kinds(&refused), [RunEventKind::Error]);
            assert_eq!(error_code(&refused), FailureCode::OverCapacity);

            // Cancel mid-stream: one `cancelled` terminal, and the mock sees
            // its client (the node) leave.
            first.cancel();
            let mut rest = Vec::new();
            while let Some(event) = within(first.next()).await {
                rest.push(event);
            }
            assert_eq!(
                rest.last().map(RunEvent::kind),
                Some(RunEventKind::Cancelled)
            );
            assert_eq!(rest.iter().filter(|e| is_terminal(e)).count(), 1);
            wait_until("the provider to see the request closed", || {
                stats.streams_client_gone() > gone_before
            });

            // Capacity came back; dropping a stream cancels its run too.
            let mut second = stack.submit("slow").await;
            assert_eq!(
                within(second.next()).await.unwrap().kind(),
                RunEventKind::Start
            );
            drop(second);
            wait_until("the dropped run's provider request to close", || {
                stats.streams_client_gone() > gone_before + 1
            });
            // ... and its capacity came back as well.
            let mut third = stack.submit("slow").await;
            assert_eq!(
                within(third.next()).await.unwrap().kind(),
                RunEventKind::Start
            );
            third.cancel();
            while within(third.next()).await.is_some() {}
        });
        wait_until("the cancelled runs in the store", || {
            let runs = stack.stored_runs();
            let count = |s: &str| runs.iter().filter(|r| r["status"] == s).count();
            count("cancelled") == 3 && count("rejected") == 1
        });
        // The refused run's record names it, its adapter and its target.
        let runs = stack.stored_runs();
        let refused = runs.iter().find(|r| r["status"] == "rejected").unwrap();
        assert_eq!(refused["adapter"], "slow");
        assert_eq!(refused["target"], "m");
        assert!(refused["run_id"].as_str().is_some_and(|id| !id.is_empty()));
        assert!(refused["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
}

#[test]
fn bad_input_and_provider_failures_end_in_one_typed_error() {
    let driver = *drivers().last().unwrap();
    let stack = Stack::start(driver, "failures");
    block_on(async {
        let cases = [
            ("nope", "m", FailureCode::UnknownAdapter),
            ("oa", "other-model", FailureCode::UnknownTarget),
            ("broken", "m", FailureCode::ProviderHttpStatus),
            ("rejects", "m", FailureCode::ProviderHttpStatus),
            ("aborts", "m", FailureCode::ProviderUnreachable),
            ("hangs", "m", FailureCode::HardTimeout),
            ("down", "m", FailureCode::ProviderUnreachable),
            ("garbage", "m", FailureCode::ProviderMalformed),
            ("garbage-ol", "m", FailureCode::ProviderMalformed),
        ];
        for (adapter, target, code) in cases {
            let stream = stack.try_submit(adapter, target).await.expect("submitted");
            let all = events(stream).await;
            assert_eq!(error_code(&all), code, "{adapter}/{target}: {all:?}");
            let failure = all.last().unwrap().failure.as_ref().unwrap();
            assert!(!failure.message.is_empty(), "{adapter}: a clear message");
            // A target the adapter's config does not list is refused at
            // admission, before any adapter call, naming both.
            if code == FailureCode::UnknownTarget {
                let named = format!("adapter {adapter:?} does not serve target {target:?}");
                assert_eq!(failure.message, named);
            }
            // 5xx is the provider's fault; a 4xx is the client's (F22:
            // only provider-side failures count against its health).
            if adapter == "broken" {
                assert_eq!(failure.http_status, 503);
                assert_eq!(failure.side(), FailureSide::Provider);
            }
            if adapter == "rejects" {
                assert_eq!(failure.http_status, 400);
                assert_eq!(failure.side(), FailureSide::Client);
            }
        }
        // Capacity was returned on every path: a good run still goes.
        let all = events(stack.submit("oa").await).await;
        assert_eq!(all.last().unwrap().kind(), RunEventKind::Complete);
    });
    wait_until("every failure recorded", || {
        let runs = stack.stored_runs();
        let count = |s: &str| runs.iter().filter(|r| r["status"] == s).count();
        count("rejected") == 2 && count("failed") == 7 && count("completed") == 1
    });
    let runs = stack.stored_runs();
    let failed = runs.iter().find(|r| r["status"] == "failed").unwrap();
    assert!(
        failed["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{failed}"
    );
}

#[test]
fn dispatch_refuses_clearly_when_no_node_can_take_the_run() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start(driver, "select");
    block_on(async {
        let mut run = SubmitRun {
            adapter: "oa".into(),
            target: "m".into(),
            ..SubmitRun::default()
        };
        // F8: one ready node, none named → that node.
        let stream = within(stack.edge.dispatcher.submit_run(run.clone()))
            .await
            .expect("single-node fallback");
        assert_eq!(stream.node().0, "node-a");
        drop(stream);

        run.node = Some("node-b".into());
        assert_eq!(
            within(stack.edge.dispatcher.submit_run(run.clone()))
                .await
                .unwrap_err(),
            SubmitError::NodeNotConnected("node-b".into())
        );
        run.adapter.clear();
        assert!(matches!(
            within(stack.edge.dispatcher.submit_run(run.clone())).await,
            Err(SubmitError::Invalid(_))
        ));
    });
    stack.kill_node();
    block_on(async {
        let run = SubmitRun {
            adapter: "oa".into(),
            target: "m".into(),
            ..SubmitRun::default()
        };
        assert_eq!(
            within(stack.edge.dispatcher.submit_run(run))
                .await
                .unwrap_err(),
            SubmitError::NoReadyNode
        );
    });
}

#[test]
fn a_node_that_dies_mid_run_ends_the_stream_with_node_disconnected() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start(driver, "dies");
    block_on(async {
        let mut stream = stack.submit("slow").await;
        assert_eq!(
            within(stream.next()).await.unwrap().kind(),
            RunEventKind::Start
        );
        stack.kill_node();
        let mut rest = Vec::new();
        while let Some(event) = within(stream.next()).await {
            rest.push(event);
        }
        assert_eq!(error_code(&rest), FailureCode::NodeDisconnected);
        assert_eq!(rest.iter().filter(|e| is_terminal(e)).count(), 1);
    });
}

#[test]
fn session_terminate_is_done_where_supported_and_unsupported_elsewhere() {
    let driver = *drivers().last().unwrap();
    let stack = Stack::start(driver, "terminate");
    block_on(async {
        let dispatcher = &stack.edge.dispatcher;
        let ollama = within(dispatcher.terminate_session(None, "ol", "m", "s-1"))
            .await
            .expect("sent");
        assert_eq!(ollama.status(), CancelStatus::Done, "{ollama:?}");
        let openai = within(dispatcher.terminate_session(None, "oa", "m", "s-1"))
            .await
            .expect("sent");
        assert_eq!(openai.status(), CancelStatus::Unsupported);
        let unknown = within(dispatcher.terminate_session(None, "nope", "m", "s-1"))
            .await
            .expect("sent");
        assert_eq!(unknown.status(), CancelStatus::Failed);
        assert!(unknown.message.contains("nope"));
    });
    assert!(stack.mock.stats().requests(Route::OllamaChat) >= 1);
}

#[test]
fn the_run_store_keeps_runs_across_a_node_restart() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start(driver, "restart");
    let first = block_on(async {
        let stream = stack.submit("oa").await;
        let id = stream.run_id().to_owned();
        events(stream).await;
        id
    });
    // The store commits at most every 20 ms (group commit), so a run can be
    // on disk as `running` a moment before its terminal is: wait for the
    // terminal before killing the node.
    wait_until("the first run recorded as completed", || {
        stack
            .stored_runs()
            .iter()
            .any(|r| r["run_id"] == first.as_str() && r["status"] == "completed")
    });
    stack.kill_node();
    stack.start_node();
    let second = block_on(async {
        let stream = stack.submit("ol").await;
        let id = stream.run_id().to_owned();
        events(stream).await;
        id
    });
    wait_until("both runs recorded", || {
        let runs = stack.stored_runs();
        runs.iter().any(|r| r["run_id"] == second.as_str())
            && runs.iter().any(|r| r["run_id"] == first.as_str())
    });
    let runs = stack.stored_runs();
    let record = runs.iter().find(|r| r["run_id"] == first.as_str()).unwrap();
    assert_eq!(record["status"], "completed");
    assert_eq!(record["adapter"], "oa");
    assert_eq!(record["target"], "m");
    assert_eq!(record["session_id"], "s-1");
    assert_eq!(record["background"], false);
}

#[test]
fn node_commands_answer_through_the_edge() {
    use proto::v1::{
        NodeCommandKind, NodeCommandRequest, OllamaApiCall, OllamaApiRequest, ProviderHealth,
    };
    let driver = *drivers().last().unwrap();
    let stack = Stack::start(driver, "commands");
    let generation = stack.generation();
    block_on(async {
        let dispatcher = &stack.edge.dispatcher;
        let command = |kind: NodeCommandKind, adapter: &str, target: &str| {
            let mut request = NodeCommandRequest {
                adapter: adapter.into(),
                target: target.into(),
                ..NodeCommandRequest::default()
            };
            request.set_kind(kind);
            request
        };
        let single = |mut all: Vec<proto::v1::NodeCommandResponse>| {
            assert_eq!(all.len(), 1, "{all:?}");
            let only = all.remove(0);
            assert!(only.r#final);
            only
        };

        // CAPABILITIES: every adapter, and an exact-target probe whose
        // health observation sequence increases per connection (F23).
        let caps = command(NodeCommandKind::Capabilities, "oa", "m");
        let stream = within(dispatcher.node_command(None, caps)).await.unwrap();
        let answer = single(within(stream.collect()).await);
        assert!(answer.ok, "{answer:?}");
        let result = answer.capabilities.expect("capabilities");
        assert_eq!(result.adapters.len(), 13);
        let ol = result.adapters.iter().find(|a| a.adapter == "ol").unwrap();
        assert!(ol.supports_terminate_session);
        let probe = result.probe.expect("probe");
        assert_eq!(probe.status(), ProviderHealth::Available);
        assert_eq!(probe.health_observation_seq, 1);
        let caps = command(NodeCommandKind::Capabilities, "down", "m");
        let stream = within(dispatcher.node_command(None, caps)).await.unwrap();
        let probe = single(within(stream.collect()).await)
            .capabilities
            .and_then(|c| c.probe)
            .expect("probe");
        assert_eq!(probe.status(), ProviderHealth::Unavailable);
        assert_eq!(probe.health_observation_seq, 2);

        // TRANSPORT_STATUS: the node's own view of this connection.
        let status = command(NodeCommandKind::TransportStatus, "", "");
        let stream = within(dispatcher.node_command(Some("node-a"), status))
            .await
            .unwrap();
        let status = single(within(stream.collect()).await)
            .transport_status
            .expect("transport status");
        assert_eq!(status.node_id, "node-a");
        assert_eq!(status.generation, generation);
        assert_eq!(status.state, "ready");
        assert!(status.connected_since_unix_ms > 0);

        // OLLAMA_API: tags in one answer; pull streams progress, final last.
        let mut tags = command(NodeCommandKind::OllamaApi, "ol", "");
        tags.ollama = Some(OllamaApiRequest {
            call: OllamaApiCall::Tags as i32,
            body_json: Default::default(),
        });
        let stream = within(dispatcher.node_command(None, tags)).await.unwrap();
        let answer = single(within(stream.collect()).await);
        assert!(answer.ok, "{answer:?}");
        let body: serde_json::Value =
            serde_json::from_slice(&answer.ollama.expect("ollama").body_json).unwrap();
        let model = body["models"][0]["name"]
            .as_str()
            .expect("a model")
            .to_owned();

        let mut pull = command(NodeCommandKind::OllamaApi, "ol", "");
        pull.ollama = Some(OllamaApiRequest {
            call: OllamaApiCall::Pull as i32,
            body_json: serde_json::json!({ "model": model }).to_string().into(),
        });
        let stream = within(dispatcher.node_command(None, pull)).await.unwrap();
        let all = within(stream.collect()).await;
        assert!(all.len() > 2, "progress then final: {all:?}");
        assert!(all.iter().all(|r| r.ok));
        assert_eq!(all.iter().filter(|r| r.r#final).count(), 1);
        assert!(all.last().unwrap().r#final);

        // Only the three kinds exist: anything else is refused before it
        // leaves the Edge.
        let none = command(NodeCommandKind::Unspecified, "", "");
        assert!(matches!(
            within(dispatcher.node_command(None, none)).await,
            Err(SubmitError::Invalid(_))
        ));
    });
}

#[test]
fn a_large_request_crosses_the_link_intact() {
    // A prompt far larger than one socket read and than a piece: the Edge
    // sends the request in 64 KiB pieces (framing::frame, pieces), each
    // arriving in reads on the node, which gathers them into the request.
    // Plain, the Node escapes it into the provider's body; JSON-escaped
    // (as the Edge sends a client's text), it goes to the provider as a
    // slice of the gathered frame, in one vectored write with the JSON
    // around it.
    use edge_proxy::dispatch::SubmitRun;
    use proto::v1::{ChatMessage, RunInput};
    let plain: String = (0..400_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    // Five bytes escaped, four once read: 400,000 bytes of text.
    let escaped = r#"ab\"d"#.repeat(100_000);
    for driver in drivers() {
        let stack = Stack::start(driver, "large");
        for (prompt, escaped_content) in [(&plain, false), (&escaped, true)] {
            block_on(async {
                let run = SubmitRun {
                    adapter: "oa".into(),
                    target: "m".into(),
                    input: RunInput {
                        messages: vec![ChatMessage {
                            role: "user".into(),
                            content: prompt.clone().into(),
                            ..ChatMessage::default()
                        }],
                        escaped_content,
                        ..RunInput::default()
                    },
                    node: Some("node-a".into()),
                    ..SubmitRun::default()
                };
                let stream = within(stack.edge.dispatcher.submit_run(run)).await.unwrap();
                let all = events(stream).await;
                assert_eq!(
                    all.last().unwrap().kind(),
                    RunEventKind::Complete,
                    "{all:?}"
                );
                // The mock counts prompt tokens from what it received: a
                // token each 4 bytes of content, so every byte arrived.
                let usage = all.last().unwrap().usage.expect("usage");
                assert_eq!(usage.input_tokens, 100_000, "{usage:?}");
            });
        }
    }
}
