//! The HTTP/1.1 server: accept loop, connection tasks, routing and the
//! shared pieces of every response (JSON, SSE, NDJSON, errors).
//!
//! Each request: route → knobs (defaults, then `x-mock-*` headers, then the
//! query) → read the body → `headers-delay-ms` → `status` → the route's
//! handler → for non-streaming replies `prefill-ms` before the response.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::body::{MockBody, Script};
use super::config::MockConfig;
use super::knobs::Knobs;
use super::stats::{Route, Stats};
use super::{ollama, openai, responses};

/// Largest request body the mock reads (413 beyond).
pub const MAX_REQUEST_BODY: usize = 16 << 20;

/// Shared state of one server instance.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) config: MockConfig,
    pub(crate) stats: Arc<Stats>,
    ids: AtomicU64,
}

impl Ctx {
    pub(crate) fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Relaxed)
    }
}

/// A handler's reply: streaming replies already sent their prefill delay
/// inside the body; full ones get it before the headers.
#[derive(Debug)]
pub(crate) struct Generated {
    resp: Response<MockBody>,
    streaming: bool,
}

impl Generated {
    pub(crate) fn full(resp: Response<MockBody>) -> Self {
        Self {
            resp,
            streaming: false,
        }
    }
    pub(crate) fn stream(resp: Response<MockBody>) -> Self {
        Self {
            resp,
            streaming: true,
        }
    }
}

/// Which error body shape a route speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    OpenAi,
    Ollama,
}

const JSON: HeaderValue = HeaderValue::from_static("application/json");
const SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
const NDJSON: HeaderValue = HeaderValue::from_static("application/x-ndjson");
const NO_CACHE: HeaderValue = HeaderValue::from_static("no-cache");

fn with_type(status: StatusCode, ctype: HeaderValue, body: MockBody) -> Response<MockBody> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, ctype);
    r
}

/// A 200 JSON response.
pub(crate) fn json_ok(body: impl Into<Bytes>) -> Response<MockBody> {
    with_type(StatusCode::OK, JSON, MockBody::full(body))
}

/// A JSON response from a `serde_json::Value`.
pub(crate) fn json_value(status: StatusCode, v: &serde_json::Value) -> Response<MockBody> {
    with_type(status, JSON, MockBody::full(v.to_string()))
}

fn stream_response(
    ctx: &Ctx,
    script: Script,
    knobs: &Knobs,
    ctype: HeaderValue,
) -> Response<MockBody> {
    let mut r = with_type(
        StatusCode::OK,
        ctype,
        MockBody::stream(script, knobs, ctx.stats.clone()),
    );
    r.headers_mut().insert(header::CACHE_CONTROL, NO_CACHE);
    r
}

/// A `text/event-stream` response walking `script`.
pub(crate) fn sse_response(ctx: &Ctx, script: Script, knobs: &Knobs) -> Response<MockBody> {
    stream_response(ctx, script, knobs, SSE)
}

/// An `application/x-ndjson` response walking `script`.
pub(crate) fn ndjson_response(ctx: &Ctx, script: Script, knobs: &Knobs) -> Response<MockBody> {
    stream_response(ctx, script, knobs, NDJSON)
}

/// An error in the route's flavour: OpenAI's `{"error":{…}}` or Ollama's
/// `{"error":"…"}`.
pub(crate) fn error_response(
    flavor: Flavor,
    status: StatusCode,
    message: &str,
) -> Response<MockBody> {
    let v = match flavor {
        Flavor::Ollama => serde_json::json!({ "error": message }),
        Flavor::OpenAi => {
            let (kind, code) = match status.as_u16() {
                400 | 413 | 422 => ("invalid_request_error", serde_json::Value::Null),
                401 => ("authentication_error", "invalid_api_key".into()),
                403 => ("permission_error", serde_json::Value::Null),
                404 | 405 => ("not_found_error", serde_json::Value::Null),
                429 => ("rate_limit_error", "rate_limit_exceeded".into()),
                _ => ("server_error", serde_json::Value::Null),
            };
            serde_json::json!({
                "error": { "message": message, "type": kind, "param": null, "code": code }
            })
        }
    };
    let mut r = json_value(status, &v);
    if matches!(status.as_u16(), 429 | 503) {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

fn route(method: &Method, path: &str) -> Result<Route, bool> {
    let (want, route) = match path {
        "/v1/chat/completions" => (Method::POST, Route::ChatCompletions),
        "/v1/responses" => (Method::POST, Route::Responses),
        "/v1/models" => (Method::GET, Route::Models),
        "/health" => (Method::GET, Route::Health),
        "/api/chat" => (Method::POST, Route::OllamaChat),
        "/api/tags" => (Method::GET, Route::OllamaTags),
        "/api/show" => (Method::POST, Route::OllamaShow),
        "/api/ps" => (Method::GET, Route::OllamaPs),
        "/mock/stats" => (Method::GET, Route::Mock),
        "/mock/health" | "/mock/reset" => (Method::POST, Route::Mock),
        _ => return Err(false),
    };
    if *method == want || (*method == Method::HEAD && want == Method::GET) {
        Ok(route)
    } else {
        Err(true)
    }
}

async fn handle(ctx: Arc<Ctx>, req: Request<Incoming>) -> Result<Response<MockBody>, Infallible> {
    let path = req.uri().path();
    let flavor = if path.starts_with("/api/") {
        Flavor::Ollama
    } else {
        Flavor::OpenAi
    };
    let route = match route(req.method(), path) {
        Ok(r) => r,
        Err(known_path) => {
            ctx.stats.count(Route::NotFound);
            let (status, msg) = if known_path {
                (
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("method {} not allowed on {path}", req.method()),
                )
            } else {
                (StatusCode::NOT_FOUND, format!("no route {path}"))
            };
            return Ok(error_response(flavor, status, &msg));
        }
    };
    ctx.stats.count(route);
    if route == Route::Mock {
        return Ok(mock_control(&ctx, req));
    }
    let mut knobs = ctx.config.knobs.clone();
    if let Err(e) = knobs.apply_request(req.headers(), req.uri().query()) {
        Stats::bump(&ctx.stats.bad_requests);
        return Ok(error_response(
            flavor,
            StatusCode::BAD_REQUEST,
            &e.to_string(),
        ));
    }
    let body = match Limited::new(req.into_body(), MAX_REQUEST_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let too_big = e.is::<http_body_util::LengthLimitError>();
            let status = if too_big {
                StatusCode::PAYLOAD_TOO_LARGE
            } else {
                StatusCode::BAD_REQUEST
            };
            Stats::bump(&ctx.stats.bad_requests);
            return Ok(error_response(
                flavor,
                status,
                &format!("reading the request body: {e}"),
            ));
        }
    };
    sleep(knobs.headers_delay).await;
    if let Some(s) = knobs.status {
        let status = StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Stats::bump(&ctx.stats.injected_errors);
        let msg = format!("mock provider: injected error (status {s})");
        return Ok(error_response(flavor, status, &msg));
    }
    let result = match route {
        Route::ChatCompletions => openai::chat_completions(&ctx, &knobs, &body),
        Route::Responses => responses::responses(&ctx, &knobs, &body),
        Route::OllamaChat => ollama::chat(&ctx, &knobs, &body),
        Route::OllamaShow => ollama::show(&ctx, &body),
        Route::Models => Ok(Generated::full(openai_models(&ctx))),
        Route::OllamaTags => Ok(Generated::full(ollama::tags(&ctx))),
        Route::OllamaPs => Ok(Generated::full(ollama::ps(&ctx))),
        Route::Health => Ok(Generated::full(health(&ctx))),
        Route::Mock | Route::NotFound => unreachable!("handled above"),
    };
    match result {
        Ok(g) => {
            if !g.streaming {
                sleep(knobs.prefill).await;
            }
            Ok(g.resp)
        }
        Err(msg) => {
            Stats::bump(&ctx.stats.bad_requests);
            Ok(error_response(flavor, StatusCode::BAD_REQUEST, &msg))
        }
    }
}

async fn sleep(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

fn health(ctx: &Ctx) -> Response<MockBody> {
    if ctx.stats.healthy() {
        json_ok(Bytes::from_static(br#"{"status":"ok"}"#))
    } else {
        let mut r = json_ok(Bytes::from_static(br#"{"status":"unhealthy"}"#));
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        r
    }
}

fn openai_models(ctx: &Ctx) -> Response<MockBody> {
    let data: Vec<_> = ctx
        .config
        .models
        .iter()
        .map(|m| serde_json::json!({ "id": m, "object": "model", "created": 0, "owned_by": "iop-mock" }))
        .collect();
    json_value(
        StatusCode::OK,
        &serde_json::json!({ "object": "list", "data": data }),
    )
}

fn mock_control(ctx: &Ctx, req: Request<Incoming>) -> Response<MockBody> {
    match req.uri().path() {
        "/mock/stats" => json_value(StatusCode::OK, &ctx.stats.to_json()),
        "/mock/reset" => {
            ctx.stats.reset();
            ctx.stats.set_healthy(!ctx.config.unhealthy);
            json_value(StatusCode::OK, &ctx.stats.to_json())
        }
        _ => {
            let status = req
                .uri()
                .query()
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix("status="));
            match status {
                Some("up") => ctx.stats.set_healthy(true),
                Some("down") => ctx.stats.set_healthy(false),
                _ => {
                    return error_response(
                        Flavor::OpenAi,
                        StatusCode::BAD_REQUEST,
                        "POST /mock/health needs ?status=up or ?status=down",
                    );
                }
            }
            json_value(
                StatusCode::OK,
                &serde_json::json!({ "healthy": ctx.stats.healthy() }),
            )
        }
    }
}

/// A running mock provider. Dropping it leaves the server running until the
/// runtime shuts down; call [`MockServer::shutdown`] to stop it.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl MockServer {
    /// The bound address (resolves port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, handy for clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The live counters (the same as `GET /mock/stats`).
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Stops accepting, drops every open connection, and waits for the
    /// accept loop to end.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Waits until the server stops (it only stops via [`MockServer::shutdown`]
    /// from a clone of the stop signal, so for the binary this is "forever").
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Binds `addr` and serves the mock on the current tokio runtime.
pub async fn bind(addr: SocketAddr, config: MockConfig) -> io::Result<MockServer> {
    serve(TcpListener::bind(addr).await?, config)
}

/// Serves the mock on `listener`, spawning on the current tokio runtime
/// (must be called from inside one).
pub fn serve(listener: TcpListener, config: MockConfig) -> io::Result<MockServer> {
    let addr = listener.local_addr()?;
    let stats = Arc::new(Stats::new(!config.unhealthy));
    let ctx = Arc::new(Ctx {
        config,
        stats: stats.clone(),
        ids: AtomicU64::new(0),
    });
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(accept_loop(listener, ctx, stop_rx));
    Ok(MockServer {
        addr,
        stats,
        stop,
        task,
    })
}

async fn accept_loop(listener: TcpListener, ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.changed() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, ctx.clone(), stop.clone()));
            }
            // Out of file descriptors and the like: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// Decrements the open-connections gauge when the connection task ends.
struct OpenConn(Arc<Stats>);

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Relaxed);
    }
}

async fn connection(stream: TcpStream, ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    Stats::bump(&ctx.stats.connections_total);
    Stats::bump(&ctx.stats.connections_open);
    let _open = OpenConn(ctx.stats.clone());
    let svc = service_fn(move |req| handle(ctx.clone(), req));
    let conn = http1::Builder::new()
        .keep_alive(true)
        .writev(true)
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        _ = stop.changed() => {}
    }
}
