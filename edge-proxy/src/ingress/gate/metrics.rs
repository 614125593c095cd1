//! F32: the StreamGate's counters and its structured log event.
//!
//! | metric | labels |
//! |---|---|
//! | `iop_edge_liveness_recovery_eligibility_total` | `api`, `path`, `eligibility` |
//! | `iop_edge_liveness_recovery_results_total` | `api`, `path`, `result` |
//!
//! Every label value comes from a closed set ([`Api`], [`Path`],
//! [`Eligibility`], [`RecoveryResult`]); every combination is rendered from
//! start-up with a zero value, so alerts can be written before the first
//! event. The log event `edge_liveness_recovery_observation` carries the
//! same closed values plus small counters and flags — never a request,
//! run or tunnel id, a prompt, a body or a credential.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use proto::v1::ProviderHealth;

use super::{Eligibility, Path, RecoveryResult};
use crate::ingress::Api;

/// Name of the eligibility counter.
pub const ELIGIBILITY_METRIC: &str = "iop_edge_liveness_recovery_eligibility_total";
/// Name of the results counter.
pub const RESULTS_METRIC: &str = "iop_edge_liveness_recovery_results_total";
/// The structured log event of every gate observation.
pub const LOG_EVENT: &str = "edge_liveness_recovery_observation";

const APIS: [Api; 2] = [Api::Chat, Api::Responses];

/// The gate's counters, indexed by position (counting never locks).
#[derive(Debug, Default)]
pub struct RecoveryMetrics {
    /// `[api][path][eligibility]`.
    eligibility: [[[AtomicU64; Eligibility::ALL.len()]; Path::ALL.len()]; APIS.len()],
    /// `[api][path][result]`.
    results: [[[AtomicU64; RecoveryResult::ALL.len()]; Path::ALL.len()]; APIS.len()],
}

fn api_index(api: Api) -> usize {
    APIS.iter().position(|a| *a == api).unwrap_or(0)
}

/// The closed label value of a health observation.
pub(crate) fn health_label(health: ProviderHealth) -> &'static str {
    match health {
        ProviderHealth::Available => "available",
        ProviderHealth::Unavailable => "unavailable",
        ProviderHealth::Unknown => "unknown",
        ProviderHealth::Unspecified => "unspecified",
    }
}

impl RecoveryMetrics {
    /// Counts one stall decision and logs it.
    pub(crate) fn eligibility(&self, api: Api, path: Path, decision: Eligibility, note: &Note) {
        let counter = &self.eligibility[api_index(api)][path as usize][decision as usize];
        counter.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            event = LOG_EVENT,
            stage = "eligibility",
            api = api.label(),
            path = path.label(),
            eligibility = decision.label(),
            attempt = note.attempt,
            provider_health = health_label(note.health),
            retryable = note.retryable,
            "liveness recovery eligibility"
        );
    }

    /// Counts the outcome of one re-admission and logs it.
    pub(crate) fn result(&self, api: Api, path: Path, result: RecoveryResult, attempt: u32) {
        let counter = &self.results[api_index(api)][path as usize][result as usize];
        counter.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            event = LOG_EVENT,
            stage = "result",
            api = api.label(),
            path = path.label(),
            result = result.label(),
            attempt,
            "liveness recovery result"
        );
    }

    /// The count of one eligibility label combination (for tests).
    pub fn eligibility_count(&self, api: Api, path: Path, decision: Eligibility) -> u64 {
        self.eligibility[api_index(api)][path as usize][decision as usize].load(Ordering::Relaxed)
    }

    /// The count of one result label combination (for tests).
    pub fn result_count(&self, api: Api, path: Path, result: RecoveryResult) -> u64 {
        self.results[api_index(api)][path as usize][result as usize].load(Ordering::Relaxed)
    }

    /// Appends both counters, every label combination, in the Prometheus
    /// text format.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP {ELIGIBILITY_METRIC} Edge-confirmed stalls of OpenAI requests by recovery eligibility."
        );
        let _ = writeln!(out, "# TYPE {ELIGIBILITY_METRIC} counter");
        for (api, by_path) in APIS.iter().zip(&self.eligibility) {
            for (path, by_value) in Path::ALL.iter().zip(by_path) {
                for (value, counter) in Eligibility::ALL.iter().zip(by_value) {
                    let _ = writeln!(
                        out,
                        "{ELIGIBILITY_METRIC}{{api=\"{}\",path=\"{}\",eligibility=\"{}\"}} {}",
                        api.label(),
                        path.label(),
                        value.label(),
                        counter.load(Ordering::Relaxed)
                    );
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP {RESULTS_METRIC} Outcomes of OpenAI stall re-admissions."
        );
        let _ = writeln!(out, "# TYPE {RESULTS_METRIC} counter");
        for (api, by_path) in APIS.iter().zip(&self.results) {
            for (path, by_value) in Path::ALL.iter().zip(by_path) {
                for (value, counter) in RecoveryResult::ALL.iter().zip(by_value) {
                    let _ = writeln!(
                        out,
                        "{RESULTS_METRIC}{{api=\"{}\",path=\"{}\",result=\"{}\"}} {}",
                        api.label(),
                        path.label(),
                        value.label(),
                        counter.load(Ordering::Relaxed)
                    );
                }
            }
        }
    }
}

/// The safe details logged with an eligibility decision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Note {
    /// The attempt that stalled (1 = the first).
    pub(crate) attempt: u32,
    /// The validated health (unspecified when unconfirmed).
    pub(crate) health: ProviderHealth,
    /// The Node's `retryable` hint.
    pub(crate) retryable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_combination_is_rendered_with_zero_before_any_event() {
        let metrics = RecoveryMetrics::default();
        let mut out = String::new();
        metrics.render(&mut out);
        let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines.len(),
            2 * 2 * (Eligibility::ALL.len() + RecoveryResult::ALL.len())
        );
        assert!(lines.iter().all(|l| l.ends_with(" 0")), "{out}");
        for needle in [
            "iop_edge_liveness_recovery_eligibility_total{api=\"chat_completions\",path=\"tunnel\",eligibility=\"eligible\"} 0",
            "iop_edge_liveness_recovery_eligibility_total{api=\"responses\",path=\"normalized\",eligibility=\"unconfirmed\"} 0",
            "iop_edge_liveness_recovery_results_total{api=\"chat_completions\",path=\"normalized\",result=\"recovered\"} 0",
            "iop_edge_liveness_recovery_results_total{api=\"responses\",path=\"tunnel\",result=\"no_candidate\"} 0",
            "# TYPE iop_edge_liveness_recovery_eligibility_total counter",
            "# TYPE iop_edge_liveness_recovery_results_total counter",
        ] {
            assert!(out.contains(needle), "{needle} missing:\n{out}");
        }
    }

    #[test]
    fn counts_land_on_their_own_label_combination() {
        let metrics = RecoveryMetrics::default();
        let note = Note {
            attempt: 1,
            health: ProviderHealth::Available,
            retryable: true,
        };
        metrics.eligibility(Api::Chat, Path::Tunnel, Eligibility::Eligible, &note);
        metrics.eligibility(Api::Chat, Path::Tunnel, Eligibility::Eligible, &note);
        metrics.result(
            Api::Responses,
            Path::Normalized,
            RecoveryResult::Recovered,
            2,
        );
        assert_eq!(
            metrics.eligibility_count(Api::Chat, Path::Tunnel, Eligibility::Eligible),
            2
        );
        assert_eq!(
            metrics.eligibility_count(Api::Chat, Path::Normalized, Eligibility::Eligible),
            0
        );
        let mut out = String::new();
        metrics.render(&mut out);
        assert!(out.contains(
            "iop_edge_liveness_recovery_results_total{api=\"responses\",path=\"normalized\",result=\"recovered\"} 1"
        ));
    }

    #[test]
    fn label_values_are_closed_snake_case_words() {
        let labels = Eligibility::ALL
            .iter()
            .map(|e| e.label())
            .chain(RecoveryResult::ALL.iter().map(|r| r.label()))
            .chain(Path::ALL.iter().map(|p| p.label()));
        for label in labels {
            assert!(
                !label.is_empty() && label.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{label}"
            );
        }
    }
}
