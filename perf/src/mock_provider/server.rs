//! Routing and the request pipeline.
//!
//! Each request: route → knobs (defaults, then `x-mock-*` headers, then the
//! query) → read the body → `headers-delay-ms` → `status` → the route's
//! handler → for non-streaming replies `prefill-ms` before the response.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use super::body::MockBody;
use super::config::MockConfig;
use super::respond::{Flavor, Generated, error_response, json_ok, json_value};
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
    pub(crate) fn new(config: MockConfig) -> Arc<Self> {
        let stats = Arc::new(Stats::new(!config.unhealthy));
        Arc::new(Self {
            config,
            stats,
            ids: AtomicU64::new(0),
        })
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Relaxed)
    }
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
        "/api/pull" => (Method::POST, Route::OllamaPull),
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

pub(crate) async fn handle(
    ctx: Arc<Ctx>,
    req: Request<Incoming>,
) -> Result<Response<MockBody>, Infallible> {
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
    if matches!(
        route,
        Route::ChatCompletions | Route::Responses | Route::OllamaChat
    ) {
        let authorization = req.headers().get("authorization").map(|v| v.as_bytes());
        ctx.stats.record_authorization(authorization);
    }
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
    let has_authorization = req
        .headers()
        .get("authorization")
        .is_some_and(|v| !v.is_empty());
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
        Route::OllamaPull => ollama::pull(&ctx, &knobs, &body),
        // A provider that needs its key on its lists and liveness (F29).
        Route::Models | Route::OllamaTags | Route::Health
            if knobs.require_auth && !has_authorization =>
        {
            Ok(Generated::full(error_response(
                flavor,
                StatusCode::UNAUTHORIZED,
                "mock provider: an Authorization header is required",
            )))
        }
        // A provider toggled down fails its model lists too (what the
        // Node's exact-target probe reads), not only `/health`.
        Route::Models | Route::OllamaTags if !ctx.stats.healthy() => {
            Ok(Generated::full(error_response(
                flavor,
                StatusCode::SERVICE_UNAVAILABLE,
                "mock provider is down",
            )))
        }
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
