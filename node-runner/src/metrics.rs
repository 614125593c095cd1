//! The Node's metrics and its stall observation log (F30), rendered as
//! Prometheus text by the admin port ([`crate::admin`]).
//!
//! # What is exported
//! - `iop_node_response_stalls_total` (counter): finalized stall
//!   observations (F21–F23), one per `response_stalled` terminal of a run
//!   or tunnel.
//! - `iop_node_response_stall_duration_seconds` (histogram, buckets
//!   [`STALL_DURATION_BUCKETS`]): how long the stream was silent when its
//!   stall was claimed (the effective `response_stall_timeout_ms` when the
//!   watchdog fires on time).
//!
//! Both carry exactly three labels with closed value sets:
//! - `kind` ∈ `run` | `tunnel` — what the watchdog watched
//!   ([`StallKind`]);
//! - `provider_health` ∈ `available` | `unavailable` | `unknown` — the F22
//!   evidence after fail-closed mapping (the liveness classification is
//!   its fixed pair, so it is not a second label);
//! - `retryable` ∈ `true` | `false` — whether the provider's return was
//!   confirmed inside the close grace.
//!
//! Every combination (2 × 3 × 2) is a fixed slot of atomics that exists from
//! the start, so `/metrics` lists all of them with zero values before the
//! first stall and alerts can be written against them. Nothing else is
//! ever a label: no adapter, target, run id, prompt, provider body or
//! credential.
//!
//! # The log event
//! [`record_stall`] also writes one structured `tracing` event,
//! `node_response_stall_observation` (level `warn`), with the fields
//! `kind`, `provider_health`, `liveness_classification`, `retryable`,
//! `stall_timeout_ms`, `duration_ms` (the silence at the claim) and
//! `health_observation_seq` (0 on an unbound path, which has none). Its
//! message is the event name; no adapter, target, run id, failure text or
//! provider byte is logged.
//!
//! # Cost
//! Recording is a few relaxed atomic adds on a process-wide [`NodeMetrics`]
//! ([`node_metrics`]): stalls are rare, and every core shares the counters.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use proto::v1::{LivenessClassification, ProviderHealth};

use crate::stall::{StallKind, StallObservation};

/// Name of the stall counter.
pub const STALLS_TOTAL: &str = "iop_node_response_stalls_total";
/// Name of the stall duration histogram.
pub const STALL_DURATION_SECONDS: &str = "iop_node_response_stall_duration_seconds";
/// Name of the structured stall log event.
pub const STALL_LOG_EVENT: &str = "node_response_stall_observation";

/// The closed `kind` label values, in slot order.
pub const KIND_VALUES: [&str; 2] = ["run", "tunnel"];
/// The closed `provider_health` label values, in slot order.
pub const PROVIDER_HEALTH_VALUES: [&str; 3] = ["available", "unavailable", "unknown"];
/// The closed `retryable` label values, in slot order.
pub const RETRYABLE_VALUES: [&str; 2] = ["true", "false"];
/// Upper bounds (seconds) of the stall duration histogram's buckets; a
/// final `+Inf` bucket follows. Covers stall timeouts from 100 ms to the
/// 300 s default and beyond.
pub const STALL_DURATION_BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

const KINDS: usize = KIND_VALUES.len();
const HEALTHS: usize = PROVIDER_HEALTH_VALUES.len();
const RETRYABLES: usize = RETRYABLE_VALUES.len();
const BUCKETS: usize = STALL_DURATION_BUCKETS.len() + 1;

/// One label combination's stall counters.
#[derive(Debug)]
struct StallSlot {
    count: AtomicU64,
    /// Sum of durations, in microseconds.
    sum_us: AtomicU64,
    /// Non-cumulative bucket counts (the last is `+Inf`); rendered
    /// cumulatively.
    buckets: [AtomicU64; BUCKETS],
}

impl StallSlot {
    const fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
        }
    }
}

/// The closed `provider_health` label of `health` (fail-closed: anything
/// but available/unavailable is `unknown`).
pub fn health_label(health: ProviderHealth) -> &'static str {
    PROVIDER_HEALTH_VALUES[health_slot(health)]
}

/// The `liveness_classification` log value of `liveness`.
pub fn liveness_label(liveness: LivenessClassification) -> &'static str {
    match liveness {
        LivenessClassification::RequestStalled => "request_stalled",
        LivenessClassification::ProviderUnhealthy => "provider_unhealthy",
        _ => "health_unknown",
    }
}

fn health_slot(health: ProviderHealth) -> usize {
    match health {
        ProviderHealth::Available => 0,
        ProviderHealth::Unavailable => 1,
        _ => 2,
    }
}

fn kind_slot(kind: StallKind) -> usize {
    match kind {
        StallKind::Run => 0,
        StallKind::Tunnel => 1,
    }
}

fn retryable_slot(retryable: bool) -> usize {
    if retryable { 0 } else { 1 }
}

/// The Node's counters: fixed slots for every closed label combination.
#[derive(Debug)]
pub struct NodeMetrics {
    stalls: [[[StallSlot; RETRYABLES]; HEALTHS]; KINDS],
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    /// All counters at zero.
    pub const fn new() -> Self {
        Self {
            stalls: [const { [const { [const { StallSlot::new() }; RETRYABLES] }; HEALTHS] };
                KINDS],
        }
    }

    /// Counts one stall observation.
    pub fn observe_stall(&self, observation: &StallObservation) {
        let slot = &self.stalls[kind_slot(observation.kind)][health_slot(observation.health)]
            [retryable_slot(observation.retryable)];
        let seconds = observation.silent_ms as f64 / 1e3;
        let bucket = STALL_DURATION_BUCKETS
            .iter()
            .position(|le| seconds <= *le)
            .unwrap_or(BUCKETS - 1);
        let micros = observation.silent_ms.saturating_mul(1_000);
        slot.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        slot.sum_us.fetch_add(micros, Ordering::Relaxed);
        slot.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Stalls counted so far with these labels.
    pub fn stalls(&self, kind: StallKind, provider_health: ProviderHealth, retryable: bool) -> u64 {
        self.stalls[kind_slot(kind)][health_slot(provider_health)][retryable_slot(retryable)]
            .count
            .load(Ordering::Relaxed)
    }

    /// Appends the Prometheus text exposition of every metric to `out`.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP {STALLS_TOTAL} Response stalls observed by the Node's watchdog (F21), by stream kind, health evidence and retryable hint."
        );
        let _ = writeln!(out, "# TYPE {STALLS_TOTAL} counter");
        self.each_slot(|labels, slot| {
            let _ = writeln!(
                out,
                "{STALLS_TOTAL}{{{labels}}} {}",
                slot.count.load(Ordering::Relaxed)
            );
        });
        let _ = writeln!(
            out,
            "# HELP {STALL_DURATION_SECONDS} Silence before a response stall was claimed, in seconds."
        );
        let _ = writeln!(out, "# TYPE {STALL_DURATION_SECONDS} histogram");
        self.each_slot(|labels, slot| {
            let mut cumulative = 0u64;
            for (i, counter) in slot.buckets.iter().enumerate() {
                cumulative += counter.load(Ordering::Relaxed);
                let le = STALL_DURATION_BUCKETS
                    .get(i)
                    .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
                let _ = writeln!(
                    out,
                    "{STALL_DURATION_SECONDS}_bucket{{{labels},le=\"{le}\"}} {cumulative}"
                );
            }
            let sum = slot.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(out, "{STALL_DURATION_SECONDS}_sum{{{labels}}} {sum}");
            // The count is the +Inf bucket, so the two always agree.
            let _ = writeln!(
                out,
                "{STALL_DURATION_SECONDS}_count{{{labels}}} {cumulative}"
            );
        });
    }

    /// Calls `f` with the rendered label pairs of every slot, in the fixed
    /// order of the closed sets.
    fn each_slot(&self, mut f: impl FnMut(&str, &StallSlot)) {
        for (k, by_health) in self.stalls.iter().enumerate() {
            for (h, row) in by_health.iter().enumerate() {
                for (r, slot) in row.iter().enumerate() {
                    let labels = format!(
                        "kind=\"{}\",provider_health=\"{}\",retryable=\"{}\"",
                        KIND_VALUES[k], PROVIDER_HEALTH_VALUES[h], RETRYABLE_VALUES[r]
                    );
                    f(&labels, slot);
                }
            }
        }
    }
}

static NODE_METRICS: NodeMetrics = NodeMetrics::new();

/// The process-wide metrics every core records into.
pub fn node_metrics() -> &'static NodeMetrics {
    &NODE_METRICS
}

/// Records the finalized stall `observation`: counts it in
/// [`node_metrics`] and logs `node_response_stall_observation`. Called
/// once per finalized observation, by the stall watchdog
/// ([`crate::stall::evidence`]).
pub fn record_stall(observation: &StallObservation) {
    node_metrics().observe_stall(observation);
    log_stall(observation);
}

/// Writes the `node_response_stall_observation` event.
pub fn log_stall(observation: &StallObservation) {
    tracing::warn!(
        event = STALL_LOG_EVENT,
        kind = observation.kind.as_str(),
        provider_health = health_label(observation.health),
        liveness_classification = liveness_label(observation.liveness),
        retryable = observation.retryable,
        stall_timeout_ms = observation.timeout_ms,
        duration_ms = observation.silent_ms,
        health_observation_seq = observation.seq.unwrap_or(0),
        "{STALL_LOG_EVENT}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(metrics: &NodeMetrics) -> String {
        let mut out = String::new();
        metrics.render(&mut out);
        out
    }

    fn observation(
        kind: StallKind,
        health: ProviderHealth,
        retryable: bool,
        silent_ms: u64,
    ) -> StallObservation {
        StallObservation::new(kind, silent_ms, silent_ms, health, retryable, Some(3))
    }

    #[test]
    fn every_closed_combination_is_listed_at_zero_before_any_stall() {
        let text = scrape(&NodeMetrics::new());
        for kind in KIND_VALUES {
            for health in PROVIDER_HEALTH_VALUES {
                for retryable in RETRYABLE_VALUES {
                    let labels = format!(
                        "kind=\"{kind}\",provider_health=\"{health}\",retryable=\"{retryable}\""
                    );
                    assert!(
                        text.contains(&format!("{STALLS_TOTAL}{{{labels}}} 0\n")),
                        "{text}"
                    );
                    assert!(text.contains(&format!(
                        "{STALL_DURATION_SECONDS}_bucket{{{labels},le=\"+Inf\"}} 0\n"
                    )));
                    assert!(
                        text.contains(&format!("{STALL_DURATION_SECONDS}_count{{{labels}}} 0\n"))
                    );
                }
            }
        }
        assert!(text.contains(&format!("# TYPE {STALLS_TOTAL} counter\n")));
        assert!(text.contains(&format!("# TYPE {STALL_DURATION_SECONDS} histogram\n")));
        let series = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(series, 12 + 12 * (BUCKETS + 2));
    }

    #[test]
    fn a_stall_counts_under_its_evidence_labels_and_bucket() {
        let metrics = NodeMetrics::new();
        let o = observation(StallKind::Tunnel, ProviderHealth::Unavailable, false, 2_000);
        metrics.observe_stall(&o);
        assert_eq!(
            metrics.stalls(StallKind::Tunnel, ProviderHealth::Unavailable, false),
            1
        );
        assert_eq!(
            metrics.stalls(StallKind::Run, ProviderHealth::Unavailable, false),
            0
        );
        let text = scrape(&metrics);
        let labels = "kind=\"tunnel\",provider_health=\"unavailable\",retryable=\"false\"";
        assert!(text.contains(&format!("{STALLS_TOTAL}{{{labels}}} 1\n")));
        // 2 s: not in le=1, in le=2.5 and every later bucket.
        assert!(text.contains(&format!(
            "{STALL_DURATION_SECONDS}_bucket{{{labels},le=\"1\"}} 0\n"
        )));
        assert!(text.contains(&format!(
            "{STALL_DURATION_SECONDS}_bucket{{{labels},le=\"2.5\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "{STALL_DURATION_SECONDS}_bucket{{{labels},le=\"+Inf\"}} 1\n"
        )));
        assert!(text.contains(&format!("{STALL_DURATION_SECONDS}_sum{{{labels}}} 2\n")));
        // A very long silence lands in +Inf only.
        let o = observation(StallKind::Run, ProviderHealth::Available, true, 900_000);
        metrics.observe_stall(&o);
        let text = scrape(&metrics);
        let labels = "kind=\"run\",provider_health=\"available\",retryable=\"true\"";
        assert!(text.contains(&format!(
            "{STALL_DURATION_SECONDS}_bucket{{{labels},le=\"600\"}} 0\n"
        )));
        assert!(text.contains(&format!("{STALL_DURATION_SECONDS}_count{{{labels}}} 1\n")));
    }

    #[test]
    fn health_outside_the_three_way_set_is_unknown() {
        let o = observation(StallKind::Run, ProviderHealth::Unspecified, false, 0);
        assert_eq!(health_label(o.health), "unknown");
        assert_eq!(liveness_label(o.liveness), "health_unknown");
        let metrics = NodeMetrics::new();
        metrics.observe_stall(&o);
        assert_eq!(
            metrics.stalls(StallKind::Run, ProviderHealth::Unknown, false),
            1
        );
    }
}
