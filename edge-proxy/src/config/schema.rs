//! The raw shape of `edge.yaml`, exactly as serde reads it.
//!
//! Nothing here is checked beyond YAML types: addresses, URLs, hashes and
//! numbers stay loose (strings, `u64`) so that `validate` can test every rule
//! and report every broken one together, instead of serde stopping at the
//! first. Every struct denies unknown fields, so a typo is an error with its
//! path, never a silently ignored setting.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};

use super::model::ProviderKind;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEdgeConfig {
    #[serde(default)]
    pub(crate) listen: RawListen,
    #[serde(default)]
    pub(crate) workers: u64,
    #[serde(default)]
    pub(crate) link: RawLink,
    pub(crate) nodes: Vec<RawNode>,
    #[serde(default)]
    pub(crate) model_groups: Vec<RawModelGroup>,
    #[serde(default)]
    pub(crate) queue: RawQueue,
    /// How long a drain (SIGTERM) lets in-flight requests finish, ms.
    #[serde(default)]
    pub(crate) drain_grace_ms: Option<u64>,
    #[serde(default)]
    pub(crate) api_keys: Vec<RawApiKey>,
    /// F29 lease policy (`config/credential.rs`).
    pub(crate) leases: Option<super::credential::RawLeases>,
    /// `admin:`, the admin API's keys (`config/admin.rs`).
    pub(crate) admin: Option<super::admin::RawAdmin>,
    /// `tls:` for the node socket (F28), checked by `config::tls`.
    #[serde(default)]
    pub(crate) tls: super::tls::RawTls,
}

/// One `api_keys[]` entry: a client key, by name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApiKey {
    pub(crate) name: String,
    pub(crate) key: Option<String>,
    pub(crate) key_blake3: Option<String>,
}

/// `listen:`; both addresses optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListen {
    pub(crate) ingress: Option<String>,
    pub(crate) nodes: Option<String>,
}

/// `link:`; every limit optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLink {
    pub(crate) max_frame_len: Option<u64>,
    pub(crate) initial_stream_window: Option<u64>,
    pub(crate) max_body_chunk: Option<u64>,
    pub(crate) register_timeout_ms: Option<u64>,
}

/// One `nodes[]` record.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNode {
    pub(crate) id: String,
    pub(crate) token: Option<String>,
    pub(crate) token_blake3: Option<String>,
    #[serde(default)]
    pub(crate) providers: Vec<RawProvider>,
}

/// One `nodes[].providers[]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProvider {
    pub(crate) id: String,
    pub(crate) adapter: Option<String>,
    pub(crate) kind: ProviderKind,
    pub(crate) base_url: String,
    pub(crate) targets: Vec<String>,
    pub(crate) max_concurrency: Option<u64>,
    #[serde(default)]
    pub(crate) response_stall_timeout_ms: u64,
    #[serde(default)]
    pub(crate) request_timeout_ms: u64,
    pub(crate) health_probe: Option<RawHealthProbe>,
    #[serde(default)]
    pub(crate) headers: RawHeaders,
    /// F29: the provider's credential, handed out only in leases.
    pub(crate) credential: Option<super::credential::RawCredential>,
}

/// `health_probe:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealthProbe {
    pub(crate) path: Option<String>,
    #[serde(default)]
    pub(crate) timeout_ms: u64,
}

/// One `model_groups[]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModelGroup {
    pub(crate) name: String,
    pub(crate) target: Option<String>,
    pub(crate) providers: Vec<String>,
    #[serde(default)]
    pub(crate) weights: std::collections::BTreeMap<String, u64>,
}

/// `queue:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQueue {
    pub(crate) max_waiting: Option<u64>,
    pub(crate) timeout_ms: Option<u64>,
}

/// `headers:` in file order. Unlike a map type it keeps repeated names, which
/// serde_yaml would otherwise let the last one win silently, so validation
/// can report them.
#[derive(Debug, Default)]
pub(crate) struct RawHeaders(pub(crate) Vec<(String, String)>);

impl<'de> Deserialize<'de> for RawHeaders {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HeadersVisitor;

        impl<'de> Visitor<'de> for HeadersVisitor {
            type Value = RawHeaders;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of header names to values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeaders, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry::<String, String>()? {
                    out.push(entry);
                }
                Ok(RawHeaders(out))
            }
        }

        deserializer.deserialize_map(HeadersVisitor)
    }
}
