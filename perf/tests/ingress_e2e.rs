//! The OpenAI front door end to end: HTTP clients against the Edge's
//! ingress, the real `iop-node`, the mock provider (set-up in
//! `support/stack.rs`). Normalized models (`ollama`, `ollama-slow`) run
//! through the node's Ollama adapter; bad input is sent on raw sockets.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

mod support;
use support::stack::*;

/// One raw HTTP exchange: writes `request`, reads until the server closes
/// or `until` appears, returns what came back.
fn raw(addr: SocketAddr, request: &[u8], until: Option<&str>) -> String {
    let mut socket = TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket.write_all(request).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match read_some(&mut socket, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
        if until.is_some_and(|u| String::from_utf8_lossy(&all).contains(u)) {
            break;
        }
    }
    String::from_utf8_lossy(&all).into_owned()
}

fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn post(path: &str, body: &str, extra: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn chat(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream,
           "messages": [{"role": "user", "content": "hello"}]})
}

async fn post_json(
    addr: SocketAddr,
    path: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.expect("body").to_vec();
    (status, headers, bytes)
}

fn sse_data(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|event| {
            event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .map(str::to_owned)
        })
        .collect()
}

/// `wait_until` for async tests: polls without blocking the runtime (the
/// HTTP client's connections run on it).
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn normalized_models_answer_chat_completions_and_responses() {
    for driver in drivers() {
        let stack = Stack::start(driver, "ingress-normalized");
        let addr = stack.edge.ingress_addr;
        block_on(async {
            // Chat, non-stream.
            let (status, _, body) = within(post_json(
                addr,
                "/v1/chat/completions",
                &chat("ollama", false),
            ))
            .await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["object"], "chat.completion");
            assert_eq!(body["model"], "ollama");
            let whole = body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(!whole.is_empty());
            assert!(body["choices"][0]["message"]["reasoning_content"].is_string());
            assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);

            // Chat, stream with usage: role first, deltas, finish, usage, [DONE].
            let mut request = chat("ollama", true);
            request["stream_options"] = json!({"include_usage": true});
            let (status, headers, body) =
                within(post_json(addr, "/v1/chat/completions", &request)).await;
            assert_eq!(status, 200);
            assert_eq!(headers["content-type"], "text/event-stream");
            assert_eq!(headers["x-accel-buffering"], "no");
            let events = sse_data(&body);
            assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
            let chunks: Vec<Value> = events[..events.len() - 1]
                .iter()
                .map(|e| serde_json::from_str(e).unwrap())
                .collect();
            assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
            let finish = chunks
                .iter()
                .find(|c| c["choices"][0]["finish_reason"].is_string());
            assert_eq!(finish.unwrap()["choices"][0]["finish_reason"], "stop");
            // The node merged the whole answer's deltas (RunRequest
            // .merge_deltas), the streamed one's it sent apart: one text.
            let streamed: String = chunks
                .iter()
                .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
                .collect();
            assert_eq!(streamed, whole);
            let usage = chunks.last().unwrap();
            assert_eq!(usage["choices"], json!([]));
            assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);

            // Without include_usage there is no usage chunk.
            let (_, _, body) = within(post_json(
                addr,
                "/v1/chat/completions",
                &chat("ollama", true),
            ))
            .await;
            assert!(!String::from_utf8_lossy(&body).contains("\"usage\""));

            // An agent's turn: its tools and limits reach the provider (the
            // Node takes them by the Edge's index of the parameters).
            let mut request = chat("ollama", false);
            request["tools"] = json!([
                {"type": "function", "function": {"name": "get_weather",
                 "description": "Météo — \"now\"", "parameters": {"type": "object",
                 "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
                {"type": "function", "function": {"name": "noop", "parameters": {}}}
            ]);
            request["max_tokens"] = 2.into();
            request["temperature"] = json!(0.25);
            let (status, _, body) = within(post_json(addr, "/v1/chat/completions", &request)).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            let body: Value = serde_json::from_slice(&body).unwrap();
            // The mock answers `num_predict` tokens of text (and as many of
            // thinking) and says why it stopped.
            assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
            assert_eq!(body["choices"][0]["message"]["content"], "tok tok ");
            // The Responses API's limit; an answer cut by it is incomplete.
            let mut request = json!({"model": "ollama", "input": "hi", "max_output_tokens": 2,
                                     "tools": request["tools"].clone()});
            let (status, _, body) = within(post_json(addr, "/v1/responses", &request)).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                body["output"][0]["content"][0]["text"], "tok tok ",
                "{body}"
            );
            assert_eq!(body["status"], "incomplete");
            assert_eq!(body["incomplete_details"]["reason"], "max_output_tokens");
            assert_eq!(body["output"][0]["status"], "incomplete");
            request["stream"] = true.into();
            let (status, _, body) = within(post_json(addr, "/v1/responses", &request)).await;
            assert_eq!(status, 200);
            let text = String::from_utf8_lossy(&body);
            let last = text.trim_end().lines().rev().nth(1).unwrap_or_default();
            assert_eq!(last, "event: response.incomplete", "{text}");

            // Responses, non-stream and stream.
            let request = json!({"model": "ollama", "input": "hi", "instructions": "be brief"});
            let (status, _, body) = within(post_json(addr, "/v1/responses", &request)).await;
            assert_eq!(status, 200);
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["object"], "response");
            assert_eq!(body["status"], "completed");
            assert!(
                !body["output"][0]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .is_empty()
            );
            let request = json!({"model": "ollama", "input": "hi", "stream": true});
            let (status, _, body) = within(post_json(addr, "/v1/responses", &request)).await;
            assert_eq!(status, 200);
            let text = String::from_utf8_lossy(&body);
            assert!(text.starts_with("event: response.created"), "{text}");
            assert!(text.contains("event: response.output_text.delta"));
            assert!(
                text.trim_end()
                    .lines()
                    .next_back()
                    .unwrap()
                    .contains("response.completed")
            );
        });
    }
}

#[test]
fn models_health_readiness_and_metrics() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start(driver, "ingress-meta");
    let addr = stack.edge.ingress_addr;
    let get = |path: &str| {
        raw(
            addr,
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
            None,
        )
    };
    let models = get("/v1/models");
    assert_eq!(status_of(&models), 200);
    for name in ["\"chat\"", "\"ollama\"", "\"mixed\""] {
        assert!(models.contains(name), "{models}");
    }
    assert_eq!(status_of(&get("/healthz")), 200);
    assert_eq!(status_of(&get("/readyz")), 200);
    let one = raw(
        addr,
        &post(
            "/v1/chat/completions",
            &chat("ollama", false).to_string(),
            "connection: close\r\n",
        ),
        None,
    );
    assert_eq!(status_of(&one), 200);
    let metrics = get("/metrics");
    assert!(
        metrics.contains("iop_requests_total{api=\"chat_completions\",status=\"200\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("iop_tokens_total{model=\"ollama\",provider=\"ol\",kind=\"output\"}"));
    assert!(metrics.contains("iop_provider_leases{provider=\"ol\"} 0"));
    stack.kill_node();
    assert_eq!(status_of(&get("/readyz")), 503);
    let refused = raw(
        addr,
        &post(
            "/v1/chat/completions",
            &chat("ollama", false).to_string(),
            "connection: close\r\n",
        ),
        None,
    );
    assert_eq!(status_of(&refused), 503, "{refused}");
    assert!(refused.to_ascii_lowercase().contains("retry-after"));
}

#[test]
fn bad_input_gets_a_clear_openai_error_and_the_connection_survives_or_closes_cleanly() {
    let driver = *drivers().last().unwrap();
    let stack = Stack::start(driver, "ingress-bad");
    let addr = stack.edge.ingress_addr;
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (post("/v1/chat/completions", "{not json", "connection: close\r\n"), 400, "invalid_json"),
        (post("/v1/chat/completions", r#"{"messages":[]}"#, "connection: close\r\n"), 400, "missing_model"),
        (post("/v1/chat/completions", &chat("nope", false).to_string(), "connection: close\r\n"), 404, "model_not_found"),
        (post("/v1/chat/completions", r#"{"model":"ollama","messages":[]}"#, "connection: close\r\n"), 400, "missing_messages"),
        (post("/v1/nothing", "{}", "connection: close\r\n"), 404, "not_found"),
        (b"GET /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".to_vec(), 405, "method_not_allowed"),
        // Larger than the 64 KiB limit: refused before the body is read.
        (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000\r\n\r\n".to_vec(), 413, "request_too_large"),
        // Request smuggling defence.
        (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n{}".to_vec(), 400, "bad_http_request"),
        (b"GARBAGE\r\n\r\n".to_vec(), 400, "bad_http_request"),
    ];
    for (request, status, code) in cases {
        let response = raw(addr, &request, None);
        assert_eq!(status_of(&response), status, "{response}");
        assert!(
            response.contains(&format!("\"code\":\"{code}\"")),
            "{response}"
        );
        assert!(
            response.contains("\"error\""),
            "OpenAI error shape: {response}"
        );
    }

    // Slowloris: a head that never completes is answered 408 and closed.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert_eq!(status_of(&answer), 408, "{answer}");

    // HTTP/1.0: answered and closed, body not chunked.
    let request = format!(
        "POST /v1/chat/completions HTTP/1.0\r\ncontent-length: {}\r\n\r\n{}",
        chat("ollama", true).to_string().len(),
        chat("ollama", true)
    );
    let response = raw(addr, request.as_bytes(), None);
    assert_eq!(status_of(&response), 200);
    assert!(!response.to_ascii_lowercase().contains("transfer-encoding"));
    assert!(response.contains("data: [DONE]"));

    // Pipelined: two requests in one write, two answers in order.
    let mut two = post(
        "/v1/chat/completions",
        &chat("ollama", false).to_string(),
        "",
    );
    two.extend(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    let response = raw(addr, &two, None);
    let first = response.find("chat.completion").expect("first answer");
    let second = response.find("{\"status\":\"ok\"}").expect("second answer");
    assert!(first < second, "{response}");

    // Keep-alive: the read that watched the first answer brings the next
    // request, written after that answer and longer than that read; a
    // request pipelined while an answer streams waits its turn.
    let mut socket = TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answers = String::new();
    let mut buf = [0u8; 8192];
    let mut read_until = |socket: &mut TcpStream, answers: &mut String, count: usize| {
        while answers.matches("HTTP/1.1 200").count() < count
            || !answers.ends_with("0\r\n\r\n") && !answers.ends_with('}')
        {
            match read_some(socket, &mut buf) {
                Ok(0) | Err(_) => panic!("closed early: {answers}"),
                Ok(n) => answers.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    };
    socket
        .write_all(&post(
            "/v1/chat/completions",
            &chat("ollama", true).to_string(),
            "",
        ))
        .unwrap();
    read_until(&mut socket, &mut answers, 1);
    let mut both = post(
        "/v1/chat/completions",
        &chat("ollama", true).to_string(),
        "",
    );
    both.extend(post(
        "/v1/chat/completions",
        &chat("ollama", false).to_string(),
        "",
    ));
    socket.write_all(&both).unwrap();
    read_until(&mut socket, &mut answers, 3);
    assert_eq!(answers.matches("data: [DONE]").count(), 2, "{answers}");
    assert!(
        answers.ends_with('}'),
        "the non-stream answer is last: {answers}"
    );
    // The watching read's 64 bytes of the next head come alone, the rest
    // later: the Edge reads on for it (the head is parsed once it is
    // whole) and answers.
    let next = post(
        "/v1/chat/completions",
        &chat("ollama", false).to_string(),
        "",
    );
    socket.write_all(&next[..64]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    socket.write_all(&next[64..]).unwrap();
    read_until(&mut socket, &mut answers, 4);
    assert!(answers.ends_with('}'), "{answers}");

    // Expect: 100-continue, then the body.
    let mut socket = TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = chat("ollama", false).to_string();
    write!(
        socket,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    let mut interim = [0u8; 25];
    socket.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    socket.write_all(body.as_bytes()).unwrap();
    let mut rest = String::new();
    let _ = socket.read_to_string(&mut rest);
    assert_eq!(status_of(&rest), 200, "{rest}");

    // A chunked request body is accepted.
    let body = chat("ollama", false).to_string();
    let chunked = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    assert_eq!(status_of(&raw(addr, chunked.as_bytes(), None)), 200);
    // Nothing leaked: every lease is back.
    assert_eq!(stack.edge.pools.outstanding(), 0);
}

#[test]
fn capacity_queue_timeout_and_client_disconnect() {
    let driver = *drivers().last().unwrap();
    let stack = Stack::start(driver, "ingress-capacity");
    let addr = stack.edge.ingress_addr;
    let stats = std::sync::Arc::clone(stack.mock.stats());
    block_on(async {
        let client = reqwest::Client::new();
        let send = |body: Value| {
            client
                .post(format!("http://{addr}/v1/chat/completions"))
                .body(body.to_string())
                .send()
        };
        // The only slot of `ollama-slow` is taken by a long stream.
        let first = within(send(chat("ollama-slow", true))).await.unwrap();
        assert_eq!(first.status(), 200);
        let mut first_body = first.bytes_stream();
        within(first_body.next())
            .await
            .expect("first chunk")
            .unwrap();
        assert_eq!(stack.edge.pools.outstanding(), 1);

        // A second request queues, then times out: 429 with Retry-After.
        let second = within(send(chat("ollama-slow", false))).await.unwrap();
        assert_eq!(second.status(), 429);
        assert!(second.headers().contains_key("retry-after"));
        let body: Value = serde_json::from_slice(&second.bytes().await.unwrap()).unwrap();
        assert_eq!(body["error"]["code"], "capacity_exceeded");

        // A third queues; the first client leaves; the third is served on
        // the freed slot (re-resolution), and the provider saw the close.
        let gone_before = stats.streams_client_gone();
        let third = tokio::spawn(send(chat("ollama-slow", true)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(first_body);
        let third = within(third).await.unwrap().unwrap();
        assert_eq!(third.status(), 200);
        eventually("the provider to see the first stream closed", || {
            stats.streams_client_gone() > gone_before
        })
        .await;
        drop(third);
        eventually("every lease released", || {
            stack.edge.pools.outstanding() == 0
        })
        .await;
    });
}

#[test]
fn a_node_killed_mid_stream_ends_the_client_stream_and_frees_the_lease() {
    let driver = *drivers().last().unwrap();
    let mut stack = Stack::start(driver, "ingress-kill");
    let addr = stack.edge.ingress_addr;
    block_on(async {
        let response = within(
            reqwest::Client::new()
                .post(format!("http://{addr}/v1/chat/completions"))
                .body(chat("ollama-slow", true).to_string())
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.bytes_stream();
        within(body.next()).await.expect("first chunk").unwrap();
        stack.kill_node();
        let mut rest = Vec::new();
        while let Some(Ok(chunk)) = within(body.next()).await {
            rest.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&rest);
        assert!(text.contains("\"error\""), "a clean error terminal: {text}");
        assert!(text.contains("node_unavailable"), "{text}");
        assert!(!text.contains("[DONE]"));
    });
    wait_until("the lease released", || stack.edge.pools.outstanding() == 0);
}

#[test]
fn a_client_that_writes_a_refused_body_whole_still_reads_the_413() {
    for driver in drivers() {
        let stack = Stack::start(driver, "ingress-linger");
        let mut socket = TcpStream::connect(stack.edge.ingress_addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        socket
            .set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // Over the 64 KiB limit, and more than the socket buffers on both
        // sides hold (this machine's tcp_rmem allows 32 MiB).
        let body = vec![b'x'; 48 << 20];
        write!(
            socket,
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        // Like most clients, it sends the whole body before it reads: the
        // Edge answers 413 and drains the rest, so the write completes and
        // the answer is there to read (no reset).
        socket
            .write_all(&body)
            .unwrap_or_else(|e| panic!("{driver:?}: the body was not drained: {e}"));
        let mut answer = String::new();
        socket
            .read_to_string(&mut answer)
            .unwrap_or_else(|e| panic!("{driver:?}: {e}"));
        assert_eq!(status_of(&answer), 413, "{driver:?}: {answer}");
        assert!(answer.contains("request_too_large"), "{answer}");
    }
}

/// A keep-alive connection's idle wait is bounded on its core's timer wheel
/// (`ingress::read_timer`), whose entry a busy connection only moves on:
/// one kept busy well past the idle timeout is served throughout, and one
/// left idle after its answer is closed.
#[test]
fn an_idle_keep_alive_connection_is_closed_and_a_busy_one_is_not() {
    const IDLE_MS: u64 = 500;
    for driver in drivers() {
        let stack = Stack::start_edge_with(driver, "ingress-idle", config, |options| {
            options.ingress_limits.idle_timeout_ms = IDLE_MS;
        });
        let addr = stack.edge.ingress_addr;
        let health = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
        let answer = |socket: &mut TcpStream| {
            let mut all = Vec::new();
            let mut buf = [0u8; 1024];
            while !String::from_utf8_lossy(&all).contains(r#"{"status":"ok"}"#) {
                match socket.read(&mut buf) {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => all.extend_from_slice(&buf[..n]),
                }
            }
            true
        };
        let connect = || {
            let socket = TcpStream::connect(addr).unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            socket
        };
        // Busy: a request every 50 ms for three idle timeouts.
        let mut busy = connect();
        for i in 0..(3 * IDLE_MS / 50) {
            busy.write_all(health).unwrap();
            assert!(answer(&mut busy), "{driver:?}: request {i} unanswered");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Idle after its answer: the Edge closes it (bounded by the read
        // timeout above, not timed).
        let mut idle = connect();
        idle.write_all(health).unwrap();
        assert!(answer(&mut idle));
        let mut rest = Vec::new();
        let read = idle.read_to_end(&mut rest);
        assert!(
            matches!(read, Ok(0)),
            "{driver:?}: the idle connection is closed, not {read:?}"
        );
    }
}
