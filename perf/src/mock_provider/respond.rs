//! Building responses: JSON, SSE and NDJSON bodies, errors in each API's shape.

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use super::body::{MockBody, Script};
use super::knobs::Knobs;
use super::server::Ctx;

/// A handler's reply: streaming replies already sent their prefill delay
/// inside the body; full ones get it before the headers.
#[derive(Debug)]
pub(crate) struct Generated {
    pub(crate) resp: Response<MockBody>,
    pub(crate) streaming: bool,
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
