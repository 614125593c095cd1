//! Token lookup (F1) and keeping tokens out of every printout.

use edge_proxy::config::{EdgeConfig, NodeTable, TokenHash, TokenSource};
use proptest::prelude::*;

fn table(text: &str) -> EdgeConfig {
    EdgeConfig::from_yaml_str(text, "edge.yaml").unwrap()
}

/// Three nodes: plaintext token, lower-case hash, upper-case hash.
fn three_nodes() -> EdgeConfig {
    let h = |t: &str| blake3::hash(t.as_bytes()).to_hex().to_string();
    table(&format!(
        "nodes:
  - id: plain
    token: secret-plain-token
  - id: hashed
    token_blake3: {}
  - id: upper
    token_blake3: {}
",
        h("secret-hashed-token"),
        h("secret-upper-token").to_uppercase()
    ))
}

#[test]
fn the_right_token_finds_its_record() {
    let config = three_nodes();
    let nodes = config.nodes();
    let plain = nodes.lookup("secret-plain-token").unwrap();
    assert_eq!(
        (plain.id.as_str(), plain.token_source),
        ("plain", TokenSource::Plaintext)
    );
    let hashed = nodes.lookup("secret-hashed-token").unwrap();
    assert_eq!(
        (hashed.id.as_str(), hashed.token_source),
        ("hashed", TokenSource::Blake3)
    );
    assert_eq!(nodes.lookup("secret-upper-token").unwrap().id, "upper");
}

#[test]
fn wrong_tokens_find_nothing() {
    let config = three_nodes();
    let nodes = config.nodes();
    let hash_hex = blake3::hash(b"secret-hashed-token").to_hex();
    for wrong in [
        "",
        "secret-plain-toke",
        "secret-plain-token\n",
        " secret-plain-token",
        "SECRET-PLAIN-TOKEN",
        // The hash itself is not the token.
        hash_hex.as_str(),
    ] {
        assert!(nodes.lookup(wrong).is_none(), "{wrong:?} matched");
    }
}

#[test]
fn the_empty_token_never_matches_even_if_configured_by_hash() {
    // Validation refuses the empty token's hash; a table is never built with
    // it, and lookup refuses "" before hashing anyway.
    let config = three_nodes();
    assert!(config.nodes().lookup("").is_none());
}

#[test]
fn lookup_by_id_and_provider() {
    let config = EdgeConfig::embedded_default();
    let nodes: &NodeTable = config.nodes();
    assert_eq!(nodes.get("node-1").unwrap().id, "node-1");
    assert!(nodes.get("node-2").is_none());
    let (node, provider) = nodes.provider("mock-ollama").unwrap();
    assert_eq!(
        (node.id.as_str(), provider.id.as_str()),
        ("node-1", "mock-ollama")
    );
    assert!(nodes.provider("nope").is_none());
    assert_eq!(nodes.into_iter().count(), 1);
    assert!(!nodes.is_empty());
}

#[test]
fn token_hash_parsing_and_equality() {
    let h = TokenHash::of("abc");
    let hex = blake3::hash(b"abc").to_hex().to_string();
    assert_eq!(TokenHash::from_hex(&hex), Some(h));
    assert_eq!(TokenHash::from_hex(&hex.to_uppercase()), Some(h));
    assert_eq!(TokenHash::from_hex(&hex[..62]), None);
    assert_eq!(TokenHash::from_hex(&format!("{hex}00")), None);
    assert_eq!(TokenHash::from_hex(&format!(" {}", &hex[1..])), None);
    assert_eq!(
        TokenHash::from_hex(&format!("{}é", &hex[..62])),
        None,
        "multi-byte char"
    );
    assert_ne!(TokenHash::of("abc"), TokenHash::of("abd"));
}

#[test]
fn nothing_prints_a_token_or_a_full_hash() {
    let config = three_nodes();
    let full_hashes: Vec<String> = [
        "secret-plain-token",
        "secret-hashed-token",
        "secret-upper-token",
    ]
    .iter()
    .map(|t| blake3::hash(t.as_bytes()).to_hex().to_string())
    .collect();
    let printed = [
        format!("{config:?}"),
        format!("{config:#?}"),
        format!("{:?}", config.nodes().lookup("secret-plain-token")),
        format!("{:?}", config.warnings()),
        config
            .warnings()
            .iter()
            .map(ToString::to_string)
            .collect::<String>(),
    ];
    for text in &printed {
        assert!(!text.contains("secret-"), "token printed: {text}");
        for full in &full_hashes {
            assert!(
                !text.to_lowercase().contains(full),
                "full hash printed: {text}"
            );
            assert!(
                !text.to_lowercase().contains(&full[..16]),
                "more than a fingerprint: {text}"
            );
        }
    }
    let record = config.nodes().get("hashed").unwrap();
    let fp = record.token.fingerprint();
    assert_eq!(fp, format!("{}…", &full_hashes[1][..8]));
    assert_eq!(format!("{:?}", record.token), format!("TokenHash({fp})"));
}

proptest! {
    /// Every configured token finds exactly its own record; any other string
    /// finds none.
    #[test]
    fn lookup_finds_exactly_the_owner(
        tokens in prop::collection::hash_set("[a-zA-Z0-9_-]{1,40}", 1..12),
        other in "[a-zA-Z0-9_-]{0,40}",
        hashed_mask in any::<u16>(),
    ) {
        let tokens: Vec<String> = tokens.into_iter().collect();
        let mut yaml = String::from("nodes:\n");
        for (i, t) in tokens.iter().enumerate() {
            if hashed_mask & (1 << i) != 0 {
                yaml += &format!("  - id: n{i}\n    token_blake3: {}\n", blake3::hash(t.as_bytes()).to_hex());
            } else {
                yaml += &format!("  - id: n{i}\n    token: '{t}'\n");
            }
        }
        let config = table(&yaml);
        for (i, t) in tokens.iter().enumerate() {
            let expected = format!("n{i}");
            prop_assert_eq!(config.nodes().lookup(t).map(|r| r.id.as_str()), Some(expected.as_str()));
        }
        if !tokens.contains(&other) {
            prop_assert!(config.nodes().lookup(&other).is_none());
        }
    }
}
