//! The structural walk against the token walk, its oracle: the same answer
//! and the same end for any text, start, depth and spacing.

use proptest::prelude::*;
use serde_json::Value;

use super::super::{Cursor, MAX_SKIP_DEPTH, skip_both};

/// What a skip from `at` gives, and where it leaves the cursor: by
/// [`Cursor::skip_any`] and by [`Cursor::skip_any_by_tokens`]. And the walk
/// alone takes whatever the token walk takes from an opener: it falls back
/// on a decline only.
fn both<const SPACED: bool>(text: &str, at: usize, depth: usize) -> [(Option<()>, usize); 2] {
    let cursor = Cursor::<SPACED> { text, at };
    let alone = matches!(cursor.peek(), Some(b'{' | b'[')).then(|| cursor.walk(depth));
    let both = skip_both::<SPACED>(text, at, depth);
    if let (Some(alone), (Some(()), end)) = (alone, both[1]) {
        assert_eq!(
            alone,
            Some(end),
            "the walk alone from {at} at {depth}: {text:?}"
        );
    }
    both
}

/// How a document is spaced between its tokens.
#[derive(Debug, Clone, Copy)]
enum Style {
    /// None.
    Compact,
    /// Python's `json.dumps`: `", "` and `": "`.
    Python,
    /// Lines and tabs.
    Pretty,
}

/// `value` written in `style` (its strings and numbers as serde writes
/// them).
fn write(value: &Value, style: Style, indent: usize, out: &mut String) {
    let (comma, colon, line) = match style {
        Style::Compact => (",", ":", String::new()),
        Style::Python => (", ", ": ", String::new()),
        Style::Pretty => (",", " : ", format!("\r\n{}", "\t".repeat(indent + 1))),
    };
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i == 0 { "" } else { comma });
                out.push_str(&line);
                write(item, style, indent + 1, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, (key, item)) in members.iter().enumerate() {
                out.push_str(if i == 0 { "" } else { comma });
                out.push_str(&line);
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push_str(colon);
                write(item, style, indent + 1, out);
            }
            out.push_str(if members.is_empty() { "" } else { &line });
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Strings of any length up to a few blocks, of plain text, escapes
/// (serde escapes quotes, backslashes and controls; `\u` escapes of
/// surrogates come from the mutations) and characters past ASCII.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,8}",
        "[a-z \"\\\\\n\u{1}\u{e9}\u{1f600}]{0,40}",
        "[a-z .,\"]{30,200}",
        "[a-zA-Z0-9+/\\\\\n]{60,300}",
        "[a-z\u{e9}\u{1f600}\"\\\\]{0,150}",
    ]
}

/// Any JSON value, numbers with exponents and keys with escapes among
/// them.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (-1_000_000i32..1_000_000).prop_map(|k| Value::from(f64::from(k) / 1000.0)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(8, 96, 6, |inner| {
        let key = prop_oneof![
            6 => "[a-z_]{0,8}",
            1 => "[a-z\"\\\\\u{1}\u{1f600}]{0,12}",
            1 => "[a-z ]{40,90}",
            1 => "[a-z \"\\\\\u{1f600}]{60,200}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A byte a mutation writes: the grammar's, whitespace, escapes' and
/// numbers' letters, a control, characters past ASCII.
fn mutant() -> impl Strategy<Value = char> {
    prop::sample::select(vec![
        '"', '\\', '{', '}', '[', ']', ':', ',', ' ', '\n', '\t', '\r', '\u{1}', '\u{1f}', 'e',
        'E', '0', '1', '-', '.', '+', 'u', 'd', '8', 'n', 't', 'f', 'l', 'x', '/', '\u{e9}',
        '\u{7f}', '\u{2028}',
    ])
}

/// A document: a value written in a style after some padding (so its
/// blocks fall anywhere), its `é` and emoji escaped (`\u00e9`, a
/// surrogate pair) or not, then mutated: chars replaced, inserted or
/// removed at fractions of its length.
fn document() -> impl Strategy<Value = String> {
    let style = prop_oneof![
        Just(Style::Compact),
        Just(Style::Python),
        Just(Style::Pretty)
    ];
    let edit = (0.0f64..1.0, 0u8..3, mutant());
    (
        value(),
        style,
        0usize..70,
        any::<bool>(),
        prop::collection::vec(edit, 0..4),
    )
        .prop_map(|(value, style, pad, escape, edits)| {
            let mut text = " ".repeat(pad);
            write(&value, style, 0, &mut text);
            if escape {
                text = text
                    .replace('\u{e9}', "\\u00e9")
                    .replace('\u{1f600}', "\\ud83d\\ude00");
            }
            let mut chars: Vec<char> = text.chars().collect();
            for (at, how, c) in edits {
                let at = ((chars.len() as f64) * at) as usize;
                match how {
                    0 if at < chars.len() => chars[at] = c,
                    1 => chars.insert(at.min(chars.len()), c),
                    _ if at < chars.len() => drop(chars.remove(at)),
                    _ => {}
                }
            }
            chars.into_iter().collect()
        })
}

/// Starts in `text`: its containers' openers, any char boundary.
fn starts(text: &str, picks: &[usize]) -> Vec<usize> {
    let openers: Vec<usize> = text
        .bytes()
        .enumerate()
        .filter(|&(_, b)| b == b'{' || b == b'[')
        .map(|(at, _)| at)
        .collect();
    let mut starts = vec![0, text.len() - text.trim_start().len()];
    for &pick in picks {
        if !openers.is_empty() {
            starts.push(openers[pick % openers.len()]);
        }
        let mut at = pick % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        starts.push(at);
    }
    starts
}

/// Depths to skip at: small ones (nesting past them declines), the limit
/// and past it.
fn depth() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..6, Just(MAX_SKIP_DEPTH), 0..MAX_SKIP_DEPTH + 3]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_walk_skips_as_the_token_walk_does(
        text in document(),
        picks in prop::collection::vec(any::<usize>(), 3),
        depth in depth(),
    ) {
        for at in starts(&text, &picks) {
            let spaced = both::<true>(&text, at, depth);
            prop_assert_eq!(spaced[0], spaced[1], "spaced from {} at {}: {:?}", at, depth, text);
            let compact = both::<false>(&text, at, depth);
            prop_assert_eq!(compact[0], compact[1], "compact from {} at {}: {:?}", at, depth, text);
        }
    }

    #[test]
    fn pieces_near_json_skip_as_the_token_walk_does(
        pieces in prop::collection::vec(prop::sample::select(crate::fuzzing::JSON_PIECES.to_vec()), 0..40),
        pad in 0usize..70,
        depth in depth(),
    ) {
        // An opener first, so that the walk takes it.
        let text = format!("[{}{}", "\"x\",".repeat(pad % 20), pieces.concat());
        for at in [0, pad % 3] {
            let spaced = both::<true>(&text, at, depth);
            prop_assert_eq!(spaced[0], spaced[1], "spaced from {} at {}: {:?}", at, depth, text);
            let compact = both::<false>(&text, at, depth);
            prop_assert_eq!(compact[0], compact[1], "compact from {} at {}: {:?}", at, depth, text);
        }
    }
}

#[test]
fn keys_with_a_backslash_are_declined_across_blocks() {
    // An escape at every offset of a key of three blocks (in its first
    // block, wholly inside ones, its last), a number running past a
    // block's end after it; and the same key plain, taken.
    for pad in 0..200 {
        for escape in ["\\n", "ab"] {
            let key = format!("{}{escape}{}", "k".repeat(pad), "k".repeat(200 - pad));
            let text = format!(
                "{{\"{key}\":{}1234567890,\"b\":[{}12345678901234567890]}}",
                " ".repeat(pad % 7),
                "1,".repeat(pad)
            );
            for depth in [1, 2, MAX_SKIP_DEPTH] {
                let spaced = both::<true>(&text, 0, depth);
                assert_eq!(spaced[0], spaced[1], "{text:?}");
                assert_eq!(
                    spaced[0].0.is_some(),
                    escape == "ab" && depth > 1,
                    "{text:?}"
                );
                let compact = both::<false>(&text, 0, depth);
                assert_eq!(compact[0], compact[1], "{text:?}");
            }
        }
    }
}
