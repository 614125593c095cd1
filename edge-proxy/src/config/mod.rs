//! The Edge's configuration, `edge.yaml`.
//!
//! [`EdgeConfig::load`] reads and checks the file once at start; an Edge with
//! an invalid file does not start. `docs/config.md` is the operator's guide to
//! every field; `edge-proxy/edge.example.yaml` shows them all.
//!
//! ```text
//!  edge.yaml ──serde_yaml──▶ schema (raw, loose types)
//!                 │ first structural error: path + line/column
//!                 ▼
//!            validate ──▶ every broken rule, one per line
//!                 │
//!                 ▼
//!            EdgeConfig ── nodes: NodeTable ── lookup(token) ─▶ NodeRecord
//!                                                   build_payload ─▶ NodeConfigPayload
//! ```
//!
//! # What it guarantees
//! - Unknown fields are errors (`deny_unknown_fields` on every struct).
//! - Every error names the file and the field path; all semantic errors are
//!   reported together.
//! - Tokens exist only as blake3 hashes ([`TokenHash`]); lookup is
//!   constant-time; nothing here prints a token or a full hash.
//! - Tunnel support derives from a provider's `kind` (F17), never from
//!   client input.
//!
//! # What it does not do
//! No I/O besides reading the file in [`EdgeConfig::load`], no logging (the
//! caller logs [`EdgeConfig::warnings`]), no reload.

mod admin;
mod credential;
mod error;
mod model;
mod payload;
mod schema;
mod tls;
mod token;
mod validate;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use admin::AdminKeys;
pub use credential::{
    CredentialSecret, CredentialSpec, DEFAULT_LEASE_TTL_MS, LeaseSettings, MAX_CREDENTIAL_LEN,
    MAX_LEASE_TTL_MS, MIN_LEASE_TTL_MS,
};
pub use error::{ConfigError, ConfigWarning, Issue};
pub use model::*;
pub use payload::{PayloadError, register_response_frame_len};
pub use tls::{LinkSecurity, NodeLinkTls, is_trust_domain};
pub use token::{
    ApiKeys, HashIndex, KeySet, NodeRecord, NodeTable, TOKEN_HASH_LEN, TokenHash, TokenSource,
    bearer_token,
};

/// The embedded default config: one node `node-1` (token `iop-dev-token`)
/// with the two mock providers of `perf`'s `iop-mock-provider`.
pub const EMBEDDED_DEFAULT_YAML: &str = include_str!("default.yaml");

/// Origin name used in messages about [`EMBEDDED_DEFAULT_YAML`].
pub const EMBEDDED_DEFAULT_ORIGIN: &str = "default.yaml (embedded)";

/// A loaded and validated `edge.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeConfig {
    origin: String,
    listen: ListenConfig,
    workers: u32,
    link: LinkConfig,
    nodes: NodeTable,
    model_groups: Vec<ModelGroup>,
    queue: QueueConfig,
    drain_grace_ms: u64,
    api_keys: ApiKeys,
    admin_keys: AdminKeys,
    leases: LeaseSettings,
    link_security: LinkSecurity,
    warnings: Vec<ConfigWarning>,
}

impl EdgeConfig {
    /// Reads and validates the file at `path`. Messages name the file as
    /// `path` was given.
    ///
    /// # Errors
    /// [`ConfigError::Read`] if the file cannot be read, otherwise as
    /// [`EdgeConfig::from_yaml_str`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            origin: origin.clone(),
            message: e.to_string(),
        })?;
        let mut config = Self::from_yaml_str(&text, &origin)?;
        // F29: a file-based Edge keeps its lease state next to its config,
        // in a directory named after the file (`edge.yaml` →
        // `edge.lease-state/`), so two configs never share one.
        if config.leases.state_dir.is_none() {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            let dir = path.with_file_name(format!("{stem}.lease-state"));
            config.leases.state_dir = Some(dir.display().to_string());
        }
        Ok(config)
    }

    /// Parses and validates `text`; `origin` names it in messages (a file
    /// name such as `edge.yaml`).
    ///
    /// # Errors
    /// [`ConfigError::Parse`] for YAML or schema errors (the first one, with
    /// its path and line/column), [`ConfigError::Invalid`] with every broken
    /// rule.
    pub fn from_yaml_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let mut raw: schema::RawEdgeConfig =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Parse {
                origin: origin.to_owned(),
                message: e.to_string(),
            })?;
        let raw_tls = std::mem::take(&mut raw.tls);
        let admin = admin::validate(raw.admin.take(), &raw.api_keys);
        let (v, link_security) = match (validate::validate(raw), tls::validate(raw_tls)) {
            (Ok(v), Ok(security)) if admin.issues.is_empty() => (v, security),
            (v, security) => {
                let mut issues = v.err().unwrap_or_default();
                issues.extend(security.err().unwrap_or_default());
                issues.extend(admin.issues);
                return Err(ConfigError::Invalid {
                    origin: origin.to_owned(),
                    issues,
                });
            }
        };
        Ok(Self {
            origin: origin.to_owned(),
            listen: v.listen,
            workers: v.workers,
            link: v.link,
            nodes: NodeTable::new(v.nodes),
            model_groups: v.model_groups,
            queue: v.queue,
            drain_grace_ms: v.drain_grace_ms,
            api_keys: ApiKeys::new(v.api_keys),
            admin_keys: admin.keys,
            leases: v.leases,
            link_security,
            warnings: v
                .warnings
                .into_iter()
                .chain(admin.warnings)
                .map(|issue| ConfigWarning {
                    origin: origin.to_owned(),
                    issue,
                })
                .collect(),
        })
    }

    /// The embedded default ([`EMBEDDED_DEFAULT_YAML`]), for development and
    /// tests.
    ///
    /// # Panics
    /// Never: a test validates the embedded text.
    pub fn embedded_default() -> Self {
        match Self::from_yaml_str(EMBEDDED_DEFAULT_YAML, EMBEDDED_DEFAULT_ORIGIN) {
            Ok(config) => config,
            Err(e) => panic!("the embedded default config is invalid: {e}"),
        }
    }

    /// The file this came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Listen addresses.
    pub fn listen(&self) -> &ListenConfig {
        &self.listen
    }

    /// Runtimes to start; 0 = one per core.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// Edge–Node link limits.
    pub fn link(&self) -> &LinkConfig {
        &self.link
    }

    /// Node records.
    pub fn nodes(&self) -> &NodeTable {
        &self.nodes
    }

    /// Model groups, in file order.
    pub fn model_groups(&self) -> &[ModelGroup] {
        &self.model_groups
    }

    /// The model group clients address as `name`.
    pub fn model_group(&self, name: &str) -> Option<&ModelGroup> {
        self.model_groups.iter().find(|g| g.name == name)
    }

    /// Queue admission limits.
    pub fn queue(&self) -> &QueueConfig {
        &self.queue
    }

    /// How long a drain (SIGTERM/SIGINT) lets in-flight requests finish, in
    /// ms (`drain_grace_ms`; `iop-edge --drain-grace-ms` overrides it).
    pub fn drain_grace_ms(&self) -> u64 {
        self.drain_grace_ms
    }

    /// Client API keys; empty means the ingress needs none.
    pub fn api_keys(&self) -> &ApiKeys {
        &self.api_keys
    }

    /// Admin API keys (`admin.keys`); empty means the admin API is off.
    pub fn admin_keys(&self) -> &AdminKeys {
        &self.admin_keys
    }

    /// F29 credential lease policy.
    pub fn leases(&self) -> &LeaseSettings {
        &self.leases
    }

    /// How the node socket is secured (`tls:`, F28).
    pub fn link_security(&self) -> &LinkSecurity {
        &self.link_security
    }

    /// Things allowed but worth logging at start (plaintext tokens, nodes
    /// without providers, no model groups).
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }
}
