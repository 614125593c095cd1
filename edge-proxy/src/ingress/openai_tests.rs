use proptest::prelude::*;

use super::*;

#[test]
fn chat_requests_become_normalized_input() {
    let body = br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},
        "temperature":0.5,"messages":[{"role":"system","content":"be brief"},
        {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}],"name":"bob"}]}"#;
    let request = parse(Bytes::from_static(body)).unwrap();
    assert_eq!(request.model, "m");
    assert!(request.stream && request.include_usage);
    let input = chat_input(&request).unwrap();
    assert_eq!(input.messages.len(), 2);
    assert_eq!(input.messages[1].content, "hi there");
    assert_eq!(&input.messages[1].extra_json[..], br#"{"name":"bob"}"#);
    assert_eq!(&input.parameters_json[..], br#"{"temperature":0.5}"#);
}

#[test]
fn bad_requests_are_typed_400s() {
    for (body, code) in [
        (&b"{nope"[..], "invalid_json"),
        (b"[1]", "invalid_request"),
        (b"{}", "missing_model"),
        (br#"{"model":7}"#, "invalid_model"),
        (br#"{"model":"m","stream":"yes"}"#, "invalid_stream"),
    ] {
        let error = parse(Bytes::from_static(body)).unwrap_err();
        assert_eq!((error.status, error.code), (400, code), "{body:?}");
    }
    let no_messages = parse(Bytes::from_static(br#"{"model":"m","messages":[]}"#)).unwrap();
    assert_eq!(
        chat_input(&no_messages).unwrap_err().code,
        "missing_messages"
    );
    let image = parse(Bytes::from_static(
        br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}"#,
    ))
    .unwrap();
    assert_eq!(chat_input(&image).unwrap_err().code, "unsupported_content");
}

#[test]
fn routing_reads_its_fields_like_a_whole_object_and_keeps_none_of_the_rest() {
    // Later duplicates win; other members of any shape are skipped.
    let body = Bytes::from_static(
        br#"{"model":"a","messages":[{"role":"user","content":"x\u00e9"}],"stream":false,
            "tools":[{"deep":[[{"x":null}]]}],"model":"b","stream":true,
            "stream_options":{"include_usage":true,"other":1}}"#,
    );
    let request = parse(body.clone()).unwrap();
    assert_eq!(request.model, "b");
    assert!(request.stream && request.include_usage);
    assert_eq!(request.body, body, "the body is the client's bytes");
    let object = request.object().unwrap();
    assert_eq!(object["model"], "b");
    assert_eq!(object["messages"][0]["content"], "xé");
    // An escaped member name is still the member; null is not a model.
    for (body, code) in [
        (&br#"{"mod\u0065l":null}"#[..], "invalid_model"),
        (br#"{"model":"m","stream":null,"stream_options":7}"#, ""),
        (br#"{"model":"m"} trailing"#, "invalid_json"),
        (br#""just a string""#, "invalid_request"),
        (b"", "invalid_json"),
    ] {
        match parse(Bytes::from_static(body)) {
            Ok(request) => {
                assert_eq!(code, "", "{body:?}");
                assert!(!request.stream && !request.include_usage);
            }
            Err(error) => assert_eq!((error.status, error.code), (400, code), "{body:?}"),
        }
    }
    // Skipped members keep serde_json's nesting limit (128).
    let deep = format!(
        r#"{{"model":"m","x":{}1{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let error = parse(Bytes::from(deep)).unwrap_err();
    assert_eq!((error.status, error.code), (400, "invalid_json"));
}

#[test]
fn a_committed_request_lets_go_of_its_body_and_keeps_its_routing() {
    let body = Bytes::from(br#"{"model":"m","stream":true,"messages":[]}"#.to_vec());
    let mut request = parse(body.clone()).unwrap();
    assert!(!body.is_unique());
    request.release_body();
    assert!(body.is_unique(), "the parsed request still holds the body");
    assert_eq!((request.model.as_str(), request.stream), ("m", true));
}

#[test]
fn responses_requests_become_normalized_input() {
    let request = parse(Bytes::from_static(
        br#"{"model":"m","instructions":"sys","input":"hello","max_output_tokens":9}"#,
    ))
    .unwrap();
    let input = responses_input(&request).unwrap();
    assert_eq!(input.messages.len(), 2);
    assert_eq!(input.messages[0].role, "system");
    assert_eq!(input.messages[1].content, "hello");
    assert_eq!(&input.parameters_json[..], br#"{"max_tokens":9}"#);
}

#[test]
fn usage_breakdowns_appear_only_when_reported() {
    let plain = chat_usage(&Usage {
        input_tokens: 3,
        output_tokens: 4,
        ..Usage::default()
    });
    assert_eq!(plain["total_tokens"], 7);
    assert!(plain.get("completion_tokens_details").is_none());
    let detailed = chat_usage(&Usage {
        reasoning_tokens: Some(2),
        cached_input_tokens: Some(1),
        ..Usage::default()
    });
    assert_eq!(detailed["completion_tokens_details"]["reasoning_tokens"], 2);
    assert_eq!(detailed["prompt_tokens_details"]["cached_tokens"], 1);
}

#[test]
fn a_stream_asks_for_usage_with_the_clients_bytes_kept() {
    // Key order, whitespace, escapes and numbers as a client may send them;
    // a tree would sort, compact and re-escape all of it.
    for body in [
        &br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#[..],
        b"{\n  \"stream\": true,\n  \"model\": \"m\",\n  \"messages\": [{\"role\": \"user\", \"content\": \"x\\u00e9\\n\\\"q\\\"\"}],\n  \"temperature\": 1.0e0\n}\n\t ",
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"日本語 😀"}],"n":1}"#
            .as_bytes(),
    ] {
        let request = parse(Bytes::copy_from_slice(body)).unwrap();
        assert!(!request.has_stream_options);
        let asked = request.body_asking_usage().unwrap();
        let close = body.iter().rposition(|&b| b == b'}').unwrap();
        let expected = [
            &body[..close],
            b",\"stream_options\":{\"include_usage\":true}",
            &body[close..],
        ]
        .concat();
        assert_eq!(&asked[..], &expected[..], "{:?}", String::from_utf8_lossy(body));
        // The same object the tree path makes.
        let mut object = request.object().unwrap();
        object.insert("stream_options".into(), json!({"include_usage": true}));
        let parsed: Value = serde_json::from_slice(&asked).unwrap();
        assert_eq!(parsed, Value::Object(object));
        assert!(parse(asked).unwrap().include_usage);
    }
}

#[test]
fn a_stream_with_its_own_stream_options_gets_include_usage_set() {
    for (options, expected) in [
        (r#"{"include_usage":false}"#, json!({"include_usage": true})),
        (r#"{"other":1}"#, json!({"other": 1, "include_usage": true})),
        ("null", json!({"include_usage": true})),
    ] {
        let body =
            format!(r#"{{"model":"m","stream":true,"stream_options":{options},"messages":[]}}"#);
        let request = parse(Bytes::from(body)).unwrap();
        assert!(request.has_stream_options && !request.include_usage);
        let asked: Value = serde_json::from_slice(&request.body_asking_usage().unwrap()).unwrap();
        assert_eq!(asked["stream_options"], expected, "{options}");
        assert_eq!(asked["model"], "m");
    }
}

#[test]
fn a_member_is_added_last_to_any_object() {
    let member = br#""k":1"#;
    for (object, expected) in [
        (&b"{}"[..], &br#"{"k":1}"#[..]),
        (b" { \n} \n", b" { \n\"k\":1} \n"),
        (br#"{"a":{}}"#, br#"{"a":{},"k":1}"#),
        (br#"{"a":[]} "#, br#"{"a":[],"k":1} "#),
    ] {
        let with = with_last_member(object, member).unwrap();
        assert_eq!(&with[..], expected);
        serde_json::from_slice::<Value>(&with).unwrap();
    }
    for not_an_object in [&b""[..], b"  ", b"[1]", b"\"}x\""] {
        assert_eq!(with_last_member(not_an_object, member), None);
    }
}

#[test]
fn chat_usage_serializes_as_the_tree_it_replaced() {
    for (reasoning, cached) in [
        (None, None),
        (Some(3), None),
        (None, Some(4)),
        (Some(3), Some(4)),
    ] {
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 20,
            reasoning_tokens: reasoning,
            cached_input_tokens: cached,
        };
        let mut tree = serde_json::json!({
            "prompt_tokens": 10,
            "completion_tokens": 20,
            "total_tokens": 30,
        });
        if let Some(r) = reasoning {
            tree["completion_tokens_details"] = serde_json::json!({ "reasoning_tokens": r });
        }
        if let Some(c) = cached {
            tree["prompt_tokens_details"] = serde_json::json!({ "cached_tokens": c });
        }
        let typed = serde_json::to_string(&ChatUsage::of(&usage)).unwrap();
        assert_eq!(typed, tree.to_string());
        assert_eq!(chat_usage(&usage), tree);
    }
}

#[test]
fn usage_writers_are_serdes() {
    // Counts of every width, each breakdown present or not: the hand
    // writers' bytes are serde's for the same struct.
    for (reasoning, cached) in [
        (None, None),
        (Some(0), None),
        (None, Some(u64::MAX)),
        (Some(7), Some(1_000_000)),
    ] {
        let usage = Usage {
            input_tokens: 1_234_567,
            output_tokens: 0,
            reasoning_tokens: reasoning,
            cached_input_tokens: cached,
        };
        let mut written = Vec::new();
        ChatUsage::of(&usage).write(&mut JsonOut(&mut written));
        let serde = serde_json::to_vec(&ChatUsage::of(&usage)).unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            String::from_utf8(serde).unwrap()
        );
        let mut written = Vec::new();
        ResponsesUsage::of(&usage).write(&mut JsonOut(&mut written));
        let serde = serde_json::to_vec(&ResponsesUsage::of(&usage)).unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            String::from_utf8(serde).unwrap()
        );
    }
}

/// The quick reader's routing fields of a body.
fn quick_routing_fields(body: &str) -> Option<RoutingFields> {
    quick_read(body).map(|(fields, _)| fields)
}

/// serde's reading of a body's routing fields: the quick reader's oracle.
fn serde_fields(body: &str) -> Option<RoutingFields> {
    read_json(body.as_bytes(), PhantomData).ok()
}

#[test]
fn common_bodies_are_routed_by_the_quick_reader_as_serde_reads_them() {
    let prompt = "a long prompt, \"quoted\",\nwith lines and \u{e9} ".repeat(2_000);
    let python = format!(
        r#"{{"messages": [{{"role": "user", "content": {}}}], "model": "gpt-4o", "stream": true, "stream_options": {{"include_usage": true}}, "temperature": 0.7, "max_tokens": -1}}"#,
        serde_json::to_string(&prompt).unwrap()
    );
    for body in [
        python.as_str(),
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        "{\n  \"model\": \"m\",\n  \"stream\": null,\n  \"input\": \"\\u00e9\"\n}\n",
        r#"{"model":"a","model":"b","stream":false}"#,
        r#"{"model":7,"stream":"yes"}"#,
        r#"{"model":"gpt\u002d4o \"x\"","stream":true,"stream_options":null}"#,
        r#"{"model":"","stream":[true],"stream_options":"no"}"#,
        r#"{}"#,
    ] {
        let quick = quick_routing_fields(body).unwrap_or_else(|| panic!("declined {body}"));
        assert_eq!(Some(quick), serde_fields(body), "{body}");
    }
    let request = parse(Bytes::from(python)).unwrap();
    assert_eq!(request.model, "gpt-4o");
    assert!(request.stream && request.include_usage && request.has_stream_options);
}

#[test]
fn the_quick_reader_leaves_the_rest_to_serde() {
    for body in [
        r#"{"mod\u0065l":"m"}"#,
        r#"{"model":"m","x":"\ud83d"}"#,
        r#"{"model":"m","x":1e3}"#,
        r#"[{"model":"m"}]"#,
        r#"{"model":"m"} x"#,
        "{\"model\":\"m\",\"x\":\"a\u{1}\"}",
        &format!(
            r#"{{"model":"m","x":{}{}}}"#,
            "[".repeat(40),
            "]".repeat(40)
        ),
    ] {
        assert_eq!(quick_routing_fields(body), None, "{body}");
    }
    // Read by serde, as before.
    let request = parse(Bytes::from_static(br#"{"mod\u0065l":"m","x":1e3}"#)).unwrap();
    assert_eq!(request.model, "m");
    // A surrogate pair (an emoji as Python's `json.dumps` writes it) is
    // taken; a lone surrogate, which serde refuses, is not.
    let paired = r#"{"model":"m","x":"\ud83d\ude00"}"#;
    assert!(quick_routing_fields(paired).is_some());
    assert!(parse(Bytes::from_static(br#"{"model":"m","x":"\ud83d"}"#)).is_err());
}

/// Request bodies of the routing keys and others, compact or pretty.
fn request_body() -> impl Strategy<Value = String> {
    let keys = vec![
        "model",
        "stream",
        "stream_options",
        "include_usage",
        "messages",
        "x",
    ];
    let value = json_value();
    (
        prop::collection::btree_map(prop::sample::select(keys), value, 0..5),
        any::<bool>(),
    )
        .prop_map(|(members, pretty)| {
            let object = Value::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            );
            if pretty {
                serde_json::to_string_pretty(&object).unwrap()
            } else {
                object.to_string()
            }
        })
}

/// JSON values with strings of any characters and numbers of every kind.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{0,14}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A common body with up to three edits: a piece put in, or bytes taken
/// out, anywhere.
fn edited_body() -> impl Strategy<Value = String> {
    let bases = prop::sample::select(vec![
        r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}"#,
        r#"{"model":"m","stream_options":{"include_usage":true},"temperature":0.5}"#,
    ]);
    with_edits(
        bases.prop_map(str::to_owned),
        &["1e5", "\"model\":", "\"stream\":", "\"model\":\"n\","],
    )
}

/// `bodies` with up to three edits each: a piece of JSON (`JSON_PIECES`
/// and `extra`) put in, or bytes taken out, anywhere.
pub(super) fn with_edits(
    bodies: impl Strategy<Value = String>,
    extra: &'static [&'static str],
) -> impl Strategy<Value = String> {
    let mut pieces = framing::fuzzing::JSON_PIECES.to_vec();
    pieces.extend(extra);
    let edit = (
        any::<prop::sample::Index>(),
        0usize..4,
        prop::sample::select(pieces),
    );
    (bodies, prop::collection::vec(edit, 1..4)).prop_map(|(mut body, edits)| {
        for (at, cut, piece) in edits {
            let at = at.index(body.len() + 1);
            framing::fuzzing::edit(&mut body, at, cut, piece);
        }
        body
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

    #[test]
    fn any_body_is_routed_as_serde_routes_it(body in request_body()) {
        if let Some(quick) = quick_routing_fields(&body) {
            proptest::prop_assert_eq!(Some(quick), serde_fields(&body), "{}", body);
        }
    }

    #[test]
    fn an_edited_body_is_routed_as_serde_routes_it_or_declined(body in edited_body()) {
        if let Some(quick) = quick_routing_fields(&body) {
            proptest::prop_assert_eq!(Some(quick), serde_fields(&body), "{}", body);
        }
    }
}
