//! Sans-IO codecs and protocol pieces for IOP.
//!
//! This crate owns every byte format IOP speaks, and the sans-IO building
//! blocks the Edge and the Node share (they never depend on each other):
//!
//! | module     | format                                                        |
//! |------------|---------------------------------------------------------------|
//! | [`frame`]  | the Edge–Node socket: `[u32 length][protobuf Envelope]` frames |
//! | [`sse`]    | Server-Sent Events: an incremental parser and an encoder      |
//! | [`ndjson`] | newline-delimited JSON (Ollama streams): a line splitter      |
//! | [`http`]   | HTTP/1.1 heads (via `httparse`) and chunked transfer coding   |
//! | [`timer`]  | per-core timer wheel, its clocks, a core's timers and ticker, the named IOP timers |
//! | [`close`]  | a one-way close signal, and a future's race against it       |
//! | [`io_driver`] | the io_uring / epoll choice, as a pure decision              |
//! | [`json_quick`] | a one-pass JSON cursor that leaves what it does not take to serde |
//! | [`json_members`] | a JSON object written from checked members, with an index of where each lies |
//! | [`link`]   | link heartbeat state machine and the closed set of close reasons |
//! | [`write_batch`] | link writer batching: small frames copied, tunnel bodies as their own iovec |
//! | [`fair_queue`] | a link writer's queue: one per stream, taken in turn (deficit round robin) |
//! | [`shared_bytes`] | a received buffer's bytes handed on as slices of it |
//! | [`room`] | room in a receive buffer or a growing text, made without `realloc` |
//! | [`outbound`] | what a link writer sends next: heartbeats, arrival order, then turns |
//! | `tls`      | the link's TLS record steps around a sans-IO `rustls::Connection` (F28; feature `tls`) |
//!
//! # What it does not do
//! No sockets, no runtime, no threads, and no clock reads in logic: time is
//! an input (`now` arguments; [`timer`] defines the clocks drivers pass in).
//! The one piece that reads a clock and waits, a core's
//! [`timer::CoreTimers`], reads the clock its driver built and sleeps with
//! the sleep its driver's runtime lends it.
//! Every codec takes bytes in
//! (`&mut BytesMut` or `&[u8]`) and hands bytes out (`Bytes` slices meant for a
//! vectored write). Drivers in `edge-proxy` and `node-runner` own the I/O.
//!
//! # Invariants
//! - **Zero copy for bodies.** Decoders split complete units off the receive
//!   buffer as refcounted [`bytes::Bytes`]; payload bytes (tunnel bodies, SSE
//!   event bytes, chunk data) are slices of that buffer, never copied. Encoders
//!   return header slices *beside* the body, so the body is its own iovec.
//! - **Limits before allocation.** Every length read from the network is checked
//!   against a named limit before any buffer is reserved for it. Over-limit or
//!   malformed input is a typed [`Error`], never a panic.
//! - **Split-point independence.** Feeding input in any partition of its bytes
//!   yields the same output as feeding it whole (property-tested per codec).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod blocks;
pub mod close;
mod error;
pub mod fair_queue;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod io_driver;
pub mod json_members;
pub mod json_quick;
pub mod link;
pub mod ndjson;
pub mod outbound;
pub mod room;
pub mod shared_bytes;
pub mod sse;
pub mod timer;
#[cfg(feature = "tls")]
pub mod tls;
pub mod write_batch;

pub use error::Error;
