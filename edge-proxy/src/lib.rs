//! The IOP Edge (binary `iop-edge`, not built yet).
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
//! Today the crate holds no functionality: the wire (`proto`) and codecs
//! (`framing`) it will stand on come first.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
