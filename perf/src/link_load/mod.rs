//! `iop-link-load`: many simulated nodes holding idle links to one Edge.
//!
//! Measures what the Edge pays for connected, idle nodes (F5 heartbeats
//! only): memory per connection and CPU per heartbeat. The pieces:
//!
//! - [`render_edge_yaml`]: the `edge.yaml` with one record per simulated node
//!   (`load-node-<i>`, token `load-node-<i>`), for `iop-link-load gen-config`;
//! - [`Fleet`]: the nodes themselves, monoio tasks that register, declare
//!   themselves ready and then only answer heartbeat pings;
//! - [`heap`]: a counting global allocator, for `iop-link-load heap`, which
//!   runs the Edge in-process and breaks its live heap per node down by
//!   allocation size;
//! - [`run()`]: connects a fleet and samples the Edge's `/proc` entry around a
//!   quiet window, the first heartbeat burst and a steady window of two
//!   heartbeat periods; [`Report`] is the result (JSON and a summary).
//!
//! `hack/bench-link-idle.sh` drives it against a real `iop-edge` under both
//! I/O drivers; results live in `bench-results/link-idle.md`.

mod client;
mod edge_config;
pub mod heap;
pub mod procfs;
mod run;

pub use client::{ClientConfig, Counters, Fleet};
pub use edge_config::{FleetConfig, LOAD_MODEL, node_name, render_edge_yaml};
pub use run::{
    ConnectReport, EdgeReport, IdleReport, Percentiles, Report, RunConfig, SystemReport,
    ToolReport, Window, run,
};
