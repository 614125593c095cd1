//! Model groups, provider selection, capacity and leases (F17, F19).
//!
//! A client's `model` names a group; the group lists providers, each homed
//! on one node. [`Pools::acquire`] picks a provider whose node is ready and
//! that has free capacity — fewest outstanding requests relative to its
//! `max_concurrency`, ties in config order — and returns a [`Lease`] on it.
//! When every candidate is full the request waits in a bounded queue for at
//! most the queue timeout, re-resolving each time any capacity frees (so a
//! freed slot on *any* provider of the group serves it).
//!
//! Selection honours the runtime health overlay ([`crate::health`]): a
//! provider lowered by fresh `unavailable` stall evidence on its node's
//! current generation is skipped until a CAPABILITIES probe restores it.
//! An admission may carry a [`Preference`] (F26): avoid one provider when a
//! runtime-eligible alternate exists, and re-select it when none does only
//! if the fallback flag says so (`select`).
//!
//! # Invariants
//! - **Capacity is never exceeded.** A lease is taken by a compare-and-swap
//!   increment below `max_concurrency`; there is no check-then-act window.
//! - **Exactly-once release.** A [`Lease`] is a value; dropping it releases
//!   its unit of capacity. It cannot be cloned, so it cannot be released
//!   twice, and every path that ends a request (complete, error, cancel,
//!   client gone, node disconnect, panic unwinding) drops it.
//! - **Immutable binding.** A lease names the provider, adapter, target,
//!   node and the node's generation at dispatch; none of them changes.
//! - The per-provider counters are atomics any core reads without a lock
//!   (DESIGN.md: shards publish load summaries); waiting uses a
//!   runtime-agnostic notifier, so any core's release wakes any waiter.

mod handoff;
#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
mod release_tests;
mod select;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use foldhash::HashMap;
use tokio::sync::Notify;

pub use self::select::{Preference, load_key};
use crate::config::{EdgeConfig, ProviderKind, QueueConfig};
pub use crate::health::StallHandoff;
use crate::health::metrics::HealthMetrics;
use crate::health::shard::{HealthSink, HealthUpdate, OverlayRoute};
use crate::health::{EvidenceOutcome, GenerationView, ProviderOverlay};
use crate::registry::{NodeDirectory, NodeRegistry};

/// One provider as the pools see it: its place and its live load.
#[derive(Debug)]
pub struct Provider {
    /// Provider id from config (a closed set: safe as a metrics label).
    pub id: String,
    /// The node it lives on (shared: every request's stream names it).
    pub node_id: Arc<str>,
    /// The adapter instance name on that node (shared: every tunnel it
    /// opens names it).
    pub adapter: Arc<str>,
    /// Its kind, which decides the wire (F17): tunnel or normalized run.
    pub kind: ProviderKind,
    /// Capacity (F19).
    pub max_concurrency: u32,
    /// F20 stall timeout as configured (0 = the default).
    pub response_stall_timeout_ms: u64,
    /// Hard deadline, 0 = none.
    pub request_timeout_ms: u64,
    outstanding: AtomicU32,
    overlay: ProviderOverlay,
}

impl Provider {
    /// Its runtime health overlay (F24, F25).
    pub fn overlay(&self) -> &ProviderOverlay {
        &self.overlay
    }

    /// Whether selection may pick it on `generation` of its node: the
    /// overlay does not hold it unavailable there.
    pub fn runtime_eligible(&self, generation: u64) -> bool {
        !self.overlay.unavailable_at(generation)
    }

    /// Requests holding a lease on it now.
    pub fn outstanding(&self) -> u32 {
        self.outstanding.load(Ordering::Acquire)
    }

    /// Takes one unit of capacity if there is one.
    fn try_take(&self) -> bool {
        self.outstanding
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_concurrency).then_some(n + 1)
            })
            .is_ok()
    }
}

/// One model group: the name clients ask for, the target sent to the
/// provider, and its providers.
#[derive(Debug)]
pub struct Group {
    /// The `model` clients ask for.
    pub name: String,
    /// The target (model) on the providers (shared: every lease names it).
    pub target: Arc<str>,
    providers: Vec<Arc<Provider>>,
    /// Each provider's weight, aligned with `providers`.
    weights: Vec<u32>,
}

impl Group {
    /// Its providers, in config order.
    pub fn providers(&self) -> &[Arc<Provider>] {
        &self.providers
    }
}

/// A dispatched request's hold on one unit of a provider's capacity (see
/// the module docs). Dropping it releases the unit, exactly once.
#[derive(Debug)]
pub struct Lease {
    provider: Arc<Provider>,
    generation: u64,
    target: Arc<str>,
    group: Arc<str>,
    released: Arc<Notify>,
}

impl Lease {
    /// The provider.
    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    /// The node connection's generation at dispatch.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The target on the provider.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The target, shared (a tunnel's request names it without a copy).
    pub fn shared_target(&self) -> &Arc<str> {
        &self.target
    }

    /// The model group it was taken for.
    pub fn group(&self) -> &str {
        &self.group
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.provider.outstanding.fetch_sub(1, Ordering::AcqRel);
        self.released.notify_waiters();
    }
}

/// Why no lease was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcquireError {
    /// No group has this name.
    #[error("the model {0:?} does not exist")]
    UnknownModel(String),
    /// No provider of the group is on a ready node: nothing can serve now.
    #[error("no provider of model {0:?} is available")]
    Unavailable(String),
    /// Every candidate is full and the queue is full too.
    #[error("model {0:?} is at capacity and its queue is full")]
    QueueFull(String),
    /// Every candidate stayed full for the whole queue timeout.
    #[error("model {0:?} stayed at capacity for {1} ms")]
    QueueTimeout(String, u64),
}

/// Every model group, built from the config and rebuilt by a reload
/// ([`Pools::reload`]).
#[derive(Debug)]
pub struct Pools {
    /// The current groups and providers; a reload swaps it whole, and each
    /// admission pass reads the table current then (queued requests
    /// re-resolve against the new config).
    table: RwLock<Arc<Table>>,
    waiting: AtomicUsize,
    released: Arc<Notify>,
    generations: OnceLock<Generations>,
    /// Where validated evidence goes: to the home core of the provider's
    /// node, the overlay's only writer ([`crate::health::shard`]).
    overlay_route: OnceLock<OverlayOwner>,
    health: Arc<HealthMetrics>,
}

/// One config's groups and providers.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) groups: HashMap<String, (Arc<str>, Arc<Group>)>,
    /// Every provider once, in config order.
    pub(crate) providers: Vec<Arc<Provider>>,
    queue: QueueConfig,
}

impl Table {
    /// The table of `config`; a provider whose id and settings are the same
    /// in `keep` is carried over (its load and health overlay with it).
    fn build(config: &EdgeConfig, keep: Option<&Table>) -> Self {
        let mut providers: HashMap<&str, Arc<Provider>> = HashMap::default();
        let mut ordered = Vec::new();
        for node in config.nodes() {
            for spec in &node.providers {
                let fresh = Provider {
                    id: spec.id.clone(),
                    node_id: Arc::from(node.id.as_str()),
                    adapter: Arc::from(spec.adapter.as_str()),
                    kind: spec.kind,
                    max_concurrency: spec.max_concurrency,
                    response_stall_timeout_ms: spec.response_stall_timeout_ms,
                    request_timeout_ms: spec.request_timeout_ms,
                    outstanding: AtomicU32::new(0),
                    overlay: ProviderOverlay::default(),
                };
                let kept = keep
                    .and_then(|old| old.providers.iter().find(|p| p.id == fresh.id))
                    .filter(|old| old.same_settings(&fresh))
                    .cloned();
                let provider = kept.unwrap_or_else(|| Arc::new(fresh));
                ordered.push(Arc::clone(&provider));
                providers.insert(&spec.id, provider);
            }
        }
        let groups = config
            .model_groups()
            .iter()
            .map(|group| {
                let members = group
                    .providers
                    .iter()
                    .filter_map(|id| providers.get(id.as_str()).cloned())
                    .collect();
                let weights = group
                    .providers
                    .iter()
                    .zip(&group.weights)
                    .filter(|(id, _)| providers.contains_key(id.as_str()))
                    .map(|(_, w)| *w)
                    .collect();
                let entry = Group {
                    name: group.name.clone(),
                    target: Arc::from(group.target.as_str()),
                    providers: members,
                    weights,
                };
                (
                    group.name.clone(),
                    (Arc::from(group.name.as_str()), Arc::new(entry)),
                )
            })
            .collect();
        Self {
            groups,
            providers: ordered,
            queue: *config.queue(),
        }
    }
}

impl Provider {
    /// Same place and settings (a reload keeps such a provider as it is).
    fn same_settings(&self, other: &Provider) -> bool {
        self.id == other.id
            && self.node_id == other.node_id
            && self.adapter == other.adapter
            && self.kind == other.kind
            && self.max_concurrency == other.max_concurrency
            && self.response_stall_timeout_ms == other.response_stall_timeout_ms
            && self.request_timeout_ms == other.request_timeout_ms
    }
}

/// The registry's view of current generations, set once at start.
struct Generations(Arc<dyn GenerationView>);

impl std::fmt::Debug for Generations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Generations")
    }
}

/// The attached overlay route.
struct OverlayOwner(Arc<dyn OverlayRoute>);

impl std::fmt::Debug for OverlayOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OverlayOwner")
    }
}

impl Pools {
    /// The groups of `config`.
    pub fn new(config: &EdgeConfig) -> Self {
        let table = Table::build(config, None);
        Self {
            health: Arc::new(HealthMetrics::new(
                table.providers.iter().map(|p| p.id.clone()),
            )),
            table: RwLock::new(Arc::new(table)),
            waiting: AtomicUsize::new(0),
            released: Arc::new(Notify::new()),
            generations: OnceLock::new(),
            overlay_route: OnceLock::new(),
        }
    }

    /// Rebuilds the groups from `config` (a reload): providers with the
    /// same id and settings are kept as they are (load, health overlay);
    /// changed and new ones start fresh; removed ones leave the groups.
    /// Leases already taken keep their provider and release into it
    /// normally. Queued requests are woken to re-resolve.
    pub fn reload(&self, config: &EdgeConfig) {
        let old = self.table();
        let table = Table::build(config, Some(&old));
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(table);
        self.capacity_changed();
    }

    /// The current table.
    pub(crate) fn table(&self) -> Arc<Table> {
        Arc::clone(&self.table.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Gives the pools the registry's view of current node generations,
    /// which the stall handoff and recovery validate against. Until it is
    /// attached, every handoff and probe answer is refused (fail-closed).
    /// Later calls are ignored.
    pub fn attach_generations(&self, view: Arc<dyn GenerationView>) {
        let _ = self.generations.set(Generations(view));
    }

    /// Gives the pools the route to each provider's overlay owner (in the
    /// Edge: the home core of its node, through that core's inbox). Until
    /// it is attached, evidence is validated and counted but applied
    /// nowhere (`stale_generation`). Later calls are ignored.
    pub fn attach_overlay_route(&self, route: Arc<dyn OverlayRoute>) {
        let _ = self.overlay_route.set(OverlayOwner(route));
    }

    /// Sends validated evidence about `provider` to its owner (see
    /// [`OverlayRoute::route`] for the answer).
    pub(crate) fn route_evidence(
        &self,
        provider: Arc<Provider>,
        evidence: Evidence,
    ) -> Option<EvidenceOutcome> {
        let update = HealthUpdate {
            provider,
            generation: evidence.generation,
            seq: evidence.seq,
            health: evidence.health,
            target: evidence.target,
            source: evidence.source,
            sink: HealthSink {
                metrics: Arc::clone(&self.health),
                wake: Arc::clone(&self.released),
            },
        };
        match self.overlay_route.get() {
            Some(owner) => owner.0.route(update),
            None => {
                update.record(EvidenceOutcome::StaleGeneration);
                Some(EvidenceOutcome::StaleGeneration)
            }
        }
    }

    /// The node's current generation, per the attached view.
    pub(crate) fn current_generation(&self, node_id: &str) -> Option<u64> {
        self.generations
            .get()
            .and_then(|g| g.0.current_generation(node_id))
    }

    /// Every provider once, in config order.
    pub fn providers(&self) -> Vec<Arc<Provider>> {
        self.table().providers.clone()
    }

    /// The F31 health counters.
    pub fn health_metrics(&self) -> &HealthMetrics {
        &self.health
    }

    /// The group clients call `model`.
    pub fn group(&self, model: &str) -> Option<Arc<Group>> {
        self.table()
            .groups
            .get(model)
            .map(|(_, group)| Arc::clone(group))
    }

    /// Every group, sorted by name.
    pub fn groups(&self) -> Vec<Arc<Group>> {
        let mut all: Vec<_> = self
            .table()
            .groups
            .values()
            .map(|(_, g)| Arc::clone(g))
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Leases held now, over every provider of the current config (leases
    /// still held on a provider a reload removed or changed are not
    /// counted).
    pub fn outstanding(&self) -> u64 {
        self.table()
            .providers
            .iter()
            .map(|p| u64::from(p.outstanding()))
            .sum()
    }

    /// Requests waiting for capacity now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Picks a provider of `model` and leases one unit of it, waiting in
    /// the queue when every candidate is full (see the module docs).
    pub async fn acquire<D: NodeDirectory>(
        &self,
        model: &str,
        registry: &NodeRegistry<D>,
    ) -> Result<Lease, AcquireError> {
        self.acquire_preferring(model, registry, &Preference::default())
            .await
    }

    /// [`Pools::acquire`] with a [`Preference`] (F26), applied on the first
    /// look and on every queued re-resolution. `acquire(m, r)` is
    /// `acquire_preferring(m, r, &Preference::default())`.
    pub async fn acquire_preferring<D: NodeDirectory>(
        &self,
        model: &str,
        registry: &NodeRegistry<D>,
        preference: &Preference,
    ) -> Result<Lease, AcquireError> {
        // Register interest before the first look, so a release between the
        // look and the wait is not missed.
        let notified = self.released.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(lease) = self.try_model(model, registry, preference)? {
            return Ok(lease);
        }
        let queue = self.table().queue;
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.waiting);
        if queued >= queue.max_waiting as usize {
            return Err(AcquireError::QueueFull(model.to_owned()));
        }
        let deadline = std::time::Instant::now() + Duration::from_millis(queue.timeout_ms);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // monoio's timer: the ingress runs on the Edge's monoio cores.
            if monoio::time::timeout(left, notified.as_mut())
                .await
                .is_err()
            {
                return Err(AcquireError::QueueTimeout(
                    model.to_owned(),
                    queue.timeout_ms,
                ));
            }
            notified.set(self.released.notified());
            notified.as_mut().enable();
            if let Some(lease) = self.try_model(model, registry, preference)? {
                return Ok(lease);
            }
        }
    }

    /// The first look of [`Pools::acquire_preferring`], without a wait: a
    /// lease when a candidate has a free unit now, `None` when every one is
    /// full (then [`Pools::acquire_preferring`] queues; it registers for
    /// releases before it looks again, so none is missed in between). A
    /// caller that takes this first keeps the queue's future, its timer
    /// and its registration off the usual path (the ingress:
    /// `bench-results/profiles.md`, round 47).
    pub fn try_acquire_preferring<D: NodeDirectory>(
        &self,
        model: &str,
        registry: &NodeRegistry<D>,
        preference: &Preference,
    ) -> Result<Option<Lease>, AcquireError> {
        self.try_model(model, registry, preference)
    }

    /// One admission pass for `model` against the current table.
    fn try_model<D: NodeDirectory>(
        &self,
        model: &str,
        registry: &NodeRegistry<D>,
        preference: &Preference,
    ) -> Result<Option<Lease>, AcquireError> {
        let table = self.table();
        let Some((name, group)) = table.groups.get(model) else {
            return Err(AcquireError::UnknownModel(model.to_owned()));
        };
        self.try_lease(name, group, registry, preference)
    }

    /// Wakes queued requests to re-resolve (a node became ready).
    pub fn capacity_changed(&self) {
        self.released.notify_waiters();
    }
}

/// What [`Pools::route_evidence`] sends, besides the provider.
#[derive(Debug)]
pub(crate) struct Evidence {
    pub(crate) generation: u64,
    pub(crate) seq: Option<u64>,
    pub(crate) health: proto::v1::ProviderHealth,
    pub(crate) target: String,
    pub(crate) source: crate::health::EvidenceSource,
}

/// Counts one queued request for as long as it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
