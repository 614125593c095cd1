//! `admin:` in edge.yaml: the keys of the operator's admin API (issue 7,
//! F29 lease revocation and provider disable over HTTP).
//!
//! Admin keys are held exactly like client `api_keys`: only as blake3
//! hashes ([`TokenHash`]), in the same [`KeySet`] type (O(1) by hash, then
//! a constant-time confirm with `subtle`). They are a separate set: a client
//! API key is never an admin key, and validation refuses a secret configured
//! as both. No admin key configured means the admin routes do not exist
//! (404).
//!
//! ```yaml
//! admin:
//!   keys:
//!     - name: ops
//!       key_blake3: <64 hex digits, `b3sum` of the key>
//! ```

use std::collections::HashMap;

use serde::Deserialize;

use super::error::Issue;
use super::model::MAX_ID_LEN;
use super::schema::RawApiKey;
use super::token::{KeySet, TOKEN_HASH_LEN, TokenHash};

/// `admin:` as serde reads it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAdmin {
    #[serde(default)]
    pub(crate) keys: Vec<RawAdminKey>,
}

/// One `admin.keys[]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAdminKey {
    pub(crate) name: String,
    pub(crate) key: Option<String>,
    pub(crate) key_blake3: Option<String>,
}

/// The admin keys (`admin.keys` in edge.yaml), held as hashes.
///
/// `Debug` shows names only.
pub type AdminKeys = KeySet;

/// What checking `admin:` found.
#[derive(Debug, Default)]
pub(crate) struct AdminCheck {
    /// The keys that passed.
    pub(crate) keys: AdminKeys,
    /// Broken rules (the file is refused).
    pub(crate) issues: Vec<Issue>,
    /// Allowed but worth logging (plaintext keys).
    pub(crate) warnings: Vec<Issue>,
}

impl AdminCheck {
    fn fail(&mut self, path: String, message: impl Into<String>) {
        self.issues.push(Issue {
            path,
            message: message.into(),
        });
    }
}

/// Checks `admin:`: names are ids and unique, each key is set exactly once
/// (`key` or `key_blake3`), keys are unique and none is also a client key
/// of `api_keys`.
pub(crate) fn validate(raw: Option<RawAdmin>, api_keys: &[RawApiKey]) -> AdminCheck {
    let mut check = AdminCheck::default();
    let client_hashes: Vec<TokenHash> = api_keys
        .iter()
        .filter_map(|k| match (&k.key, &k.key_blake3) {
            (Some(plain), None) if !plain.is_empty() => Some(TokenHash::of(plain)),
            (None, Some(hex)) => TokenHash::from_hex(hex),
            _ => None,
        })
        .collect();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut hashes: HashMap<[u8; TOKEN_HASH_LEN], usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, key) in raw.unwrap_or_default().keys.into_iter().enumerate() {
        let path = format!("admin.keys[{i}]");
        if !is_id(&key.name) {
            let msg = format!(
                "{:?} is not an id (1 to {MAX_ID_LEN} of A-Z a-z 0-9 . _ -)",
                key.name
            );
            check.fail(format!("{path}.name"), msg);
        }
        if let Some(first) = names.insert(key.name.clone(), i) {
            let msg = format!(
                "duplicate admin key name {:?} (first at admin.keys[{first}])",
                key.name
            );
            check.fail(format!("{path}.name"), msg);
        }
        let Some((hash, field)) = secret(&mut check, &path, &key) else {
            continue;
        };
        if client_hashes.contains(&hash) {
            check.fail(
                format!("{path}.{field}"),
                "same key as a client key in api_keys: admin keys must be separate secrets",
            );
        } else if let Some(first) = hashes.insert(*hash.bytes(), i) {
            check.fail(
                format!("{path}.{field}"),
                format!("same key as admin.keys[{first}]"),
            );
        } else {
            out.push((key.name, hash));
        }
    }
    check.keys = AdminKeys::new(out);
    check
}

/// The key's hash and the field it came from; never echoes a value.
fn secret(
    check: &mut AdminCheck,
    path: &str,
    key: &RawAdminKey,
) -> Option<(TokenHash, &'static str)> {
    match (key.key.as_deref(), key.key_blake3.as_deref()) {
        (Some(_), Some(_)) => {
            check.fail(
                path.to_owned(),
                "set exactly one of `key` and `key_blake3`, not both",
            );
            None
        }
        (None, None) => {
            check.fail(
                path.to_owned(),
                "missing `key_blake3` (or `key`, for development only)",
            );
            None
        }
        (Some(""), None) => {
            check.fail(format!("{path}.key"), "empty");
            None
        }
        (Some(plain), None) => {
            check.warnings.push(Issue {
                path: format!("{path}.key"),
                message: "plaintext key (development only): store its blake3 hash as \
                          `key_blake3` instead"
                    .into(),
            });
            Some((TokenHash::of(plain), "key"))
        }
        (None, Some(hex)) => match TokenHash::from_hex(hex) {
            Some(hash) => Some((hash, "key_blake3")),
            None => {
                check.fail(
                    format!("{path}.key_blake3"),
                    "not 64 hex digits (a blake3 hash, as `b3sum` prints)",
                );
                None
            }
        },
    }
}

fn is_id(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_ID_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use crate::config::{ConfigError, EdgeConfig};

    fn yaml(admin: &str) -> String {
        format!(
            "api_keys:\n  - name: team-a\n    key: client-key\n\
             nodes:\n  - id: n1\n    token: tok\n{admin}"
        )
    }

    fn issues(text: &str) -> Vec<String> {
        match EdgeConfig::from_yaml_str(text, "edge.yaml") {
            Err(ConfigError::Invalid { issues, .. }) => {
                issues.iter().map(ToString::to_string).collect()
            }
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn no_admin_section_means_no_admin_keys() {
        let config = EdgeConfig::from_yaml_str(&yaml(""), "edge.yaml").unwrap();
        assert!(config.admin_keys().is_empty());
        assert_eq!(config.admin_keys().check("client-key"), None);
    }

    #[test]
    fn admin_keys_are_hashed_and_checked_by_name() {
        let hex = blake3::hash(b"ops-secret").to_hex().to_string();
        let text = yaml(&format!(
            "admin:\n  keys:\n    - name: ops\n      key_blake3: {hex}\n    - name: dev\n      key: dev-secret\n"
        ));
        let config = EdgeConfig::from_yaml_str(&text, "edge.yaml").unwrap();
        let keys = config.admin_keys();
        assert_eq!(keys.check("ops-secret"), Some("ops"));
        assert_eq!(keys.check("dev-secret"), Some("dev"));
        assert_eq!(keys.check(""), None);
        assert_eq!(
            keys.check("client-key"),
            None,
            "a client key is no admin key"
        );
        assert!(!format!("{keys:?}").contains("secret"));
        let warnings: Vec<String> = config.warnings().iter().map(|w| w.to_string()).collect();
        assert!(
            warnings.iter().any(|w| w.contains("admin.keys[1].key")),
            "{warnings:?}"
        );
    }

    #[test]
    fn broken_admin_keys_name_their_field() {
        let text = yaml(
            "admin:\n  keys:\n    - name: 'bad name'\n      key: a\n    - name: ops\n      key: a\n\
             \x20   - name: ops\n    - name: x\n      key_blake3: nothex\n    - name: y\n      key: client-key\n\
             \x20   - name: z\n      key: b\n      key_blake3: c\n",
        );
        let found = issues(&text);
        let expect = [
            "admin.keys[0].name: \"bad name\" is not an id",
            "admin.keys[1].key: same key as admin.keys[0]",
            "admin.keys[2].name: duplicate admin key name \"ops\"",
            "admin.keys[2]: missing `key_blake3`",
            "admin.keys[3].key_blake3: not 64 hex digits",
            "admin.keys[4].key: same key as a client key",
            "admin.keys[5]: set exactly one of `key` and `key_blake3`",
        ];
        for e in expect {
            assert!(found.iter().any(|f| f.contains(e)), "{e} in {found:?}");
        }
        assert!(
            !found
                .iter()
                .any(|f| f.contains("nothex") || f.contains("client-key"))
        );
    }

    #[test]
    fn unknown_admin_field_is_a_parse_error() {
        let text = yaml("admin:\n  keyz: []\n");
        let err = EdgeConfig::from_yaml_str(&text, "edge.yaml").unwrap_err();
        assert!(err.to_string().contains("keyz"), "{err}");
    }
}
