//! F31 counters of the health overlay, in Prometheus text.
//!
//! - `iop_edge_provider_health_evidence_total{provider, source, health,
//!   outcome}`: every piece of evidence the Edge looked at — stall
//!   terminals and CAPABILITIES probe answers — and what it did.
//! - `iop_edge_provider_health_transitions_total{provider, from, to}`:
//!   overlay changes (`available` → `unavailable` when lowered,
//!   `unavailable` → `available` when restored).
//!
//! Every label value is closed: provider ids from the config, `source` ∈
//! {stall, capabilities}, `health` ∈ {available, unavailable, unknown},
//! `outcome` ∈ [`EvidenceOutcome::ALL`], `from`/`to` ∈ {available,
//! unavailable}. Every combination exists from the start at 0, so
//! `/metrics` lists them before the first event.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use foldhash::HashMap;
use proto::v1::ProviderHealth;

use super::{EvidenceOutcome, EvidenceSource, HEALTH_LABELS, health_label};

const SOURCES: usize = EvidenceSource::ALL.len();
const HEALTHS: usize = HEALTH_LABELS.len();
const OUTCOMES: usize = EvidenceOutcome::ALL.len();
const PER_PROVIDER: usize = SOURCES * HEALTHS * OUTCOMES;

/// The overlay transitions, as `(from, to)` label pairs.
pub const TRANSITIONS: [(&str, &str); 2] =
    [("available", "unavailable"), ("unavailable", "available")];

/// The F31 counters (see the module docs).
#[derive(Debug)]
pub struct HealthMetrics {
    providers: Vec<String>,
    index: HashMap<String, usize>,
    /// `[provider][source][health][outcome]`, flattened.
    evidence: Vec<AtomicU64>,
    /// `[provider][transition]`, flattened.
    transitions: Vec<AtomicU64>,
}

impl HealthMetrics {
    /// Zeroed counters for `providers` (config ids, in config order).
    pub fn new(providers: impl IntoIterator<Item = String>) -> Self {
        let providers: Vec<String> = providers.into_iter().collect();
        let index = providers
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect();
        Self {
            evidence: (0..providers.len() * PER_PROVIDER)
                .map(|_| AtomicU64::new(0))
                .collect(),
            transitions: (0..providers.len() * TRANSITIONS.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            providers,
            index,
        }
    }

    /// Counts one piece of evidence, and the transition it caused. An id
    /// not in the config is not counted (labels stay closed).
    pub fn evidence(
        &self,
        provider: &str,
        source: EvidenceSource,
        health: ProviderHealth,
        outcome: EvidenceOutcome,
    ) {
        let Some(&p) = self.index.get(provider) else {
            return;
        };
        let s = EvidenceSource::ALL
            .iter()
            .position(|x| *x == source)
            .unwrap_or(0);
        let h = HEALTH_LABELS
            .iter()
            .position(|x| *x == health_label(health))
            .unwrap_or(HEALTHS - 1);
        let o = EvidenceOutcome::ALL
            .iter()
            .position(|x| *x == outcome)
            .unwrap_or(0);
        if let Some(c) = self
            .evidence
            .get(((p * SOURCES + s) * HEALTHS + h) * OUTCOMES + o)
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let transition = match outcome {
            EvidenceOutcome::Lowered => Some(0),
            EvidenceOutcome::Restored => Some(1),
            _ => None,
        };
        if let Some(t) = transition
            && let Some(c) = self.transitions.get(p * TRANSITIONS.len() + t)
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One evidence counter's value (tests, operators).
    pub fn evidence_count(
        &self,
        provider: &str,
        source: EvidenceSource,
        health: &str,
        outcome: EvidenceOutcome,
    ) -> u64 {
        let (Some(&p), Some(s), Some(h), Some(o)) = (
            self.index.get(provider),
            EvidenceSource::ALL.iter().position(|x| *x == source),
            HEALTH_LABELS.iter().position(|x| *x == health),
            EvidenceOutcome::ALL.iter().position(|x| *x == outcome),
        ) else {
            return 0;
        };
        self.evidence[((p * SOURCES + s) * HEALTHS + h) * OUTCOMES + o].load(Ordering::Relaxed)
    }

    /// Appends both families to `out`.
    pub fn render(&self, out: &mut String) {
        out.push_str(
            "# HELP iop_edge_provider_health_evidence_total Provider health evidence seen by the Edge, by source, health and outcome.\n",
        );
        out.push_str("# TYPE iop_edge_provider_health_evidence_total counter\n");
        let mut i = 0;
        for provider in &self.providers {
            for source in EvidenceSource::ALL {
                for health in HEALTH_LABELS {
                    for outcome in EvidenceOutcome::ALL {
                        let _ = writeln!(
                            out,
                            "iop_edge_provider_health_evidence_total{{provider=\"{provider}\",source=\"{}\",health=\"{health}\",outcome=\"{}\"}} {}",
                            source.label(),
                            outcome.label(),
                            self.evidence[i].load(Ordering::Relaxed)
                        );
                        i += 1;
                    }
                }
            }
        }
        out.push_str(
            "# HELP iop_edge_provider_health_transitions_total Runtime health overlay changes by provider.\n",
        );
        out.push_str("# TYPE iop_edge_provider_health_transitions_total counter\n");
        let mut i = 0;
        for provider in &self.providers {
            for (from, to) in TRANSITIONS {
                let _ = writeln!(
                    out,
                    "iop_edge_provider_health_transitions_total{{provider=\"{provider}\",from=\"{from}\",to=\"{to}\"}} {}",
                    self.transitions[i].load(Ordering::Relaxed)
                );
                i += 1;
            }
        }
    }
}
