//! The IOP Edge (binary `iop-edge`).
//!
//! The Edge is the front door. It will own, each in a module of its own:
//!
//! - **ingress**: OpenAI-compatible HTTP/1.1 (`/v1/chat/completions`,
//!   `/v1/responses`, `/v1/models`, health, `/metrics`) on per-core `monoio`
//!   runtimes with `SO_REUSEPORT` listeners;
//! - **node socket server**: registration by token (F1–F3), readiness (F4),
//!   heartbeat 30 s / 45 s (F5), generation fencing (F6), the event bus (F7);
//! - **registry, pools, queue and leases**: provider selection by capacity,
//!   runtime health and load; bounded queue admission; immutable leases
//!   released exactly once (F17, F19);
//! - **health overlay and StreamGate**: typed stall evidence handoff,
//!   CAPABILITIES recovery and pre-commit OpenAI stall recovery (F24–F27);
//! - **metrics**: Prometheus exposition with closed label sets (F31, F32).
//!
//! # Invariants (to hold as it is built)
//! - Never depends on `node-runner`; what the two share lives in `proto` and
//!   `framing`.
//! - Response bodies travel as `Bytes` slices of the node-socket receive buffer
//!   to the client socket, never copied.
//! - State is owned by a core; cores talk by message passing, every message
//!   tagged `(node_id, generation)`.
//!
//! # What is built
//! - [`config`]: `edge.yaml`, validated, with node records and payloads.
//! - [`link`], [`registry`], [`events`]: the node socket (F1–F7) —
//!   registration, readiness, heartbeat, generation fencing, lifecycle events.
//! - [`runtime`], [`server`]: thread-per-core monoio runtimes on io_uring or
//!   epoll, one `SO_REUSEPORT` listener per core.
//! - [`dispatch`]: `SubmitRun` (F8), session terminate (F13) and node
//!   commands (F14) as ordered streams over the node's link, one terminal
//!   each; [`events`] also carries run events (F7).
//!
//! - [`pool`], [`health`]: model groups, capacity, queue and leases; the
//!   runtime health overlay fed by the stall handoff (F24) and restored by
//!   scheduled CAPABILITIES probes (F25); provider preference (F26); the
//!   F31 counters (see `docs/health.md`).
//! - [`ops`]: graceful drain on SIGTERM/SIGINT and `edge.yaml` reload on
//!   SIGHUP (see `docs/operations.md`).

// `deny`, not `forbid`: the exceptions are `iovec`, which implements
// monoio's `IoVecBuf` for owned `Bytes` (see its SAFETY note), `at_once`
// (`recv(2)` and `sendmsg(2)` that never wait), and `ops::signals`
// (sigmask/sigwait FFI).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod at_once;
pub mod config;
pub mod dispatch;
pub mod events;
pub mod health;
pub mod ingress;
mod iovec;
pub mod lease;
pub mod link;
pub mod ops;
pub mod pool;
pub mod registry;
pub mod runtime;
pub mod server;
