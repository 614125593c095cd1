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
