//! Counters for `/metrics` (Prometheus text format).
//!
//! Every label value comes from a closed set: the API (two values), an
//! HTTP status from a fixed list (anything else is `other`), and model
//! group / provider ids from the config. Counters are atomics indexed by
//! position, so counting never takes a lock.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use proto::v1::Usage;

use super::Api;
use crate::config::EdgeConfig;
use crate::pool::Pools;
use crate::registry::NodeRegistry;

/// The statuses counted by name; the rest count as `other`.
const STATUSES: [u16; 17] = [
    200, 400, 401, 404, 405, 408, 411, 413, 429, 431, 499, 500, 501, 502, 503, 504, 505,
];
const APIS: [Api; 2] = [Api::Chat, Api::Responses];

/// The Edge's request and token counters.
#[derive(Debug)]
pub struct Metrics {
    /// `[api][status index]`, the last index being `other`.
    requests: Vec<Vec<AtomicU64>>,
    /// `(model, provider)` → index into `tokens`.
    usage_index: HashMap<(String, String), usize>,
    usage_labels: Vec<(String, String)>,
    /// `[pair][input, output, reasoning, cached_input]`.
    tokens: Vec<[AtomicU64; 4]>,
    /// F32: the StreamGate's recovery counters.
    pub recovery: super::gate::metrics::RecoveryMetrics,
}

impl Metrics {
    /// Counters for every model group / provider pair of `config`.
    pub fn new(config: &EdgeConfig) -> Self {
        let mut usage_labels = Vec::new();
        for group in config.model_groups() {
            for provider in &group.providers {
                usage_labels.push((group.name.clone(), provider.clone()));
            }
        }
        let usage_index = usage_labels
            .iter()
            .enumerate()
            .map(|(i, pair)| (pair.clone(), i))
            .collect();
        Self {
            requests: APIS
                .iter()
                .map(|_| (0..=STATUSES.len()).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            tokens: usage_labels.iter().map(|_| Default::default()).collect(),
            usage_index,
            usage_labels,
            recovery: Default::default(),
        }
    }

    /// Counts one completion request answered with `status`.
    pub fn request(&self, api: Api, status: u16) {
        let row = APIS.iter().position(|a| *a == api).unwrap_or(0);
        let col = STATUSES
            .iter()
            .position(|s| *s == status)
            .unwrap_or(STATUSES.len());
        if let Some(counter) = self.requests.get(row).and_then(|r| r.get(col)) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds provider-reported usage (F18) for `model` served by `provider`.
    pub fn usage(&self, model: &str, provider: &str, usage: &Usage) {
        let key = (model.to_owned(), provider.to_owned());
        let Some(&i) = self.usage_index.get(&key) else {
            return;
        };
        let counters = &self.tokens[i];
        counters[0].fetch_add(usage.input_tokens, Ordering::Relaxed);
        counters[1].fetch_add(usage.output_tokens, Ordering::Relaxed);
        counters[2].fetch_add(usage.reasoning_tokens.unwrap_or(0), Ordering::Relaxed);
        counters[3].fetch_add(usage.cached_input_tokens.unwrap_or(0), Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self, pools: &Pools, registry: &NodeRegistry<EdgeConfig>) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str("# HELP iop_requests_total Completion requests by API and HTTP status.\n");
        out.push_str("# TYPE iop_requests_total counter\n");
        for (api, row) in APIS.iter().zip(&self.requests) {
            for (i, counter) in row.iter().enumerate() {
                let status = STATUSES
                    .get(i)
                    .map_or_else(|| "other".to_owned(), u16::to_string);
                let _ = writeln!(
                    out,
                    "iop_requests_total{{api=\"{}\",status=\"{status}\"}} {}",
                    api.label(),
                    counter.load(Ordering::Relaxed)
                );
            }
        }
        out.push_str(
            "# HELP iop_tokens_total Provider-reported tokens by model group, provider and kind.\n",
        );
        out.push_str("# TYPE iop_tokens_total counter\n");
        for ((model, provider), counters) in self.usage_labels.iter().zip(&self.tokens) {
            for (kind, counter) in ["input", "output", "reasoning", "cached_input"]
                .iter()
                .zip(counters)
            {
                let _ = writeln!(
                    out,
                    "iop_tokens_total{{model=\"{model}\",provider=\"{provider}\",kind=\"{kind}\"}} {}",
                    counter.load(Ordering::Relaxed)
                );
            }
        }
        out.push_str("# HELP iop_provider_leases Requests holding a lease on each provider.\n");
        out.push_str("# TYPE iop_provider_leases gauge\n");
        let mut seen = std::collections::HashSet::new();
        for group in pools.groups() {
            for provider in group.providers() {
                if seen.insert(provider.id.clone()) {
                    let _ = writeln!(
                        out,
                        "iop_provider_leases{{provider=\"{}\"}} {}",
                        provider.id,
                        provider.outstanding()
                    );
                }
            }
        }
        out.push_str("# HELP iop_queue_waiting Requests waiting for capacity.\n");
        out.push_str("# TYPE iop_queue_waiting gauge\n");
        let _ = writeln!(out, "iop_queue_waiting {}", pools.waiting());
        out.push_str("# HELP iop_nodes_ready Nodes whose current connection is ready.\n");
        out.push_str("# TYPE iop_nodes_ready gauge\n");
        let _ = writeln!(out, "iop_nodes_ready {}", registry.ready_nodes().len());
        // F31: the health overlay's evidence and transitions.
        pools.health_metrics().render(&mut out);
        self.recovery.render(&mut out);
        out
    }
}
