//! F25 recovery probes with credential leases (F29): the CAPABILITIES probe
//! the Edge schedules for a lowered provider carries its own lease, bound to
//! route `probe` and a fresh probe id, opened by the node with a run's rules.
//! Nothing here asserts a duration.

use bytes::Bytes;
use edge_proxy::dispatch::SubmitError;
use edge_proxy::lease::{LeaseScope, probe_scope};
use perf::mock_provider::Route;
use proto::v1::{
    ChatMessage, FailureCode, LeaseRevocationKind, NodeCommandKind, NodeCommandRequest,
    NodeCommandResponse, ProviderHealth, RunInput,
};

use super::support::stack::*;
use super::{SENTINEL, assert_no_secret, authority, lease_for, now_ms, pinned, seal, start};

/// The adapter `provider_id` runs on, on node-a.
fn adapter_of(stack: &Stack, provider_id: &str) -> String {
    let providers = stack.edge.pools.providers();
    let provider = providers.iter().find(|p| p.id == provider_id).unwrap();
    String::from(&*provider.adapter)
}

/// The final answer of a CAPABILITIES command.
fn final_answer(responses: Vec<NodeCommandResponse>) -> NodeCommandResponse {
    let last = responses.last().cloned().expect("an answer");
    assert!(last.r#final, "{responses:?}");
    if let Some(failure) = &last.failure {
        assert!(!failure.message.contains(SENTINEL), "{failure:?}");
    }
    last
}

/// The F25 recovery probe of `provider_id`, as the scheduler sends it.
fn recovery_probe(stack: &Stack, provider_id: &str) -> Result<ProviderHealth, SubmitError> {
    let adapter = adapter_of(stack, provider_id);
    let dispatcher = &stack.edge.dispatcher;
    let responses = block_on(async {
        let stream =
            within(dispatcher.probe_capabilities("node-a", provider_id, &adapter, "m")).await?;
        Ok::<_, SubmitError>(within(stream.collect()).await)
    })?;
    let answer = final_answer(responses);
    assert!(answer.ok, "{answer:?}");
    Ok(answer.capabilities.unwrap().probe.unwrap().status())
}

/// A CAPABILITIES probe of `keyed-stall` carrying `sealed` as probe
/// `probe_id`, sent as is: the node's answer.
fn probe_with(stack: &Stack, probe_id: &str, sealed: Bytes) -> NodeCommandResponse {
    let mut request = NodeCommandRequest {
        adapter: adapter_of(stack, "keyed-stall"),
        target: "m".into(),
        probe_id: probe_id.into(),
        credential_lease: sealed,
        ..NodeCommandRequest::default()
    };
    request.set_kind(NodeCommandKind::Capabilities);
    let dispatcher = &stack.edge.dispatcher;
    let responses = block_on(async {
        let stream = within(dispatcher.node_command(Some("node-a"), request))
            .await
            .expect("sent");
        within(stream.collect()).await
    });
    final_answer(responses)
}

fn probe_scope_of(stack: &Stack, probe_id: &str) -> LeaseScope {
    probe_scope(
        probe_id,
        "keyed-stall",
        (&adapter_of(stack, "keyed-stall"), "m"),
        ("node-a", stack.generation()),
        authority(stack).revision_of("node-a"),
    )
}

fn lease_code(answer: &NodeCommandResponse) -> FailureCode {
    assert!(!answer.ok, "{answer:?}");
    assert_eq!(answer.capabilities, None, "no probe result");
    answer.failure.as_ref().unwrap().code()
}

#[test]
fn the_recovery_probe_of_a_keyed_provider_carries_its_own_lease() {
    let stack = start("lease-recovery-probe");
    let models = || stack.mock.stats().requests(Route::Models);
    // /v1/models answers 401 without the key: AVAILABLE shows the key came,
    // on the one provider call the probe made.
    assert_eq!(
        recovery_probe(&stack, "keyed-stall").unwrap(),
        ProviderHealth::Available
    );
    assert_eq!(models(), 1, "one provider call");
    // The same provider without a credential: no lease, its plain headers
    // only — 401, so we cannot tell.
    assert_eq!(
        recovery_probe(&stack, "bare-stall").unwrap(),
        ProviderHealth::Unknown
    );
    assert_eq!(models(), 2);
    // Fail closed at the node, zero provider calls: a lease for another
    // route, another probe id, a tampered box, a replay, a revoked one, and
    // none at all.
    let mut chat_route = lease_for(&probe_scope_of(&stack, "p-1"), &stack, now_ms());
    chat_route.api = "chat".into();
    let answer = probe_with(&stack, "p-1", seal(&stack, &chat_route, &pinned(&stack)));
    assert_eq!(lease_code(&answer), FailureCode::CredentialLeaseMismatch);
    let other_slot = stack.edge.dispatcher.issue(&probe_scope_of(&stack, "p-2"));
    let answer = probe_with(&stack, "p-3", other_slot.unwrap());
    assert_eq!(lease_code(&answer), FailureCode::CredentialLeaseMismatch);
    let mut tampered = stack
        .edge
        .dispatcher
        .issue(&probe_scope_of(&stack, "p-4"))
        .unwrap()
        .to_vec();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    let answer = probe_with(&stack, "p-4", tampered.into());
    assert_eq!(
        lease_code(&answer),
        FailureCode::CredentialLeaseWrongRecipient
    );
    let good = stack.edge.dispatcher.issue(&probe_scope_of(&stack, "p-5"));
    let good = good.unwrap();
    let answer = probe_with(&stack, "p-5", good.clone());
    assert!(answer.ok, "{answer:?}");
    assert_eq!(models(), 3, "the genuine lease probed once");
    let answer = probe_with(&stack, "p-5", good);
    assert_eq!(lease_code(&answer), FailureCode::CredentialLeaseReplayed);
    let answer = probe_with(&stack, "p-6", Bytes::new());
    assert_eq!(lease_code(&answer), FailureCode::CredentialLeaseInvalid);
    let outstanding = stack.edge.dispatcher.issue(&probe_scope_of(&stack, "p-7"));
    assert!(
        stack
            .edge
            .dispatcher
            .revoke_leases(LeaseRevocationKind::Provider, "keyed-stall")
    );
    let answer = probe_with(&stack, "p-7", outstanding.unwrap());
    assert_eq!(lease_code(&answer), FailureCode::CredentialLeaseRevoked);
    // And the Edge issues no new one: the recovery probe is not sent.
    assert!(matches!(
        recovery_probe(&stack, "keyed-stall"),
        Err(SubmitError::Lease(_))
    ));
    assert_eq!(models(), 3, "no provider call after the genuine one");
    assert_no_secret(&stack, 0);
}

/// Whether `keyed-stall` is selectable on the node's current generation.
fn keyed_eligible(stack: &Stack) -> bool {
    let generation = stack.generation();
    stack
        .edge
        .pools
        .providers()
        .iter()
        .find(|p| p.id == "keyed-stall")
        .is_some_and(|p| p.runtime_eligible(generation))
}

#[test]
fn the_edges_own_recovery_probe_restores_a_keyed_provider() {
    let stack = start("lease-recovery-restore");
    let edge = &stack.edge;
    // Down while its run stalls: the stall probe (with the run's key) reads
    // a 503 list, UNAVAILABLE, and the provider is lowered.
    stack.mock.stats().set_healthy(false);
    let lease = block_on(edge.pools.acquire("keyed-stall", &edge.registry)).expect("a lease");
    let run = edge_proxy::dispatch::SubmitRun {
        input: RunInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "hello".into(),
                ..ChatMessage::default()
            }],
            ..RunInput::default()
        },
        response_stall_timeout_ms: lease.provider().response_stall_timeout_ms,
        ..edge_proxy::dispatch::SubmitRun::default()
    };
    let stream = edge
        .dispatcher
        .submit_leased(&lease, run)
        .expect("submitted");
    let (node, generation) = stream.node();
    let reception = (node.to_owned(), generation);
    let events = block_on(events(stream));
    assert_eq!(error_code(&events), FailureCode::ResponseStalled);
    let failure = events.last().unwrap().failure.clone().unwrap();
    assert_eq!(failure.provider_health(), ProviderHealth::Unavailable);
    edge.pools
        .handoff_stall(&lease, (&reception.0, reception.1), &failure)
        .expect("a validated, current, bound stall");
    drop(lease);
    wait_until("the home core to lower the provider", || {
        !keyed_eligible(&stack)
    });
    // Up again: only a probe that carries the key can see it (its list is
    // 401 without one), and the Edge's scheduled probe restores it.
    stack.mock.stats().set_healthy(true);
    wait_until("the recovery probe to restore the provider", || {
        keyed_eligible(&stack)
    });
    assert_no_secret(&stack, 1);
}
