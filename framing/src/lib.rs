//! Sans-IO codecs for IOP.
//!
//! This crate owns every byte format IOP speaks and nothing else:
//!
//! | module     | format                                                        |
//! |------------|---------------------------------------------------------------|
//! | [`frame`]  | the Edge–Node socket: `[u32 length][protobuf Envelope]` frames |
//! | [`sse`]    | Server-Sent Events: an incremental parser and an encoder      |
//! | [`ndjson`] | newline-delimited JSON (Ollama streams): a line splitter      |
//! | [`http`]   | HTTP/1.1 heads (via `httparse`) and chunked transfer coding   |
//!
//! # What it does not do
//! No sockets, no runtime, no clocks, no threads. Every codec takes bytes in
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

mod error;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod ndjson;
pub mod sse;

pub use error::Error;
