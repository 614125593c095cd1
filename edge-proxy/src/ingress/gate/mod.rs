//! The StreamGate (F27): the one liveness owner of every Chat Completions /
//! Responses request, normalized or tunnel, streaming or not.
//!
//! A request runs as one or more **attempts** (a lease, a run or tunnel on
//! a node). The attempt's relay tells the gate whether anything was
//! **committed** to the client — the status line, a header or a body byte
//! written. When an attempt ends with a `RESPONSE_STALLED` terminal, the
//! Edge's pool validates it first (`Pools::handoff_stall`: reception
//! node/generation and the immutable lease, F24); only that Edge-confirmed
//! stall becomes a [`GateEvent`] — the provider id (a config value), the
//! validated health and the Node's `retryable` hint, nothing raw.
//!
//! # The rule
//! [`eligibility`] decides, in this order:
//!
//! | case | eligibility | the client sees |
//! |---|---|---|
//! | the pool did not confirm the stall | `unconfirmed` | the stall's error |
//! | something was committed | `committed` | one terminal error event, then a clean end |
//! | the Node did not confirm the provider's return (`retryable` unset) | `not_retryable` | the stall's HTTP error |
//! | [`MAX_ATTEMPTS`] attempts were used | `budget_exhausted` | the stall's HTTP error |
//! | otherwise | `eligible` | nothing yet: a new attempt |
//!
//! `retryable` means the Node saw the provider's response closed inside its
//! close grace, so the old provider request is over and a new attempt
//! cannot double-send. An eligible stall re-admits through the pool with
//! `avoid_provider_id` = the stalled provider and
//! `allow_avoided_provider_fallback` only when the evidence was a
//! probe-backed `available` (F26). The old transport is already fenced by
//! the Node (its terminal was the stall); the attempt drops its stream and
//! releases its lease — exactly once — before the new lease is taken.
//! The Node never grants replay; the decision is the Edge's alone.
//!
//! Every decision counts in `iop_edge_liveness_recovery_eligibility_total`
//! and every re-admission's outcome in
//! `iop_edge_liveness_recovery_results_total` ([`metrics`]).

pub(crate) mod commit;
pub mod metrics;

use proto::v1::ProviderHealth;
use serde_json::json;

use self::metrics::{Note, RecoveryMetrics};
use super::Api;
use super::error::ApiError;
use super::openai::sse;

/// Attempts one request may use in all, the first included: one
/// re-admission after an eligible stall.
pub const MAX_ATTEMPTS: u32 = 2;

/// The wire an attempt used (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// A raw provider tunnel.
    Tunnel = 0,
    /// A normalized run.
    Normalized = 1,
}

impl Path {
    /// Every value, in label order.
    pub const ALL: [Self; 2] = [Self::Tunnel, Self::Normalized];

    /// Its label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Tunnel => "tunnel",
            Self::Normalized => "normalized",
        }
    }
}

/// What the gate decided about one stalled attempt (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eligibility {
    /// Re-admitted on a new attempt.
    Eligible = 0,
    /// Bytes already reached the client.
    Committed = 1,
    /// The provider's return was not confirmed by the Node.
    NotRetryable = 2,
    /// The request used all its attempts.
    BudgetExhausted = 3,
    /// The pool did not confirm the stall (stale reception or lease).
    Unconfirmed = 4,
}

impl Eligibility {
    /// Every value, in label order.
    pub const ALL: [Self; 5] = [
        Self::Eligible,
        Self::Committed,
        Self::NotRetryable,
        Self::BudgetExhausted,
        Self::Unconfirmed,
    ];

    /// Its label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Eligible => "eligible",
            Self::Committed => "committed",
            Self::NotRetryable => "not_retryable",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Unconfirmed => "unconfirmed",
        }
    }
}

/// How a re-admission ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryResult {
    /// The new attempt answered the client normally (2xx).
    Recovered = 0,
    /// The new attempt ended with an error answer.
    Failed = 1,
    /// The new attempt stalled too (its own eligibility is counted).
    Stalled = 2,
    /// No provider could be leased for the new attempt; the client got
    /// the stall's error.
    NoCandidate = 3,
    /// The client left during the new attempt.
    ClientGone = 4,
}

impl RecoveryResult {
    /// Every value, in label order.
    pub const ALL: [Self; 5] = [
        Self::Recovered,
        Self::Failed,
        Self::Stalled,
        Self::NoCandidate,
        Self::ClientGone,
    ];

    /// Its label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Recovered => "recovered",
            Self::Failed => "failed",
            Self::Stalled => "stalled",
            Self::NoCandidate => "no_candidate",
            Self::ClientGone => "client_gone",
        }
    }

    /// The result of a new attempt that answered `status` (499 = the
    /// client left).
    pub fn of_status(status: u16) -> Self {
        match status {
            499 => Self::ClientGone,
            200..=299 => Self::Recovered,
            _ => Self::Failed,
        }
    }
}

/// An Edge-confirmed typed stall, raw-free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateEvent {
    /// The stalled provider (a config id).
    pub provider_id: String,
    /// The validated health evidence.
    pub health: ProviderHealth,
    /// The Node confirmed the provider's return inside the close grace.
    pub retryable: bool,
}

/// Provider avoidance for a new attempt (F26).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Avoid {
    /// The provider that stalled.
    pub provider_id: String,
    /// May it be chosen again when no alternate exists: only on
    /// probe-backed `available` evidence.
    pub allow_fallback: bool,
}

/// What to do after a stalled attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Drop the old attempt and admit a new one with this avoidance.
    Reattempt(Avoid),
    /// End the request with an error.
    Terminal(Eligibility),
}

/// The rule of the module docs, as a function of its inputs.
pub fn eligibility(event: Option<&GateEvent>, committed: bool, attempts_used: u32) -> Eligibility {
    match event {
        None => Eligibility::Unconfirmed,
        Some(_) if committed => Eligibility::Committed,
        Some(event) if !event.retryable => Eligibility::NotRetryable,
        Some(_) if attempts_used >= MAX_ATTEMPTS => Eligibility::BudgetExhausted,
        Some(_) => Eligibility::Eligible,
    }
}

/// The liveness owner of one request (see the module docs).
#[derive(Debug)]
pub(crate) struct StreamGate<'m> {
    api: Api,
    metrics: &'m RecoveryMetrics,
    attempts: u32,
    /// A re-admission whose outcome is not counted yet: the path of the
    /// attempt that stalled.
    pending: Option<Path>,
}

impl<'m> StreamGate<'m> {
    /// The gate of one `api` request.
    pub(crate) fn new(api: Api, metrics: &'m RecoveryMetrics) -> Self {
        Self {
            api,
            metrics,
            attempts: 0,
            pending: None,
        }
    }

    /// A new attempt starts.
    pub(crate) fn begin_attempt(&mut self) {
        self.attempts += 1;
    }

    /// Attempts started so far.
    #[cfg(test)]
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The current attempt (on `path`) ended with a stall; `event` is the
    /// pool's confirmation, if any. Counts, logs and decides.
    pub(crate) fn stall(
        &mut self,
        path: Path,
        event: Option<GateEvent>,
        committed: bool,
    ) -> Decision {
        self.settle(RecoveryResult::Stalled);
        let decision = eligibility(event.as_ref(), committed, self.attempts);
        let note = Note {
            attempt: self.attempts,
            health: event
                .as_ref()
                .map_or(ProviderHealth::Unspecified, |e| e.health),
            retryable: event.as_ref().is_some_and(|e| e.retryable),
        };
        self.metrics.eligibility(self.api, path, decision, &note);
        match (decision, event) {
            (Eligibility::Eligible, Some(event)) => {
                self.pending = Some(path);
                Decision::Reattempt(Avoid {
                    allow_fallback: event.health == ProviderHealth::Available,
                    provider_id: event.provider_id,
                })
            }
            (decision, _) => Decision::Terminal(decision),
        }
    }

    /// The request ended; counts the outcome of a pending re-admission.
    pub(crate) fn finish(&mut self, result: RecoveryResult) {
        self.settle(result);
    }

    fn settle(&mut self, result: RecoveryResult) {
        if let Some(path) = self.pending.take() {
            self.metrics
                .result(self.api, path, result, self.attempts.max(1));
        }
    }
}

/// The terminal SSE error event sent after commit: Chat Completions gets
/// `data: {"error": …}`, Responses an `event: error` with
/// `{"type": "error", "error": …}`. The stream then ends cleanly (last
/// chunk) and without `data: [DONE]`, so the `openai` clients raise an
/// `APIError` instead of treating the answer as complete.
pub(crate) fn error_event(api: Api, error: &ApiError) -> Vec<u8> {
    let detail = json!({"message": error.message, "type": error.kind, "code": error.code});
    match api {
        Api::Chat => sse(None, &json!({ "error": detail })),
        Api::Responses => sse(Some("error"), &json!({"type": "error", "error": detail})),
    }
}

#[cfg(test)]
mod tests;
