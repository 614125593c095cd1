//! Relay rules with fake event sources: order, numbering, exactly one
//! terminal, synthesis, cancel and hard timeout. Timing-free: stops are
//! futures the test resolves, not sleeps.

use std::collections::VecDeque;
use std::future::{self, Future};

use proto::v1::{FailureCode, RunEvent, RunEventKind};

use super::*;
use crate::adapter::RuntimeEvent;

/// Yields its events, then `None`; or, with `hang`, never ends after them.
struct Fake {
    events: VecDeque<RuntimeEvent>,
    hang: bool,
}

impl EventSource for Fake {
    async fn next(&mut self) -> Option<RuntimeEvent> {
        match self.events.pop_front() {
            Some(event) => Some(event),
            None if self.hang => future::pending().await,
            None => None,
        }
    }
}

fn fake(events: Vec<RuntimeEvent>, hang: bool) -> Fake {
    Fake {
        events: events.into(),
        hang,
    }
}

fn block_on<F: Future>(future: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .expect("runtime")
        .block_on(future)
}

fn run(source: Fake, stop: impl Future<Output = Stop>) -> (Outcome, Vec<RunEvent>) {
    let mut out = Vec::new();
    let (outcome, _) = block_on(relay(async { source }, stop, |e| out.push(e)));
    (outcome, out)
}

fn kinds(events: &[RunEvent]) -> Vec<RunEventKind> {
    events.iter().map(RunEvent::kind).collect()
}

fn complete() -> RuntimeEvent {
    RuntimeEvent::Complete {
        finish_reason: "stop".into(),
        usage: None,
    }
}

#[test]
fn events_pass_in_order_numbered_from_one_and_stop_at_the_terminal() {
    let source = fake(
        vec![
            RuntimeEvent::Start,
            RuntimeEvent::Delta("a".into()),
            RuntimeEvent::ReasoningDelta("r".into()),
            complete(),
            // Anything after a terminal is never sent.
            RuntimeEvent::Delta("late".into()),
        ],
        false,
    );
    let (outcome, events) = run(source, future::pending());
    assert_eq!(outcome, Outcome::Completed);
    assert_eq!(
        kinds(&events),
        [
            RunEventKind::Start,
            RunEventKind::Delta,
            RunEventKind::ReasoningDelta,
            RunEventKind::Complete
        ]
    );
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
}

#[test]
fn a_source_that_ends_without_a_terminal_gets_one_synthesized() {
    let source = fake(
        vec![RuntimeEvent::Start, RuntimeEvent::Delta("a".into())],
        false,
    );
    let (outcome, events) = run(source, future::pending());
    assert!(matches!(outcome, Outcome::Failed(_)));
    assert_eq!(
        kinds(&events),
        [
            RunEventKind::Start,
            RunEventKind::Delta,
            RunEventKind::Error
        ]
    );
    let failure = events[2].failure.as_ref().expect("failure");
    assert_eq!(failure.code(), FailureCode::MissingTerminal);
    assert_eq!(events[2].seq, 3);
}

#[test]
fn cancel_mid_stream_ends_with_one_cancelled_terminal() {
    let source = fake(
        vec![RuntimeEvent::Start, RuntimeEvent::Delta("a".into())],
        true,
    );
    let (cancel_tx, cancel_rx) = local_sync::oneshot::channel::<()>();
    let stop = async move {
        let _ = cancel_rx.await;
        Stop::Cancelled
    };
    let mut out = Vec::new();
    let outcome = block_on(async {
        monoio::spawn(async move {
            let _ = cancel_tx.send(());
        });
        relay(async { source }, stop, |e| out.push(e)).await.0
    });
    assert_eq!(outcome, Outcome::Cancelled);
    assert_eq!(kinds(&out).last(), Some(&RunEventKind::Cancelled));
    assert_eq!(
        out.iter().filter(|e| is_terminal(e)).count(),
        1,
        "exactly one terminal"
    );
}

#[test]
fn a_stop_while_the_provider_has_not_answered_still_gives_one_terminal() {
    let mut out = Vec::new();
    let (outcome, rest) = block_on(relay(
        future::pending::<Fake>(),
        future::ready(Stop::HardTimeout(1_000)),
        |e| out.push(e),
    ));
    assert!(rest.is_none());
    assert!(matches!(outcome, Outcome::Failed(ref m) if m.contains("1000 ms")));
    assert_eq!(kinds(&out), [RunEventKind::Error]);
    assert_eq!(out[0].seq, 1);
    assert_eq!(
        out[0].failure.as_ref().map(|f| f.code()),
        Some(FailureCode::HardTimeout)
    );
}

#[test]
fn an_adapter_error_is_the_terminal_and_its_message_is_the_outcome() {
    let error = failure(
        FailureCode::ProviderHttpStatus,
        FailureSide::Provider,
        "HTTP 503",
    );
    let source = fake(vec![RuntimeEvent::Start, RuntimeEvent::Error(error)], false);
    let (outcome, events) = run(source, future::pending());
    assert_eq!(outcome, Outcome::Failed("HTTP 503".into()));
    assert_eq!(kinds(&events), [RunEventKind::Start, RunEventKind::Error]);
}
