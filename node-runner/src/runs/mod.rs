//! The run manager: the Node's side of runs, cancels and session
//! terminates on one link connection (F9–F13, F15), one per core.
//!
//! The Node is thread-per-core ([`cores`]): every core builds its own
//! [`RunManager`] for the connection's generation from the
//! `NodeConfigPayload` the Edge sent — one adapter instance per provider,
//! over the core's [`ProviderClient`] — and the link core hands each work
//! frame to one core ([`cores::Router`]). A manager answers through its
//! core's [`Outbox`] onto the connection's single writer. What the cores
//! must agree on lives in the generation's [`GenShared`] (atomics).
//!
//! # Invariants
//! - **Admission (F9).** A run is admitted only while its adapter has fewer
//!   than `max_concurrency` runs active *over all cores* (one shared
//!   counter per adapter, compare-and-increment); otherwise it is refused
//!   at once with an `OVER_CAPACITY` error terminal. Capacity is returned
//!   when the run's terminal has been sent, on every path (a [`Lease`]
//!   dropped).
//! - **Exactly one terminal (F10, F11).** Every `RunRequest` gets exactly
//!   one terminal `RunEvent` on its stream, and nothing after it: refused
//!   runs get a lone `error`; admitted ones get what [`relay()`] emits. A
//!   run's stream lives on one core, so its frames keep their order.
//! - **Validation before any provider call (F20).** Unknown adapter,
//!   unknown target, an invalid raw stall timeout or input the adapter
//!   cannot send end the run before a byte goes to the provider.
//! - **Stall watchdog (F21–F23).** Every admitted run and tunnel is
//!   watched with its effective stall timeout ([`relay_watched`],
//!   `tunnel::run_tunnel_watched`); a stall is one
//!   `RESPONSE_STALLED` terminal with the evidence of [`crate::stall`]
//!   (close-grace fence and exact adapter/target probe, joined) and this
//!   connection's next `health_observation_seq` ([`GenShared`]). The
//!   watchdogs live on the core's timer wheel ([`CoreTimers`], one per
//!   core, built by [`serve_core`]), as do the runs' hard deadlines;
//!   progress is one store.
//! - **Cancel (F12)** stops only the named run: its task stops, its
//!   provider response is dropped (closing that provider connection), and
//!   its terminal is `cancelled`. A link that closes cancels every run of
//!   the connection on every core; their frames are not sent (the Edge
//!   fences them).
//! - **Run store (F15).** Every run is recorded — admitted, started, ended
//!   or refused — through the store thread's queue, never on the event
//!   path.
//! - **Done reports.** Every `RunRequest` a core takes is reported done
//!   (by stream id) once its terminal is sent, so the link core knows
//!   where cancels go and how loaded each core is.

mod control;
pub mod cores;
mod leases;
mod normalized;
mod outbox;
mod relay;
#[cfg(test)]
mod relay_tests;
mod shared;
#[cfg(test)]
mod stall_admission_tests;
#[cfg(test)]
mod stall_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tunnel_batch_tests;
mod tunnels;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use foldhash::HashMap;
use proto::Envelope;
use proto::v1::{
    CancelKind, CancelRequest, CancelResponse, CancelStatus, FailureCode, FailureSide,
    NodeCommandRequest, NodeConfigPayload, RunRequest, envelope::Msg,
};

pub use self::cores::{CoreInbox, CoreMsg, Cores, DoneTx, serve_core};
pub use self::outbox::{FrameTx, Outbox};
pub use self::relay::{
    EventSource, Outcome, Stop, is_terminal, relay, relay_credited, relay_watched,
};
pub use self::shared::{Capacity, GenShared, Lease};
use crate::adapter::{Adapter, AnyAdapter, ExecuteSpec, RuntimeEvent, TerminateError, failure};
use crate::commands::{CommandContext, CommandLimits, NamedAdapter, run_command_leased};
use crate::provider_http::{ProviderClient, ProviderClientConfig};
use crate::stall::{CLOSE_GRACE, CoreTimers, HealthCheck, StallKind, Watchdog};
use crate::store::{RunInfo, StoreHandle, StoreUpdate, Transition};

/// Upper bound on the spawned task of one normalized run, in bytes
/// (checked in debug builds): it lives as long as the run, so every quiet
/// stream pays it. The adapter's call, the relay and the final body read
/// are built outside it and boxed apart (72 B in release builds when
/// measured; 2,648 B while it captured the call's adapter and spec and the
/// relay's watchdog, and held the source twice for the final read).
const RUN_TASK_BUDGET: usize = 512;

/// Upper bound on one run's relay ([`relay_watched`]), in bytes (checked in
/// debug builds). The stall evidence (a health probe of the provider) is
/// boxed inside it; inline it made the relay 29,440 B, and with it a quiet
/// normalized stream cost the Node ~44 KB. 1,832 B in release builds when
/// measured: the call and the stream are two phases of their own, so the
/// source is laid out once, the stop is made in place and the adapter is
/// shared (2,160 B with the stop twice and an adapter copy; 3,040 B before
/// the phases; 5,376 B, 128-byte aligned,
/// while the source's drain after a `complete` and its monoio timer were
/// inline, and the relay's arguments were laid out twice).
const RUN_RELAY_BUDGET: usize = 2560;

/// F20: the stall timeout a wire value of 0 means, in ms.
pub const DEFAULT_STALL_TIMEOUT_MS: u64 = proto::DEFAULT_RESPONSE_STALL_TIMEOUT_MS;
/// F20: the largest raw stall timeout accepted (24 h); larger is refused as
/// invalid before any provider call.
pub const MAX_STALL_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

/// What the Node's runs need besides the Edge's config payload.
#[derive(Debug, Clone, Default)]
pub struct RunnerConfig {
    /// Where runs are recorded (F15); `None` records nothing.
    pub store: Option<StoreHandle>,
    /// Settings of the provider HTTP client.
    pub provider: ProviderClientConfig,
    /// F29: opens credential leases; `None` refuses every lease (a provider
    /// that needs one then fails closed).
    pub leases: Option<Arc<crate::lease::LeaseOpener>>,
}

/// One provider's adapter on this core and connection; its admission
/// counter is the generation's, shared with the other cores.
#[derive(Debug)]
struct Slot {
    /// Shared: a run's stall watchdog and call keep it for the run's whole
    /// life, and by value it is ~0.2 KB a run (issue 8).
    adapter: Result<Rc<AnyAdapter>, String>,
    /// The provider's index in the payload (its [`Capacity`]).
    index: usize,
    max_concurrency: u32,
    request_timeout_ms: u64,
}

#[derive(Debug)]
struct ActiveRun {
    /// The run's record fields (its id names it to a cancel), shared with
    /// the store's updates.
    info: Arc<RunInfo>,
    cancel: Option<local_sync::oneshot::Sender<()>>,
    /// The stream's window: a tunnel's body bytes, a run's event credit.
    credit: Option<crate::tunnel::Credit>,
}

/// Who this connection is, for `TRANSPORT_STATUS` (F14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkIdentity {
    /// The node id the Edge assigned.
    pub node_id: String,
    /// This connection's generation.
    pub generation: u64,
    /// When the connection was established, ms since the Unix epoch.
    pub connected_since_unix_ms: u64,
}

/// The run manager of one connection on one core (see the module docs).
#[derive(Debug)]
pub struct RunManager {
    core: usize,
    slots: HashMap<String, Slot>,
    /// The adapters that could be built, as node commands see them.
    named: Vec<NamedAdapter>,
    runs: RefCell<HashMap<u64, ActiveRun>>,
    outbox: Outbox,
    store: Option<StoreHandle>,
    client: ProviderClient,
    closed: Cell<bool>,
    /// Admission, F23's health sequence and the transport status, shared
    /// by the generation's cores.
    shared: Arc<GenShared>,
    done: DoneTx,
    /// Window and chunk size of this connection's tunnels.
    tunnel_limits: crate::tunnel::TunnelLimits,
    /// The core's timer wheel: stall watchdogs, close grace, probe bounds,
    /// hard deadlines.
    timers: Rc<CoreTimers>,
    /// F29: how this connection's leases are opened (see `leases.rs`).
    leases: std::cell::OnceCell<leases::LeaseContext>,
}

impl RunManager {
    /// The manager on `core` for the connection `shared`, configured by
    /// `payload`. A provider whose adapter cannot be built is kept, refusing
    /// its runs with the reason, so the Edge learns why. Finished run
    /// streams are reported on `done`. Its timers live on `timers`, the
    /// core's wheel.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        core: usize,
        payload: &NodeConfigPayload,
        shared: Arc<GenShared>,
        client: &ProviderClient,
        store: Option<StoreHandle>,
        outbox: Outbox,
        done: DoneTx,
        timers: Rc<CoreTimers>,
    ) -> Rc<Self> {
        let outbox_max_frame_len = outbox.max_frame_len();
        let slots: HashMap<String, Slot> = payload
            .providers
            .iter()
            .enumerate()
            .map(|(index, provider)| {
                let adapter = AnyAdapter::from_provider(provider, client.clone())
                    .map(Rc::new)
                    .map_err(|e| e.to_string());
                if let Err(why) = &adapter
                    && core == 0
                {
                    tracing::warn!(adapter = %provider.adapter, %why, "adapter not usable");
                }
                let slot = Slot {
                    adapter,
                    index,
                    max_concurrency: provider.max_concurrency,
                    request_timeout_ms: provider.request_timeout_ms,
                };
                (provider.adapter.clone(), slot)
            })
            .collect();
        let mut named: Vec<NamedAdapter> = slots
            .values()
            .filter_map(|slot| slot.adapter.as_deref().ok().cloned().map(NamedAdapter::new))
            .collect();
        named.sort_by(|a, b| a.name.cmp(&b.name));
        Rc::new(Self {
            core,
            slots,
            named,
            runs: RefCell::new(HashMap::default()),
            outbox,
            store,
            client: client.clone(),
            closed: Cell::new(false),
            shared,
            done,
            tunnel_limits: crate::tunnel::TunnelLimits::from_config(payload, outbox_max_frame_len),
            leases: std::cell::OnceCell::new(),
            timers,
        })
    }

    /// F29: opens this connection's credential leases with `opener` (the
    /// Edge's key and revision come from `payload`). Without it every lease
    /// is refused. Call once, right after [`new`](Self::new).
    pub fn install_leases(
        &self,
        opener: Option<Arc<crate::lease::LeaseOpener>>,
        payload: &NodeConfigPayload,
    ) {
        let _ = self.leases.set(leases::LeaseContext::new(opener, payload));
    }

    /// Opens a request's lease after admission (see `leases.rs`).
    fn open_lease(
        &self,
        request: &leases::LeasedRequest<'_>,
    ) -> Result<Option<crate::lease::OpenedCredential>, proto::v1::ExecutionFailure> {
        let fallback = leases::LeaseContext::default();
        let context = self.leases.get().unwrap_or(&fallback);
        context.open(self.shared.identity(), request)
    }

    /// A manager for the same connection and core configured by `payload`
    /// (an edge.yaml reload): it shares this one's admission, outbox and
    /// done channel; this one keeps serving the runs it holds.
    pub fn refreshed(
        &self,
        payload: &NodeConfigPayload,
        client: &ProviderClient,
        store: Option<StoreHandle>,
    ) -> Rc<Self> {
        RunManager::new(
            self.core,
            payload,
            Arc::clone(&self.shared),
            client,
            store,
            self.outbox.clone(),
            self.done.clone(),
            Rc::clone(&self.timers),
        )
    }

    /// Whether stream `stream_id` has a run or tunnel active here.
    pub fn has_stream(&self, stream_id: u64) -> bool {
        self.runs.borrow().contains_key(&stream_id)
    }

    /// The connection generation this manager serves.
    pub fn generation(&self) -> u64 {
        self.shared.generation()
    }

    /// Runs active now on this core (admitted, terminal not yet sent).
    pub fn active_runs(&self) -> usize {
        self.runs.borrow().len()
    }

    /// Runs active now on `adapter`, over all cores.
    pub fn active_on(&self, adapter: &str) -> u32 {
        self.slots
            .get(adapter)
            .and_then(|slot| self.shared.capacity(slot.index))
            .map_or(0, Capacity::active)
    }

    /// Handles one work frame from the Edge.
    pub fn handle(self: &Rc<Self>, envelope: Envelope) {
        if self.closed.get() {
            return;
        }
        let stream_id = envelope.stream_id;
        match envelope.msg {
            Some(Msg::RunRequest(request)) => self.start_run(stream_id, *request),
            Some(Msg::CancelRequest(request)) => match request.kind() {
                CancelKind::CancelRun => self.cancel_run(stream_id, &request),
                CancelKind::TerminateSession => self.terminate(stream_id, *request),
                CancelKind::Unspecified => self.answer_cancel(
                    stream_id,
                    CancelKind::Unspecified,
                    CancelStatus::Failed,
                    "cancel kind not set".into(),
                ),
            },
            Some(Msg::NodeCommandRequest(request)) => self.command(stream_id, *request),
            Some(Msg::ProviderTunnelRequest(request)) => self.start_tunnel(stream_id, request),
            Some(Msg::WindowUpdate(update)) => self.grant(stream_id, update.increment),
            _ => tracing::debug!(stream_id, "unexpected work frame ignored"),
        }
    }

    /// The connection ended: cancel every run; send nothing more.
    pub fn shutdown(&self) {
        self.closed.set(true);
        for run in self.runs.borrow_mut().values_mut() {
            if let Some(cancel) = run.cancel.take() {
                let _ = cancel.send(());
            }
        }
    }

    fn record(&self, info: &Arc<RunInfo>, transition: Transition) {
        if let Some(store) = &self.store {
            store.record(StoreUpdate {
                run: Arc::clone(info),
                transition,
            });
        }
    }
}

/// The exact-target probe and sequence of a stalled stream on this
/// connection.
#[derive(Debug)]
pub(crate) struct TargetHealth {
    adapter: Rc<AnyAdapter>,
    /// The stream's run: its target is the one probed (shared, not copied:
    /// a probe is rare, a run's start is not).
    run: Arc<RunInfo>,
    shared: Arc<GenShared>,
    /// The stalled request's own opened credential (F29), if any.
    credential: Option<crate::lease::OpenedCredential>,
}

impl HealthCheck for TargetHealth {
    async fn probe(&self) -> proto::v1::ProviderHealth {
        let timeout = self.adapter.config().health_timeout();
        let credential = self.credential.as_ref();
        self.adapter
            .probe_health(&self.run.target, timeout, credential)
            .await
    }

    fn next_seq(&self) -> Option<u64> {
        Some(self.shared.next_health_seq())
    }
}

/// Now, in ms since the Unix epoch.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
