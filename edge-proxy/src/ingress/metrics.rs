//! Counters for `/metrics` (Prometheus text format).
//!
//! Every label value comes from a closed set: the API (two values), an
//! HTTP status from a fixed list (anything else is `other`), and model
//! group / provider ids from the config. Counters are atomics indexed by
//! position, so counting never takes a lock.

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use foldhash::HashMap;
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
    /// The token counters of the current config's pairs (a reload swaps
    /// the table, keeping the counters of pairs it keeps).
    usage: RwLock<Arc<UsageTable>>,
    /// F32: the StreamGate's recovery counters.
    pub recovery: super::gate::metrics::RecoveryMetrics,
    /// Drain and reload (`docs/operations.md`).
    pub ops: OpsMetrics,
}

/// `[input, output, reasoning, cached_input]` of one pair.
type TokenCounters = Arc<[AtomicU64; 4]>;

/// One config's `(model group, provider)` pairs and their token counters.
#[derive(Debug, Default)]
struct UsageTable {
    /// model → provider → index into `labels` and `tokens` (nested, so a
    /// request looks its pair up by `&str`, allocating nothing).
    index: HashMap<String, HashMap<String, usize>>,
    labels: Vec<(String, String)>,
    tokens: Vec<TokenCounters>,
}

impl UsageTable {
    /// The pairs of `config`; a pair `keep` already counts keeps its counters.
    fn build(config: &EdgeConfig, keep: Option<&UsageTable>) -> Self {
        let mut labels = Vec::new();
        for group in config.model_groups() {
            for provider in &group.providers {
                labels.push((group.name.clone(), provider.clone()));
            }
        }
        let tokens = labels
            .iter()
            .map(|(model, provider)| {
                keep.and_then(|old| {
                    old.find(model, provider)
                        .map(|i| Arc::clone(&old.tokens[i]))
                })
                .unwrap_or_default()
            })
            .collect();
        let mut index: HashMap<String, HashMap<String, usize>> = HashMap::default();
        for (i, (model, provider)) in labels.iter().enumerate() {
            index
                .entry(model.clone())
                .or_default()
                .insert(provider.clone(), i);
        }
        Self {
            index,
            labels,
            tokens,
        }
    }

    /// The index of the pair `(model, provider)`.
    fn find(&self, model: &str, provider: &str) -> Option<usize> {
        self.index.get(model)?.get(provider).copied()
    }
}

/// Counters of the operator actions.
#[derive(Debug, Default)]
pub struct OpsMetrics {
    /// Set when a drain begins.
    pub draining: AtomicBool,
    /// Reloads applied.
    pub reloads_applied: AtomicU64,
    /// Reloads rejected (invalid file).
    pub reloads_rejected: AtomicU64,
}

impl Metrics {
    /// Counters for every model group / provider pair of `config`.
    pub fn new(config: &EdgeConfig) -> Self {
        Self {
            requests: APIS
                .iter()
                .map(|_| (0..=STATUSES.len()).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            usage: RwLock::new(Arc::new(UsageTable::build(config, None))),
            recovery: Default::default(),
            ops: OpsMetrics::default(),
        }
    }

    /// Follows a reloaded config: token counters for its pairs, the pairs
    /// it keeps counting on from where they were.
    pub fn reload(&self, config: &EdgeConfig) {
        let old = self.usage_table();
        let table = UsageTable::build(config, Some(&old));
        *self.usage.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(table);
    }

    fn usage_table(&self) -> Arc<UsageTable> {
        Arc::clone(&self.usage.read().unwrap_or_else(|e| e.into_inner()))
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
        let table = self.usage_table();
        let Some(i) = table.find(model, provider) else {
            return;
        };
        let counters = &table.tokens[i];
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
        let table = self.usage_table();
        for ((model, provider), counters) in table.labels.iter().zip(&table.tokens) {
            for (kind, counter) in ["input", "output", "reasoning", "cached_input"]
                .iter()
                .zip(counters.iter())
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
        out.push_str("# HELP iop_edge_draining 1 while the Edge drains (SIGTERM/SIGINT).\n");
        out.push_str("# TYPE iop_edge_draining gauge\n");
        let draining = self.ops.draining.load(Ordering::Relaxed);
        let _ = writeln!(out, "iop_edge_draining {}", u8::from(draining));
        out.push_str(
            "# HELP iop_edge_config_reloads_total edge.yaml reloads (SIGHUP) by result.\n",
        );
        out.push_str("# TYPE iop_edge_config_reloads_total counter\n");
        for (result, counter) in [
            ("applied", &self.ops.reloads_applied),
            ("rejected", &self.ops.reloads_rejected),
        ] {
            let _ = writeln!(
                out,
                "iop_edge_config_reloads_total{{result=\"{result}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        // F31: the health overlay's evidence and transitions.
        pools.health_metrics().render(&mut out);
        self.recovery.render(&mut out);
        out
    }
}
