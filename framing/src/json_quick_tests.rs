//! The cursor's skipping against serde_json's reading, its oracle.

use proptest::prelude::*;
use serde_json::Value;

use super::{Cursor, FEW_MEMBERS, MAX_SKIP_DEPTH, last_wins, unescape};

/// Whether the cursor skips `text` as one whole document.
fn skips(text: &str, spaced: bool) -> bool {
    fn whole<const SPACED: bool>(mut cursor: Cursor<'_, SPACED>) -> bool {
        cursor.skip_any(MAX_SKIP_DEPTH).is_some() && cursor.only_whitespace_left()
    }
    if spaced {
        whole(Cursor::spaced(text))
    } else {
        whole(Cursor::new(text))
    }
}

/// Whether serde reads `text` as a value, as the Edge's routing skips
/// members (`deserialize_any`: numbers out of range are errors).
fn serde_reads(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok()
}

/// [`last_wins`] as a JSON object parsed whole reads it, the slow way.
fn last_wins_by_scan(members: &[(String, u32)]) -> Vec<(String, u32)> {
    let mut kept: Vec<(String, u32)> = Vec::new();
    for (key, value) in members {
        match kept.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = *value,
            None => kept.push((key.clone(), *value)),
        }
    }
    kept
}

#[test]
fn a_later_duplicate_wins_in_the_first_ones_place_however_many_members() {
    let few = vec![("a", 1), ("b", 2), ("a", 3)];
    assert_eq!(last_wins(few), [("a", 3), ("b", 2)]);
    // Past FEW_MEMBERS the hash map: the same answer, for 200k members
    // over 50k keys (a pairwise scan would compare ~10^10 pairs).
    let many: Vec<(String, u32)> = (0..200_000u32)
        .map(|i| (format!("k{}", i % 50_000), i))
        .collect();
    let kept = last_wins(many);
    assert_eq!(kept.len(), 50_000);
    assert!(kept.len() > FEW_MEMBERS);
    for (i, (key, value)) in kept.iter().enumerate() {
        assert_eq!(
            (key.as_str(), *value),
            (format!("k{i}").as_str(), 150_000 + i as u32)
        );
    }
}

#[test]
fn containers_close_in_order_and_nest_within_the_depth() {
    let skip = |text: &str, depth: usize| {
        let mut cursor = Cursor::new(text);
        cursor.skip_any(depth).is_some() && cursor.at_end()
    };
    let nested = r#"{"a":[{"b":[1,{}]},2,[]],"c":{},"d":"x"}"#;
    assert!(skip(nested, 5));
    assert!(!skip(nested, 4), "{{}} inside [1,{{}}] is the fifth level");
    for (text, depth) in [("7", 0), ("[]", 1), ("{}", 1), (r#"[[],{"a":[]}]"#, 3)] {
        assert!(skip(text, depth), "{text}");
    }
    for (text, depth) in [("[]", 0), ("{}", 0), (r#"[[],{"a":[]}]"#, 2)] {
        assert!(!skip(text, depth), "{text} at {depth}");
    }
    let deepest = format!(
        "{}{}",
        "[".repeat(MAX_SKIP_DEPTH),
        "]".repeat(MAX_SKIP_DEPTH)
    );
    assert!(skip(&deepest, MAX_SKIP_DEPTH));
    assert!(
        !skip(&format!("[{deepest}]"), MAX_SKIP_DEPTH + 1),
        "bounded by MAX_SKIP_DEPTH"
    );
    for declined in [
        "[1}",
        r#"{"a":1]"#,
        r#"[{"a":1]}"#,
        "[1,]",
        r#"{"a":1,}"#,
        "{,}",
        "[,1]",
        r#"{"a"}"#,
        r#"{"a":}"#,
        r#"{"a" 1}"#,
        r#"{1:2}"#,
        "[1 2]",
        "[",
        r#"{"a":["#,
    ] {
        assert!(!skip(declined, MAX_SKIP_DEPTH), "{declined}");
    }
}

#[test]
fn numbers_are_skipped_by_the_json_grammar_without_exponents() {
    for taken in [
        "0",
        "-0",
        "7",
        "-12",
        "0.5",
        "-3.25",
        "123456789012345678901234",
    ] {
        assert!(skips(&format!("[{taken}]"), false), "{taken}");
    }
    for declined in [
        "01",
        "-",
        "-a",
        "1.",
        ".5",
        "1.e3",
        "1e5",
        "2E-3",
        "+1",
        "1234567890123456789012345",
    ] {
        assert!(!skips(&format!("[{declined}]"), false), "{declined}");
    }
}

#[test]
fn escapes_are_skipped_but_lone_surrogates_left_to_serde() {
    for taken in [
        r#""\u0041""#,
        r#""a\n\"\\\/\b\f\r\t""#,
        r#""\u00e9\uFFFF""#,
        // Pairs, as Python's `json.dumps` writes an emoji.
        r#""\ud83d\ude00""#,
        r#""\uDBFF\uDFFF \uD800\uDC00""#,
    ] {
        assert!(skips(taken, false), "{taken}");
        assert!(serde_reads(taken), "{taken}");
    }
    for declined in [
        r#""\ud83d""#,
        r#""\ud83d \ude00""#,
        r#""\ud83d\n""#,
        r#""\ud83d\ud83d""#,
        r#""\ude00\ud83d""#,
        r#""\ud83d\\ude00""#,
        r#""\ud83d\ude0""#,
        r#""\uDC00""#,
        r#""\u+123""#,
        r#""\u12""#,
        r#""\x""#,
        "\"a\u{1}b\"",
        r#""open"#,
    ] {
        assert!(!skips(declined, false), "{declined}");
    }
}

#[test]
fn whitespace_between_tokens_only_when_spaced() {
    let doc = " {\n  \"a\" : [ 1 , {\"b\" :null} ],\t\"c\":\"d\" } \n";
    assert!(skips(doc, true));
    assert!(!skips(doc, false));
    assert!(skips(r#"{"a":[1,{"b":null}],"c":"d"}"#, false));
    assert!(!skips("{} x", true));
    assert!(skips("[ ]", true) && skips("{ }", true));
}

#[test]
fn a_long_string_is_skipped_to_its_end() {
    let text = "x".repeat(100_000);
    let doc = format!(r#"{{"messages":[{{"content":"{text}\n{text}"}}],"model":"m"}}"#);
    assert!(skips(&doc, true));
    let broken = format!("{{\"content\":\"{text}\u{1}{text}\"}}");
    assert!(!skips(&broken, true));
}

/// Documents near JSON: its pieces, and pieces one step off it (the
/// fuzzers' pieces, and a few of strings and numbers cut short).
fn near_document() -> impl Strategy<Value = String> {
    let mut pieces = crate::fuzzing::JSON_PIECES.to_vec();
    pieces.extend(["\"k\"", "\"v w\"", "\\u00", "1", ".", "5", "e", "nul"]);
    let piece = prop::sample::select(pieces);
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

/// Any JSON value the cursor takes whole: integers of any size, fractions
/// serde writes without an exponent, strings of any characters (serde
/// writes a control character as a `\u` escape), plain keys.
fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1_000_000i32..1_000_000).prop_map(|k| Value::from(f64::from(k) / 1000.0)),
        ".{0,12}".prop_map(Value::String),
        // Long enough for the 64-byte blocks, escapes anywhere in them.
        "[a \"\\\\\n\u{1}\u{e9}]{0,160}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn what_is_skipped_serde_reads(doc in near_document(), spaced in any::<bool>()) {
        if skips(&doc, spaced) {
            prop_assert!(serde_reads(&doc), "skipped what serde refuses: {:?}", doc);
        }
    }

    #[test]
    fn a_long_string_skipped_is_one_serde_reads(
        pad in 0usize..140,
        doc in near_document(),
    ) {
        // The pieces inside a string long enough for the 64-byte blocks,
        // at any offset in them.
        let doc = format!("{{\"p\":\"{}{doc}\",\"model\":\"m\"}}{}", "x".repeat(pad), " ".repeat(64));
        if skips(&doc, false) {
            prop_assert!(serde_reads(&doc), "skipped what serde refuses: {:?}", doc);
        }
    }

    /// [`last_wins`] keeps what a pairwise scan keeps, on either side of
    /// [`FEW_MEMBERS`].
    #[test]
    fn last_wins_is_the_pairwise_scan(
        members in prop::collection::vec(("[a-e]{1,2}", any::<u32>()), 0..3 * FEW_MEMBERS),
    ) {
        prop_assert_eq!(last_wins(members.clone()), last_wins_by_scan(&members));
    }

    /// A value nested `n` containers deep is skipped at a depth of `n`,
    /// declined at `n - 1`, and the cursor ends past it.
    #[test]
    fn nesting_is_bounded_by_the_depth_given(value in any_value(), spaced in any::<bool>()) {
        fn nesting(value: &Value) -> usize {
            match value {
                Value::Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
                Value::Object(members) => 1 + members.values().map(nesting).max().unwrap_or(0),
                _ => 0,
            }
        }
        let text = if spaced { serde_json::to_string_pretty(&value).unwrap() } else { value.to_string() };
        let n = nesting(&value);
        let mut cursor = Cursor::spaced(&text);
        prop_assert!(cursor.skip_any(n).is_some(), "{:?} at {}", text, n);
        prop_assert!(cursor.at_end(), "{:?}", text);
        if let Some(less) = n.checked_sub(1) {
            prop_assert!(Cursor::spaced(&text).skip_any(less).is_none(), "{:?} at {}", text, less);
        }
    }

    #[test]
    fn what_serde_writes_is_skipped(value in any_value()) {
        let compact = value.to_string();
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        prop_assert!(skips(&compact, false), "{:?}", compact);
        prop_assert!(skips(&compact, true), "{:?}", compact);
        prop_assert!(skips(&pretty, true), "{:?}", pretty);
        prop_assert!(!pretty.contains('\n') || !skips(&pretty, false), "{:?}", pretty);
    }
}

proptest! {
    #[test]
    fn a_skipped_run_ends_where_the_table_says(
        bytes in prop::collection::vec(prop::sample::select(vec![b'a', b' ', b'"', b'\\', 0x1f, 0x20, 0x7f, 0x80, 0xff, 0x00, 0x21, 0x5b, 0x5d]), 0..200),
        plain in 0usize..150,
    ) {
        // A plain prefix of any length, so the stop falls in any word.
        let mut text = vec![b'x'; plain];
        text.extend(bytes);
        let expected = text.iter().position(|&b| super::STRING_STOP[usize::from(b)]);
        let found = super::skipped_run(&text);
        match expected {
            // A control byte with no quote or backslash after it may read as
            // none (past the word run, `memchr2` finds nothing): the string
            // is declined either way.
            Some(at) if text[at] < 0x20 => prop_assert!(found == expected || found.is_none()),
            _ => prop_assert_eq!(found, expected),
        }
    }
}

/// A string's raw body of escapes and plain text, any piece anywhere.
fn raw_body() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "a",
        "plain text ",
        "\\n",
        "\\\"",
        "\\\\",
        "\\/",
        "\\b",
        "\\f",
        "\\r",
        "\\t",
        "\\u00e9",
        "\\u2028",
        "\\u0000",
        "\\ud83d\\ude00",
        "\\uDBFF\\uDFFF",
        "é",
        "漢",
        "\u{1F600}",
    ]);
    prop::collection::vec(piece, 0..120).prop_map(|pieces| pieces.concat())
}

#[test]
fn unescape_declines_what_no_cursor_takes() {
    for raw in [
        "\\x",
        "a\\",
        "\\u12",
        "\\ud800",
        "\\udc00",
        "\\ud800\\u0041",
        "\\ud800\\ud800",
        "\\u12g4",
    ] {
        assert_eq!(unescape(raw), None, "{raw:?}");
    }
    let long = format!("{}\\n{}", "x".repeat(300), "y".repeat(300));
    assert_eq!(
        unescape(&long).unwrap(),
        format!("{}\n{}", "x".repeat(300), "y".repeat(300))
    );
}

proptest! {
    #[test]
    fn unescape_reads_as_serde_reads(raw in raw_body(), plain in 0usize..70) {
        let raw = format!("{}{raw}", "x".repeat(plain));
        let text: String = serde_json::from_str(&format!("\"{raw}\"")).unwrap();
        prop_assert_eq!(unescape(&raw), Some(text), "{:?}", raw);
    }
}

proptest! {
    /// A run's end found eight bytes at a time is the first byte the
    /// table stops at, for any bytes (quotes, backslashes and control
    /// bytes among plain ones, and any length around a word's).
    #[test]
    fn the_first_stop_is_the_tables(
        bytes in proptest::collection::vec(
            prop_oneof![4 => b' '..=b'~', 1 => Just(b'"'), 1 => Just(b'\\'), 1 => 0u8..0x20, 1 => 0x80u8..=0xff],
            0..40,
        ),
    ) {
        let table = bytes.iter().position(|&b| super::STRING_STOP[usize::from(b)]);
        prop_assert_eq!(super::first_stop(&bytes), table);
    }
}
