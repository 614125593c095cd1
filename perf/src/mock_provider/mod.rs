//! The mock provider: a fast OpenAI/Ollama-compatible model server stand-in.
//!
//! A real HTTP/1.1 server (hyper 1 on tokio) that speaks the shapes IOP
//! relays: OpenAI chat completions (stream and not), the Responses API,
//! `/v1/models`, `/health`, and Ollama's `/api/chat`, `/api/tags`,
//! `/api/show`, `/api/ps`, `/api/pull` (NDJSON progress; a pull line counts
//! as a token for the pacing knobs). Every generation is deterministic: a
//! token is the 4-byte word [`CONTENT_TOKEN`] (or [`REASONING_TOKEN`]),
//! `prompt_tokens` is `ceil(prompt text bytes / 4)` (see [`TextLen`]).
//!
//! Behaviour is steered per request by [`Knobs`] (`x-mock-<knob>` headers or
//! `?<knob>=` query parameters) over the defaults of a [`MockConfig`]; the
//! test-control routes under `/mock/` expose [`Stats`] (`GET /mock/stats`),
//! toggle health (`POST /mock/health?status=up|down`; down answers 503 on
//! `/health`, `/v1/models` and `/api/tags`) and reset counters
//! (`POST /mock/reset`). [`Stats::watch_cuts`] reports each stream a
//! client cut, with the instant the mock's socket saw the client go
//! ([`StreamCut`]; cancellation-latency benches). The `stamp` knob puts
//! each chat token event's `CLOCK_MONOTONIC` send time into it
//! ([`monotonic_ns`], [`parse_stamp`]; one-way latency benches).
//!
//! It is test and benchmark infrastructure, not IOP's data path; it must
//! never be the bottleneck: static JSON fragments are precomputed per
//! request, token text and padding are static slices written with `writev`,
//! and no timer exists unless a delay knob is set.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use perf::mock_provider::{MockConfig, bind};
//! let server = bind("127.0.0.1:0".parse().unwrap(), MockConfig::default()).await?;
//! println!("mock provider on {}", server.url());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod body;
mod config;
mod cut;
mod knobs;
mod listen;
mod ollama;
mod openai;
mod request;
mod respond;
mod responses;
mod server;
mod stamp;
mod stats;
mod text;

pub use body::{MockAbort, MockBody};
pub use config::{MockConfig, MockTls};
pub use cut::StreamCut;
pub use knobs::{
    HEADER_PREFIX, KNOB_NAMES, KnobError, Knobs, MAX_EVENT_BYTES, MAX_NON_STREAM_TOKENS,
};
pub use listen::{MockServer, MockThreads, bind, serve, serve_threads};
pub use request::TextLen;
pub use server::MAX_REQUEST_BODY;
pub use stamp::{STAMP_FIELD, monotonic_ns, parse_stamp};
pub use stats::{Route, Stats};
pub use text::{CONTENT_TOKEN, EventBuf, PAD_BYTE, REASONING_TOKEN};
