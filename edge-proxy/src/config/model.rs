//! The validated configuration types and the named limits they are held to.
//!
//! A value of these types exists only after `validate` has accepted it, so the
//! rest of the Edge can rely on the rules in `docs/config.md` (ids unique,
//! URLs well-formed, limits in range) without checking again.

use std::net::SocketAddr;

use serde::Deserialize;

use proto::v1::AdapterKind;

/// Default client (OpenAI HTTP) listener.
pub const DEFAULT_INGRESS_ADDR: &str = "127.0.0.1:8080";
/// Default node socket listener.
pub const DEFAULT_NODES_ADDR: &str = "127.0.0.1:7070";

/// Most runtimes `workers` may ask for; 0 means one per core.
pub const MAX_WORKERS: u64 = 1024;

/// Default largest frame the Edge accepts from a Node (4 MiB, the framing
/// default).
pub const DEFAULT_MAX_FRAME_LEN: u32 = 4 * 1024 * 1024;
/// Smallest `link.max_frame_len` (1 KiB).
pub const MIN_MAX_FRAME_LEN: u64 = 1024;
/// Largest `link.max_frame_len` (64 MiB).
pub const MAX_MAX_FRAME_LEN: u64 = 64 * 1024 * 1024;

/// Default per-stream credit (256 KiB), the wire's meaning of 0.
///
/// A trade-off, measured on the 2-core box (issue 8). A stream moves at
/// most a window per round trip (Node → Edge → client → grant), so a
/// larger window relays a large response faster: at 1 MiB, four k6
/// clients reading 16 MiB streams got 447–498 against 411–475 MiB/s. But
/// a stream then has up to its window in flight ahead of its client, and
/// with the relay saturated by token streams another stream's events on
/// the same link waited 42–44 ms at p99 with 1 MiB windows against
/// 9–13 ms with 256 KiB (`s2-load`, half load). Since a provider read's
/// events travel as one frame, the medians are close (4.4 against 4.1 ms
/// over five runs) but 1 MiB still had a long tail in two of them (9 and
/// 30 ms). The default favours the token streams.
pub const DEFAULT_INITIAL_STREAM_WINDOW: u32 = 256 * 1024;
/// Smallest `link.initial_stream_window` (1 KiB).
pub const MIN_INITIAL_STREAM_WINDOW: u64 = 1024;
/// Largest `link.initial_stream_window` (64 MiB).
pub const MAX_INITIAL_STREAM_WINDOW: u64 = 64 * 1024 * 1024;

/// Default largest tunnel body frame a Node sends (64 KiB).
pub const DEFAULT_MAX_BODY_CHUNK: u32 = 64 * 1024;
/// Smallest `link.max_body_chunk` (256 bytes).
pub const MIN_MAX_BODY_CHUNK: u64 = 256;
/// Bytes a tunnel body frame spends besides its body: `stream_id`, the
/// `provider_tunnel_frame` and `body` tags and lengths, with room to spare.
/// `link.max_body_chunk + TUNNEL_FRAME_OVERHEAD` must fit `link.max_frame_len`.
pub const TUNNEL_FRAME_OVERHEAD: u64 = 64;

/// Default time a new node connection has to register (10 s).
pub const DEFAULT_REGISTER_TIMEOUT_MS: u64 = 10_000;
/// Smallest `link.register_timeout_ms`.
pub const MIN_REGISTER_TIMEOUT_MS: u64 = 100;
/// Largest `link.register_timeout_ms` (5 min).
pub const MAX_REGISTER_TIMEOUT_MS: u64 = 300_000;

/// Default `max_concurrency` of a provider.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 64;
/// Largest `max_concurrency` of a provider.
pub const MAX_MAX_CONCURRENCY: u64 = 65_536;

/// Largest response-stall and request timeout (24 h), in ms.
pub const MAX_PROVIDER_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

/// Default health probe bound, the wire's meaning of 0 (2 s).
pub const DEFAULT_HEALTH_PROBE_TIMEOUT_MS: u64 = 2_000;
/// Largest `health_probe.timeout_ms` (1 min).
pub const MAX_HEALTH_PROBE_TIMEOUT_MS: u64 = 60_000;

/// Default bound on requests waiting for capacity, Edge-wide.
pub const DEFAULT_QUEUE_MAX_WAITING: u32 = 1024;
/// Largest `queue.max_waiting`.
pub const MAX_QUEUE_MAX_WAITING: u64 = 1_000_000;
/// Default time a request may wait in the queue (30 s).
pub const DEFAULT_QUEUE_TIMEOUT_MS: u64 = 30_000;
/// Largest `queue.timeout_ms` (1 h).
pub const MAX_QUEUE_TIMEOUT_MS: u64 = 60 * 60 * 1000;

/// Default grace of a drain (SIGTERM) for in-flight requests (30 s).
pub const DEFAULT_DRAIN_GRACE_MS: u64 = 30_000;
/// Largest `drain_grace_ms` (1 h).
pub const MAX_DRAIN_GRACE_MS: u64 = 60 * 60 * 1000;

/// Largest `model_groups[].weights` value.
pub const MAX_WEIGHT: u64 = 1000;

/// Longest node id, provider id, adapter name or model group name.
pub const MAX_ID_LEN: usize = 128;
/// Longest target (model) name.
pub const MAX_TARGET_LEN: usize = 256;
/// Most extra headers on one provider.
pub const MAX_HEADERS: usize = 32;

/// Where the Edge listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenConfig {
    /// Clients: OpenAI-compatible HTTP.
    pub ingress: SocketAddr,
    /// Nodes: the node socket.
    pub nodes: SocketAddr,
}

/// Limits of the Edge–Node link. The first three travel to every Node in its
/// `NodeConfigPayload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    /// Largest frame (envelope bytes, prefix excluded) the Edge accepts.
    pub max_frame_len: u32,
    /// Initial per-stream credit in bytes.
    pub initial_stream_window: u32,
    /// Largest tunnel body frame a Node sends, in bytes.
    pub max_body_chunk: u32,
    /// A new connection must register within this many ms or is closed.
    pub register_timeout_ms: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            initial_stream_window: DEFAULT_INITIAL_STREAM_WINDOW,
            max_body_chunk: DEFAULT_MAX_BODY_CHUNK,
            register_timeout_ms: DEFAULT_REGISTER_TIMEOUT_MS,
        }
    }
}

/// Bounded queue admission (F19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Requests that may wait for capacity at once; 0 rejects at once when
    /// every candidate is full.
    pub max_waiting: u32,
    /// How long one request may wait, in ms.
    pub timeout_ms: u64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            max_waiting: DEFAULT_QUEUE_MAX_WAITING,
            timeout_ms: DEFAULT_QUEUE_TIMEOUT_MS,
        }
    }
}

/// Which adapter serves a provider. Decides tunnel versus normalized dispatch
/// (F17), never the client's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Any OpenAI-compatible server.
    OpenaiCompat,
    /// vLLM (OpenAI-compatible, with the usage breakdown).
    Vllm,
    /// Ollama's native API.
    Ollama,
}

impl ProviderKind {
    /// The wire's `AdapterKind`.
    pub fn adapter_kind(self) -> AdapterKind {
        match self {
            Self::OpenaiCompat => AdapterKind::OpenaiCompat,
            Self::Vllm => AdapterKind::Vllm,
            Self::Ollama => AdapterKind::Ollama,
        }
    }

    /// Whether the Edge sends raw `ProviderTunnelRequest`s to this kind
    /// (OpenAI-compatible bodies pass through untouched) rather than
    /// normalized `RunRequest`s.
    pub fn supports_tunnel(self) -> bool {
        match self {
            Self::OpenaiCompat | Self::Vllm => true,
            Self::Ollama => false,
        }
    }

    /// The health probe path used when the config names none.
    pub fn default_health_path(self) -> &'static str {
        match self {
            Self::OpenaiCompat => "/v1/models",
            Self::Vllm => "/health",
            Self::Ollama => "/api/tags",
        }
    }

    /// The name used in `edge.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenaiCompat => "openai_compat",
            Self::Vllm => "vllm",
            Self::Ollama => "ollama",
        }
    }
}

/// How the Node probes a provider (F21, F25).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthProbe {
    /// Absolute path probed with GET.
    pub path: String,
    /// Bound on one probe in ms; 0 = the default
    /// ([`DEFAULT_HEALTH_PROBE_TIMEOUT_MS`]), kept as 0 on the wire.
    pub timeout_ms: u64,
}

/// One provider behind a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSpec {
    /// Unique across the Edge.
    pub id: String,
    /// Adapter instance name on the Node (`RunRequest.adapter`); unique per
    /// node.
    pub adapter: String,
    /// Adapter implementation.
    pub kind: ProviderKind,
    /// Base URL of the model server, as written (http or https, with a host).
    pub base_url: String,
    /// Models served; non-empty, unique.
    pub targets: Vec<String>,
    /// Admission bound on the Node and the Edge's capacity for it; ≥ 1.
    pub max_concurrency: u32,
    /// As configured: 0 = the default (300000 ms), kept as 0 on the wire (F20).
    pub response_stall_timeout_ms: u64,
    /// Hard deadline of one request in ms; 0 = none.
    pub request_timeout_ms: u64,
    /// Health probe.
    pub health_probe: HealthProbe,
    /// Extra request headers the Node adds, in file order.
    pub headers: Vec<(String, String)>,
    /// F29: the credential handed to the Node in a sealed lease per request.
    pub credential: Option<super::credential::CredentialSpec>,
}

impl ProviderSpec {
    /// The stall timeout that applies, with 0 resolved to
    /// [`proto::DEFAULT_RESPONSE_STALL_TIMEOUT_MS`].
    pub fn effective_stall_timeout_ms(&self) -> u64 {
        match self.response_stall_timeout_ms {
            0 => proto::DEFAULT_RESPONSE_STALL_TIMEOUT_MS,
            ms => ms,
        }
    }

    /// See [`ProviderKind::supports_tunnel`].
    pub fn supports_tunnel(&self) -> bool {
        self.kind.supports_tunnel()
    }

    /// Whether this provider serves `target`.
    pub fn serves(&self, target: &str) -> bool {
        self.targets.iter().any(|t| t == target)
    }
}

/// A client-facing model name and the providers that may serve it (F17).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelGroup {
    /// The `model` clients ask for; unique.
    pub name: String,
    /// The target sent to the chosen provider; every provider in the group
    /// serves it. Defaults to `name`.
    pub target: String,
    /// Provider ids, each existing, no repeats.
    pub providers: Vec<String>,
    /// Selection weight of each provider, aligned with `providers` (1 when
    /// not configured, at most [`MAX_WEIGHT`]).
    pub weights: Vec<u32>,
}
