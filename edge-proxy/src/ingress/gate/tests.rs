use proto::v1::ProviderHealth;

use super::metrics::RecoveryMetrics;
use super::*;
use crate::ingress::Api;
use crate::ingress::error::ApiError;

fn event(health: ProviderHealth, retryable: bool) -> GateEvent {
    GateEvent {
        provider_id: "p1".into(),
        health,
        retryable,
    }
}

#[test]
fn the_rule_in_order() {
    let good = event(ProviderHealth::Available, true);
    assert_eq!(eligibility(None, false, 1), Eligibility::Unconfirmed);
    assert_eq!(eligibility(None, true, 9), Eligibility::Unconfirmed);
    assert_eq!(eligibility(Some(&good), true, 1), Eligibility::Committed);
    let unconfirmed_return = event(ProviderHealth::Available, false);
    assert_eq!(
        eligibility(Some(&unconfirmed_return), false, 1),
        Eligibility::NotRetryable
    );
    assert_eq!(
        eligibility(Some(&good), false, MAX_ATTEMPTS),
        Eligibility::BudgetExhausted
    );
    assert_eq!(eligibility(Some(&good), false, 1), Eligibility::Eligible);
    // Health does not decide eligibility; it decides the fallback.
    let unknown = event(ProviderHealth::Unknown, true);
    assert_eq!(eligibility(Some(&unknown), false, 1), Eligibility::Eligible);
}

#[test]
fn an_eligible_stall_avoids_the_provider_and_falls_back_only_on_available() {
    let metrics = RecoveryMetrics::default();
    for (health, fallback) in [
        (ProviderHealth::Available, true),
        (ProviderHealth::Unavailable, false),
        (ProviderHealth::Unknown, false),
    ] {
        let mut gate = StreamGate::new(Api::Chat, &metrics);
        gate.begin_attempt();
        let decision = gate.stall(Path::Tunnel, Some(event(health, true)), false);
        assert_eq!(
            decision,
            Decision::Reattempt(Avoid {
                provider_id: "p1".into(),
                allow_fallback: fallback,
            })
        );
    }
}

#[test]
fn one_shared_budget_two_attempts_then_exhausted() {
    let metrics = RecoveryMetrics::default();
    let mut gate = StreamGate::new(Api::Responses, &metrics);
    gate.begin_attempt();
    let first = gate.stall(
        Path::Normalized,
        Some(event(ProviderHealth::Available, true)),
        false,
    );
    assert!(matches!(first, Decision::Reattempt(_)));
    gate.begin_attempt();
    let second = gate.stall(
        Path::Tunnel,
        Some(event(ProviderHealth::Available, true)),
        false,
    );
    assert_eq!(second, Decision::Terminal(Eligibility::BudgetExhausted));
    gate.finish(RecoveryResult::Failed);
    assert_eq!(gate.attempts(), 2);
    // The first re-admission's outcome: its attempt stalled too; the
    // request's end counts nothing more.
    assert_eq!(
        metrics.result_count(Api::Responses, Path::Normalized, RecoveryResult::Stalled),
        1
    );
    let all_results: u64 = Path::ALL
        .iter()
        .flat_map(|p| {
            RecoveryResult::ALL
                .iter()
                .map(|r| metrics.result_count(Api::Responses, *p, *r))
        })
        .sum();
    assert_eq!(all_results, 1);
    assert_eq!(
        metrics.eligibility_count(Api::Responses, Path::Tunnel, Eligibility::BudgetExhausted),
        1
    );
}

#[test]
fn a_recovered_request_counts_one_result() {
    let metrics = RecoveryMetrics::default();
    let mut gate = StreamGate::new(Api::Chat, &metrics);
    gate.begin_attempt();
    let decision = gate.stall(
        Path::Tunnel,
        Some(event(ProviderHealth::Available, true)),
        false,
    );
    assert!(matches!(decision, Decision::Reattempt(_)));
    gate.begin_attempt();
    gate.finish(RecoveryResult::of_status(200));
    gate.finish(RecoveryResult::of_status(200));
    assert_eq!(
        metrics.result_count(Api::Chat, Path::Tunnel, RecoveryResult::Recovered),
        1
    );
    assert_eq!(
        metrics.eligibility_count(Api::Chat, Path::Tunnel, Eligibility::Eligible),
        1
    );
}

#[test]
fn a_committed_or_unconfirmed_stall_is_terminal_and_counts_no_result() {
    let metrics = RecoveryMetrics::default();
    let mut gate = StreamGate::new(Api::Chat, &metrics);
    gate.begin_attempt();
    assert_eq!(
        gate.stall(
            Path::Normalized,
            Some(event(ProviderHealth::Available, true)),
            true
        ),
        Decision::Terminal(Eligibility::Committed)
    );
    assert_eq!(
        gate.stall(Path::Normalized, None, false),
        Decision::Terminal(Eligibility::Unconfirmed)
    );
    gate.finish(RecoveryResult::Failed);
    for result in RecoveryResult::ALL {
        assert_eq!(metrics.result_count(Api::Chat, Path::Normalized, result), 0);
    }
}

#[test]
fn status_maps_to_results() {
    assert_eq!(RecoveryResult::of_status(200), RecoveryResult::Recovered);
    assert_eq!(RecoveryResult::of_status(499), RecoveryResult::ClientGone);
    assert_eq!(RecoveryResult::of_status(504), RecoveryResult::Failed);
    assert_eq!(RecoveryResult::of_status(429), RecoveryResult::Failed);
}

#[test]
fn the_error_event_is_one_openai_shaped_sse_event() {
    let error = ApiError::new(504, "server_error", "upstream_timeout", "stalled");
    let chat = String::from_utf8(error_event(Api::Chat, &error)).unwrap();
    assert!(chat.starts_with("data: {"), "{chat}");
    assert!(chat.ends_with("\n\n"));
    let data: serde_json::Value = serde_json::from_str(&chat[6..chat.len() - 2]).unwrap();
    assert_eq!(data["error"]["code"], "upstream_timeout");
    assert_eq!(data["error"]["type"], "server_error");
    assert!(!chat.contains("[DONE]"));
    let responses = String::from_utf8(error_event(Api::Responses, &error)).unwrap();
    assert!(
        responses.starts_with("event: error\ndata: {"),
        "{responses}"
    );
    assert!(responses.contains(r#""type":"error""#));
}
