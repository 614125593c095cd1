//! The live node registry: which connection of each node is current, its
//! generation, and whether it is ready (F3, F4, F6).
//!
//! The registry is shared by every core and guarded by one mutex. It is on the
//! control path only — register, ready, disconnect, status — never per frame
//! or per token; the data path reads what it needs once per dispatch.
//!
//! # Invariants
//! - A node has at most one live connection. A second registration while one
//!   is live is rejected (`duplicate_connection`); the first stays.
//! - Generations are strictly increasing per node, across the process's life
//!   (a rejected attempt consumes none).
//! - Only the live, ready generation is dispatchable. Releasing or readying
//!   any other generation is a no-op: that is the fence.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use foldhash::HashMap;
use framing::link::CloseReason;
use proto::v1::{NodeConfigPayload, RegisterRejectReason, RegisterRequest};

use crate::link::session::{Accepted, Registrar, Rejection};

/// Where node records come from: token authentication and config payloads.
/// Implemented by the config's node table; tests use small fakes.
pub trait NodeDirectory: Send + Sync {
    /// The id of the node whose token this is, compared in constant time.
    fn authenticate(&self, token: &str) -> Option<String>;
    /// Builds the node's config payload for a peer that accepts frames up to
    /// `peer_max_frame_len` bytes (0 = unknown), or says why it cannot.
    fn build_payload(
        &self,
        node_id: &str,
        peer_max_frame_len: u32,
    ) -> Result<NodeConfigPayload, String>;
}

/// Where a node stands, for dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// No live connection.
    Offline,
    /// Connected and registered, readiness not completed (F4).
    Registered,
    /// Ready: work goes to this generation on this home core.
    Ready {
        /// The live generation.
        generation: u64,
        /// The core that owns the connection.
        core: usize,
    },
}

/// A live connection's status, for `TRANSPORT_STATUS` and operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionStatus {
    /// Node id from config.
    pub node_id: String,
    /// The connection's generation.
    pub generation: u64,
    /// `registered`, `ready` or `draining`.
    pub state: &'static str,
    /// When it registered, ms since the Unix epoch.
    pub connected_since_unix_ms: u64,
    /// Last heartbeat round trip, µs.
    pub last_heartbeat_rtt_us: Option<u64>,
    /// The core that owns the connection.
    pub home_core: usize,
}

#[derive(Debug, Default)]
struct Slot {
    last_generation: u64,
    live: Option<Live>,
}

#[derive(Debug)]
struct Live {
    generation: u64,
    ready: bool,
    connected_since_unix_ms: u64,
    last_rtt_us: Option<u64>,
    home_core: usize,
    /// Announced a drain: not ready again on this generation.
    draining: bool,
    /// The frame limit the node announced (payloads rebuilt by a reload
    /// honour it).
    peer_max_frame_len: u32,
}

/// The registry (see the module docs).
#[derive(Debug)]
pub struct NodeRegistry<D> {
    /// Swapped whole by a config reload; readers hold their `Arc`.
    directory: RwLock<Arc<D>>,
    /// Set by a drain: new registrations are refused (`unavailable`).
    refusing: AtomicBool,
    slots: Mutex<HashMap<String, Slot>>,
    /// F29: pins node lease keys and extends payloads, when installed.
    leases: std::sync::OnceLock<Arc<crate::lease::LeaseAuthority>>,
}

impl<D: NodeDirectory> NodeRegistry<D> {
    /// An empty registry over `directory`.
    pub fn new(directory: D) -> Self {
        Self {
            directory: RwLock::new(Arc::new(directory)),
            refusing: AtomicBool::new(false),
            slots: Mutex::new(HashMap::default()),
            leases: std::sync::OnceLock::new(),
        }
    }

    /// Installs the credential lease authority (F29); once, at start.
    pub fn set_leases(&self, leases: Arc<crate::lease::LeaseAuthority>) {
        let _ = self.leases.set(leases);
    }

    /// The credential lease authority, when installed.
    pub fn leases(&self) -> Option<&Arc<crate::lease::LeaseAuthority>> {
        self.leases.get()
    }

    /// The directory it authenticates against now (a reload may replace
    /// it; the returned one stays whole for as long as it is held).
    pub fn directory(&self) -> Arc<D> {
        Arc::clone(&self.directory.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Replaces the directory (a config reload): the next registration
    /// authenticates and builds its payload against `directory`. Live
    /// connections are not touched here.
    pub fn replace_directory(&self, directory: D) {
        *self.directory.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(directory);
    }

    /// Refuses every registration from now on (`unavailable`): the Edge is
    /// draining.
    pub fn refuse_registrations(&self) {
        self.refusing.store(true, Ordering::Release);
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        // A panic while holding the lock cannot leave a slot half-written
        // (every update is a single assignment), so poisoning is ignored.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers on behalf of a connection homed on `home_core`, accepted at
    /// `connected_since_unix_ms`.
    pub fn register(
        &self,
        request: &RegisterRequest,
        home_core: usize,
        connected_since_unix_ms: u64,
    ) -> Result<Accepted, Rejection> {
        if self.refusing.load(Ordering::Acquire) {
            return Err(Rejection {
                node_id: None,
                reason: RegisterRejectReason::Unavailable,
                message: "the edge is draining".into(),
            });
        }
        let directory = self.directory();
        let Some(node_id) = directory.authenticate(&request.token) else {
            return Err(Rejection {
                node_id: None,
                reason: RegisterRejectReason::UnknownToken,
                message: "unknown node token".into(),
            });
        };
        let mut slots = self.slots();
        let slot = slots.entry(node_id.clone()).or_default();
        if let Some(live) = &slot.live {
            return Err(Rejection {
                message: format!(
                    "node {node_id} already has a live connection (generation {})",
                    live.generation
                ),
                node_id: Some(node_id),
                reason: RegisterRejectReason::DuplicateConnection,
            });
        }
        let mut config = match directory.build_payload(&node_id, request.max_frame_len) {
            Ok(config) => config,
            Err(why) => {
                return Err(Rejection {
                    message: format!("config for node {node_id} failed to build: {why}"),
                    node_id: Some(node_id),
                    reason: RegisterRejectReason::ConfigBuildFailed,
                });
            }
        };
        // F29: pin the node's lease key (mTLS hook: the link has checked
        // the peer identity against `node_id` before this point).
        if let Some(leases) = self.leases.get()
            && let Err(why) = leases.register_node(&node_id, &request.lease_public_key, &mut config)
        {
            return Err(Rejection {
                message: why.to_string(),
                node_id: Some(node_id),
                reason: RegisterRejectReason::LeaseKeyMismatch,
            });
        }
        slot.last_generation += 1;
        let generation = slot.last_generation;
        slot.live = Some(Live {
            generation,
            ready: false,
            connected_since_unix_ms,
            last_rtt_us: None,
            home_core,
            draining: false,
            peer_max_frame_len: request.max_frame_len,
        });
        Ok(Accepted {
            node_id,
            generation,
            config,
        })
    }

    /// Marks the live generation ready. False if `generation` is not live.
    pub fn mark_ready(&self, node_id: &str, generation: u64) -> bool {
        match self.slots().get_mut(node_id).and_then(|s| s.live.as_mut()) {
            Some(live) if live.generation == generation && !live.draining => {
                live.ready = true;
                true
            }
            _ => false,
        }
    }

    /// The payload a reload gives `node_id`'s live, ready connection, built
    /// from the current directory as a registration would (lease key and
    /// revocations included): `(generation, home_core, payload)`. `None` if
    /// the node has no ready connection; `Err` if the payload fails to build.
    pub fn refreshed_payload(
        &self,
        node_id: &str,
    ) -> Option<Result<(u64, usize, NodeConfigPayload), String>> {
        let (generation, home_core, peer_max) = {
            let slots = self.slots();
            let live = slots.get(node_id)?.live.as_ref().filter(|l| l.ready)?;
            (live.generation, live.home_core, live.peer_max_frame_len)
        };
        let mut payload = match self.directory().build_payload(node_id, peer_max) {
            Ok(payload) => payload,
            Err(why) => return Some(Err(why)),
        };
        if let Some(leases) = self.leases.get() {
            // The key pinned at registration, unchanged.
            let key = leases
                .node_key(node_id)
                .map(|k| k.to_vec())
                .unwrap_or_default();
            if let Err(why) = leases.register_node(node_id, &key, &mut payload) {
                return Some(Err(why.to_string()));
            }
        }
        Some(Ok((generation, home_core, payload)))
    }

    /// The live `generation` is draining (`NodeDrainNotice`): it is no
    /// longer dispatchable or ready, though still live (its open streams
    /// continue until it closes). False if `generation` is not live.
    pub fn mark_draining(&self, node_id: &str, generation: u64) -> bool {
        match self.slots().get_mut(node_id).and_then(|s| s.live.as_mut()) {
            Some(live) if live.generation == generation => {
                live.ready = false;
                live.draining = true;
                true
            }
            _ => false,
        }
    }

    /// Ends `generation` if it is the live one; otherwise does nothing.
    pub fn release(&self, node_id: &str, generation: u64) {
        if let Some(slot) = self.slots().get_mut(node_id)
            && slot
                .live
                .as_ref()
                .is_some_and(|l| l.generation == generation)
        {
            slot.live = None;
        }
    }

    /// Records a heartbeat round trip for the live generation.
    pub fn record_rtt(&self, node_id: &str, generation: u64, rtt_us: u64) {
        if let Some(live) = self.slots().get_mut(node_id).and_then(|s| s.live.as_mut())
            && live.generation == generation
        {
            live.last_rtt_us = Some(rtt_us);
        }
    }

    /// The generation and home core of `node_id`'s connection, only if it is
    /// live and ready (F4: nothing is dispatched before readiness).
    pub fn dispatchable(&self, node_id: &str) -> Option<(u64, usize)> {
        let slots = self.slots();
        let live = slots.get(node_id)?.live.as_ref()?;
        live.ready.then_some((live.generation, live.home_core))
    }

    /// Where `node_id` stands.
    pub fn node_state(&self, node_id: &str) -> NodeState {
        let slots = self.slots();
        match slots.get(node_id).and_then(|s| s.live.as_ref()) {
            None => NodeState::Offline,
            Some(live) if !live.ready => NodeState::Registered,
            Some(live) => NodeState::Ready {
                generation: live.generation,
                core: live.home_core,
            },
        }
    }

    /// Every ready node: `(node_id, generation, home_core)`, sorted by id.
    pub fn ready_nodes(&self) -> Vec<(String, u64, usize)> {
        let mut ready: Vec<_> = self
            .slots()
            .iter()
            .filter_map(|(id, s)| {
                let live = s.live.as_ref().filter(|l| l.ready)?;
                Some((id.clone(), live.generation, live.home_core))
            })
            .collect();
        ready.sort();
        ready
    }

    /// The one core every ready node's link lives on, if they share one
    /// (`None` with no ready node, or links on several cores): where the
    /// ingress prefers to serve client connections (`ingress::placement`).
    pub fn sole_link_core(&self) -> Option<usize> {
        let slots = self.slots();
        let mut cores = slots
            .values()
            .filter_map(|s| s.live.as_ref().filter(|l| l.ready))
            .map(|live| live.home_core);
        let first = cores.next()?;
        cores.all(|core| core == first).then_some(first)
    }

    /// Status of every live connection, sorted by node id.
    pub fn status(&self) -> Vec<ConnectionStatus> {
        let mut all: Vec<_> = self
            .slots()
            .iter()
            .filter_map(|(id, s)| {
                s.live.as_ref().map(|l| ConnectionStatus {
                    node_id: id.clone(),
                    generation: l.generation,
                    state: if l.draining {
                        "draining"
                    } else if l.ready {
                        "ready"
                    } else {
                        "registered"
                    },
                    connected_since_unix_ms: l.connected_since_unix_ms,
                    last_heartbeat_rtt_us: l.last_rtt_us,
                    home_core: l.home_core,
                })
            })
            .collect();
        all.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        all
    }

    /// Number of live connections.
    pub fn live_count(&self) -> usize {
        self.slots().values().filter(|s| s.live.is_some()).count()
    }
}

/// A [`Registrar`] for one connection: the registry plus where and when the
/// connection was accepted.
#[derive(Debug)]
pub struct ConnRegistrar<'a, D> {
    /// The shared registry.
    pub registry: &'a NodeRegistry<D>,
    /// The core that owns the connection.
    pub home_core: usize,
    /// When it was accepted, ms since the Unix epoch.
    pub connected_since_unix_ms: u64,
}

impl<D: NodeDirectory> Registrar for ConnRegistrar<'_, D> {
    fn register(&self, request: &RegisterRequest) -> Result<Accepted, Rejection> {
        self.registry
            .register(request, self.home_core, self.connected_since_unix_ms)
    }

    fn ready(&self, node_id: &str, generation: u64) -> bool {
        self.registry.mark_ready(node_id, generation)
    }

    fn release(&self, node_id: &str, generation: u64, _reason: CloseReason) {
        self.registry.release(node_id, generation);
    }

    fn draining(&self, node_id: &str, generation: u64) {
        self.registry.mark_draining(node_id, generation);
    }
}

/// A directory for tests: a token is the id of the node it authenticates,
/// and every node gets an empty payload.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct TokenIsNodeId;

#[cfg(test)]
impl NodeDirectory for TokenIsNodeId {
    fn authenticate(&self, token: &str) -> Option<String> {
        Some(token.to_owned())
    }
    fn build_payload(&self, _: &str, _: u32) -> Result<NodeConfigPayload, String> {
        Ok(NodeConfigPayload::default())
    }
}

#[cfg(test)]
mod sole_link_core_tests {
    use super::*;

    fn ready(registry: &NodeRegistry<TokenIsNodeId>, node: &str, core: usize) -> u64 {
        let request = RegisterRequest {
            token: node.into(),
            ..RegisterRequest::default()
        };
        let generation = registry.register(&request, core, 0).unwrap().generation;
        assert!(registry.mark_ready(node, generation));
        generation
    }

    #[test]
    fn the_link_core_is_the_one_all_ready_nodes_share() {
        let registry = NodeRegistry::new(TokenIsNodeId);
        assert_eq!(registry.sole_link_core(), None, "no node");
        let request = RegisterRequest {
            token: "waiting".into(),
            ..RegisterRequest::default()
        };
        registry.register(&request, 0, 0).unwrap();
        assert_eq!(registry.sole_link_core(), None, "registered is not ready");
        ready(&registry, "n1", 1);
        assert_eq!(registry.sole_link_core(), Some(1));
        ready(&registry, "n2", 1);
        assert_eq!(registry.sole_link_core(), Some(1), "both on core 1");
        let third = ready(&registry, "n3", 0);
        assert_eq!(registry.sole_link_core(), None, "links on two cores");
        registry.release("n3", third);
        assert_eq!(registry.sole_link_core(), Some(1));
    }
}
