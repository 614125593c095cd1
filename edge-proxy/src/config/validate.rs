//! The rules of `edge.yaml`: raw schema in, validated config or every broken
//! rule out.
//!
//! Rules are checked in file order and none stops the others, so one run
//! reports everything wrong with the file. A rule that spans two places
//! (a duplicate id) is reported at the later one and names the earlier.

use std::collections::HashMap;
use std::net::SocketAddr;

use super::error::Issue;
use super::model::*;
use super::schema::{
    RawApiKey, RawEdgeConfig, RawHeaders, RawHealthProbe, RawLink, RawListen, RawModelGroup,
    RawNode, RawProvider, RawQueue,
};
use super::token::{NodeRecord, TokenHash, TokenSource};

mod providers;

/// Everything validation produces.
#[derive(Debug)]
pub(crate) struct Validated {
    pub(crate) listen: ListenConfig,
    pub(crate) workers: u32,
    pub(crate) link: LinkConfig,
    pub(crate) nodes: Vec<NodeRecord>,
    pub(crate) model_groups: Vec<ModelGroup>,
    pub(crate) queue: QueueConfig,
    pub(crate) drain_grace_ms: u64,
    pub(crate) api_keys: Vec<(String, TokenHash)>,
    pub(crate) leases: super::credential::LeaseSettings,
    pub(crate) warnings: Vec<Issue>,
}

/// Checks `raw`; `Err` holds every broken rule, in file order.
pub(crate) fn validate(raw: RawEdgeConfig) -> Result<Validated, Vec<Issue>> {
    let mut c = Checker {
        leases_disabled: raw.leases.as_ref().and_then(|l| l.enabled) == Some(false),
        ..Checker::default()
    };
    let listen = c.listen(&raw.listen);
    let workers = c.range("workers", Some(raw.workers), 0, 0, MAX_WORKERS);
    let link = c.link(&raw.link);
    let nodes = c.nodes(raw.nodes);
    let model_groups = c.model_groups(raw.model_groups, &nodes);
    let queue = c.queue(&raw.queue);
    let drain_grace_ms = c.range(
        "drain_grace_ms",
        raw.drain_grace_ms,
        DEFAULT_DRAIN_GRACE_MS,
        0,
        MAX_DRAIN_GRACE_MS,
    );
    let api_keys = c.api_keys(raw.api_keys);
    let leases = super::credential::validate_leases(raw.leases, &mut |p, m| c.fail(p, m));
    if !c.issues.is_empty() {
        return Err(c.issues);
    }
    Ok(Validated {
        listen,
        workers: narrow(workers),
        link,
        nodes,
        model_groups,
        queue,
        drain_grace_ms,
        api_keys,
        leases,
        warnings: c.warnings,
    })
}

/// Narrows a value already range-checked to fit.
fn narrow(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[derive(Default)]
struct Checker {
    issues: Vec<Issue>,
    warnings: Vec<Issue>,
    /// F29: `leases.enabled: false` (credentials unmanaged by default).
    leases_disabled: bool,
}

impl Checker {
    fn fail(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue {
            path: path.into(),
            message: message.into(),
        });
    }

    fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Issue {
            path: path.into(),
            message: message.into(),
        });
    }

    /// `value` (or `default` when absent) if within `min..=max`; otherwise an
    /// issue, and `default` so checking can go on.
    fn range(&mut self, path: &str, value: Option<u64>, default: u64, min: u64, max: u64) -> u64 {
        match value {
            None => default,
            Some(v) if (min..=max).contains(&v) => v,
            Some(v) => {
                self.fail(path, format!("{v} is out of range {min}..={max}"));
                default
            }
        }
    }

    fn listen(&mut self, raw: &RawListen) -> ListenConfig {
        let ingress = self.addr(
            "listen.ingress",
            raw.ingress.as_deref(),
            DEFAULT_INGRESS_ADDR,
        );
        let nodes = self.addr("listen.nodes", raw.nodes.as_deref(), DEFAULT_NODES_ADDR);
        if ingress == nodes && ingress.port() != 0 {
            self.fail(
                "listen.nodes",
                format!("same address as listen.ingress ({ingress})"),
            );
        }
        ListenConfig { ingress, nodes }
    }

    fn addr(&mut self, path: &str, value: Option<&str>, default: &str) -> SocketAddr {
        let fallback = || {
            default
                .parse()
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)))
        };
        match value.map(str::parse::<SocketAddr>) {
            None => fallback(),
            Some(Ok(addr)) => addr,
            Some(Err(_)) => {
                let shown = value.unwrap_or_default();
                self.fail(
                    path,
                    format!("not a socket address (ip:port, e.g. 127.0.0.1:8080): {shown:?}"),
                );
                fallback()
            }
        }
    }

    fn link(&mut self, raw: &RawLink) -> LinkConfig {
        let d = LinkConfig::default();
        let max_frame_len = self.range(
            "link.max_frame_len",
            raw.max_frame_len,
            d.max_frame_len.into(),
            MIN_MAX_FRAME_LEN,
            MAX_MAX_FRAME_LEN,
        );
        let initial_stream_window = self.range(
            "link.initial_stream_window",
            raw.initial_stream_window,
            d.initial_stream_window.into(),
            MIN_INITIAL_STREAM_WINDOW,
            MAX_INITIAL_STREAM_WINDOW,
        );
        let max_body_chunk = self.range(
            "link.max_body_chunk",
            raw.max_body_chunk,
            d.max_body_chunk.into(),
            MIN_MAX_BODY_CHUNK,
            MAX_MAX_FRAME_LEN - TUNNEL_FRAME_OVERHEAD,
        );
        if max_body_chunk + TUNNEL_FRAME_OVERHEAD > max_frame_len {
            self.fail(
                "link.max_body_chunk",
                format!(
                    "{max_body_chunk} plus {TUNNEL_FRAME_OVERHEAD} bytes of frame head does not \
                     fit link.max_frame_len ({max_frame_len})"
                ),
            );
        }
        let register_timeout_ms = self.range(
            "link.register_timeout_ms",
            raw.register_timeout_ms,
            d.register_timeout_ms,
            MIN_REGISTER_TIMEOUT_MS,
            MAX_REGISTER_TIMEOUT_MS,
        );
        LinkConfig {
            max_frame_len: narrow(max_frame_len),
            initial_stream_window: narrow(initial_stream_window),
            max_body_chunk: narrow(max_body_chunk),
            register_timeout_ms,
        }
    }

    fn queue(&mut self, raw: &RawQueue) -> QueueConfig {
        let max_waiting = self.range(
            "queue.max_waiting",
            raw.max_waiting,
            DEFAULT_QUEUE_MAX_WAITING.into(),
            0,
            MAX_QUEUE_MAX_WAITING,
        );
        let timeout_ms = self.range(
            "queue.timeout_ms",
            raw.timeout_ms,
            DEFAULT_QUEUE_TIMEOUT_MS,
            1,
            MAX_QUEUE_TIMEOUT_MS,
        );
        QueueConfig {
            max_waiting: narrow(max_waiting),
            timeout_ms,
        }
    }

    fn nodes(&mut self, raw: Vec<RawNode>) -> Vec<NodeRecord> {
        if raw.is_empty() {
            self.fail("nodes", "at least one node is required");
        }
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut tokens: HashMap<[u8; 32], (usize, String)> = HashMap::new();
        let mut provider_ids: HashMap<String, String> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, node) in raw.into_iter().enumerate() {
            let path = format!("nodes[{i}]");
            self.id(&format!("{path}.id"), &node.id);
            if let Some(first) = ids.get(&node.id) {
                let msg = format!("duplicate node id {:?} (first at nodes[{first}])", node.id);
                self.fail(format!("{path}.id"), msg);
            } else {
                ids.insert(node.id.clone(), i);
            }
            let token = self.secret(
                &path,
                node.token.as_deref(),
                node.token_blake3.as_deref(),
                ("token", "token_blake3"),
            );
            if let Some((hash, _, field)) = token {
                if let Some((first, first_id)) = tokens.get(hash.bytes()) {
                    let msg = format!("same token as nodes[{first}] ({first_id:?})");
                    self.fail(format!("{path}.{field}"), msg);
                } else {
                    tokens.insert(*hash.bytes(), (i, node.id.clone()));
                }
                if node.providers.is_empty() {
                    self.warn(
                        format!("{path}.providers"),
                        "none: every registration of this node will be refused",
                    );
                }
            }
            let providers = self.providers(&path, node.providers, &mut provider_ids);
            // A node with a broken token is still kept, so model groups can
            // resolve its providers; the issue already recorded means this
            // placeholder hash never leaves validation.
            let (token, token_source, _) =
                token.unwrap_or((TokenHash::of(""), TokenSource::Blake3, ""));
            out.push(NodeRecord {
                id: node.id,
                token,
                token_source,
                providers,
            });
        }
        out
    }

    /// The node's token hash, its source and the field it came from.
    /// A secret given in plaintext (`plain_field`, development only) or as
    /// its blake3 hash (`hash_field`): exactly one of the two.
    fn secret(
        &mut self,
        path: &str,
        plain: Option<&str>,
        hex: Option<&str>,
        (plain_field, hash_field): (&'static str, &'static str),
    ) -> Option<(TokenHash, TokenSource, &'static str)> {
        match (plain, hex) {
            (Some(_), Some(_)) => {
                let msg =
                    format!("set exactly one of `{plain_field}` and `{hash_field}`, not both");
                self.fail(path, msg);
                None
            }
            (None, None) => {
                let msg =
                    format!("missing `{hash_field}` (or `{plain_field}`, for development only)");
                self.fail(path, msg);
                None
            }
            (Some(""), None) => {
                self.fail(format!("{path}.{plain_field}"), "empty");
                None
            }
            (Some(token), None) => {
                let msg = format!(
                    "plaintext {plain_field} (development only): store its blake3 hash as \
                     `{hash_field}` instead"
                );
                self.warn(format!("{path}.{plain_field}"), msg);
                Some((TokenHash::of(token), TokenSource::Plaintext, plain_field))
            }
            (None, Some(hex)) => {
                let field = format!("{path}.{hash_field}");
                match TokenHash::from_hex(hex) {
                    None => {
                        // Never echo the value: it may be a pasted plaintext token.
                        self.fail(
                            field,
                            "not 64 hex digits (a blake3 hash, as `b3sum` prints)",
                        );
                        None
                    }
                    Some(hash) if hash == TokenHash::of("") => {
                        self.fail(field, format!("is the hash of the empty {plain_field}"));
                        None
                    }
                    Some(hash) => Some((hash, TokenSource::Blake3, hash_field)),
                }
            }
        }
    }

    /// `api_keys[]`: unique names, unique keys, each a secret.
    fn api_keys(&mut self, raw: Vec<RawApiKey>) -> Vec<(String, TokenHash)> {
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut hashes: HashMap<[u8; 32], usize> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, key) in raw.into_iter().enumerate() {
            let path = format!("api_keys[{i}]");
            self.id(&format!("{path}.name"), &key.name);
            if let Some(first) = names.insert(key.name.clone(), i) {
                let msg = format!(
                    "duplicate key name {:?} (first at api_keys[{first}])",
                    key.name
                );
                self.fail(format!("{path}.name"), msg);
            }
            let secret = self.secret(
                &path,
                key.key.as_deref(),
                key.key_blake3.as_deref(),
                ("key", "key_blake3"),
            );
            if let Some((hash, _, field)) = secret {
                if let Some(first) = hashes.insert(*hash.bytes(), i) {
                    self.fail(
                        format!("{path}.{field}"),
                        format!("same key as api_keys[{first}]"),
                    );
                } else {
                    out.push((key.name, hash));
                }
            }
        }
        out
    }

    fn model_groups(&mut self, raw: Vec<RawModelGroup>, nodes: &[NodeRecord]) -> Vec<ModelGroup> {
        if raw.is_empty() {
            self.warn("model_groups", "none: clients can reach no provider");
        }
        let providers: HashMap<&str, &ProviderSpec> = nodes
            .iter()
            .flat_map(|n| &n.providers)
            .map(|p| (p.id.as_str(), p))
            .collect();
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (g, group) in raw.into_iter().enumerate() {
            let path = format!("model_groups[{g}]");
            self.name(&format!("{path}.name"), &group.name, MAX_TARGET_LEN);
            if let Some(first) = names.get(&group.name) {
                let msg = format!(
                    "duplicate model group {:?} (first at model_groups[{first}])",
                    group.name
                );
                self.fail(format!("{path}.name"), msg);
            } else {
                names.insert(group.name.clone(), g);
            }
            let target = group.target.unwrap_or_else(|| group.name.clone());
            self.name(&format!("{path}.target"), &target, MAX_TARGET_LEN);
            if group.providers.is_empty() {
                self.fail(
                    format!("{path}.providers"),
                    "at least one provider is required",
                );
            }
            for (k, id) in group.providers.iter().enumerate() {
                let ppath = format!("{path}.providers[{k}]");
                if group.providers[..k].contains(id) {
                    self.fail(ppath, format!("provider {id:?} listed twice"));
                } else if let Some(spec) = providers.get(id.as_str()) {
                    if !spec.serves(&target) {
                        let msg = format!(
                            "provider {id:?} does not serve target {target:?} (its targets: {})",
                            spec.targets.join(", ")
                        );
                        self.fail(ppath, msg);
                    }
                } else {
                    let msg = format!("no provider {id:?} under nodes[].providers");
                    self.fail(ppath, msg);
                }
            }
            for id in group.weights.keys() {
                if !group.providers.contains(id) {
                    let msg = format!("provider {id:?} is not in this group's providers");
                    self.fail(format!("{path}.weights.{id}"), msg);
                }
            }
            let weights = group
                .providers
                .iter()
                .map(|id| {
                    let weight = group.weights.get(id).copied();
                    let field = format!("{path}.weights.{id}");
                    narrow(self.range(&field, weight, 1, 1, MAX_WEIGHT))
                })
                .collect();
            out.push(ModelGroup {
                name: group.name,
                target,
                providers: group.providers,
                weights,
            });
        }
        out
    }

    /// Node, provider and adapter ids: `[A-Za-z0-9._-]`, 1..=MAX_ID_LEN.
    fn id(&mut self, path: &str, value: &str) {
        let ok = !value.is_empty()
            && value.len() <= MAX_ID_LEN
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            self.fail(
                path,
                format!("{value:?} is not an id (1 to {MAX_ID_LEN} of A-Z a-z 0-9 . _ -)"),
            );
        }
    }

    /// Targets and model names: non-empty, no whitespace or control
    /// characters (`llama3:8b`, `Qwen/Qwen2.5-7B` are fine).
    fn name(&mut self, path: &str, value: &str, max: usize) {
        let ok = !value.is_empty()
            && value.len() <= max
            && !value.chars().any(|c| c.is_whitespace() || c.is_control());
        if !ok {
            self.fail(
                path,
                format!("{value:?} is not a model name (1 to {max} bytes, no spaces)"),
            );
        }
    }
}

/// Headers the Node derives from the request or its own framing.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];
