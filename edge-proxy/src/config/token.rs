//! Node tokens: stored as blake3 hashes, looked up by hash (F1).
//!
//! The Edge never keeps a plaintext token: a `token:` in the file is hashed
//! as it is read. A presented token is hashed once and looked up by that hash
//! in O(1) (see [`NodeTable`] for why that leaks nothing usable); the final
//! comparison is constant-time (`subtle`). Neither tokens nor full hashes are
//! ever printed: `Debug` shows an 8-hex-digit fingerprint.

use std::collections::HashMap;
use std::fmt;

use subtle::ConstantTimeEq;

use super::model::ProviderSpec;

/// Length of a token hash in bytes.
pub const TOKEN_HASH_LEN: usize = 32;

/// The blake3 hash of a node token.
///
/// Equality is constant-time. There is no `Display`; `Debug` and
/// [`TokenHash::fingerprint`] show only the first 4 bytes.
#[derive(Clone, Copy)]
pub struct TokenHash([u8; TOKEN_HASH_LEN]);

impl TokenHash {
    /// Hashes a plaintext token.
    pub fn of(token: &str) -> Self {
        Self(*blake3::hash(token.as_bytes()).as_bytes())
    }

    /// Parses the 64 hex digits `b3sum` prints (either case). `None` for
    /// anything else, including surrounding whitespace.
    pub fn from_hex(hex: &str) -> Option<Self> {
        let digits = hex.as_bytes();
        if digits.len() != TOKEN_HASH_LEN * 2 {
            return None;
        }
        let mut out = [0u8; TOKEN_HASH_LEN];
        for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
            *byte = (hex_value(pair[0])? << 4) | hex_value(pair[1])?;
        }
        Some(Self(out))
    }

    /// The raw hash bytes (not secret, but not for logs either: see
    /// [`fingerprint`](Self::fingerprint)).
    pub(crate) fn bytes(&self) -> &[u8; TOKEN_HASH_LEN] {
        &self.0
    }

    /// A short, non-secret name for logs: the first 8 hex digits and `…`.
    pub fn fingerprint(&self) -> String {
        let [a, b, c, d, ..] = self.0;
        format!("{a:02x}{b:02x}{c:02x}{d:02x}…")
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl ConstantTimeEq for TokenHash {
    fn ct_eq(&self, other: &Self) -> subtle::Choice {
        self.0.ct_eq(&other.0)
    }
}

impl PartialEq for TokenHash {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq(other).into()
    }
}

impl Eq for TokenHash {}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({})", self.fingerprint())
    }
}

/// How a record's token was written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// `token: <plaintext>` (development only; hashed on load).
    Plaintext,
    /// `token_blake3: <hex>`.
    Blake3,
}

/// One `nodes[]` record: who the node is, how it proves it, what it serves.
///
/// `Debug` is safe to log: the token is only ever held as a [`TokenHash`],
/// which prints its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    /// Node id, unique across the Edge.
    pub id: String,
    /// Hash of the node's token.
    pub token: TokenHash,
    /// How the token was written.
    pub token_source: TokenSource,
    /// Its providers; may be empty, in which case every registration is
    /// refused (the payload fails to build, F3).
    pub providers: Vec<ProviderSpec>,
}

/// The node records, looked up by presented token (F1) or by id.
///
/// Built by validation, which guarantees unique ids and unique tokens.
///
/// Lookups are O(1): a presented token is hashed with blake3 and the hash is
/// looked up in a map. Timing can at most reveal where the presented token's
/// *hash* falls in the map, which says nothing usable about any stored token
/// (steering a hash towards a chosen value is a preimage search). The one
/// comparison that decides a match is constant-time ([`TokenHash`]'s `Eq`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTable {
    records: Vec<NodeRecord>,
    by_token: HashIndex,
    by_id: HashMap<String, usize>,
}

/// Secrets found by their blake3 hash: O(1) by hash, then a constant-time
/// confirm (see [`NodeTable`] for why the lookup by hash leaks nothing
/// usable). Maps a presented secret to the position it was given at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HashIndex {
    by_hash: HashMap<[u8; TOKEN_HASH_LEN], (TokenHash, usize)>,
}

impl HashIndex {
    /// An index of `hashes`, each at its position.
    pub fn new<'a>(hashes: impl IntoIterator<Item = &'a TokenHash>) -> Self {
        let by_hash = hashes
            .into_iter()
            .enumerate()
            .map(|(i, hash)| (*hash.bytes(), (*hash, i)))
            .collect();
        Self { by_hash }
    }

    /// The position of the secret `presented`, if any. An empty secret
    /// matches nothing.
    pub fn find(&self, presented: &str) -> Option<usize> {
        if presented.is_empty() {
            return None;
        }
        let hash = TokenHash::of(presented);
        let (stored, i) = self.by_hash.get(hash.bytes())?;
        // The map found it by hash equality; confirm in constant time.
        bool::from(stored.ct_eq(&hash)).then_some(*i)
    }
}

/// Named secrets held as hashes: the client API keys (`api_keys:`,
/// [`ApiKeys`]) and the admin keys (`admin.keys`, `AdminKeys`). `Debug`
/// shows names only.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeySet {
    names: Vec<String>,
    index: HashIndex,
}

/// Client API keys (`api_keys:` in edge.yaml).
pub type ApiKeys = KeySet;

/// The secret of an `Authorization: Bearer <secret>` header (scheme
/// case-insensitive, surrounding space trimmed); `None` for any other form.
pub fn bearer_token(authorization: Option<&[u8]>) -> Option<&str> {
    let value = std::str::from_utf8(authorization?).ok()?;
    let (scheme, secret) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| secret.trim())
}

impl KeySet {
    /// The keys `(name, hash)` that validation accepted.
    pub(crate) fn new(keys: Vec<(String, TokenHash)>) -> Self {
        let index = HashIndex::new(keys.iter().map(|(_, hash)| hash));
        Self {
            names: keys.into_iter().map(|(name, _)| name).collect(),
            index,
        }
    }

    /// Whether no key is configured (for client keys the ingress is then
    /// open; for admin keys the admin API is off).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The name of the key `presented`, if it is one. An empty key matches
    /// nothing.
    pub fn check(&self, presented: &str) -> Option<&str> {
        self.names
            .get(self.index.find(presented)?)
            .map(String::as_str)
    }
}

impl NodeTable {
    /// Wraps records that validation has accepted.
    pub(crate) fn new(records: Vec<NodeRecord>) -> Self {
        let by_token = HashIndex::new(records.iter().map(|r| &r.token));
        let by_id = records
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.clone(), i))
            .collect();
        Self {
            records,
            by_token,
            by_id,
        }
    }

    /// The record whose token is `presented`, if any. An empty token matches
    /// nothing.
    pub fn lookup(&self, presented: &str) -> Option<&NodeRecord> {
        self.records.get(self.by_token.find(presented)?)
    }

    /// The record with this node id.
    pub fn get(&self, id: &str) -> Option<&NodeRecord> {
        self.records.get(*self.by_id.get(id)?)
    }

    /// The record serving provider `provider_id`, with that provider.
    pub fn provider(&self, provider_id: &str) -> Option<(&NodeRecord, &ProviderSpec)> {
        self.records.iter().find_map(|r| {
            r.providers
                .iter()
                .find(|p| p.id == provider_id)
                .map(|p| (r, p))
        })
    }

    /// Every record, in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, NodeRecord> {
        self.records.iter()
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are no records (never, after validation).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

impl<'a> IntoIterator for &'a NodeTable {
    type Item = &'a NodeRecord;
    type IntoIter = std::slice::Iter<'a, NodeRecord>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
