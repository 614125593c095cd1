//! Provider credentials and managed credential leases (F29) in `edge.yaml`.
//!
//! A provider that needs a credential (an API key for a remote
//! OpenAI-compatible server) gets a `credential:` block; the Edge then hands
//! the key to the Node only inside a signed lease sealed to that Node's key,
//! one lease per request (see `docs/leases.md`). Leases are on for every
//! provider with a `credential` unless turned off globally
//! (`leases.enabled: false`) or per provider (`credential.managed: false`);
//! an unmanaged credential travels as a plain provider header in the node's
//! config payload (development only). The top-level `leases:` block also sets
//! the lease lifetime, the Edge's signing key and node key pinning.
//!
//! ```yaml
//! leases:
//!   enabled: true                               # default
//!   ttl_ms: 30000
//!   signing_key_path: /etc/iop/edge-lease.key   # 32 raw bytes; absent = state_dir/lease-signing.key
//!   state_dir: /var/lib/iop-edge   # pins, revocations, key; default: edge.lease-state/ next to edge.yaml
//!   allow_node_key_change: false
//! nodes:
//!   - id: node-1
//!     providers:
//!       - id: remote
//!         credential:
//!           api_key_env: REMOTE_API_KEY   # or api_key: "..."
//!           header: authorization         # default
//!           prefix: "Bearer "             # default
//!           managed: true                 # default: leases.enabled
//! ```
//!
//! The secret is held as [`CredentialSecret`]: its `Debug` prints
//! `<redacted>`, it is zeroed on drop, and nothing in the config module
//! prints it.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use zeroize::Zeroizing;

/// Default lease lifetime (30 s): long enough for queueing and admission on
/// the Node, short enough that a leaked lease is soon worthless.
pub const DEFAULT_LEASE_TTL_MS: u64 = 30_000;
/// Shortest `leases.ttl_ms`.
pub const MIN_LEASE_TTL_MS: u64 = 100;
/// Longest `leases.ttl_ms` (1 h).
pub const MAX_LEASE_TTL_MS: u64 = 60 * 60 * 1000;
/// Longest credential, in bytes.
pub const MAX_CREDENTIAL_LEN: usize = 8 * 1024;

/// `leases:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLeases {
    pub(crate) enabled: Option<bool>,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) signing_key_path: Option<String>,
    pub(crate) state_dir: Option<String>,
    #[serde(default)]
    pub(crate) allow_node_key_change: bool,
}

/// `nodes[].providers[].credential:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCredential {
    pub(crate) api_key: Option<String>,
    pub(crate) api_key_env: Option<String>,
    pub(crate) header: Option<String>,
    pub(crate) prefix: Option<String>,
    pub(crate) managed: Option<bool>,
}

/// Lease policy for every provider with a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// Whether credentials are managed (leased) unless a provider says
    /// otherwise; default true.
    pub enabled: bool,
    /// Lifetime of one lease, in ms.
    pub ttl_ms: u64,
    /// File with the Edge's 32-byte Ed25519 signing key; `None` = the one
    /// kept in `state_dir` (created once), or, without a state dir, a fresh
    /// key at every start (Nodes learn it at registration).
    pub signing_key_path: Option<String>,
    /// Directory keeping pinned node keys, revocations, disabled providers
    /// and (without `signing_key_path`) the signing key across restarts
    /// (`lease/persist.rs`). `None` = kept in memory only: the default of a
    /// config not read from a file; [`crate::config::EdgeConfig::load`]
    /// defaults it to `<file stem>.lease-state/` next to the file
    /// (`edge.yaml` → `edge.lease-state/`).
    pub state_dir: Option<String>,
    /// Whether a node id may register with a different lease public key
    /// than the one pinned for it since start. Off by default: a changed key
    /// is refused (`REGISTER_REJECT_REASON_LEASE_KEY_MISMATCH`).
    pub allow_node_key_change: bool,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl_ms: DEFAULT_LEASE_TTL_MS,
            signing_key_path: None,
            state_dir: None,
            allow_node_key_change: false,
        }
    }
}

/// A provider credential: where it goes and the secret itself.
#[derive(Clone, PartialEq, Eq)]
pub struct CredentialSpec {
    /// HTTP header the Node sets (lowercase), default `authorization`.
    pub header: String,
    /// Prefix of the header value, default `Bearer `.
    pub prefix: String,
    /// Handed out in sealed leases (true) or sent as a plain provider
    /// header in the config payload (false, development only).
    pub managed: bool,
    /// The secret.
    pub secret: CredentialSecret,
}

impl fmt::Debug for CredentialSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialSpec")
            .field("header", &self.header)
            .field("prefix", &self.prefix)
            .field("managed", &self.managed)
            .field("secret", &self.secret)
            .finish()
    }
}

/// A secret that never prints and is zeroed when its last copy drops.
#[derive(Clone)]
pub struct CredentialSecret(Arc<Zeroizing<Vec<u8>>>);

impl CredentialSecret {
    /// Wraps `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(Arc::new(Zeroizing::new(bytes)))
    }

    /// The secret bytes, for sealing only.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl PartialEq for CredentialSecret {
    fn eq(&self, other: &Self) -> bool {
        use subtle::ConstantTimeEq;
        self.0.len() == other.0.len() && bool::from(self.0.ct_eq(&other.0))
    }
}

impl Eq for CredentialSecret {}

impl fmt::Debug for CredentialSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The plain header of an unmanaged credential (`managed: false`), sent in
/// the node's config payload; `None` for a managed one or none.
pub(crate) fn unmanaged_header(spec: &super::ProviderSpec) -> Option<proto::v1::Header> {
    let credential = spec.credential.as_ref().filter(|c| !c.managed)?;
    let mut value = credential.prefix.clone().into_bytes();
    value.extend_from_slice(credential.secret.expose());
    Some(proto::v1::Header {
        name: credential.header.clone().into(),
        value: value.into(),
    })
}

/// Checks `leases:`; broken rules go to `fail(path, message)`.
pub(crate) fn validate_leases(
    raw: Option<RawLeases>,
    fail: &mut dyn FnMut(String, String),
) -> LeaseSettings {
    let raw = raw.unwrap_or_default();
    let ttl_ms = raw.ttl_ms.unwrap_or(DEFAULT_LEASE_TTL_MS);
    if !(MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(&ttl_ms) {
        fail(
            "leases.ttl_ms".into(),
            format!("must be in {MIN_LEASE_TTL_MS}..={MAX_LEASE_TTL_MS}, got {ttl_ms}"),
        );
    }
    if raw.signing_key_path.as_deref() == Some("") {
        fail("leases.signing_key_path".into(), "must not be empty".into());
    }
    if raw.state_dir.as_deref() == Some("") {
        fail("leases.state_dir".into(), "must not be empty".into());
    }
    LeaseSettings {
        enabled: raw.enabled.unwrap_or(true),
        ttl_ms,
        signing_key_path: raw.signing_key_path,
        state_dir: raw.state_dir,
        allow_node_key_change: raw.allow_node_key_change,
    }
}

/// Checks one provider's `credential:` at `path` and resolves its secret
/// (reading `api_key_env` now). Messages never contain the secret.
pub(crate) fn validate_credential(
    path: &str,
    raw: RawCredential,
    managed_by_default: bool,
    env: &dyn Fn(&str) -> Option<String>,
    fail: &mut dyn FnMut(String, String),
) -> Option<CredentialSpec> {
    let secret = match (raw.api_key, raw.api_key_env) {
        (Some(key), None) => Some(key),
        (None, Some(var)) => match env(&var) {
            Some(key) => Some(key),
            None => {
                fail(
                    format!("{path}.api_key_env"),
                    format!("environment variable {var:?} is not set"),
                );
                None
            }
        },
        _ => {
            fail(
                path.to_owned(),
                "exactly one of `api_key` and `api_key_env` is required".into(),
            );
            None
        }
    }?;
    if secret.is_empty() || secret.len() > MAX_CREDENTIAL_LEN {
        fail(
            path.to_owned(),
            format!("the credential must be 1..={MAX_CREDENTIAL_LEN} bytes"),
        );
        return None;
    }
    if secret.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        fail(
            path.to_owned(),
            "the credential must not contain CR, LF or NUL".into(),
        );
        return None;
    }
    let header = raw
        .header
        .unwrap_or_else(|| "authorization".into())
        .to_ascii_lowercase();
    if header.is_empty()
        || !header
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        fail(
            format!("{path}.header"),
            format!("not a header name: {header:?}"),
        );
    }
    let prefix = raw.prefix.unwrap_or_else(|| "Bearer ".into());
    if prefix.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        fail(
            format!("{path}.prefix"),
            "must not contain CR, LF or NUL".into(),
        );
    }
    Some(CredentialSpec {
        managed: raw.managed.unwrap_or(managed_by_default),
        header,
        prefix,
        secret: CredentialSecret::new(secret.into_bytes()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: RawCredential) -> (Option<CredentialSpec>, Vec<String>) {
        let mut errors = Vec::new();
        let env = |name: &str| (name == "SET").then(|| "sk-from-env".to_owned());
        let spec = validate_credential("p.credential", raw, true, &env, &mut |p, m| {
            errors.push(format!("{p}: {m}"))
        });
        (spec, errors)
    }

    fn raw(key: Option<&str>, env: Option<&str>) -> RawCredential {
        RawCredential {
            api_key: key.map(str::to_owned),
            api_key_env: env.map(str::to_owned),
            header: None,
            prefix: None,
            managed: None,
        }
    }

    #[test]
    fn inline_and_env_keys_resolve_with_defaults() {
        let (spec, errors) = check(raw(Some("sk-inline"), None));
        assert!(errors.is_empty());
        let spec = spec.unwrap();
        assert_eq!(spec.secret.expose(), b"sk-inline");
        assert_eq!(
            (spec.header.as_str(), spec.prefix.as_str()),
            ("authorization", "Bearer ")
        );
        let (spec, errors) = check(raw(None, Some("SET")));
        assert!(errors.is_empty());
        assert_eq!(spec.unwrap().secret.expose(), b"sk-from-env");
    }

    #[test]
    fn broken_credentials_are_errors_that_never_echo_the_key() {
        let (_, errors) = check(raw(Some("sk-SENTINEL\r\n"), None));
        assert_eq!(errors.len(), 1);
        assert!(!errors[0].contains("SENTINEL"));
        let (_, errors) = check(raw(Some("a"), Some("SET")));
        assert!(errors[0].contains("exactly one"));
        let (_, errors) = check(raw(None, Some("UNSET")));
        assert!(errors[0].contains("UNSET"));
    }

    #[test]
    fn debug_redacts_the_secret() {
        let (spec, _) = check(raw(Some("sk-SENTINEL"), None));
        let printed = format!("{:?}", spec.unwrap());
        assert!(!printed.contains("SENTINEL"), "{printed}");
        assert!(printed.contains("<redacted>"));
    }

    #[test]
    fn lease_settings_default_and_range() {
        let mut errors = Vec::new();
        let s = validate_leases(None, &mut |p, m| errors.push(format!("{p}: {m}")));
        assert_eq!(s, LeaseSettings::default());
        let raw = RawLeases {
            enabled: None,
            ttl_ms: Some(1),
            signing_key_path: None,
            state_dir: None,
            allow_node_key_change: false,
        };
        validate_leases(Some(raw), &mut |p, m| errors.push(format!("{p}: {m}")));
        assert!(errors[0].starts_with("leases.ttl_ms"));
    }

    fn payload_of(yaml_leases: &str, yaml_credential_extra: &str) -> proto::v1::ProviderConfig {
        let yaml = format!(
            r#"
{yaml_leases}
nodes:
  - id: n
    token: t
    providers:
      - id: p
        kind: openai_compat
        base_url: http://127.0.0.1:1
        targets: [m]
        credential:
          api_key: sk-SENTINEL-cfg
{yaml_credential_extra}
"#
        );
        let config = crate::config::EdgeConfig::from_yaml_str(&yaml, "t.yaml").unwrap();
        let node = config.nodes().get("n").unwrap();
        let payload = node.build_payload(config.link(), 1, 1 << 20).unwrap();
        payload.providers[0].clone()
    }

    #[test]
    fn a_managed_credential_never_travels_in_the_payload() {
        let provider = payload_of("", "");
        assert!(provider.credential_lease_required);
        assert!(provider.headers.is_empty());
        assert!(!format!("{provider:?}").contains("SENTINEL"));
    }

    #[test]
    fn leases_can_be_turned_off_globally_or_per_provider() {
        for (leases, extra) in [
            ("leases:\n  enabled: false", ""),
            ("", "          managed: false"),
        ] {
            let provider = payload_of(leases, extra);
            assert!(!provider.credential_lease_required, "{leases}{extra}");
            assert_eq!(provider.headers.len(), 1);
            assert_eq!(provider.headers[0].name, "authorization");
            assert_eq!(
                provider.headers[0].value.as_ref(),
                b"Bearer sk-SENTINEL-cfg"
            );
        }
        // A provider can opt back in under a global off.
        let provider = payload_of("leases:\n  enabled: false", "          managed: true");
        assert!(provider.credential_lease_required);
        assert!(provider.headers.is_empty());
    }
}
