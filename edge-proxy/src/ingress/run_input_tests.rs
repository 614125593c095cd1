use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::ingress::openai::parse;

/// A message's role, which the wire carries as bytes.
fn role_of(message: &ChatMessage) -> &str {
    std::str::from_utf8(&message.role).expect("a UTF-8 role")
}

/// A chat body's run input, its texts plain (as a Node that does not take
/// escaped texts gets them).
fn input(body: &str) -> Result<RunInput, ApiError> {
    chat_input(&parse(Bytes::from(body.to_owned())).expect("routing")).map(plain)
}

/// `input` with its texts unescaped when they are escaped.
fn plain(mut input: RunInput) -> RunInput {
    framing::frame::unescape_content(&mut input).expect("escaped texts a cursor checked");
    input
}

#[test]
fn a_text_without_escapes_is_a_slice_of_the_clients_body() {
    let prompt = "p".repeat(100_000);
    let body = Bytes::from(format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{prompt}"}}]}}"#
    ));
    let input = chat_input(&parse(body.clone()).unwrap()).unwrap();
    let text = &input.messages[0].content;
    assert_eq!(text, prompt.as_str());
    assert!(
        body.as_ptr_range().contains(&text.as_ptr()),
        "the text was copied"
    );
}

#[test]
fn a_text_with_escapes_is_unescaped() {
    let input = input(r#"{"model":"m","messages":[{"role":"user","content":"a\n\"q\" \u00e9"}]}"#);
    assert_eq!(input.unwrap().messages[0].content, "a\n\"q\" é");
}

#[test]
fn shapes_a_run_cannot_take_are_typed_400s() {
    for (messages, code) in [
        ("7", "missing_messages"),
        ("null", "missing_messages"),
        (r#""hi""#, "missing_messages"),
        (r#"{"role":"user"}"#, "missing_messages"),
        ("[]", "missing_messages"),
        ("[1]", "invalid_message"),
        ("[null]", "invalid_message"),
        (r#"["hi"]"#, "invalid_message"),
        ("[[{}]]", "invalid_message"),
        (r#"[{"content":"x"}]"#, "invalid_message"),
        (r#"[{"role":1,"content":"x"}]"#, "invalid_message"),
        (r#"[{"role":"user","content":1}]"#, "invalid_content"),
        (r#"[{"role":"user","content":true}]"#, "invalid_content"),
        (
            r#"[{"role":"user","content":{"text":"x"}}]"#,
            "invalid_content",
        ),
        (
            r#"[{"role":"user","content":[{"type":"image_url"}]}]"#,
            "unsupported_content",
        ),
    ] {
        let error = input(&format!(r#"{{"model":"m","messages":{messages}}}"#)).unwrap_err();
        assert_eq!((error.status, error.code), (400, code), "{messages}");
    }
    let missing = input(r#"{"model":"m"}"#).unwrap_err();
    assert_eq!(missing.code, "missing_messages");
}

#[test]
fn later_duplicates_win_and_routing_members_are_not_parameters() {
    let input = input(
        r#"{"temperature":1,"messages":[{"role":"a","content":"x"}],"model":"m",
            "temperature":2,"stream":false,"stream_options":null,
            "messages":[{"role":"user","content":"y","content":"z","name":"n","name":"o"}]}"#,
    )
    .unwrap();
    assert_eq!(input.messages.len(), 1);
    let message = &input.messages[0];
    assert_eq!(
        (role_of(message), &message.content[..]),
        ("user", &b"z"[..])
    );
    assert_eq!(&message.extra_json[..], br#"{"name":"o"}"#);
    assert_eq!(&input.parameters_json[..], br#"{"temperature":2}"#);
}

#[test]
fn a_responses_request_becomes_instructions_then_its_input() {
    let prompt = "p".repeat(70_000);
    let body = Bytes::from(format!(
        r#"{{"input":"{prompt}","model":"m","instructions":"be \"brief\"","top_p":1,
            "tools":[{{"deep":[[]]}}],"max_output_tokens":5,"max_output_tokens":9}}"#
    ));
    let input = responses_input(&parse(body.clone()).unwrap()).unwrap();
    assert!(
        body.as_ptr_range()
            .contains(&input.messages[1].content.as_ptr())
    );
    let input = plain(input);
    let texts: Vec<_> = input
        .messages
        .iter()
        .map(|m| (role_of(m), &m.content[..]))
        .collect();
    assert_eq!(
        texts,
        [
            ("system", &b"be \"brief\""[..]),
            ("user", prompt.as_bytes())
        ]
    );
    // As the client wrote them, in its order, a later duplicate in the
    // first's place.
    assert_eq!(&input.parameters_json[..], br#"{"top_p":1,"max_tokens":9}"#);

    let items = parse(Bytes::from_static(
        br#"{"model":"m","instructions":7,"input":[{"type":"message","role":"user",
            "content":[{"type":"input_text","text":"a"},{"type":"output_text","text":"b"}]},
            {"role":"assistant","content":null}]}"#,
    ))
    .unwrap();
    let input = responses_input(&items).unwrap();
    let texts: Vec<_> = input
        .messages
        .iter()
        .map(|m| (role_of(m), &m.content[..]))
        .collect();
    assert_eq!(texts, [("user", &b"ab"[..]), ("assistant", &b""[..])]);
    assert!(input.messages.iter().all(|m| m.extra_json.is_empty()));
}

#[test]
fn responses_shapes_a_run_cannot_take_are_typed_400s() {
    for (input, code) in [
        ("7", "missing_input"),
        ("null", "missing_input"),
        (r#"{"role":"user"}"#, "missing_input"),
        ("[1]", "invalid_input"),
        (r#"[{"content":"x"}]"#, "invalid_input"),
        (r#"[{"role":1,"content":"x"}]"#, "invalid_input"),
        (r#"[{"role":"user","content":{}}]"#, "invalid_content"),
        (
            r#"[{"role":"user","content":[{"type":"text","text":"x"}]}]"#,
            "unsupported_content",
        ),
    ] {
        let body = format!(r#"{{"model":"m","input":{input}}}"#);
        let error = responses_input(&parse(Bytes::from(body)).unwrap()).unwrap_err();
        assert_eq!((error.status, error.code), (400, code), "{input}");
    }
}

/// What a body's messages and parameters are, read from a whole tree:
/// the reading this module replaced, kept as the oracle.
fn from_tree(body: &Value) -> (Vec<(String, String, String)>, String) {
    let mut object = body.as_object().unwrap().clone();
    let messages = object.remove("messages").unwrap();
    let messages = messages.as_array().unwrap().iter().map(|m| {
        let mut fields = m.as_object().unwrap().clone();
        let role = fields.remove("role").unwrap().as_str().unwrap().to_owned();
        let content = match fields.remove("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text,
            Some(Value::Array(parts)) => {
                parts.iter().map(|p| p["text"].as_str().unwrap()).collect()
            }
            Some(other) => panic!("{other}"),
        };
        let extra = if fields.is_empty() {
            String::new()
        } else {
            Value::Object(fields).to_string()
        };
        (role, content, extra)
    });
    let messages = messages.collect();
    for routing in ROUTING {
        object.remove(routing);
    }
    (messages, Value::Object(object).to_string())
}

fn content() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        any::<String>().prop_map(|t| Some(json!(t))),
        "[a-z \\n\"\\\\]{0,20}".prop_map(|t| Some(json!(t))),
        Just(None),
        Just(Some(Value::Null)),
        prop::collection::vec(any::<String>(), 0..3).prop_map(|parts| {
            Some(Value::Array(
                parts
                    .into_iter()
                    .map(|t| json!({"type": "text", "text": t}))
                    .collect(),
            ))
        }),
    ]
}

proptest! {
    /// Any messages (texts of any characters, escaped or not, null,
    /// absent, in parts; extras or none) and parameters come out as a
    /// parsed tree of the same body gives them.
    #[test]
    fn the_input_is_what_a_whole_tree_gives(
        messages in prop::collection::vec(
            ("[a-z]{1,8}", content(), prop::option::of(any::<String>())), 1..4),
        temperature in prop::option::of(0u32..3),
    ) {
        let messages: Vec<Value> = messages.into_iter().map(|(role, content, name)| {
            let mut m = json!({"role": role});
            if let Some(content) = content { m["content"] = content; }
            if let Some(name) = name { m["name"] = json!(name); }
            m
        }).collect();
        let mut body = json!({"model": "m", "stream": true, "messages": messages});
        if let Some(t) = temperature { body["temperature"] = json!(t); }
        let got = input(&body.to_string()).unwrap();
        let got_messages: Vec<_> = got.messages.iter().map(|m| (
            role_of(m).to_owned(),
            String::from_utf8(m.content.to_vec()).unwrap(),
            String::from_utf8(m.extra_json.to_vec()).unwrap(),
        )).collect();
        let (messages, parameters) = from_tree(&body);
        prop_assert_eq!(got_messages, messages);
        prop_assert_eq!(String::from_utf8(got.parameters_json.to_vec()).unwrap(), parameters);
    }
}

/// The quick reader's chat input of `body`, and serde's when the quick
/// reader took it (`None` when it declined, or routing refused the body).
fn quick_and_serde(body: &str) -> Option<(RunInput, Result<RunInput, ApiError>)> {
    quick_and_serde_of(body, quick::chat_input, chat_input_by_serde)
}

/// [`quick_and_serde`] for a Responses body.
fn quick_and_serde_responses(body: &str) -> Option<(RunInput, Result<RunInput, ApiError>)> {
    quick_and_serde_of(body, quick::responses_input, responses_input_by_serde)
}

/// The input `quick` makes of `body` from routing's spans, its texts
/// plain and its JSON as serde writes it ([`canonical`]), and `serde`'s,
/// when `quick` took it.
fn quick_and_serde_of(
    body: &str,
    quick: fn(&Bytes, &InputSpans) -> Option<RunInput>,
    serde: fn(&ParsedRequest) -> Result<RunInput, ApiError>,
) -> Option<(RunInput, Result<RunInput, ApiError>)> {
    let request = parse(Bytes::from(body.to_owned())).ok()?;
    let input = quick(&request.body, request.input_spans.as_deref()?)?;
    Some((canonical(plain(input)), serde(&request)))
}

/// `input` with its parameters and extras as serde writes them: the quick
/// reader keeps the JSON text the client wrote (order, spaces, a number's
/// digits), which means the same. The parameters' index (the quick
/// reader's only) is checked against the object and dropped.
fn canonical(mut input: RunInput) -> RunInput {
    check_index(&input);
    input.parameters_index.clear();
    let canonical = |json: &Bytes| match json.is_empty() {
        true => Bytes::new(),
        false => serde_json::from_slice::<Value>(json)
            .expect("the quick reader writes JSON")
            .to_string()
            .into(),
    };
    input.parameters_json = canonical(&input.parameters_json);
    for message in &mut input.messages {
        message.extra_json = canonical(&message.extra_json);
    }
    input
}

/// The parameters' index finds each member of the object, as serde reads
/// them; an object without members has none.
fn check_index(input: &RunInput) {
    let object = std::str::from_utf8(&input.parameters_json).expect("UTF-8");
    let parsed: serde_json::Map<String, Value> =
        serde_json::from_str(object).expect("the quick reader writes an object");
    let Some(members) = framing::json_members::members(object, &input.parameters_index) else {
        assert!(parsed.is_empty(), "no index for {object}");
        return;
    };
    assert_eq!(members.len(), parsed.len(), "{object}");
    for (key, value) in members {
        let value: Value = serde_json::from_str(value).expect("a member's value");
        assert_eq!(parsed.get(key), Some(&value), "{key} in {object}");
    }
}

/// The quick reader's input of a request, from the spans routing found.
fn quick_input(request: &ParsedRequest) -> Option<RunInput> {
    quick::chat_input(&request.body, request.input_spans.as_deref()?)
}

#[test]
fn the_quick_reader_leaves_other_shapes_to_serde() {
    for declined in [
        // Content parts, a message's escaped key, a role not a string.
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":["a"]}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"a","na\u006de":"n"}]}"#,
        r#"{"model":"m","messages":[{"role":1,"content":"a"}]}"#,
        r#"{"model":"m","messages":[{"content":"a"}]}"#,
        // No messages, an empty list, not a list.
        r#"{"model":"m"}"#,
        r#"{"model":"m","messages":[]}"#,
        r#"{"model":"m","messages":"a"}"#,
        // A lone surrogate, an exponent.
        r#"{"model":"m","messages":[{"role":"user","content":"\ud83d"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"a"}],"temperature":1e0}"#,
    ] {
        assert!(quick_and_serde(declined).is_none(), "{declined}");
    }
    // Something after the object (which routing refuses first).
    let trailing = r#"{"model":"m","messages":[{"role":"user","content":"a"}]} x"#;
    assert!(parse(Bytes::from(trailing)).is_err());
    // Declined, then refused by serde as before.
    let lone = r#"{"model":"m","messages":[{"role":"user","content":"\ud83d"}]}"#;
    assert!(parse(Bytes::from(lone)).is_err());
    // A pair (an emoji as Python's `json.dumps` writes it) is taken, as
    // the client escaped it.
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi \ud83d\ude00!"}]}"#;
    let request = parse(Bytes::from(body)).unwrap();
    let escaped = quick_input(&request).expect("taken");
    assert_eq!(escaped.messages[0].content, r"hi \ud83d\ude00!");
    let (quick, serde) = quick_and_serde(body).expect("taken");
    assert_eq!(quick, serde.unwrap());
    assert_eq!(quick.messages[0].content, "hi 😀!");
}

#[test]
fn the_quick_reader_takes_the_common_shape() {
    let prose = "The \\\"quick\\\" brown fox jumps over the lazy dog, twice.\\n".repeat(40);
    let body = format!(
        "{{\"model\": \"m\", \"messages\": [{{\"role\": \"system\", \"content\": \"be brief \\u00e9\"}}, \
         {{\"content\": null, \"role\": \"user\"}}, {{\"role\": \"user\", \"content\": \"{prose}\"}}], \
         \"stream\": true, \"temperature\": 0.5, \"max_tokens\": 16}}"
    );
    // The texts as the client escaped them, slices of its body.
    let request = parse(Bytes::from(body.clone())).unwrap();
    let (bytes, escaped) = (&request.body, quick_input(&request).expect("taken"));
    assert!(escaped.escaped_content);
    assert_eq!(escaped.messages[0].content, "be brief \\u00e9");
    let range = bytes.as_ptr_range();
    assert!(range.contains(&escaped.messages[2].content.as_ptr()));
    // So are the roles.
    assert!(range.contains(&escaped.messages[0].role.as_ptr()));
    let (quick, serde) = quick_and_serde(&body).expect("taken");
    assert_eq!(quick, serde.unwrap());
    assert_eq!(quick.messages[0].content, "be brief é");
    assert_eq!(quick.messages[1].content, "");
    assert!(quick.messages[2].content.starts_with(b"The \"quick\""));
    assert_eq!(
        &escaped.parameters_json[..],
        br#"{"temperature":0.5,"max_tokens":16}"#
    );
    assert_eq!(
        &quick.parameters_json[..],
        br#"{"max_tokens":16,"temperature":0.5}"#
    );
}

#[test]
fn thousands_of_parameters_are_each_written_once() {
    // A client may send any number of members; each key once, the last
    // value, as serde reads the body.
    let parameters: Vec<String> = (0..20_000)
        .map(|i| format!(r#""p{}":{i}"#, i % 5_000))
        .collect();
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],{}}}"#,
        parameters.join(",")
    );
    let request = parse(Bytes::from(body.clone())).unwrap();
    let quick = quick_input(&request).expect("taken");
    let written: Value = serde_json::from_slice(&quick.parameters_json).unwrap();
    assert_eq!(written.as_object().unwrap().len(), 5_000);
    assert_eq!(written["p4999"], 19_999);
    let (quick, serde) = quick_and_serde(&body).expect("taken");
    assert_eq!(quick, serde.unwrap());
}

#[test]
fn an_agents_turn_is_taken_its_extras_and_tools_as_the_client_wrote_them() {
    let prompt = "Plan the \\\"trip\\\".\\n".repeat(30);
    let body = format!(
        r#"{{"model":"m","tools":[{{"type":"function","function":{{"name":"get_weather",
        "parameters":{{"type":"object"}}}}}}],"messages":[
        {{"role":"user","content":"{prompt}"}},
        {{"role":"assistant","content":null,"tool_calls":[{{"id":"call_1","type":"function",
          "function":{{"name":"get_weather","arguments":"{{\"city\":\"Paris\"}}"}}}}]}},
        {{"tool_call_id":"call_1","role":"tool","content":"{{\"temp_c\": 21}}"}},
        {{"role":"user","name":"b","content":"again?","name":"ann"}}]}}"#
    );
    let request = parse(Bytes::from(body.clone())).unwrap();
    let escaped = quick_input(&request).expect("taken");
    // The long text is still a slice of the client's body.
    assert!(
        request
            .body
            .as_ptr_range()
            .contains(&escaped.messages[0].content.as_ptr())
    );
    let (quick, serde) = quick_and_serde(&body).expect("taken");
    assert_eq!(quick, serde.unwrap());
    let extras: Vec<_> = quick.messages.iter().map(|m| &m.extra_json[..]).collect();
    assert_eq!(
        extras,
        [
            &b""[..],
            br#"{"tool_calls":[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"get_weather"},"id":"call_1","type":"function"}]}"#,
            br#"{"tool_call_id":"call_1"}"#,
            br#"{"name":"ann"}"#,
        ]
    );
    assert_eq!(quick.messages[1].content, "");
    assert_eq!(quick.messages[2].content, r#"{"temp_c": 21}"#);
    // Not parsed and printed again: the client's own JSON text.
    let tools = r#"[{"type":"function","function":{"name":"get_weather",
        "parameters":{"type":"object"}}}]"#;
    assert_eq!(escaped.parameters_json, format!(r#"{{"tools":{tools}}}"#));
    assert_eq!(
        escaped.messages[1].extra_json,
        r#"{"tool_calls":[{"id":"call_1","type":"function",
          "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}"#
    );
    assert_eq!(escaped.messages[3].extra_json, r#"{"name":"ann"}"#);
}

#[test]
fn a_content_of_other_parts_is_read_through_once_and_left_to_serde() {
    use framing::json_quick::Cursor;
    let image = format!(r#"{{"url":"data:image/png;base64,{}"}}"#, "iVBO".repeat(64));
    let other_parts = format!(
        r#"[{{"role":"user","content":[{{"type":"text","text":"what is it?"}},
        {{"type":"image_url","image_url":{image}}}]}}, {{"role":"user","content":"a"}}] ,"#
    );
    let read = |text: &str| {
        let mut cursor = Cursor::spaced(text);
        let read = quick::read_or_stay(&mut cursor, text, quick::MessageShape::CHAT);
        (
            read.map(|messages| messages.map(|m| m.len())),
            cursor.position(),
        )
    };
    // Read through: the cursor is past the array, for routing to go on.
    let end = other_parts.rfind(']').unwrap() + 1;
    assert_eq!(read(&other_parts), (Some(None), end));
    // Taken: its spans.
    let taken = r#"[{"role":"user","content":[{"type":"text","text":"a"}]}]"#;
    assert_eq!(read(taken), (Some(Some(1)), taken.len()));
    // What the cursor declines: the cursor stays, for a skip or serde.
    assert_eq!(read(r#"[{"role":"user","content":[1]}]"#), (None, 0));
    // The whole request: routed, its input serde's (which refuses the
    // image for a normalized run).
    let body = format!(
        r#"{{"model":"m","messages":{}"stream":false}}"#,
        other_parts
    );
    let request = parse(Bytes::from(body.clone())).expect("routing");
    assert_eq!(
        (request.model.as_str(), request.input_spans.is_none()),
        ("m", true)
    );
    assert_eq!(input(&body).unwrap_err().code, "unsupported_content");
}

#[test]
fn text_parts_are_taken_and_joined() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":[
        {"type":"text","text":"a \"b\" "},{"text":"c","type":"text","cache_control":{"type":"x"}}]},
        {"role":"user","content":[{"type":"text","text":"one"}]},{"role":"user","content":[]}]}"#;
    let request = parse(Bytes::from(body)).unwrap();
    let escaped = quick_input(&request).expect("taken");
    assert_eq!(escaped.messages[0].content, r#"a \"b\" c"#);
    let range = request.body.as_ptr_range();
    assert!(
        range.contains(&escaped.messages[1].content.as_ptr()),
        "one part: a slice"
    );
    let (quick, serde) = quick_and_serde(body).expect("taken");
    assert_eq!(quick, serde.unwrap());
    let texts: Vec<_> = quick.messages.iter().map(|m| &m.content[..]).collect();
    assert_eq!(texts, [&b"a \"b\" c"[..], b"one", b""]);
    // A Responses item's parts: input_text and output_text.
    let body = r#"{"model":"m","input":[{"role":"user","content":[
        {"type":"input_text","text":"a"},{"type":"output_text","text":"b"}]}]}"#;
    let (quick, serde) = quick_and_serde_responses(body).expect("taken");
    assert_eq!(quick, serde.unwrap());
    assert_eq!(quick.messages[0].content, "ab");
}

#[test]
fn routing_notes_the_spans_of_the_common_shape_only() {
    let good = r#"{"role":"user","content":"a"}"#;
    let parts = r#"{"role":"user","content":"b","na\u006de":"n"}"#;
    let routed = |body: String| parse(Bytes::from(body)).expect("routing");
    // Another shape: routed all the same, its input left to serde.
    let request = routed(format!(r#"{{"model":"m","messages":[{parts}],"n":1}}"#));
    assert_eq!(
        (request.model.as_str(), request.input_spans.is_none()),
        ("m", true)
    );
    assert_eq!(
        input(std::str::from_utf8(&request.body).unwrap())
            .unwrap()
            .messages[0]
            .content,
        "b"
    );
    // A later `messages` wins; one of another shape leaves all to serde.
    for (first, second, taken) in [
        (good, parts, false),
        (parts, good, false),
        (parts, parts, false),
    ] {
        let body = format!(r#"{{"messages":[{first}],"model":"m","messages":[{second}]}}"#);
        assert_eq!(routed(body.clone()).input_spans.is_some(), taken, "{body}");
        assert_eq!(quick_and_serde(&body), None);
    }
    let body = r#"{"messages":[{"role":"a","content":"x"}],"model":"m","messages":[{"role":"b\tc","content":"y"}]}"#;
    let (quick, serde) = quick_and_serde(body).expect("taken");
    assert_eq!(quick, serde.unwrap());
    assert_eq!(
        (quick.messages.len(), role_of(&quick.messages[0])),
        (1, "b\tc")
    );
    // Committed: the body and its spans are let go of together.
    let mut request = routed(body.to_owned());
    request.release_body();
    assert_eq!((request.body.len(), request.input_spans), (0, None));
}

#[test]
fn the_quick_reader_takes_a_responses_string_input_or_message_items() {
    let prose = "The \\\"quick\\\" fox.\\n".repeat(400);
    let body = format!(
        "{{\"model\": \"m\", \"instructions\": \"be brief \\u00e9\", \"input\": \"{prose}\", \
         \"tools\": [], \"temperature\": 0.5, \"max_output_tokens\": 16, \"stream\": true}}"
    );
    let request = parse(Bytes::from(body.clone())).unwrap();
    let escaped = responses_input(&request).unwrap();
    assert!(escaped.escaped_content, "taken by the quick reader");
    assert_eq!(escaped.messages[0].content, "be brief \\u00e9");
    let range = request.body.as_ptr_range();
    assert!(range.contains(&escaped.messages[1].content.as_ptr()));
    let (quick, serde) = quick_and_serde_responses(&body).expect("taken");
    assert_eq!(quick, serde.unwrap());
    assert_eq!(quick.messages[0].content, "be brief é");
    assert!(
        quick.messages[1]
            .content
            .starts_with(b"The \"quick\" fox.\n")
    );
    assert_eq!(
        &quick.parameters_json[..],
        br#"{"max_tokens":16,"temperature":0.5}"#
    );
    // `null` instructions, a later `input` winning; declined: items, a
    // number, no input, instructions of another type.
    let body = r#"{"model":"m","input":[1],"instructions":null,"input":""}"#;
    let (quick, serde) = quick_and_serde_responses(body).expect("taken");
    assert_eq!(quick, serde.unwrap());
    assert_eq!(
        (quick.messages.len(), role_of(&quick.messages[0])),
        (1, "user")
    );
    // Message items: their other members dropped, as serde drops them.
    let body = r#"{"model":"m","instructions":"s","input":[{"type":"message","role":"user",
        "content":"a \"b\"","id":{"x":[1]}},{"role":"a\tb","content":null}]}"#;
    let (quick, serde) = quick_and_serde_responses(body).expect("taken");
    assert_eq!(quick, serde.unwrap());
    let texts: Vec<_> = (quick.messages.iter())
        .map(|m| (role_of(m), &m.content[..]))
        .collect();
    assert_eq!(
        texts,
        [("system", &b"s"[..]), ("user", b"a \"b\""), ("a\tb", b"")]
    );
    for declined in [
        r#"{"model":"m","input":[{"role":"user","content":[{"type":"text","text":"a"}]}]}"#,
        r#"{"model":"m","input":[{"content":"a"}]}"#,
        r#"{"model":"m","input":[{"role":"user","content":"a"}],"input":7}"#,
        r#"{"model":"m","input":7}"#,
        r#"{"model":"m","instructions":"a"}"#,
        r#"{"model":"m","input":"a","instructions":["b"]}"#,
        r#"{"model":"m","input":"a","messages":[{"role":"user","content":[1]}]}"#,
    ] {
        assert!(quick_and_serde_responses(declined).is_none(), "{declined}");
    }
}

/// Responses bodies of the quick reader's shape and near it, compact or
/// spaced, members repeated.
fn responses_body() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        any::<String>().prop_map(Value::String),
        "[a \"\\\\\n\u{1}\u{e9}]{0,150}".prop_map(Value::String),
        Just(Value::Null),
        Just(json!(7)),
        Just(json!([{"role": "user", "content": "a"}])),
        Just(json!([])),
        Just(json!([{"role": "user", "content": [{"type": "input_text", "text": "a"}]}])),
        Just(json!([{"role": "user", "content": [{"type": "output_text", "text": "\"", "x": 1}]}])),
        Just(json!([{"role": "user", "content": [{"type": "text", "text": "a"}]}])),
        Just(json!([{"content": "x"}, {"role": 1}])),
        "[a \"\\\\\n\u{e9}]{0,40}".prop_map(|t| json!([
            {"type": "message", "role": "user", "content": t, "id": ["x", {"y": null}]},
            {"role": "assistant", "content": null},
        ])),
    ];
    let key = prop::sample::select(vec![
        "input",
        "instructions",
        "temperature",
        "top_p",
        "max_output_tokens",
        "tools",
        "messages",
    ]);
    (prop::collection::vec((key, value), 0..5), any::<bool>()).prop_map(|(members, spaced)| {
        let colon = if spaced { ": " } else { ":" };
        let members: Vec<String> = std::iter::once(("model", json!("m")))
            .chain(members)
            .map(|(key, value)| format!("\"{key}\"{colon}{value}"))
            .collect();
        format!("{{{}}}", members.join(if spaced { ",\n  " } else { "," }))
    })
}

/// Chat bodies of the quick reader's shape and near it, compact or spaced
/// (the spaced ones with an emoji's surrogate pair escaped).
fn chat_body() -> impl Strategy<Value = String> {
    let text = prop_oneof![
        any::<String>(),
        "[a \"\\\\\n\u{1}\u{e9}]{0,150}",
        "[a-z]{0,8}".prop_map(|t| format!("{t}\u{1F600}")),
    ];
    let content = prop_oneof![
        text.clone().prop_map(|t| Some(json!(t))),
        Just(None),
        Just(Some(Value::Null)),
        Just(Some(json!([{"type": "text", "text": "a"}]))),
        Just(Some(
            json!([{"type": "image_url", "image_url": {"url": "u"}}])
        )),
        Just(Some(json!([{"type": "input_text", "text": "a"}, "b"]))),
        "[a \"\\\\\n\u{e9}]{0,40}".prop_map(|t| Some(json!([
            {"type": "text", "text": t, "cache_control": {"type": "ephemeral"}},
            {"text": "b\\", "type": "text"},
        ]))),
    ];
    let extra = prop_oneof![
        Just(json!([{"id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": "{\"a\":[1,\"\\n\"]}"}}])),
        Just(json!("call_1")),
        Just(json!({"nested": [null, true, -0.5, {"deep": []}]})),
        Just(json!(1e300)),
        "[a \"\\\\\n\u{e9}]{0,20}".prop_map(Value::String),
    ];
    let extras = prop::collection::vec(
        (
            prop::sample::select(vec!["tool_calls", "tool_call_id", "name", "x"]),
            extra,
        ),
        0..3,
    );
    let message = (
        "[a-z]{1,8}",
        content,
        prop::option::of(text),
        any::<bool>(),
        extras,
    );
    let parameter = prop_oneof![
        Just(json!(0.5)),
        Just(json!(16)),
        Just(json!(-1.25)),
        Just(json!(1e300)),
        Just(json!(["stop", "\n"])),
        Just(json!({"type": "json_object"})),
        any::<String>().prop_map(Value::String),
    ];
    (
        prop::collection::vec(message, 0..4),
        prop::collection::btree_map("[a-z_]{1,12}", parameter, 0..3),
        any::<bool>(),
    )
        .prop_map(|(messages, parameters, pretty)| {
            let messages: Vec<Value> = messages
                .into_iter()
                .map(|(role, content, name, role_first, extras)| {
                    let mut m = serde_json::Map::new();
                    for (key, value) in extras {
                        m.insert(key.into(), value);
                    }
                    if role_first {
                        m.insert("role".into(), json!(role));
                    }
                    if let Some(content) = content {
                        m.insert("content".into(), content);
                    }
                    if !role_first {
                        m.insert("role".into(), json!(role));
                    }
                    if let Some(name) = name.filter(|n| n.len() % 3 == 0) {
                        m.insert("name".into(), json!(name));
                    }
                    Value::Object(m)
                })
                .collect();
            let mut body = json!({"model": "m", "stream": true, "messages": messages});
            for (key, value) in parameters {
                body[key] = value;
            }
            let body = if pretty {
                serde_json::to_string_pretty(&body).unwrap()
            } else {
                body.to_string()
            };
            // An emoji as Python's `json.dumps` writes it, sometimes.
            if pretty {
                body.replace('\u{1F600}', r"\ud83d\ude00")
            } else {
                body
            }
        })
}

/// A chat body with up to three edits: a piece put in, or bytes taken out.
fn edited_chat_body() -> impl Strategy<Value = String> {
    let extra = &[
        "\"messages\":",
        "\"role\":",
        "\"content\":",
        "\\u00e9",
        "{\"role\":\"a\"}",
    ];
    super::super::tests::with_edits(chat_body(), extra)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// What the quick reader takes, serde reads to the same input.
    #[test]
    fn the_quick_reader_reads_as_serde_reads(body in chat_body()) {
        if let Some((quick, serde)) = quick_and_serde(&body) {
            prop_assert_eq!(Ok(quick), serde.map_err(|e| e.code), "{}", body);
        }
    }

    /// What the quick reader takes of a Responses body, serde reads to
    /// the same input.
    #[test]
    fn the_quick_reader_reads_responses_as_serde_reads(body in responses_body()) {
        if let Some((quick, serde)) = quick_and_serde_responses(&body) {
            prop_assert_eq!(Ok(quick), serde.map_err(|e| e.code), "{}", body);
        }
    }

    #[test]
    fn an_edited_body_is_read_as_serde_reads_it_or_declined(body in edited_chat_body()) {
        if let Some((quick, serde)) = quick_and_serde(&body) {
            prop_assert_eq!(Ok(quick), serde.map_err(|e| e.code), "{}", body);
        }
    }

    #[test]
    fn an_edited_responses_body_is_read_as_serde_reads_it_or_declined(
        body in super::super::tests::with_edits(
            responses_body(),
            &["\"input\":", "\"instructions\":", "\\u00e9", "null"],
        )
    ) {
        if let Some((quick, serde)) = quick_and_serde_responses(&body) {
            prop_assert_eq!(Ok(quick), serde.map_err(|e| e.code), "{}", body);
        }
    }
}
