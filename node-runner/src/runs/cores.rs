//! The Node's cores: one monoio runtime per worker thread, each with its own
//! run manager and provider client, fed by the link core over an inbox.
//!
//! ```text
//!                       ┌──────────── core 0 (link core) ────────────┐
//!  Edge ──socket──▶ reader ─▶ NodeSession ─▶ Router ──CoreMsg──▶ inbox 0 ─▶ RunManager 0 ─┐
//!                       │                      │ └────CoreMsg──▶ inbox k ─▶ RunManager k ─┤ (core k)
//!                       │                      ▲  stream done ◀─────────────────────────────┤
//!  Edge ◀─socket── writer ◀──── frames (Bytes, Send channel) ◀─────────────────────────────┘
//! ```
//!
//! - **Generations.** On registration (generation G) the link core sends
//!   every core [`CoreMsg::Configure`]: the config payload and the
//!   generation's [`GenShared`]. Each core builds its own adapters over its
//!   own [`ProviderClient`] (one keep-alive pool per core, kept for the
//!   core's life). When the connection ends, every core gets
//!   [`CoreMsg::Shutdown`] and cancels G's runs, sending nothing more. Every
//!   message carries its generation; a core drops work for a generation it
//!   does not hold.
//! - **Refresh.** An edge.yaml reload's payload for the live generation
//!   ([`CoreMsg::Refresh`]) gives each core a new run manager for new work;
//!   the old one is retired, not shut down: it keeps its runs (cancels and
//!   window updates for their streams still reach it) until they end.
//! - **Placement.** [`Router`] sends a `RunRequest`, a `NodeCommandRequest`
//!   or a `TERMINATE_SESSION` to the link core while it holds at most
//!   `link_slack` more runs in flight than the least loaded core (work there
//!   crosses no core: its frames go to the writer beside it), and otherwise
//!   to the core with the fewest runs in flight (ties round-robin,
//!   [`pick_core`]); `CANCEL_RUN` to the core that owns the stream. A run
//!   whose stream turns out *bulk* (the Edge grants it [`BULK_CREDIT`]
//!   bytes of window within [`BULK_WITHIN_MS`]) weighs `link_slack + 1`
//!   runs more on its core until it ends: small work still goes to the
//!   link core, but a few large streams spread evenly over the cores
//!   instead of sharing one thread. The link core keeps `stream_id → core`
//!   until that core reports the run's stream done (its terminal sent); a
//!   cancel for a stream it does not know is answered `NOT_FOUND` by the
//!   link core.
//! - **Admission (F9)** is global per adapter: the cores share the
//!   generation's [`Capacity`](super::Capacity) counters.
//! - **Frames** from any core go to the connection's single writer over a
//!   `Send` channel, encoded on the producing core ([`Outbox`]) and moved
//!   as `Bytes`. A stream lives on one core, so its frames keep its order.

use std::rc::Rc;
use std::sync::Arc;

use foldhash::HashMap;
use proto::Envelope;
use proto::v1::{CancelKind, NodeConfigPayload, envelope::Msg};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::{FrameTx, GenShared, Outbox, RunManager, RunnerConfig};
use crate::provider_http::ProviderClient;
use framing::timer::CoreTimers;

/// Where a core reports the streams of runs it has finished (their
/// terminal sent, or refused), by stream id.
pub type DoneTx = UnboundedSender<u64>;

/// A message to one core.
// `Work` is the hot variant and is moved as is: boxing its envelope would
// cost an allocation per frame crossing cores.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum CoreMsg {
    /// Serve a new connection generation (replacing any older one).
    Configure(Box<Configure>),
    /// A work frame of `generation`.
    Work {
        /// The connection generation it belongs to.
        generation: u64,
        /// The frame.
        envelope: Envelope,
    },
    /// `generation`'s connection ended: cancel its runs, send nothing more.
    Shutdown {
        /// The generation that ended.
        generation: u64,
    },
    /// A refreshed config payload for the live `generation` (edge.yaml
    /// reload): new work uses adapters built from it; runs in flight keep
    /// theirs.
    Refresh {
        /// The generation it is for.
        generation: u64,
        /// The new payload.
        payload: Arc<NodeConfigPayload>,
    },
}

/// What a core needs to serve one connection generation.
#[derive(Debug)]
pub struct Configure {
    /// The generation's shared state (admission, health sequence, status).
    pub shared: Arc<GenShared>,
    /// The config the Edge sent.
    pub payload: Arc<NodeConfigPayload>,
    /// The connection's writer queue.
    pub frames: FrameTx,
    /// Largest frame the Edge accepts.
    pub max_frame_len: usize,
    /// Where finished run streams are reported.
    pub done: DoneTx,
}

/// The senders of every core's inbox; cheap to clone, `Send`.
#[derive(Debug, Clone)]
pub struct Cores {
    inboxes: Arc<[UnboundedSender<CoreMsg>]>,
    link_slack: u32,
}

/// One core's inbox, to be served by [`serve_core`] on that core.
#[derive(Debug)]
pub struct CoreInbox {
    core: usize,
    rx: UnboundedReceiver<CoreMsg>,
}

impl CoreInbox {
    /// The core this inbox belongs to.
    pub fn core(&self) -> usize {
        self.core
    }
}

impl Cores {
    /// `count` cores (at least one): the handle and each core's inbox, in
    /// core order.
    pub fn new(count: usize) -> (Self, Vec<CoreInbox>) {
        let (txs, inboxes): (Vec<_>, Vec<_>) = (0..count.max(1))
            .map(|core| {
                let (tx, rx) = unbounded_channel();
                (tx, CoreInbox { core, rx })
            })
            .unzip();
        (
            Self {
                inboxes: txs.into(),
                link_slack: DEFAULT_LINK_CORE_SLACK,
            },
            inboxes,
        )
    }

    /// The same cores, the link core taking new work while it holds at most
    /// `slack` more runs than the least loaded one (0: round-robin).
    pub fn with_link_slack(mut self, slack: u32) -> Self {
        self.link_slack = slack;
        self
    }

    /// See [`with_link_slack`](Self::with_link_slack).
    pub fn link_slack(&self) -> u32 {
        self.link_slack
    }

    /// How many cores there are.
    pub fn len(&self) -> usize {
        self.inboxes.len()
    }

    /// Always false: there is at least one core.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sends `msg` to `core`; false if that core has stopped.
    pub fn send(&self, core: usize, msg: CoreMsg) -> bool {
        self.inboxes
            .get(core)
            .is_some_and(|inbox| inbox.send(msg).is_ok())
    }

    /// Sends `make()` to every core.
    pub fn broadcast(&self, make: impl Fn() -> CoreMsg) {
        for inbox in self.inboxes.iter() {
            let _ = inbox.send(make());
        }
    }
}

/// Serves one core's inbox until every [`Cores`] handle is dropped. Call
/// on that core's runtime.
pub async fn serve_core(mut inbox: CoreInbox, runner: RunnerConfig) {
    let core = inbox.core;
    let client = ProviderClient::new(runner.provider.clone());
    // The core's timer wheel (stall watchdogs, close grace, probe bounds,
    // hard deadlines) on the core's clock; its ticker lives as long as
    // this loop.
    let timers = CoreTimers::new(&runner.provider.clock, crate::stall::STALL_TICK_MS);
    monoio::spawn(Rc::clone(&timers).run(monoio::time::sleep));
    let mut current: Option<Rc<RunManager>> = None;
    // Managers replaced by a refresh, still finishing their runs.
    let mut retired: Vec<Rc<RunManager>> = Vec::new();
    while let Some(msg) = inbox.rx.recv().await {
        retired.retain(|m| m.active_runs() > 0);
        match msg {
            CoreMsg::Configure(configure) => {
                if let Some(old) = current.take() {
                    old.shutdown();
                }
                retired.drain(..).for_each(|m| m.shutdown());
                let Configure {
                    shared,
                    payload,
                    frames,
                    max_frame_len,
                    done,
                } = *configure;
                current = Some(RunManager::new(
                    core,
                    &payload,
                    shared,
                    &client,
                    runner.store.clone(),
                    Outbox::new(frames, max_frame_len),
                    done,
                    Rc::clone(&timers),
                ));
                if let Some(manager) = &current {
                    manager.install_leases(runner.leases.clone(), &payload);
                }
            }
            CoreMsg::Refresh {
                generation,
                payload,
            } => {
                if let Some(old) = current.take_if(|m| m.generation() == generation) {
                    let fresh = old.refreshed(&payload, &client, runner.store.clone());
                    fresh.install_leases(runner.leases.clone(), &payload);
                    current = Some(fresh);
                    retired.push(old);
                }
            }
            CoreMsg::Work {
                generation,
                envelope,
            } => match retired
                .iter()
                .find(|m| m.generation() == generation && m.has_stream(envelope.stream_id))
                .or_else(|| current.as_ref().filter(|m| m.generation() == generation))
            {
                Some(manager) => manager.handle(envelope),
                None => tracing::debug!(
                    core,
                    generation,
                    stream_id = envelope.stream_id,
                    "work for a generation this core does not hold dropped"
                ),
            },
            CoreMsg::Shutdown { generation } => {
                if current
                    .as_ref()
                    .is_some_and(|m| m.generation() == generation)
                    && let Some(manager) = current.take()
                {
                    manager.shutdown();
                }
                retired.retain(|m| {
                    let ended = m.generation() == generation;
                    if ended {
                        m.shutdown();
                    }
                    !ended
                });
            }
        }
    }
    if let Some(manager) = current.take() {
        manager.shutdown();
    }
    retired.drain(..).for_each(|m| m.shutdown());
    timers.stop();
}

/// How many more runs in flight the link core may hold than the least
/// loaded core and still take new work (`iop-node --link-core-slack`).
///
/// A run on another core costs each request a hop there and its frames a
/// hop back to the writer, each a wakeup of a thread that may be parked.
/// k6 `qps` (16 users, 2 cores, tunnel; issue 8): the Node's CPU a request
/// was ~15 % lower with 16 than with 0 (round-robin), streaming no worse.
/// Under many runs the cores still share the work to within this many.
pub const DEFAULT_LINK_CORE_SLACK: u32 = 16;

/// Window credit, in bytes, that makes a stream *bulk* when the Edge grants
/// it within [`BULK_WITHIN_MS`]: 1 MiB in 100 ms is 10 MiB/s, beyond any
/// token stream (a thousand 150-byte events a second is 150 KB/s) and well
/// below a large-event stream that keeps a core busy (~250 MiB/s each in
/// `hack/peers.sh bulk`).
pub const BULK_CREDIT: u64 = 1024 * 1024;

/// See [`BULK_CREDIT`].
pub const BULK_WITHIN_MS: u64 = 100;

/// The core for new work: the link core (0) while its load is at most
/// `slack` above the least loaded core's; otherwise the one with the fewest
/// runs in flight, among equals the first at or after `cursor`
/// (round-robin), and the cursor moves past it. `slack` 0 is plain
/// least-loaded round-robin.
pub fn pick_core(load: &[u32], cursor: &mut usize, slack: u32) -> usize {
    let count = load.len().max(1);
    let least = load.iter().copied().min().unwrap_or(0);
    if slack > 0
        && load
            .first()
            .is_some_and(|&l| l <= least.saturating_add(slack))
    {
        return 0;
    }
    let start = *cursor % count;
    let core = (0..count)
        .map(|i| (start + i) % count)
        .find(|&core| load.get(core).copied().unwrap_or(0) == least)
        .unwrap_or(0);
    *cursor = (core + 1) % count;
    core
}

/// Where the link core sends a work frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To this core.
    Core(usize),
    /// A `CANCEL_RUN` for a stream no core holds: answer `NOT_FOUND`.
    CancelNotFound,
    /// Nothing to do with it (flow control for a finished stream).
    Drop,
}

#[derive(Debug)]
struct Owner {
    core: usize,
    run_id: String,
    /// `RunRequest`s on the stream not yet reported done (a duplicate is
    /// refused by the owner, and reported like any run).
    pending: u32,
    /// The stream's window grants, measured until it turns bulk.
    rate: BulkMeter,
}

/// Whether a stream is bulk: [`BULK_CREDIT`] bytes of window granted
/// within [`BULK_WITHIN_MS`]. Once bulk it stays so.
#[derive(Debug, Default)]
struct BulkMeter {
    bulk: bool,
    /// Credit granted since `since_ms`, while not bulk.
    credit: u64,
    since_ms: u64,
}

impl BulkMeter {
    /// Counts `increment` bytes granted at `now_ms`; true the first time
    /// the stream turns bulk (a slower stream starts a new measure).
    fn credited(&mut self, increment: u32, now_ms: u64) -> bool {
        if self.bulk {
            return false;
        }
        if self.credit == 0 || now_ms.saturating_sub(self.since_ms) > BULK_WITHIN_MS {
            self.credit = 0;
            self.since_ms = now_ms;
        }
        self.credit += u64::from(increment);
        self.bulk = self.credit >= BULK_CREDIT;
        self.bulk
    }
}

/// The link core's placement of one connection's work (see the module
/// docs). Single-core: owned by the link.
#[derive(Debug)]
pub struct Router {
    /// Runs in flight per core.
    load: Vec<u32>,
    /// `load` plus [`bulk_weight`](Self::bulk_weight) for each bulk run:
    /// what placement compares.
    weight: Vec<u32>,
    cursor: usize,
    slack: u32,
    owners: HashMap<u64, Owner>,
}

impl Router {
    /// A router over `cores` cores whose link core (0) takes new work while
    /// it holds at most `slack` more runs than the least loaded core.
    pub fn new(cores: usize, slack: u32) -> Self {
        Self {
            load: vec![0; cores.max(1)],
            weight: vec![0; cores.max(1)],
            cursor: 0,
            slack,
            owners: HashMap::default(),
        }
    }

    /// Runs in flight per core (routed, not yet reported done).
    pub fn load(&self) -> &[u32] {
        &self.load
    }

    /// What placement compares per core: runs in flight, each bulk one
    /// (see [`BULK_CREDIT`]) weighing the slack + 1 more.
    pub fn weight(&self) -> &[u32] {
        &self.weight
    }

    /// How much more than a run a bulk run weighs: one past the slack, so
    /// one bulk run on the link core sends new work to an idle core.
    fn bulk_weight(&self) -> u32 {
        self.slack.saturating_add(1)
    }

    /// Where `envelope` goes; `now_ms` (the core's clock, read only for a
    /// window update) times the stream's credit (see [`BULK_CREDIT`]).
    pub fn route(&mut self, envelope: &Envelope, now_ms: impl FnOnce() -> u64) -> Route {
        let stream_id = envelope.stream_id;
        let opened = match &envelope.msg {
            Some(Msg::RunRequest(request)) => Some(&request.run_id),
            Some(Msg::ProviderTunnelRequest(request)) => Some(&request.tunnel_id),
            _ => None,
        };
        if let Some(run_id) = opened {
            let core = match self.owners.get_mut(&stream_id) {
                Some(owner) => {
                    owner.pending += 1;
                    owner.core
                }
                None => {
                    let core = pick_core(&self.weight, &mut self.cursor, self.slack);
                    self.owners.insert(
                        stream_id,
                        Owner {
                            core,
                            run_id: run_id.clone(),
                            pending: 1,
                            rate: BulkMeter::default(),
                        },
                    );
                    core
                }
            };
            self.load[core] += 1;
            self.weight[core] = self.weight[core].saturating_add(1);
            return Route::Core(core);
        }
        match &envelope.msg {
            Some(Msg::CancelRequest(cancel)) if cancel.kind() == CancelKind::CancelRun => {
                // The Edge cancels on the run's own stream; a cancel on
                // another stream names the run by id.
                let owner = self.owners.get(&stream_id).or_else(|| {
                    (!cancel.run_id.is_empty())
                        .then(|| self.owners.values().find(|o| o.run_id == cancel.run_id))
                        .flatten()
                });
                owner.map_or(Route::CancelNotFound, |owner| Route::Core(owner.core))
            }
            Some(Msg::WindowUpdate(update)) => {
                let Some(owner) = self.owners.get_mut(&stream_id) else {
                    return Route::Drop;
                };
                let core = owner.core;
                if owner.rate.credited(update.increment, now_ms()) {
                    tracing::debug!(
                        event = "run_bulk",
                        core,
                        run_id = %owner.run_id,
                        stream_id,
                        "run_bulk"
                    );
                    self.weight[core] = self.weight[core].saturating_add(self.bulk_weight());
                }
                Route::Core(core)
            }
            _ => Route::Core(pick_core(&self.weight, &mut self.cursor, self.slack)),
        }
    }

    /// The core owning `stream_id` finished one run on it.
    pub fn stream_done(&mut self, stream_id: u64) {
        let Some(owner) = self.owners.get_mut(&stream_id) else {
            return;
        };
        let core = owner.core;
        owner.pending = owner.pending.saturating_sub(1);
        let mut freed = 1;
        if owner.pending == 0 {
            if owner.rate.bulk {
                freed += self.bulk_weight();
            }
            self.owners.remove(&stream_id);
        }
        if let Some(load) = self.load.get_mut(core) {
            *load = load.saturating_sub(1);
        }
        if let Some(weight) = self.weight.get_mut(core) {
            *weight = weight.saturating_sub(freed);
        }
    }
}

#[cfg(test)]
#[path = "cores_tests.rs"]
mod tests;
