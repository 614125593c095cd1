//! Starting the Edge: one monoio runtime per core, each with its own
//! `SO_REUSEPORT` node-socket listener, sharing one registry and event bus.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use framing::link::HeartbeatConfig;
use framing::timer::{ClockSource, DriverClock};
use proto::v1::NodeConfigPayload;

use crate::config::EdgeConfig;
use crate::dispatch::Dispatcher;
use crate::events::{EventBus, LifecycleEvent};
use crate::ingress::IngressShared;
use crate::ingress::http::IngressLimits;
use crate::ingress::metrics::Metrics;
use crate::ingress::placement::Placement;
use crate::link::session::SessionConfig;
use crate::link::{LinkServerConfig, LinkShared, bind, serve_core};
use crate::pool::Pools;
use crate::registry::{NodeDirectory, NodeRegistry};
use crate::runtime::{IoDriver, block_on};

/// Default longest sleep of a core's ticker between timer-wheel polls with a
/// manual clock, in ms.
pub const DEFAULT_TICK_MS: u64 = 50;

/// How to start the Edge beyond what `edge.yaml` says.
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// Worker threads (one runtime each); 0 = `workers` from the config, and
    /// when that is 0 too, one per available core.
    pub workers: usize,
    /// The I/O driver.
    pub driver: IoDriver,
    /// The clock the cores read (a shared manual clock in tests).
    pub clock: ClockSource,
    /// Heartbeat timings; production keeps the 30 s / 45 s default.
    pub heartbeat: HeartbeatConfig,
    /// Longest ticker sleep with a manual clock, in ms (see
    /// [`LinkServerConfig::tick_ms`]).
    pub tick_ms: u64,
    /// Client request limits of the ingress.
    pub ingress_limits: IngressLimits,
    /// Client connections a link core serves before connections accepted
    /// elsewhere stay there (`ingress::placement`); 0 = off.
    pub link_core_slack: usize,
}

impl StartOptions {
    /// Production options with `driver`.
    pub fn new(driver: IoDriver) -> Self {
        Self {
            workers: 0,
            driver,
            clock: ClockSource::Coarse,
            heartbeat: HeartbeatConfig::default(),
            tick_ms: DEFAULT_TICK_MS,
            ingress_limits: IngressLimits::default(),
            link_core_slack: crate::ingress::placement::DEFAULT_LINK_CORE_SLACK,
        }
    }
}

/// A running Edge.
#[derive(Debug)]
pub struct EdgeServer {
    /// Where the node socket listens (the resolved port when 0 was asked).
    pub node_addr: SocketAddr,
    /// Where the OpenAI ingress listens (the resolved port when 0 was asked).
    pub ingress_addr: SocketAddr,
    /// Model groups, capacity and leases.
    pub pools: Arc<Pools>,
    /// Live nodes.
    pub registry: Arc<NodeRegistry<EdgeConfig>>,
    /// Lifecycle and run events.
    pub bus: EventBus,
    /// Sends runs, cancels and commands to nodes.
    pub dispatcher: Dispatcher<EdgeConfig>,
    /// Worker count.
    pub workers: usize,
    /// The `/metrics` counters (a reload re-labels the token counters).
    pub metrics: Arc<Metrics>,
    /// Flipped by a drain ([`crate::ops::drain_server`]).
    pub drain: Arc<crate::ops::drain::DrainSwitch>,
    /// Which core serves each client connection, and how many each serves.
    pub placement: Arc<Placement>,
    /// Each core's link inbox (the drain and a reload close node links).
    pub(crate) core_inboxes: Vec<tokio::sync::mpsc::UnboundedSender<crate::link::inbox::CoreMsg>>,
    threads: Vec<JoinHandle<()>>,
}

impl EdgeServer {
    /// Starts the node socket on every core and returns once every core is
    /// listening (or the first bind failed).
    pub fn start(config: EdgeConfig, options: StartOptions) -> io::Result<Self> {
        let requested = if options.workers > 0 {
            options.workers
        } else {
            usize::try_from(config.workers()).unwrap_or(0)
        };
        let workers = crate::runtime::worker_count(requested);
        let link = *config.link();
        let security = config.link_security().clone();
        // F29: the credential lease authority (signing key, credentials).
        let leases = Arc::new(crate::lease::LeaseAuthority::from_config(&config)?);
        let shared = Arc::new(LinkShared {
            registry: Arc::new(NodeRegistry::new(config)),
            bus: EventBus::new(),
            config: LinkServerConfig {
                session: SessionConfig {
                    register_timeout_ms: link.register_timeout_ms,
                    heartbeat: options.heartbeat,
                },
                max_frame_len: link.max_frame_len as usize,
                piece_len: link.max_body_chunk as usize,
                tick_ms: options.tick_ms,
            },
            clock: options.clock.clone(),
            security,
        });
        shared.registry.set_leases(leases);
        let mut addr = shared.registry.directory().listen().nodes;
        let mut ingress_addr = shared.registry.directory().listen().ingress;
        let mut threads = Vec::with_capacity(workers);
        let (inboxes, mut inbox_rxs): (Vec<_>, Vec<_>) = (0..workers)
            .map(|_| tokio::sync::mpsc::unbounded_channel())
            .unzip();
        let core_inboxes = inboxes.clone();
        let drain = Arc::new(crate::ops::drain::DrainSwitch::new());
        let dispatcher = Dispatcher::new(
            Arc::clone(&shared.registry),
            inboxes,
            link.initial_stream_window,
        );
        let pools = Arc::new(Pools::new(&shared.registry.directory()));
        // The stall handoff and recovery validate against live generations.
        pools.attach_generations(shared.registry.clone());
        // Each node's home core is the only writer of its providers' overlay.
        pools.attach_overlay_route(Arc::new(crate::link::inbox::InboxRoute::new(
            Arc::clone(&shared.registry),
            core_inboxes.clone(),
        )));
        let metrics = Arc::new(Metrics::new(&shared.registry.directory()));
        let (placement, mut handoffs) = Placement::new(workers, options.link_core_slack);
        let placement = Arc::new(placement);
        let ingress = Arc::new(IngressShared {
            placement: Arc::clone(&placement),
            registry: Arc::clone(&shared.registry),
            dispatcher: dispatcher.clone(),
            pools: Arc::clone(&pools),
            limits: options
                .ingress_limits
                .fitting_frames(link.max_frame_len as usize),
            metrics: Arc::clone(&metrics),
            drain: Arc::clone(&drain),
        });
        // Queued requests re-resolve when a node becomes ready.
        spawn_ready_watch(&shared.bus, Arc::clone(&pools))?;
        for core in 0..workers {
            let (bound_tx, bound_rx) = mpsc::channel();
            let shared = Arc::clone(&shared);
            let inbox = inbox_rxs.remove(0);
            let ingress = Arc::clone(&ingress);
            let handed = handoffs.remove(0);
            let driver = options.driver;
            // Core 0 schedules CAPABILITIES probes for lowered providers (F25).
            let recovery = (core == 0).then(|| {
                (
                    Arc::clone(&pools),
                    dispatcher.clone(),
                    options.clock.clone(),
                )
            });
            let thread = std::thread::Builder::new()
                .name(format!("iop-edge-{core}"))
                .spawn(move || {
                    let run = block_on(driver, async move {
                        let bound = bind(addr).and_then(|nodes| {
                            let clients = bind(ingress_addr)?;
                            Ok((nodes, clients))
                        });
                        let (listener, clients) = match bound {
                            Ok(pair) => pair,
                            Err(e) => {
                                let _ = bound_tx.send(Err(e));
                                return;
                            }
                        };
                        let addrs = listener
                            .local_addr()
                            .and_then(|n| Ok((n, clients.local_addr()?)));
                        let _ = bound_tx.send(addrs);
                        monoio::spawn(crate::ingress::serve_core(core, clients, ingress, handed));
                        if let Some((pools, dispatcher, clock)) = recovery {
                            let clock = DriverClock::new(&clock);
                            monoio::spawn(crate::health::recovery::run(pools, dispatcher, clock));
                        }
                        serve_core(core, listener, shared, inbox).await;
                    });
                    if let Err(e) = run {
                        tracing::error!(core, error = %e, "edge runtime failed to start");
                    }
                })?;
            threads.push(thread);
            match bound_rx.recv() {
                Ok(Ok((nodes, clients))) => {
                    addr = nodes;
                    ingress_addr = clients;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(io::Error::other(format!(
                        "edge core {core} failed to start"
                    )));
                }
            }
        }
        Ok(Self {
            node_addr: addr,
            ingress_addr,
            pools,
            registry: Arc::clone(&shared.registry),
            bus: shared.bus.clone(),
            dispatcher,
            workers,
            metrics,
            drain,
            placement,
            core_inboxes,
            threads,
        })
    }

    /// Blocks until every core stops (they run until the process exits).
    pub fn join(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// Wakes queued requests whenever a node becomes ready, so they re-resolve
/// onto its providers (F19).
fn spawn_ready_watch(bus: &EventBus, pools: Arc<Pools>) -> io::Result<()> {
    let mut events = bus.subscribe();
    std::thread::Builder::new()
        .name("iop-edge-ready-watch".into())
        .spawn(move || {
            loop {
                match events.blocking_recv() {
                    Ok(LifecycleEvent::Ready { .. })
                    | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        pools.capacity_changed()
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        })?;
    Ok(())
}

/// The config is the node directory: tokens from `nodes[]`, payloads built
/// from each record.
impl NodeDirectory for EdgeConfig {
    fn authenticate(&self, token: &str) -> Option<String> {
        self.nodes().lookup(token).map(|record| record.id.clone())
    }

    fn build_payload(
        &self,
        node_id: &str,
        peer_max_frame_len: u32,
    ) -> Result<NodeConfigPayload, String> {
        let record = self
            .nodes()
            .get(node_id)
            .ok_or_else(|| format!("node {node_id} is no longer configured"))?;
        let link = self.link();
        // A peer that announced no limit gets at most what the Edge accepts.
        let peer_max = if peer_max_frame_len == 0 {
            link.max_frame_len
        } else {
            peer_max_frame_len
        };
        record
            .build_payload(link, CONFIG_REVISION, peer_max)
            .map_err(|e| e.to_string())
    }
}

/// The config revision sent to nodes. The config is immutable for the
/// process's life today; a reload will increase it.
const CONFIG_REVISION: u64 = 1;
