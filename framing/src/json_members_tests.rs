use proptest::prelude::*;
use serde_json::Value;

use super::*;

/// An object of three members and its index.
fn sample() -> (String, Vec<u32>) {
    let (object, index) = write_indexed(&[
        ("tools", r#"[{"type":"function","name":"é"}]"#),
        ("", "\"ü\""),
        ("temperature", "0.5"),
    ]);
    (String::from_utf8(object).unwrap(), index)
}

#[test]
fn the_index_finds_each_member_as_written() {
    let (object, index) = sample();
    assert_eq!(
        object,
        r#"{"tools":[{"type":"function","name":"é"}],"":"ü","temperature":0.5}"#
    );
    assert_eq!(index.len(), 12);
    assert_eq!(
        members(&object, &index).unwrap(),
        [
            ("tools", r#"[{"type":"function","name":"é"}]"#),
            ("", "\"ü\""),
            ("temperature", "0.5"),
        ]
    );
}

#[test]
fn no_members_is_an_empty_object_and_no_index() {
    let (object, index) = write_indexed::<&[u8]>(&[]);
    assert_eq!(object, b"{}");
    assert!(index.is_empty());
    // An empty index is "not given": the reader walks the object.
    assert_eq!(members("{}", &index), None);
}

#[test]
fn an_index_that_does_not_fit_the_object_is_refused() {
    let (object, index) = sample();
    let with = |edit: &dyn Fn(&mut Vec<u32>)| {
        let mut index = index.clone();
        edit(&mut index);
        members(&object, &index)
    };
    // Not four offsets a member.
    assert_eq!(with(&|i| i.truncate(11)), None);
    // Past the object's end.
    assert_eq!(with(&|i| i[11] = object.len() as u32 + 1), None);
    // Out of order: a value before its key, members overlapping.
    assert_eq!(with(&|i| i.swap(1, 2)), None);
    assert_eq!(with(&|i| i[4] = i[2] + 1), None);
    assert_eq!(with(&|i| i[0] = 0), None);
    // A key not between quotes, or one holding a quote.
    assert_eq!(with(&|i| i[0] += 1), None);
    assert_eq!(with(&|i| i[1] -= 1), None);
    assert_eq!(with(&|i| i[1] = i[4] + 2), None);
    // A value's end inside `é`, `ü`'s two bytes.
    let inside = |c: char| (object.find(c).unwrap() + 1) as u32;
    assert_eq!(with(&|i| i[3] = inside('é')), None);
    assert_eq!(with(&|i| i[6] = inside('ü')), None);
    // What was written is still taken.
    assert!(with(&|_| {}).is_some());
}

#[test]
fn a_key_with_a_control_byte_or_backslash_is_refused() {
    for key in ["a\\nb", "a\u{1}b"] {
        let (object, index) = write_indexed(&[(key, b"1")]);
        assert_eq!(members(std::str::from_utf8(&object).unwrap(), &index), None);
    }
}

/// JSON values of every kind, some with multi-byte characters.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        any::<i32>().prop_map(|n| n.to_string()),
        "[a-zé😀 ]{0,12}".prop_map(|s| format!("\"{s}\"")),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-z]{1,4}", inner), 0..4).prop_map(|v| {
                let members: Vec<String> = v.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn what_is_written_reads_back_through_its_index(
        written in prop::collection::vec(("[a-z_é]{0,8}", value()), 0..8),
    ) {
        let members_in: Vec<(&str, &[u8])> =
            written.iter().map(|(k, v)| (k.as_str(), v.as_bytes())).collect();
        let (object, index) = write_indexed(&members_in);
        let object = String::from_utf8(object).unwrap();
        // The object is JSON, its members the ones given.
        let parsed: Value = serde_json::from_str(&object).unwrap();
        prop_assert!(parsed.is_object());
        let read = members(&object, &index);
        if written.is_empty() {
            prop_assert_eq!(read, None);
        } else {
            let expected: Vec<(&str, &str)> =
                written.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            prop_assert_eq!(read, Some(expected));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Any index over any text: no panic, and what is taken holds to the
    /// index's promise (keys without quotes or escapes, in order).
    #[test]
    fn any_index_over_any_text_is_taken_or_refused(
        text in "[\"a:{}é\\\\]{0,24}",
        index in prop::collection::vec(0u32..28, 0..12),
    ) {
        if let Some(members) = members(&text, &index) {
            prop_assert_eq!(members.len() * 4, index.len());
            for (key, value) in members {
                prop_assert!(!key.contains(['"', '\\']));
                prop_assert!(!value.is_empty());
            }
        }
    }
}
