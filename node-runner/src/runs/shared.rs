//! What the cores serving one connection generation share: the adapters'
//! admission counters (F9), the health observation sequence (F23) and the
//! link's transport facts (F14). Atomics only: no lock, no message on the
//! event path.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use proto::v1::{NodeConfigPayload, TransportStatusResult};

use super::LinkIdentity;

/// One adapter's capacity on this connection, shared by every core: a run
/// holds one unit from admission until its terminal has been sent.
#[derive(Debug)]
pub struct Capacity {
    max: u32,
    active: AtomicU32,
}

impl Capacity {
    /// A capacity of `max` concurrent runs.
    pub fn new(max: u32) -> Self {
        Self {
            max,
            active: AtomicU32::new(0),
        }
    }

    /// Takes one unit if fewer than `max` are held (compare-and-increment:
    /// cores racing for the last unit cannot both get it).
    pub fn try_acquire(&self) -> bool {
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |active| {
                (active < self.max).then_some(active + 1)
            })
            .is_ok()
    }

    /// Returns one unit.
    pub fn release(&self) {
        let _ = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |active| {
                active.checked_sub(1)
            });
    }

    /// Units held now, over all cores.
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Acquire)
    }

    /// The limit.
    pub fn max(&self) -> u32 {
        self.max
    }
}

/// One unit of an adapter's [`Capacity`], returned when dropped: exactly
/// once, on every path.
#[derive(Debug)]
pub struct Lease {
    shared: Arc<GenShared>,
    index: usize,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.shared.capacity[self.index].release();
    }
}

/// The state one connection generation shares across the Node's cores.
#[derive(Debug)]
pub struct GenShared {
    identity: LinkIdentity,
    /// Per provider, in the config payload's order.
    capacity: Box<[Capacity]>,
    /// F23: the last health observation sequence handed out (0 = none).
    health_seq: AtomicU64,
    ready: AtomicBool,
    heartbeat_rtt_us: AtomicU64,
}

impl GenShared {
    /// The shared state of the connection `identity`, configured by
    /// `payload` (one [`Capacity`] per provider, in payload order).
    pub fn new(identity: LinkIdentity, payload: &NodeConfigPayload) -> Arc<Self> {
        Arc::new(Self {
            identity,
            capacity: payload
                .providers
                .iter()
                .map(|p| Capacity::new(p.max_concurrency))
                .collect(),
            health_seq: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            heartbeat_rtt_us: AtomicU64::new(0),
        })
    }

    /// This connection's generation.
    pub fn generation(&self) -> u64 {
        self.identity.generation
    }

    /// Who this connection is.
    pub fn identity(&self) -> &LinkIdentity {
        &self.identity
    }

    /// Provider `index`'s capacity (payload order).
    pub fn capacity(&self, index: usize) -> Option<&Capacity> {
        self.capacity.get(index)
    }

    /// Takes one unit of provider `index`'s capacity, if free.
    pub fn try_lease(self: &Arc<Self>, index: usize) -> Option<Lease> {
        self.capacity(index)?.try_acquire().then(|| Lease {
            shared: Arc::clone(self),
            index,
        })
    }

    /// Runs active now on every core (each holds one unit of capacity).
    pub fn active_runs(&self) -> u32 {
        self.capacity.iter().map(Capacity::active).sum()
    }

    /// F23: the next health observation sequence of this connection,
    /// unique across cores.
    pub fn next_health_seq(&self) -> u64 {
        self.health_seq.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Readiness completed.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// The last heartbeat round trip, in µs.
    pub fn set_heartbeat_rtt_us(&self, rtt_us: u64) {
        self.heartbeat_rtt_us.store(rtt_us, Ordering::Release);
    }

    /// The `TRANSPORT_STATUS` snapshot; `closing` when the asking core has
    /// seen the connection end.
    pub fn transport(&self, closing: bool) -> TransportStatusResult {
        let state = if closing {
            "closing"
        } else if self.ready.load(Ordering::Acquire) {
            "ready"
        } else {
            "registered"
        };
        TransportStatusResult {
            node_id: self.identity.node_id.clone(),
            generation: self.identity.generation,
            state: state.into(),
            connected_since_unix_ms: self.identity.connected_since_unix_ms,
            last_heartbeat_rtt_us: self.heartbeat_rtt_us.load(Ordering::Acquire),
            active_runs: self.active_runs(),
            ..TransportStatusResult::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;

    use proto::v1::ProviderConfig;

    use super::*;

    fn shared(max: &[u32]) -> Arc<GenShared> {
        let payload = NodeConfigPayload {
            providers: max
                .iter()
                .map(|&max_concurrency| ProviderConfig {
                    max_concurrency,
                    ..ProviderConfig::default()
                })
                .collect(),
            ..NodeConfigPayload::default()
        };
        let identity = LinkIdentity {
            node_id: "n".into(),
            generation: 3,
            connected_since_unix_ms: 1,
        };
        GenShared::new(identity, &payload)
    }

    #[test]
    fn a_lease_is_returned_once_when_dropped() {
        let shared = shared(&[1, 2]);
        let lease = shared.try_lease(0).expect("free");
        assert!(shared.try_lease(0).is_none(), "max_concurrency 1");
        let _other = shared.try_lease(1).expect("another adapter is separate");
        assert_eq!(shared.active_runs(), 2);
        drop(lease);
        assert_eq!(shared.capacity(0).unwrap().active(), 0);
        assert!(shared.try_lease(0).is_some());
        assert!(shared.try_lease(9).is_none(), "no such provider");
    }

    #[test]
    fn cores_racing_never_exceed_max_concurrency_together() {
        // Eight threads (cores) grab and return units of one adapter as fast
        // as they can; the count never passes the limit, and every unit
        // comes back.
        const MAX: u32 = 3;
        let shared = shared(&[MAX]);
        let peak = AtomicU32::new(0);
        let barrier = Barrier::new(8);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    barrier.wait();
                    for _ in 0..20_000 {
                        if let Some(lease) = shared.try_lease(0) {
                            let now = shared.capacity(0).unwrap().active();
                            peak.fetch_max(now, Ordering::Relaxed);
                            assert!(now <= MAX, "{now} over {MAX}");
                            drop(lease);
                        }
                    }
                });
            }
        });
        assert!(peak.load(Ordering::Relaxed) <= MAX);
        assert_eq!(shared.active_runs(), 0);
    }

    #[test]
    fn health_sequence_is_unique_across_cores() {
        let shared = shared(&[]);
        let mut all: Vec<u64> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        (0..1000)
                            .map(|_| shared.next_health_seq())
                            .collect::<Vec<u64>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        all.sort_unstable();
        assert_eq!(all, (1..=4000).collect::<Vec<_>>());
    }

    #[test]
    fn transport_reports_state_and_total_runs() {
        let shared = shared(&[4, 4]);
        assert_eq!(shared.transport(false).state, "registered");
        shared.set_ready();
        shared.set_heartbeat_rtt_us(250);
        let _a = shared.try_lease(0);
        let _b = shared.try_lease(1);
        let status = shared.transport(false);
        assert_eq!(
            (status.state.as_str(), status.active_runs, status.generation),
            ("ready", 2, 3)
        );
        assert_eq!(status.last_heartbeat_rtt_us, 250);
        assert_eq!(shared.transport(true).state, "closing");
    }
}
