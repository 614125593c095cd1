//! The IOP Node (binary `iop-node`).
//!
//! A Node runs next to model servers and dials out to the Edge. It will own,
//! each in a module of its own:
//!
//! - **edge link and supervisor**: register with a token, apply the
//!   `NodeConfigPayload`, ready, heartbeat, reconnect with capped backoff
//!   (F1–F6);
//! - **adapters**: `openai_compat`, `vllm`, `ollama`, each with
//!   `capabilities()`, `execute()`, optional `terminate_session()` and a
//!   bounded `probe_health()` (F9, F13);
//! - **run manager**: admission by `max_concurrency`, ordered events, exactly
//!   one terminal per run, cancel (F9–F12);
//! - **tunnel handler**: provider HTTP/1.1 (built from `framing`'s codecs, on
//!   the Node's monoio cores) relayed as ordered `ProviderTunnelFrame`s whose
//!   bodies are the provider's bytes, never copied (F16);
//! - **watchdog and health probe**: one activity watchdog per run and tunnel on
//!   the per-core timer wheel; typed stall terminals with health evidence
//!   (F20–F23, F30);
//! - **run store**: local LMDB bookkeeping via `heed` (F15).
//!
//! # Invariants (to hold as it is built)
//! - Never depends on `edge-proxy`.
//! - The Node never grants replay; it only reports typed evidence.
//!
//! # What is built
//! - Thread-per-core: `iop-node --workers N` (default one per available
//!   core) starts one monoio runtime per worker (io_uring, or epoll per
//!   `IOP_IO_DRIVER`). Core 0 runs the link and serves work; every core has
//!   its own adapters, provider client and run manager per connection
//!   generation ([`runs::cores`]).
//! - [`link`]: the edge link — the sans-IO session (register, ready,
//!   heartbeat), its socket driver with the handshake deadline and
//!   heartbeat on the link core's timer wheel (`framing::timer::CoreTimers`), and the
//!   reconnecting supervisor (F1–F6).
//! - [`store`]: the run store — run records in LMDB (via `heed`) in the data
//!   dir, written off the event path by a store thread, with a retention
//!   bound (F15).
//! - [`provider_http`]: the HTTP/1.1 client to model servers on monoio, with
//!   a keep-alive pool per core, zero-copy body chunks and rustls for
//!   `https://` providers.
//! - [`runs`]: the run manager — admission by `max_concurrency` (global
//!   over the cores), validation before any provider call, ordered numbered
//!   events with exactly one terminal (synthesized if the adapter ends
//!   without one), cancel, hard timeout, session terminate, and a record of
//!   every run (F9–F13, F15); work placed on the cores by the link core
//!   (fewest runs in flight, cancels to the owning core).
//! - [`adapter`]: the `openai_compat` / `vllm` (SSE) and `ollama` (NDJSON)
//!   adapters — typed run event streams, session terminate, health probe
//!   (F9, F10, F13, F18).
//! - [`commands`]: the node commands — `CAPABILITIES` with the exact-target
//!   probe, `TRANSPORT_STATUS`, and the Ollama API tunnel (F14, F25).
//! - [`metrics`] and [`admin`]: the F30 stall metrics and log event, served
//!   as Prometheus text on the admin port (`--admin-addr`).
//! - [`runtime`]: each worker's monoio runtime (io_uring rings set up as
//!   cheaply as the kernel allows, or epoll).
//!
//! The tunnel handler and the stall watchdog come next.

// `deny`, not `forbid`: the one exception is opening the LMDB environment,
// which heed marks `unsafe` (see `store::lmdb::open_env` and its SAFETY note).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod adapter;
pub mod admin;
pub mod commands;
pub mod drain;
mod iovec;
pub mod lease;
pub mod link;
pub mod metrics;
pub mod provider_http;
pub mod runs;
pub mod runtime;
pub mod sockopt;
pub mod stall;
pub mod store;
#[cfg(test)]
mod test_ca;
mod tls_io;
pub mod tunnel;
