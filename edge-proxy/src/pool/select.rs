//! One selection pass: which providers of a group are candidates now, in
//! which order, and the lease on the first with free capacity.
//!
//! A candidate is **runtime-eligible**: its node is ready and the health
//! overlay does not hold it unavailable on that node's current generation.
//! Candidates are tried least loaded first ([`load_key`]), ties in config
//! order.
//!
//! # Preference (F26)
//! With `avoid_provider_id` set, the avoided provider is dropped from the
//! candidates whenever any runtime-eligible alternate exists — even when
//! every alternate is full: the request then waits in the queue for an
//! alternate rather than going back to the avoided one. When no alternate
//! exists, only `allow_avoided_provider_fallback` lets the avoided provider
//! (if it is runtime-eligible itself) be selected; otherwise the answer is
//! [`AcquireError::Unavailable`]. The zero value changes nothing. This is
//! selection policy only: no retry, reservation or priority.

use std::sync::Arc;

use super::{AcquireError, Group, Lease, Pools, Provider};
use crate::registry::{NodeDirectory, NodeRegistry, NodeState};

/// F26: the avoidance hint of one admission.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preference {
    /// The provider (config id) to avoid when an alternate exists.
    pub avoid_provider_id: Option<String>,
    /// Whether the avoided provider may be selected when no runtime-eligible
    /// alternate exists (set only from exact probe-backed `available`
    /// evidence).
    pub allow_avoided_provider_fallback: bool,
}

impl Pools {
    /// One pass over the candidates: a lease, `None` when all are full, or
    /// `Unavailable` when no candidate is runtime-eligible (after the
    /// preference).
    ///
    /// The least loaded candidate is found without a list (one allocation
    /// and a sort a request saved); only when it turns out full (taken
    /// meanwhile) are the others listed and tried in order.
    pub(super) fn try_lease<D: NodeDirectory>(
        &self,
        name: &Arc<str>,
        group: &Group,
        registry: &NodeRegistry<D>,
        preference: &Preference,
    ) -> Result<Option<Lease>, AcquireError> {
        // The runtime-eligible providers, in config order, each with its
        // weight and its node's generation.
        let eligible = || {
            group
                .providers
                .iter()
                .zip(&group.weights)
                .filter_map(|(p, &weight)| match registry.node_state(&p.node_id) {
                    NodeState::Ready { generation, .. } if p.runtime_eligible(generation) => {
                        Some((p, weight, generation))
                    }
                    _ => None,
                })
        };
        let avoid = preference.avoid_provider_id.as_deref();
        let keeps_avoided = match avoid {
            None => true,
            Some(avoid) => {
                preference.allow_avoided_provider_fallback
                    && !eligible().any(|(p, _, _)| p.id != avoid)
            }
        };
        let candidates =
            || eligible().filter(|(p, _, _)| keeps_avoided || Some(p.id.as_str()) != avoid);
        // Least loaded first; ties in config order (the first of equals).
        let load = |(p, weight, _): &(&Arc<Provider>, u32, u64)| {
            load_key(p.outstanding(), p.max_concurrency, *weight)
        };
        let Some(first) = candidates().min_by_key(load) else {
            return Err(AcquireError::Unavailable(group.name.clone()));
        };
        if let Some(lease) = self.take(name, group, first) {
            return Ok(Some(lease));
        }
        let mut rest: Vec<_> = candidates()
            .filter(|(p, _, _)| !Arc::ptr_eq(p, first.0))
            .collect();
        rest.sort_by_key(load);
        Ok(rest
            .into_iter()
            .find_map(|candidate| self.take(name, group, candidate)))
    }

    /// A lease on `provider` (on its node's `generation`) if it has a unit
    /// of capacity free.
    fn take(
        &self,
        name: &Arc<str>,
        group: &Group,
        (provider, _, generation): (&Arc<Provider>, u32, u64),
    ) -> Option<Lease> {
        provider.try_take().then(|| Lease {
            provider: Arc::clone(provider),
            generation,
            target: Arc::clone(&group.target),
            group: Arc::clone(name),
            released: Arc::clone(&self.released),
        })
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
