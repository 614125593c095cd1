//! Every rule of `edge.yaml`, each broken alone (and limits at and one past
//! their bounds): the error names the file and the field path.

mod config_support;

use config_support::{assert_line, base, error, hex, parse, with};

#[test]
fn listen_and_top_level_rules() {
    assert_line(
        &with("ingress: 127.0.0.1:8080", "ingress: localhost:8080"),
        "listen.ingress",
        "not a socket address (ip:port, e.g. 127.0.0.1:8080): \"localhost:8080\"",
    );
    assert_line(
        &with("nodes: 127.0.0.1:7070", "nodes: 127.0.0.1:8080"),
        "listen.nodes",
        "same address as listen.ingress",
    );
    assert_line(
        &format!("workers: 1025\n{}", base()),
        "workers",
        "1025 is out of range 0..=1024",
    );
    assert!(parse(&format!("workers: 1024\n{}", base())).is_ok());
    let mut no_nodes = String::from("nodes: []\n");
    no_nodes.push_str("model_groups: []\n");
    assert_line(&no_nodes, "nodes", "at least one node is required");
}

#[test]
fn link_limits_at_and_past_their_bounds() {
    let link = |body: &str| format!("{}link: {{ {body} }}\n", base());
    assert!(parse(&link("max_frame_len: 1024, max_body_chunk: 960")).is_ok());
    assert_line(
        &link("max_frame_len: 1023, max_body_chunk: 256"),
        "link.max_frame_len",
        "1023 is out of range 1024..=67108864",
    );
    assert!(parse(&link("max_frame_len: 67108864")).is_ok());
    assert_line(
        &link("max_frame_len: 67108865"),
        "link.max_frame_len",
        "out of range",
    );
    assert_line(
        &link("max_frame_len: 1024, max_body_chunk: 961"),
        "link.max_body_chunk",
        "does not fit link.max_frame_len (1024)",
    );
    assert_line(
        &link("max_body_chunk: 255"),
        "link.max_body_chunk",
        "255 is out of range",
    );
    assert_line(
        &link("initial_stream_window: 0"),
        "link.initial_stream_window",
        "0 is out of range 1024..=67108864",
    );
    assert_line(
        &link("initial_stream_window: 67108865"),
        "link.initial_stream_window",
        "out of range",
    );
    assert_line(
        &link("register_timeout_ms: 99"),
        "link.register_timeout_ms",
        "99 is out of range 100..=300000",
    );
    assert_line(
        &link("register_timeout_ms: 300001"),
        "link.register_timeout_ms",
        "out of range",
    );
}

#[test]
fn node_rules() {
    assert_line(
        &with("id: node-1", "id: node 1"),
        "nodes[0].id",
        "\"node 1\" is not an id",
    );
    assert_line(&with("id: node-1", "id: ''"), "nodes[0].id", "is not an id");
    assert_line(
        &with("id: node-2", "id: node-1"),
        "nodes[1].id",
        "duplicate node id \"node-1\" (first at nodes[0])",
    );
    let both = with(
        "    token: tok-1\n",
        "    token: tok-1\n    token_blake3: 0000000000000000000000000000000000000000000000000000000000000000\n",
    );
    assert_line(
        &both,
        "nodes[0]",
        "set exactly one of `token` and `token_blake3`, not both",
    );
    assert_line(
        &with("    token: tok-1\n", ""),
        "nodes[0]",
        "missing `token_blake3`",
    );
    assert_line(
        &with("token: tok-1", "token: ''"),
        "nodes[0].token",
        "empty",
    );
    // A broken token is one error: the node's providers still resolve in
    // model groups.
    let e = parse(&with("    token: tok-1\n", "")).unwrap_err();
    assert_eq!(e.issues().len(), 1, "{e}");
}

#[test]
fn token_hash_rules() {
    let h2 = hex(&blake3::hash(b"tok-2"));
    let short = with(&h2, &h2[..63]);
    assert_line(&short, "nodes[1].token_blake3", "not 64 hex digits");
    let not_hex = with(&h2, &format!("{}g", &h2[..63]));
    assert_line(&not_hex, "nodes[1].token_blake3", "not 64 hex digits");
    assert!(
        !error(&not_hex).contains(&h2[..63]),
        "the value is never echoed"
    );
    assert!(
        parse(&with(&h2, &h2.to_uppercase())).is_ok(),
        "upper-case hex is fine"
    );
    let empty = hex(&blake3::hash(b""));
    assert_line(
        &with(&h2, &empty),
        "nodes[1].token_blake3",
        "is the hash of the empty token",
    );
    // The same secret as a plaintext token and as a hash is one token.
    let same = with(&h2, &hex(&blake3::hash(b"tok-1")));
    assert_line(
        &same,
        "nodes[1].token_blake3",
        "same token as nodes[0] (\"node-1\")",
    );
    let same_plain = with(&format!("token_blake3: {h2}"), "token: tok-1");
    assert_line(&same_plain, "nodes[1].token", "same token as nodes[0]");
    assert!(
        !error(&same_plain).contains("tok-1\""),
        "the token is never echoed"
    );
}

#[test]
fn provider_rules() {
    assert_line(
        &with("id: p3", "id: p1"),
        "nodes[1].providers[0].id",
        "duplicate provider id \"p1\" (first at nodes[0].providers[0])",
    );
    // Within one node the defaulted adapter name is not reported again.
    let same_node = error(&with("id: p2", "id: p1"));
    assert!(same_node.contains("nodes[0].providers[1].id: duplicate provider id"));
    assert!(!same_node.contains(".adapter:"), "{same_node}");
    assert_line(
        &with("id: p2", "id: p2\n        adapter: p1"),
        "nodes[0].providers[1].adapter",
        "adapter \"p1\" is already used on this node by nodes[0].providers[0]",
    );
    assert!(
        parse(&with("id: p3", "id: p3\n        adapter: p1")).is_ok(),
        "adapter names are per node"
    );
    assert_line(
        &with("id: p2", "id: p2\n        adapter: a/b"),
        "nodes[0].providers[1].adapter",
        "is not an id",
    );
    assert_line(
        &with("base_url: http://127.0.0.1:11434", "base_url: ftp://x"),
        "nodes[0].providers[1].base_url",
        "not an http(s) URL: \"ftp://x\"",
    );
    assert_line(
        &with(
            "base_url: http://127.0.0.1:11434",
            "base_url: 127.0.0.1:11434",
        ),
        "nodes[0].providers[1].base_url",
        "not an http(s) URL",
    );
    assert_line(
        &with("base_url: http://127.0.0.1:11434", "base_url: not a url"),
        "nodes[0].providers[1].base_url",
        "not an http(s) URL (relative URL without a base): \"not a url\"",
    );
    assert_line(
        &with("base_url: http://127.0.0.1:11434", "base_url: 'http://'"),
        "nodes[0].providers[1].base_url",
        "not an http(s) URL (empty host)",
    );
    let creds = with(
        "base_url: http://127.0.0.1:11434",
        "base_url: http://admin:s3cret@127.0.0.1:11434",
    );
    assert_line(
        &creds,
        "nodes[0].providers[1].base_url",
        "must not carry credentials",
    );
    assert!(!error(&creds).contains("s3cret"));
    assert_line(
        &with(
            "base_url: http://127.0.0.1:11434",
            "base_url: http://h/?a=1",
        ),
        "nodes[0].providers[1].base_url",
        "must not have a query or fragment",
    );
    assert_line(
        &with("targets: [m2]", "targets: []"),
        "nodes[0].providers[1].targets",
        "at least one target is required",
    );
    assert_line(
        &with("targets: [m2]", "targets: [m2, m2]"),
        "nodes[0].providers[1].targets[1]",
        "duplicate target \"m2\"",
    );
    assert_line(
        &with("targets: [m2]", "targets: [m2, 'a b']"),
        "nodes[0].providers[1].targets[1]",
        "is not a model name",
    );
}

#[test]
fn provider_limits_at_and_past_their_bounds() {
    let set = |line: &str| {
        with(
            "        targets: [m2]\n",
            &format!("        targets: [m2]\n        {line}\n"),
        )
    };
    let path = "nodes[0].providers[1]";
    assert_line(
        &set("max_concurrency: 0"),
        &format!("{path}.max_concurrency"),
        "0 is out of range 1..=65536",
    );
    assert!(parse(&set("max_concurrency: 1")).is_ok());
    assert!(parse(&set("max_concurrency: 65536")).is_ok());
    assert_line(
        &set("max_concurrency: 65537"),
        &format!("{path}.max_concurrency"),
        "out of range",
    );
    assert!(parse(&set("response_stall_timeout_ms: 86400000")).is_ok());
    assert_line(
        &set("response_stall_timeout_ms: 86400001"),
        &format!("{path}.response_stall_timeout_ms"),
        "86400001 is out of range 0..=86400000",
    );
    assert!(parse(&set("request_timeout_ms: 86400000")).is_ok());
    assert_line(
        &set("request_timeout_ms: 86400001"),
        &format!("{path}.request_timeout_ms"),
        "out of range",
    );
    assert_line(
        &set("health_probe: { path: health }"),
        &format!("{path}.health_probe.path"),
        "not an absolute path like /health: \"health\"",
    );
    assert_line(
        &set("health_probe: { path: '/a b' }"),
        &format!("{path}.health_probe.path"),
        "not an absolute path",
    );
    assert!(parse(&set("health_probe: { timeout_ms: 60000 }")).is_ok());
    assert_line(
        &set("health_probe: { timeout_ms: 60001 }"),
        &format!("{path}.health_probe.timeout_ms"),
        "out of range 0..=60000",
    );
}

#[test]
fn header_rules() {
    let set = |map: &str| {
        with(
            "        targets: [m2]\n",
            &format!("        targets: [m2]\n        headers: {map}\n"),
        )
    };
    let path = "nodes[0].providers[1].headers";
    let ok = parse(&set("{ x-b: '2', X-A: '1' }")).unwrap();
    let (_, p2) = ok.nodes().provider("p2").unwrap();
    assert_eq!(
        p2.headers,
        [("x-b".into(), "2".into()), ("X-A".into(), "1".into())],
        "file order kept"
    );
    assert_line(
        &set("{ 'x y': v }"),
        &format!("{path}.x y"),
        "not a valid header name",
    );
    assert_line(
        &set("{ Host: h }"),
        &format!("{path}.Host"),
        "set by the Node itself",
    );
    assert_line(
        &set("{ transfer-encoding: chunked }"),
        &format!("{path}.transfer-encoding"),
        "set by the Node itself",
    );
    assert_line(
        &set("{ x-a: '1', X-A: '2' }"),
        &format!("{path}.X-A"),
        "duplicate header",
    );
    assert_line(
        &set("{ x-a: '1', x-a: '2' }"),
        &format!("{path}.x-a"),
        "duplicate header",
    );
    let ctl = set("{ authorization: \"Bearer sk-123\\r\\nx: y\" }");
    assert_line(
        &ctl,
        &format!("{path}.authorization"),
        "value contains a control character",
    );
    assert!(!error(&ctl).contains("sk-123"), "values are never echoed");
    let many: Vec<String> = (0..33).map(|i| format!("x-{i}: v")).collect();
    assert_line(
        &set(&format!("{{ {} }}", many.join(", "))),
        path,
        "33 headers, at most 32",
    );
}

#[test]
fn model_group_rules() {
    assert_line(
        &with("providers: [p2]", "providers: []"),
        "model_groups[1].providers",
        "at least one provider is required",
    );
    assert_line(
        &with("providers: [p2]", "providers: [p9]"),
        "model_groups[1].providers[0]",
        "no provider \"p9\" under nodes[].providers",
    );
    assert_line(
        &with("providers: [p2]", "providers: [p2, p2]"),
        "model_groups[1].providers[1]",
        "provider \"p2\" listed twice",
    );
    assert_line(
        &with("name: m2", "name: m1"),
        "model_groups[1].name",
        "duplicate model group \"m1\" (first at model_groups[0])",
    );
    assert_line(
        &with("name: m2", "name: 'm 2'"),
        "model_groups[1].name",
        "is not a model name",
    );
    assert_line(
        &with("providers: [p2]", "providers: [p2, p1]"),
        "model_groups[1].providers[1]",
        "provider \"p1\" does not serve target \"m2\" (its targets: m1)",
    );
    let explicit = with("name: m2", "name: chat\n    target: m2");
    let config = parse(&explicit).unwrap();
    assert_eq!(config.model_group("chat").unwrap().target, "m2");
    // A provider may be in two groups.
    assert!(
        parse(&with(
            "providers: [p2]",
            "providers: [p2]\n  - name: m1-again\n    target: m1\n    providers: [p1]"
        ))
        .is_ok()
    );
}

#[test]
fn queue_limits() {
    let queue = |body: &str| format!("{}queue: {{ {body} }}\n", base());
    assert!(parse(&queue("max_waiting: 0, timeout_ms: 1")).is_ok());
    assert_line(
        &queue("timeout_ms: 0"),
        "queue.timeout_ms",
        "0 is out of range 1..=3600000",
    );
    assert_line(
        &queue("timeout_ms: 3600001"),
        "queue.timeout_ms",
        "out of range",
    );
    assert_line(
        &queue("max_waiting: 1000001"),
        "queue.max_waiting",
        "out of range 0..=1000000",
    );
    let config = parse(&base()).unwrap();
    assert_eq!(
        (config.queue().max_waiting, config.queue().timeout_ms),
        (1024, 30_000)
    );
}

#[test]
fn group_weights_name_listed_providers_within_bounds() {
    let weighted = |weights: &str| {
        with(
            "    providers: [p1, p3]\n",
            &format!("    providers: [p1, p3]\n    weights: {{ {weights} }}\n"),
        )
    };
    let config = parse(&weighted("p3: 5")).expect("valid weights");
    let group = config.model_group("m1").expect("m1");
    assert_eq!(group.weights, vec![1, 5], "unset weights are 1");
    assert!(parse(&weighted("p1: 1000")).is_ok());
    assert_line(
        &weighted("p1: 1001"),
        "model_groups[0].weights.p1",
        "1001 is out of range 1..=1000",
    );
    assert_line(
        &weighted("p1: 0"),
        "model_groups[0].weights.p1",
        "0 is out of range 1..=1000",
    );
    assert_line(
        &weighted("p2: 3"),
        "model_groups[0].weights.p2",
        "provider \"p2\" is not in this group's providers",
    );
}
