//! F25: scheduling CAPABILITIES probes for lowered providers.
//!
//! Every [`SCAN_INTERVAL_MS`] the scheduler looks for providers whose
//! overlay is lowered on their node's current generation. Each gets at most
//! one probe per [`PROBE_INTERVAL_MS`] and never two at once: a
//! `NodeCommandRequest{kind: CAPABILITIES, adapter, target}` to its node
//! (with a credential lease for a provider with a managed credential, F29),
//! whose responses go to [`Pools::apply_capabilities`] together with the
//! generation the command was actually sent on. The Node runs the same
//! bounded exact-target probe it runs after a stall; an answer not back
//! within [`PROBE_ANSWER_WAIT_MS`] is dropped and changes nothing.
//!
//! The decision of *what* to probe ([`ProbeSchedule::due`]) takes the time
//! as an input and has no I/O, so it is tested with plain numbers; the
//! driver ([`run`]) only sleeps, sends and applies.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use framing::timer::DriverClock;
use proto::v1::{NodeCommandKind, NodeCommandRequest};

use crate::dispatch::Dispatcher;
use crate::pool::Pools;
use crate::registry::NodeDirectory;

/// How often the scheduler looks for lowered providers, in ms.
pub const SCAN_INTERVAL_MS: u64 = 1_000;
/// The least time between two probes of one provider, in ms.
pub const PROBE_INTERVAL_MS: u64 = 5_000;
/// How long the scheduler waits for a probe's answer, in ms. Above the
/// Node's largest probe bound (`health_probe.timeout_ms` ≤ 60 s) would hold
/// a provider's slot too long; a late answer is simply not applied.
pub const PROBE_ANSWER_WAIT_MS: u64 = 30_000;

/// One probe to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The provider it is for (config id).
    pub provider_id: String,
    /// Its node.
    pub node_id: String,
    /// The node generation the provider is lowered on.
    pub generation: u64,
    /// The adapter to probe.
    pub adapter: String,
    /// The exact target to probe (the one the lowering evidence was for).
    pub target: String,
}

impl ProbeTarget {
    /// The command to send.
    pub fn request(&self) -> NodeCommandRequest {
        let mut request = NodeCommandRequest {
            adapter: self.adapter.clone(),
            target: self.target.clone(),
            ..NodeCommandRequest::default()
        };
        request.set_kind(NodeCommandKind::Capabilities);
        request
    }
}

/// Which lowered providers are due a probe (see the module docs).
#[derive(Debug)]
pub struct ProbeSchedule {
    interval_ms: u64,
    /// Provider id → when its last probe was sent, ms.
    last_sent: HashMap<String, u64>,
    in_flight: HashSet<String>,
}

impl ProbeSchedule {
    /// A schedule probing each provider at most once per `interval_ms`.
    pub fn new(interval_ms: u64) -> Self {
        Self {
            interval_ms,
            last_sent: HashMap::new(),
            in_flight: HashSet::new(),
        }
    }

    /// The probes to send at `now_ms`: every provider lowered on its node's
    /// current generation, not in flight, and not probed in the last
    /// interval. They are recorded as sent and in flight.
    pub fn due(&mut self, now_ms: u64, pools: &Pools) -> Vec<ProbeTarget> {
        let mut due = Vec::new();
        for provider in pools.providers() {
            let Some((generation, target)) = provider.overlay().lowered() else {
                self.last_sent.remove(&provider.id);
                continue;
            };
            if pools.current_generation(&provider.node_id) != Some(generation) {
                continue;
            }
            if self.in_flight.contains(&provider.id) {
                continue;
            }
            if self
                .last_sent
                .get(&provider.id)
                .is_some_and(|&at| now_ms.saturating_sub(at) < self.interval_ms)
            {
                continue;
            }
            self.last_sent.insert(provider.id.clone(), now_ms);
            self.in_flight.insert(provider.id.clone());
            due.push(ProbeTarget {
                provider_id: provider.id.clone(),
                node_id: provider.node_id.to_string(),
                generation,
                adapter: String::from(&*provider.adapter),
                target,
            });
        }
        due
    }

    /// The probe for `provider_id` ended (answered, failed or timed out).
    pub fn finished(&mut self, provider_id: &str) {
        self.in_flight.remove(provider_id);
    }
}

/// Runs the scheduler forever. Call inside one monoio runtime (one core
/// drives it for the whole Edge).
pub async fn run<D: NodeDirectory + 'static>(
    pools: Arc<Pools>,
    dispatcher: Dispatcher<D>,
    clock: DriverClock,
) {
    let schedule = Rc::new(RefCell::new(ProbeSchedule::new(PROBE_INTERVAL_MS)));
    loop {
        monoio::time::sleep(Duration::from_millis(SCAN_INTERVAL_MS)).await;
        let now = clock.refresh();
        let due = schedule.borrow_mut().due(now, &pools);
        for target in due {
            let pools = Arc::clone(&pools);
            let dispatcher = dispatcher.clone();
            let schedule = Rc::clone(&schedule);
            monoio::spawn(async move {
                let wait = Duration::from_millis(PROBE_ANSWER_WAIT_MS);
                let _ = monoio::time::timeout(wait, probe(&pools, &dispatcher, &target)).await;
                schedule.borrow_mut().finished(&target.provider_id);
            });
        }
    }
}

/// Sends one probe and applies its final answer.
async fn probe<D: NodeDirectory>(pools: &Pools, dispatcher: &Dispatcher<D>, target: &ProbeTarget) {
    // F29: carries a credential lease when the provider has a managed
    // credential; a refused lease sends nothing.
    let Ok(mut stream) = dispatcher
        .probe_capabilities(
            &target.node_id,
            &target.provider_id,
            &target.adapter,
            &target.target,
        )
        .await
    else {
        return;
    };
    let (node, generation) = stream.node();
    let (node, generation) = (node.to_owned(), generation);
    let mut responses = Vec::new();
    while let Some(response) = stream.next().await {
        responses.push(response);
    }
    pools.apply_capabilities(&target.provider_id, (&node, generation), &responses);
}
