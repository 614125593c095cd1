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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::{EdgeConfig, ProviderKind, QueueConfig};
use crate::registry::{NodeDirectory, NodeRegistry, NodeState};

/// One provider as the pools see it: its place and its live load.
#[derive(Debug)]
pub struct Provider {
    /// Provider id from config (a closed set: safe as a metrics label).
    pub id: String,
    /// The node it lives on.
    pub node_id: String,
    /// The adapter instance name on that node.
    pub adapter: String,
    /// Its kind, which decides the wire (F17): tunnel or normalized run.
    pub kind: ProviderKind,
    /// Capacity (F19).
    pub max_concurrency: u32,
    /// F20 stall timeout as configured (0 = the default).
    pub response_stall_timeout_ms: u64,
    /// Hard deadline, 0 = none.
    pub request_timeout_ms: u64,
    outstanding: AtomicU32,
}

impl Provider {
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
    /// The target (model) on the providers.
    pub target: String,
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
    target: String,
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

/// Every model group, built once from the config.
#[derive(Debug)]
pub struct Pools {
    groups: HashMap<String, (Arc<str>, Group)>,
    queue: QueueConfig,
    waiting: AtomicUsize,
    released: Arc<Notify>,
}

impl Pools {
    /// The groups of `config`.
    pub fn new(config: &EdgeConfig) -> Self {
        let mut providers: HashMap<&str, Arc<Provider>> = HashMap::new();
        for node in config.nodes() {
            for spec in &node.providers {
                providers.insert(
                    &spec.id,
                    Arc::new(Provider {
                        id: spec.id.clone(),
                        node_id: node.id.clone(),
                        adapter: spec.adapter.clone(),
                        kind: spec.kind,
                        max_concurrency: spec.max_concurrency,
                        response_stall_timeout_ms: spec.response_stall_timeout_ms,
                        request_timeout_ms: spec.request_timeout_ms,
                        outstanding: AtomicU32::new(0),
                    }),
                );
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
                    target: group.target.clone(),
                    providers: members,
                    weights,
                };
                (group.name.clone(), (Arc::from(group.name.as_str()), entry))
            })
            .collect();
        Self {
            groups,
            queue: *config.queue(),
            waiting: AtomicUsize::new(0),
            released: Arc::new(Notify::new()),
        }
    }

    /// The group clients call `model`.
    pub fn group(&self, model: &str) -> Option<&Group> {
        self.groups.get(model).map(|(_, group)| group)
    }

    /// Every group, sorted by name.
    pub fn groups(&self) -> Vec<&Group> {
        let mut all: Vec<_> = self.groups.values().map(|(_, g)| g).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Leases held now, over every provider.
    pub fn outstanding(&self) -> u64 {
        self.groups
            .values()
            .flat_map(|(_, g)| g.providers.iter())
            .map(|p| (Arc::as_ptr(p), p.outstanding()))
            .collect::<HashMap<_, _>>()
            .values()
            .map(|&n| u64::from(n))
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
        let Some((name, group)) = self.groups.get(model) else {
            return Err(AcquireError::UnknownModel(model.to_owned()));
        };
        // Register interest before the first look, so a release between the
        // look and the wait is not missed.
        let notified = self.released.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(lease) = self.try_lease(name, group, registry)? {
            return Ok(lease);
        }
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.waiting);
        if queued >= self.queue.max_waiting as usize {
            return Err(AcquireError::QueueFull(model.to_owned()));
        }
        let deadline = std::time::Instant::now() + Duration::from_millis(self.queue.timeout_ms);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // monoio's timer: the ingress runs on the Edge's monoio cores.
            if monoio::time::timeout(left, notified.as_mut())
                .await
                .is_err()
            {
                return Err(AcquireError::QueueTimeout(
                    model.to_owned(),
                    self.queue.timeout_ms,
                ));
            }
            notified.set(self.released.notified());
            notified.as_mut().enable();
            if let Some(lease) = self.try_lease(name, group, registry)? {
                return Ok(lease);
            }
        }
    }

    /// Wakes queued requests to re-resolve (a node became ready).
    pub fn capacity_changed(&self) {
        self.released.notify_waiters();
    }

    /// One pass over the candidates: a lease, `None` when all are full, or
    /// `Unavailable` when no candidate's node is ready.
    fn try_lease<D: NodeDirectory>(
        &self,
        name: &Arc<str>,
        group: &Group,
        registry: &NodeRegistry<D>,
    ) -> Result<Option<Lease>, AcquireError> {
        let mut ready: Vec<(&Arc<Provider>, u32, u64)> = group
            .providers
            .iter()
            .zip(&group.weights)
            .filter_map(|(p, &weight)| match registry.node_state(&p.node_id) {
                NodeState::Ready { generation, .. } => Some((p, weight, generation)),
                _ => None,
            })
            .collect();
        if ready.is_empty() {
            return Err(AcquireError::Unavailable(group.name.clone()));
        }
        // Least loaded first; stable, so config order breaks ties.
        ready.sort_by_key(|(p, weight, _)| load_key(p.outstanding(), p.max_concurrency, *weight));
        for (provider, _, generation) in ready {
            if provider.try_take() {
                return Ok(Some(Lease {
                    provider: Arc::clone(provider),
                    generation,
                    target: group.target.clone(),
                    group: Arc::clone(name),
                    released: Arc::clone(&self.released),
                }));
            }
        }
        Ok(None)
    }
}

/// A provider's load for selection: outstanding requests relative to its
/// capacity times its weight (weighted least-outstanding). With equal
/// weights, requests spread in proportion to `max_concurrency`; a weight
/// of 2 gives a provider twice the share of an equal one.
pub fn load_key(outstanding: u32, max_concurrency: u32, weight: u32) -> u64 {
    let share = u64::from(max_concurrency.max(1)) * u64::from(weight.max(1));
    (u64::from(outstanding) << 32) / share
}

/// Counts one queued request for as long as it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::load_key;

    #[test]
    fn weights_and_capacity_scale_a_providers_share() {
        // Equal capacity and weight: the less loaded wins.
        assert!(load_key(1, 8, 1) < load_key(2, 8, 1));
        // Twice the weight: two outstanding weigh like one.
        assert_eq!(load_key(2, 8, 2), load_key(1, 8, 1));
        // Twice the capacity, same weight: likewise.
        assert_eq!(load_key(2, 16, 1), load_key(1, 8, 1));
        // Idle is idle, whatever the weight (ties go to config order).
        assert_eq!(load_key(0, 8, 1), load_key(0, 64, 1000));
        // No overflow at the extremes.
        assert!(load_key(u32::MAX, 1, 1) > load_key(u32::MAX - 1, 1, 1));
        let _ = load_key(u32::MAX, u32::MAX, 1000);
    }
}
