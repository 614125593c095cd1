//! Sending work to nodes: the surface-neutral `SubmitRun` (F8), session
//! terminate (F13) and node commands (F14).
//!
//! [`Dispatcher`] is cheap to clone and usable from any thread (an ingress
//! core, a test on a plain thread). It picks the node — the named one, or
//! with none named the single ready node (F8 single-node fallback) — and
//! sends an open request, with a stream id it takes itself, to the core that
//! owns that node's connection, which writes the request. It does not wait
//! for that core to answer: the stream's frames come back over a channel in
//! the node's order, and a cross-core open costs one wakeup, not a round
//! trip and two (issue 8).
//!
//! # Invariants
//! - Work goes only to a node's current, ready generation: a generation
//!   that is not (or no longer) the ready one is
//!   [`SubmitError::ConnectionGone`] at once, and the owning core checks
//!   `(node_id, generation)` again when it opens the stream, so a
//!   connection that closed or was replaced in between ends the stream with
//!   a `NODE_DISCONNECTED` error saying nothing was sent; never a send to a
//!   fenced generation.
//! - A [`RunStream`] yields exactly one terminal, whatever happens: the
//!   node's, or a `NODE_DISCONNECTED` error the Edge makes when the link
//!   ends first (or the stream could not be opened). Frames after a
//!   terminal are never delivered.
//! - Dropping a [`RunStream`] before its terminal cancels the run on the
//!   node.

mod credentials;
mod stream;
mod tunnel;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use framing::frame::TunnelOpen;
use proto::v1::{
    CancelKind, CancelRequest, CancelResponse, NodeCommandKind, NodeCommandRequest, RunInput,
    RunRequest, envelope::Msg,
};
use tokio::sync::mpsc::UnboundedSender;

pub use self::stream::{CommandStream, RunStream, is_terminal, run_event_text};
use self::stream::{StreamHandle, cancel_answer};
pub use self::tunnel::TunnelStream;
use crate::link::inbox::{CoreMsg, Opening};
use crate::link::streams::{StreamIds, StreamKind, stream_channel};
use crate::pool::Lease;
use crate::registry::{NodeDirectory, NodeRegistry, NodeState};

/// A run to submit (F8). `node: None` uses the single ready node.
#[derive(Debug, Clone, Default)]
pub struct SubmitRun {
    /// Adapter instance name on the node (`ProviderConfig.adapter`).
    pub adapter: String,
    /// Target (model) on that adapter.
    pub target: String,
    /// Messages and parameters.
    pub input: RunInput,
    /// The node to run on; `None` = the only ready node.
    pub node: Option<String>,
    /// Opaque correlation value (never links runs).
    pub session_id: String,
    /// The caller will not wait on the stream (recorded by the node).
    pub background: bool,
    /// F20 stall timeout for the node's watchdog; 0 = the default.
    pub response_stall_timeout_ms: u64,
    /// Hard deadline of the whole run; 0 = the provider's configured one.
    pub hard_timeout_ms: u64,
    /// The caller reads the whole answer (a non-streaming client): the node
    /// may merge deltas it already holds into one event
    /// (`RunRequest.merge_deltas`).
    pub merge_deltas: bool,
}

/// Why work could not be sent to a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// No node was named and no node is ready.
    #[error("no ready node is connected")]
    NoReadyNode,
    /// No node was named and several are ready: the single-node fallback
    /// does not guess.
    #[error("{0} nodes are ready; name the node to use")]
    AmbiguousNode(usize),
    /// The named node has no live connection.
    #[error("node {0} is not connected")]
    NodeNotConnected(String),
    /// The named node is connected but has not completed readiness (F4).
    #[error("node {0} is connected but not ready")]
    NodeNotReady(String),
    /// The node's connection closed or was replaced since it was picked
    /// (the lease names an older generation); nothing was sent.
    #[error("the node's connection closed before the request was sent")]
    ConnectionGone,
    /// The request itself is invalid.
    #[error("invalid request: {0}")]
    Invalid(&'static str),
    /// F29: no credential lease could be issued (disabled, revoked, no node
    /// key); nothing was sent and no other credential is tried.
    #[error("credential lease refused: {0}")]
    Lease(#[from] crate::lease::IssueError),
}

/// Run ids: unique per Edge process and across its restarts (the node's run
/// store is keyed by them): `run-<start ms, hex>-<count>`.
#[derive(Debug)]
struct RunIds {
    /// `run-<start ms, hex>-`, formatted once.
    prefix: Box<str>,
    next: AtomicU64,
}

impl RunIds {
    fn new() -> Self {
        let started_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self::starting(started_ms, 1)
    }

    fn starting(started_ms: u64, next: u64) -> Self {
        Self {
            prefix: format!("run-{started_ms:x}-").into(),
            next: AtomicU64::new(next),
        }
    }

    /// A fresh id, in one allocation: put together on the stack, then copied
    /// into the `Arc`. The count is formatted by `itoa`: `write!` through
    /// `core::fmt` had cost ~600 instructions a request.
    fn next(&self) -> Arc<str> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut count = itoa::Buffer::new();
        let count = count.format(n);
        // "run-" + 16 hex digits + "-" + 20 digits at most.
        let mut buf = [0u8; 48];
        let len = self.prefix.len() + count.len();
        buf[..self.prefix.len()].copy_from_slice(self.prefix.as_bytes());
        buf[self.prefix.len()..len].copy_from_slice(count.as_bytes());
        Arc::from(std::str::from_utf8(&buf[..len]).unwrap_or_default())
    }
}

/// Sends runs, cancels and commands to nodes (see the module docs).
#[derive(Debug)]
pub struct Dispatcher<D> {
    registry: Arc<NodeRegistry<D>>,
    inboxes: Arc<[UnboundedSender<CoreMsg>]>,
    run_ids: Arc<RunIds>,
    stream_ids: Arc<StreamIds>,
    /// The credit window each run and tunnel is opened with
    /// (`link.initial_stream_window`), named in its request so that the
    /// node and the Edge's grants agree on it (see
    /// [`stream::grant_threshold_of`]).
    stream_window: u32,
}

impl<D> Clone for Dispatcher<D> {
    fn clone(&self) -> Self {
        Self {
            registry: Arc::clone(&self.registry),
            inboxes: Arc::clone(&self.inboxes),
            run_ids: Arc::clone(&self.run_ids),
            stream_ids: Arc::clone(&self.stream_ids),
            stream_window: self.stream_window,
        }
    }
}

/// A node picked for work: its id, ready generation and home core.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    node_id: Arc<str>,
    generation: u64,
    core: usize,
}

impl<D: NodeDirectory> Dispatcher<D> {
    /// A dispatcher over `registry`, reaching core `i` through `inboxes[i]`,
    /// opening runs and tunnels with a credit window of `stream_window`
    /// bytes (0: the node's configured window, granted back in the
    /// smallest updates).
    pub(crate) fn new(
        registry: Arc<NodeRegistry<D>>,
        inboxes: Vec<UnboundedSender<CoreMsg>>,
        stream_window: u32,
    ) -> Self {
        Self {
            registry,
            inboxes: inboxes.into(),
            run_ids: Arc::new(RunIds::new()),
            stream_ids: Arc::new(StreamIds::new()),
            stream_window,
        }
    }

    /// Submits a run (F8) and returns its event stream.
    pub async fn submit_run(&self, run: SubmitRun) -> Result<RunStream, SubmitError> {
        if run.adapter.is_empty() {
            return Err(SubmitError::Invalid("adapter must not be empty"));
        }
        if run.target.is_empty() {
            return Err(SubmitError::Invalid("target must not be empty"));
        }
        let target = self.select(run.node.as_deref())?;
        self.submit_to(target, run)
    }

    /// Submits a run to the provider `lease` holds (F17, F19): its node, at
    /// the generation leased. A node that reconnected since is
    /// [`SubmitError::ConnectionGone`]: the lease was for the old one.
    pub fn submit_leased(&self, lease: &Lease, run: SubmitRun) -> Result<RunStream, SubmitError> {
        self.submit_leased_as(lease, run, "")
    }

    /// [`submit_leased`](Self::submit_leased) for the client `principal`
    /// (its API key's name), bound into the credential lease (F29).
    pub fn submit_leased_as(
        &self,
        lease: &Lease,
        mut run: SubmitRun,
        principal: &str,
    ) -> Result<RunStream, SubmitError> {
        let target = self.leased(lease)?;
        run.adapter = String::from(&*lease.provider().adapter);
        run.target = lease.target().to_owned();
        let run_id = self.run_ids.next();
        let credential_lease = self.credential(lease, || {
            self.lease_scope(lease, &target, &run_id, principal, "")
        })?;
        self.submit_with(target, run, run_id, credential_lease)
    }

    /// Opens a raw provider tunnel like [`open_tunnel`](Self::open_tunnel)
    /// for the client `principal` (its API key's name, never the key),
    /// bound into the credential lease (F29) when the provider has one.
    pub fn open_tunnel_as(
        &self,
        lease: &Lease,
        request: impl Into<TunnelOpen>,
        principal: &str,
    ) -> Result<TunnelStream, SubmitError> {
        self.open_tunnel_sealing(lease, request.into(), |target, tunnel_id, api| {
            self.credential(lease, || {
                self.lease_scope(lease, target, tunnel_id, principal, api)
            })
        })
    }

    /// [`open_tunnel_as`](Self::open_tunnel_as) with the credential lease
    /// made by `seal` from the scope the Edge would bind (tests and tools
    /// that need a lease with chosen fields; the ingress never uses it).
    pub fn open_tunnel_sealed_by(
        &self,
        lease: &Lease,
        request: impl Into<TunnelOpen>,
        principal: &str,
        seal: impl FnOnce(&crate::lease::LeaseScope) -> Result<bytes::Bytes, SubmitError>,
    ) -> Result<TunnelStream, SubmitError> {
        self.open_tunnel_sealing(lease, request.into(), |target, tunnel_id, api| {
            seal(&self.lease_scope(lease, target, tunnel_id, principal, api))
        })
    }

    /// Opens a raw provider tunnel (F16) on the provider `lease` holds:
    /// `request` (a prost `ProviderTunnelRequest` or a [`TunnelOpen`]) with
    /// its tunnel id, adapter and target filled in from the lease, and its
    /// initial window when it has none.
    pub fn open_tunnel(
        &self,
        lease: &Lease,
        request: impl Into<TunnelOpen>,
    ) -> Result<TunnelStream, SubmitError> {
        self.open_tunnel_as(lease, request, "")
    }

    /// Opens a tunnel on `lease`'s provider with the credential lease
    /// `seal` makes for its target, tunnel id and API. Its names are the
    /// lease's own, shared: nothing is copied.
    fn open_tunnel_sealing(
        &self,
        lease: &Lease,
        mut request: TunnelOpen,
        seal: impl FnOnce(&Target, &str, &str) -> Result<bytes::Bytes, SubmitError>,
    ) -> Result<TunnelStream, SubmitError> {
        let target = self.leased(lease)?;
        let tunnel_id = self.run_ids.next();
        let api = crate::lease::api_of_path(&request.path);
        request.credential_lease = seal(&target, &tunnel_id, api)?;
        request.tunnel_id = Arc::clone(&tunnel_id);
        request.adapter = Arc::clone(&lease.provider().adapter);
        request.target = Arc::clone(lease.shared_target());
        if request.initial_window == 0 {
            request.initial_window = self.stream_window;
        }
        let handle = self.open(
            target,
            StreamKind::Tunnel,
            Some(Arc::clone(&tunnel_id)),
            Opening::Tunnel(request),
        )?;
        Ok(TunnelStream {
            handle,
            tunnel_id,
            batch: None,
        })
    }

    /// The node and core of a lease, if its generation is still current.
    fn leased(&self, lease: &Lease) -> Result<Target, SubmitError> {
        let node_id = &lease.provider().node_id;
        match self.registry.node_state(node_id) {
            NodeState::Ready { generation, core } if generation == lease.generation() => {
                Ok(Target {
                    node_id: node_id.clone(),
                    generation,
                    core,
                })
            }
            _ => Err(SubmitError::ConnectionGone),
        }
    }

    fn submit_to(&self, target: Target, run: SubmitRun) -> Result<RunStream, SubmitError> {
        let run_id = self.run_ids.next();
        self.submit_with(target, run, run_id, bytes::Bytes::new())
    }

    fn submit_with(
        &self,
        target: Target,
        run: SubmitRun,
        run_id: Arc<str>,
        credential_lease: bytes::Bytes,
    ) -> Result<RunStream, SubmitError> {
        let request = RunRequest {
            credential_lease,
            run_id: String::from(&*run_id),
            adapter: run.adapter,
            target: run.target,
            session_id: run.session_id,
            background: run.background,
            input: Some(run.input),
            response_stall_timeout_ms: run.response_stall_timeout_ms,
            hard_timeout_ms: run.hard_timeout_ms,
            merge_deltas: run.merge_deltas,
            initial_window: self.stream_window,
        };
        let handle = self.open(
            target,
            StreamKind::Run,
            Some(Arc::clone(&run_id)),
            Opening::Msg(Msg::RunRequest(Box::new(request))),
        )?;
        Ok(RunStream {
            handle,
            run_id,
            last_seq: 0,
        })
    }

    /// Sends a node command (F14) and returns its responses.
    pub async fn node_command(
        &self,
        node: Option<&str>,
        request: NodeCommandRequest,
    ) -> Result<CommandStream, SubmitError> {
        let kind = request.kind();
        if kind == NodeCommandKind::Unspecified {
            return Err(SubmitError::Invalid("command kind must be set"));
        }
        let target = self.select(node)?;
        let handle = self.open(
            target,
            StreamKind::Command,
            None,
            Opening::Msg(Msg::NodeCommandRequest(Box::new(request))),
        )?;
        Ok(CommandStream { handle, kind })
    }

    /// Sends the F25 recovery probe of `provider_id` — a CAPABILITIES
    /// command for its `adapter`/`target` on `node_id` — with a credential
    /// lease when the provider has a managed credential (F29): slot = a
    /// fresh probe id (the run id space), route = [`PROBE_ROUTE`], bound to
    /// the node's current generation and revision. A provider or node whose
    /// leases are refused gets no command at all.
    ///
    /// [`PROBE_ROUTE`]: crate::lease::PROBE_ROUTE
    pub async fn probe_capabilities(
        &self,
        node_id: &str,
        provider_id: &str,
        adapter: &str,
        target: &str,
    ) -> Result<CommandStream, SubmitError> {
        let node = self.select(Some(node_id))?;
        let probe_id = self.run_ids.next();
        let scope = crate::lease::probe_scope(
            &probe_id,
            provider_id,
            (adapter, target),
            (&node.node_id, node.generation),
            self.registry
                .leases()
                .map_or(0, |l| l.revision_of(&node.node_id)),
        );
        let credential_lease = self.issue(&scope)?;
        let mut request = NodeCommandRequest {
            adapter: adapter.to_owned(),
            target: target.to_owned(),
            probe_id: if credential_lease.is_empty() {
                String::new()
            } else {
                probe_id.to_string()
            },
            credential_lease,
            ..NodeCommandRequest::default()
        };
        request.set_kind(NodeCommandKind::Capabilities);
        let handle = self.open(
            node,
            StreamKind::Command,
            None,
            Opening::Msg(Msg::NodeCommandRequest(Box::new(request))),
        )?;
        Ok(CommandStream {
            handle,
            kind: NodeCommandKind::Capabilities,
        })
    }

    /// Asks the node to end `session_id` on `adapter`/`target` (F13) and
    /// returns its answer (`DONE`, `UNSUPPORTED` or `FAILED`).
    pub async fn terminate_session(
        &self,
        node: Option<&str>,
        adapter: &str,
        target: &str,
        session_id: &str,
    ) -> Result<CancelResponse, SubmitError> {
        if adapter.is_empty() || session_id.is_empty() {
            return Err(SubmitError::Invalid(
                "adapter and session id must not be empty",
            ));
        }
        let target_node = self.select(node)?;
        let mut request = CancelRequest {
            adapter: adapter.to_owned(),
            target: target.to_owned(),
            session_id: session_id.to_owned(),
            ..CancelRequest::default()
        };
        request.set_kind(CancelKind::TerminateSession);
        let handle = self.open(
            target_node,
            StreamKind::Cancel,
            None,
            Opening::Msg(Msg::CancelRequest(Box::new(request))),
        )?;
        Ok(cancel_answer(handle).await)
    }

    /// Picks the node for work (F4, F8).
    fn select(&self, node: Option<&str>) -> Result<Target, SubmitError> {
        match node {
            Some(node_id) => match self.registry.node_state(node_id) {
                NodeState::Ready { generation, core } => Ok(Target {
                    node_id: Arc::from(node_id),
                    generation,
                    core,
                }),
                NodeState::Registered => Err(SubmitError::NodeNotReady(node_id.to_owned())),
                NodeState::Offline => Err(SubmitError::NodeNotConnected(node_id.to_owned())),
            },
            None => {
                let mut ready = self.registry.ready_nodes();
                match ready.len() {
                    0 => Err(SubmitError::NoReadyNode),
                    1 => {
                        let (node_id, generation, core) = ready.remove(0);
                        Ok(Target {
                            node_id: Arc::from(node_id),
                            generation,
                            core,
                        })
                    }
                    n => Err(SubmitError::AmbiguousNode(n)),
                }
            }
        }
    }

    /// Opens a stream on `target`'s home core: sends the open and returns
    /// at once, with the stream's id chosen here. Should the connection no
    /// longer be current when the open reaches its core, the stream's first
    /// item is [`StreamItem::NotSent`](crate::link::streams::StreamItem).
    /// A run's or a tunnel's grants are sized to the window its request
    /// names (other streams have none).
    fn open(
        &self,
        target: Target,
        kind: StreamKind,
        run_id: Option<Arc<str>>,
        msg: Opening,
    ) -> Result<StreamHandle, SubmitError> {
        let grant_at = stream::grant_threshold_of(&msg);
        let inbox = self
            .inboxes
            .get(target.core)
            .ok_or(SubmitError::ConnectionGone)?
            .clone();
        let (sink, rx) = stream_channel();
        let stream_id = self.stream_ids.next();
        inbox
            .send(CoreMsg::Open {
                node_id: target.node_id.clone(),
                generation: target.generation,
                stream_id,
                kind,
                run_id,
                msg,
                sink,
            })
            .map_err(|_| SubmitError::ConnectionGone)?;
        Ok(StreamHandle {
            node_id: target.node_id,
            generation: target.generation,
            stream_id,
            rx,
            inbox,
            ended: false,
            taken: 0,
            grant_at,
        })
    }
}

#[cfg(test)]
mod tests;
