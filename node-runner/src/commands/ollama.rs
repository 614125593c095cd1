//! `OLLAMA_API`: the Ollama API tunnel (`TAGS`, `SHOW`, `PS`, `PULL`); see
//! the parent module's docs for the contract.

use bytes::Bytes;
use framing::ndjson::NdjsonObserver;
use proto::v1::{
    ExecutionFailure, FailureCode, FailureSide, LivenessClassification, NodeCommandRequest,
    NodeCommandResponse, OllamaApiCall, OllamaApiResponse, ProviderHealth,
};
use serde_json::{Map, Value};

use super::{CommandContext, CommandLimits, Emitter, invalid, unknown_adapter};
use crate::adapter::{
    AnyAdapter, OllamaAdapter, drain, failure, status_failure, transport_failure,
};
use crate::provider_http::{ProviderRequest, ProviderResponse};

/// The one call, ready to send.
struct Call {
    pull: bool,
    request: ProviderRequest,
}

/// Runs the `OLLAMA_API` command `request`.
pub(super) async fn run(
    ctx: &CommandContext<'_>,
    request: &NodeCommandRequest,
    emit: &mut Emitter<'_>,
) {
    match prepare(ctx, request) {
        Err(f) => emit.finish(Err(f)),
        Ok(Call {
            pull: true,
            request,
        }) => pull(ctx, request, emit).await,
        Ok(Call { request, .. }) => emit.finish_raw(call(ctx, request).await),
    }
}

/// Validates the request and builds the provider request: nothing reaches
/// the provider unless this succeeds.
fn prepare(
    ctx: &CommandContext<'_>,
    request: &NodeCommandRequest,
) -> Result<Call, ExecutionFailure> {
    let api = request
        .ollama
        .as_ref()
        .ok_or_else(|| invalid("OLLAMA_API needs an ollama request"))?;
    let call = match OllamaApiCall::try_from(api.call) {
        Ok(OllamaApiCall::Unspecified) | Err(_) => {
            return Err(invalid(
                "unknown Ollama API call (allowed: TAGS, SHOW, PS, PULL)",
            ));
        }
        Ok(call) => call,
    };
    let adapter = select(ctx, &request.adapter)?;
    let body = body_object(&api.body_json, &ctx.limits)?;
    let config = adapter.config();
    let post = |path, body: Bytes| {
        config
            .request("POST", path)
            .header("content-type", "application/json")
            .body(body)
    };
    let required = |body: Option<Map<String, Value>>| {
        body.ok_or_else(|| invalid("body_json is required for this Ollama API call"))
    };
    Ok(match call {
        OllamaApiCall::Tags | OllamaApiCall::Ps => {
            let path = if call == OllamaApiCall::Tags {
                "/api/tags"
            } else {
                "/api/ps"
            };
            Call {
                pull: false,
                request: config.request("GET", path),
            }
        }
        OllamaApiCall::Show => {
            required(body)?;
            Call {
                pull: false,
                request: post("/api/show", api.body_json.clone()),
            }
        }
        OllamaApiCall::Pull => {
            let mut body = required(body)?;
            body.insert("stream".into(), Value::Bool(true));
            let bytes = serde_json::to_vec(&Value::Object(body)).unwrap_or_default();
            Call {
                pull: true,
                request: post("/api/pull", Bytes::from(bytes)),
            }
        }
        OllamaApiCall::Unspecified => unreachable!("refused above"),
    })
}

/// The `ollama` adapter `name` names, or the only one when `name` is empty.
fn select<'c>(
    ctx: &'c CommandContext<'_>,
    name: &str,
) -> Result<&'c OllamaAdapter, ExecutionFailure> {
    if name.is_empty() {
        let mut all = ctx.adapters.iter().filter_map(|a| match &a.adapter {
            AnyAdapter::Ollama(o) => Some(o),
            AnyAdapter::OpenAi(_) => None,
        });
        return match (all.next(), all.next()) {
            (Some(only), None) => Ok(only),
            (None, _) => Err(failure(
                FailureCode::UnknownAdapter,
                FailureSide::Client,
                "no ollama adapter on this node",
            )),
            (Some(_), Some(_)) => Err(invalid("several ollama adapters on this node: name one")),
        };
    }
    match &ctx.adapter(name).ok_or_else(unknown_adapter)?.adapter {
        AnyAdapter::Ollama(o) => Ok(o),
        AnyAdapter::OpenAi(_) => Err(invalid("adapter is not ollama")),
    }
}

/// `body_json` as a JSON object; `None` when empty. Over the bound or not
/// an object: `INVALID_REQUEST`.
fn body_object(
    bytes: &[u8],
    limits: &CommandLimits,
) -> Result<Option<Map<String, Value>>, ExecutionFailure> {
    if bytes.len() > limits.max_request_body {
        return Err(invalid(format!(
            "body_json over {} bytes",
            limits.max_request_body
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        _ => Err(invalid("body_json is not a JSON object")),
    }
}

/// `TAGS`, `SHOW`, `PS`: one bounded exchange, one final response.
async fn call(ctx: &CommandContext<'_>, request: ProviderRequest) -> NodeCommandResponse {
    let max = ctx.limits.max_response_body;
    let exchange = async {
        let mut response = ctx
            .client
            .request(request)
            .await
            .map_err(|e| transport_failure(&e))?;
        let status = response.status();
        let body = read_body(&mut response, max).await?;
        Ok::<_, ExecutionFailure>((status, body))
    };
    let (status, body) = match monoio::time::timeout(ctx.limits.call_timeout, exchange).await {
        Err(_) => {
            return failed(failure(
                FailureCode::HardTimeout,
                FailureSide::Provider,
                format!(
                    "Ollama API call did not finish within {} ms",
                    ctx.limits.call_timeout.as_millis()
                ),
            ));
        }
        Ok(Err(f)) => return failed(f),
        Ok(Ok(answer)) => answer,
    };
    if !(200..300).contains(&status) {
        return status_response(status, body);
    }
    if !is_json_object(&body) {
        return failed(failure(
            FailureCode::ProviderMalformed,
            FailureSide::Provider,
            "Ollama API answer is not a JSON object",
        ));
    }
    NodeCommandResponse {
        ok: true,
        ollama: Some(answer(status, body)),
        ..NodeCommandResponse::default()
    }
}

/// `PULL`: one progress response per NDJSON line, then the final one.
async fn pull(ctx: &CommandContext<'_>, request: ProviderRequest, emit: &mut Emitter<'_>) {
    let idle = ctx.limits.pull_idle_timeout;
    let mut response = match monoio::time::timeout(idle, ctx.client.request(request)).await {
        Err(_) => return emit.finish(Err(stalled(idle))),
        Ok(Err(e)) => return emit.finish(Err(transport_failure(&e))),
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if !(200..300).contains(&status) {
        let max = ctx.limits.max_response_body;
        let body = match monoio::time::timeout(idle, read_body(&mut response, max)).await {
            Ok(Ok(body)) => body,
            _ => Bytes::new(),
        };
        return emit.finish_raw(status_response(status, body));
    }
    let mut splitter = NdjsonObserver::with_max_line_len(ctx.limits.max_pull_line);
    let mut lines = Vec::new();
    loop {
        let (chunk, split) = match monoio::time::timeout(idle, response.next_chunk()).await {
            Err(_) => return emit.finish(Err(stalled(idle))),
            Ok(Some(Err(e))) => return emit.finish(Err(transport_failure(&e))),
            Ok(Some(Ok(chunk))) => {
                let split = splitter.feed(&chunk, |line| lines.push(line_bytes(&chunk, line)));
                (Some(chunk), split)
            }
            Ok(None) => (
                None,
                splitter.finish(|line| lines.push(Bytes::copy_from_slice(line))),
            ),
        };
        for line in lines.drain(..) {
            match serde_json::from_slice::<Value>(&line) {
                Ok(Value::Object(fields)) if fields.contains_key("error") => {
                    let mut f = failure(
                        FailureCode::ProviderHttpStatus,
                        FailureSide::Provider,
                        "Ollama reported an error during the pull",
                    );
                    f.http_status = u32::from(status);
                    return emit.finish_raw(NodeCommandResponse {
                        failure: Some(f),
                        ollama: Some(answer(status, line)),
                        ..NodeCommandResponse::default()
                    });
                }
                Ok(Value::Object(fields)) => {
                    let success = fields.get("status").and_then(Value::as_str) == Some("success");
                    emit.progress(NodeCommandResponse {
                        ok: true,
                        ollama: Some(answer(status, line)),
                        ..NodeCommandResponse::default()
                    });
                    if success {
                        drain(response).await;
                        return emit.finish(Ok(NodeCommandResponse {
                            ollama: Some(answer(status, Bytes::new())),
                            ..NodeCommandResponse::default()
                        }));
                    }
                }
                _ => {
                    return emit.finish(Err(failure(
                        FailureCode::ProviderMalformed,
                        FailureSide::Provider,
                        "Ollama pull progress line is not a JSON object",
                    )));
                }
            }
        }
        if let Err(e) = split {
            return emit.finish(Err(failure(
                FailureCode::ProviderMalformed,
                FailureSide::Provider,
                format!("malformed Ollama pull stream: {e}"),
            )));
        }
        if chunk.is_none() {
            return emit.finish(Err(failure(
                FailureCode::ProviderUnreachable,
                FailureSide::Provider,
                "Ollama pull stream ended before success",
            )));
        }
    }
}

/// `line` as a slice of `chunk` when it lies in it (no copy), else a copy.
fn line_bytes(chunk: &Bytes, line: &[u8]) -> Bytes {
    framing::shared_bytes::slice_within(chunk, line).unwrap_or_else(|| Bytes::copy_from_slice(line))
}

/// The whole body of `response`, at most `max` bytes (else
/// `PROVIDER_MALFORMED`).
async fn read_body(response: &mut ProviderResponse, max: usize) -> Result<Bytes, ExecutionFailure> {
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while let Some(chunk) = response.next_chunk().await {
        let chunk = chunk.map_err(|e| transport_failure(&e))?;
        len += chunk.len();
        if len > max {
            return Err(failure(
                FailureCode::ProviderMalformed,
                FailureSide::Provider,
                format!("Ollama API answer over {max} bytes"),
            ));
        }
        chunks.push(chunk);
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => Bytes::from(chunks.concat()),
    })
}

fn is_json_object(body: &[u8]) -> bool {
    matches!(serde_json::from_slice(body), Ok(Value::Object(_)))
}

fn answer(status: u16, body_json: Bytes) -> OllamaApiResponse {
    OllamaApiResponse {
        http_status: u32::from(status),
        body_json,
    }
}

/// `ok = false` for a provider status outside 2xx, with the provider's
/// error body when it is a JSON object.
fn status_response(status: u16, body: Bytes) -> NodeCommandResponse {
    let body = if is_json_object(&body) {
        body
    } else {
        Bytes::new()
    };
    NodeCommandResponse {
        failure: Some(status_failure(status)),
        ollama: Some(answer(status, body)),
        ..NodeCommandResponse::default()
    }
}

fn failed(failure: ExecutionFailure) -> NodeCommandResponse {
    NodeCommandResponse {
        failure: Some(failure),
        ..NodeCommandResponse::default()
    }
}

/// No pull progress within `idle`: a stall, without health evidence.
fn stalled(idle: std::time::Duration) -> ExecutionFailure {
    let mut f = failure(
        FailureCode::ResponseStalled,
        FailureSide::Provider,
        format!("no Ollama pull progress for {} ms", idle.as_millis()),
    );
    f.stall_timeout_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    f.set_provider_health(ProviderHealth::Unknown);
    f.set_liveness_classification(LivenessClassification::HealthUnknown);
    f
}
