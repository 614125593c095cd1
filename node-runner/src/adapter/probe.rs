//! The exact-target health probe (F21, F22, F25): one bounded answer to
//! "can this provider serve this exact target right now?".
//!
//! # What is asked
//! Per adapter kind, at most two `GET`s, sent concurrently and each bounded
//! by the probe's timeout (so the whole probe is bounded by it too):
//!
//! | kind | liveness `GET` | listing `GET` (the exact target must be in it) |
//! |---|---|---|
//! | `openai_compat` | the configured `health_probe.path`, if it is not `/v1/models` | `/v1/models`: some `data[].id == target` |
//! | `vllm` | the configured path, else `/health` | `/v1/models`: some `data[].id == target` |
//! | `ollama` | the configured path, if it is not `/api/tags` | `/api/tags`: some `models[].name` or `.model` equals the target, or `target:latest` when the target has no tag |
//!
//! # What it answers (fail-closed)
//! Each `GET` gives one [`ProviderHealth`]:
//! - `Unavailable`: the connection is refused or cannot be made, the
//!   provider answers 5xx, or (listing) a well-formed 2xx list that does not
//!   name the target;
//! - `Unknown`: the timeout passed, a 1xx/3xx/4xx status (e.g. 401: we
//!   cannot tell), a listing that is not the expected JSON or is over
//!   [`MAX_LISTING_BODY`], or the connection breaks after the head;
//! - `Available`: a 2xx (liveness) or a list that names the target.
//!
//! The probe's answer is the worst of its `GET`s: any `Unavailable` wins,
//! then any `Unknown`, and only all-`Available` is `Available`.
//!
//! # The credential (F29)
//! A provider with a managed credential may need its key on its lists and
//! liveness too. The probe then carries the credential of the request it is
//! part of: the stall probe the one opened for the stalled request, the
//! `CAPABILITIES` probe one opened for that command. It is set as the one
//! header the lease names, exactly as on the request, and never kept past
//! the probe. Without one, such a provider answers 401: `Unknown`.
//!
//! A probe result is evidence only: it is not progress, never moves a
//! stall fence and grants no retry or replay (F22). The probe never sends a
//! prompt, and its safe result is the only thing that leaves this module
//! (never a provider body).

use std::time::Duration;

use bytes::Bytes;
use proto::v1::ProviderHealth;
use serde_json::Value;

use super::AdapterConfig;
use crate::lease::OpenedCredential;
use crate::provider_http::{ProviderClient, ProviderError, ProviderRequest};

/// The OpenAI-compatible model list.
pub const OPENAI_MODELS_PATH: &str = "/v1/models";
/// vLLM's liveness endpoint (its default probe path).
pub const VLLM_HEALTH_PATH: &str = "/health";
/// Ollama's local model list.
pub const OLLAMA_TAGS_PATH: &str = "/api/tags";
/// Largest listing body the probe reads; past it the answer is `Unknown`.
pub const MAX_LISTING_BODY: usize = 4 * 1024 * 1024;
/// Largest liveness body the probe reads before it stops (the status
/// decides; the rest is not needed).
const MAX_LIVENESS_BODY: usize = 64 * 1024;

/// Which model list names the targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// `GET /v1/models`: `{"data": [{"id": …}, …]}`.
    OpenAiModels,
    /// `GET /api/tags`: `{"models": [{"name": …, "model": …}, …]}`.
    OllamaTags,
}

impl Listing {
    /// The path of the list.
    pub fn path(self) -> &'static str {
        match self {
            Self::OpenAiModels => OPENAI_MODELS_PATH,
            Self::OllamaTags => OLLAMA_TAGS_PATH,
        }
    }

    /// Whether the 2xx body `body` names `target`: `Some(true/false)`, or
    /// `None` when it is not the expected JSON shape.
    pub fn names(self, body: &[u8], target: &str) -> Option<bool> {
        let value: Value = serde_json::from_slice(body).ok()?;
        match self {
            Self::OpenAiModels => {
                let data = value.get("data")?.as_array()?;
                Some(
                    data.iter()
                        .any(|m| m.get("id").and_then(Value::as_str) == Some(target)),
                )
            }
            Self::OllamaTags => {
                let models = value.get("models")?.as_array()?;
                Some(models.iter().any(|m| {
                    ["name", "model"].iter().any(|key| {
                        m.get(key)
                            .and_then(Value::as_str)
                            .is_some_and(|name| ollama_same_model(name, target))
                    })
                }))
            }
        }
    }
}

/// Whether the Ollama model `name` is `target`: equal, or `target:latest`
/// when `target` has no tag (Ollama's default tag).
pub fn ollama_same_model(name: &str, target: &str) -> bool {
    if name == target {
        return true;
    }
    // The tag follows the last ':' of the last path segment (a registry
    // host may carry a port: `host:5000/ns/model`).
    let has_tag = target.rsplit('/').next().is_some_and(|m| m.contains(':'));
    !has_tag
        && name
            .strip_prefix(target)
            .is_some_and(|rest| rest == ":latest")
}

/// What to ask for one probe: see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbePlan {
    /// A liveness `GET`, if any.
    pub liveness: Option<String>,
    /// The list that must name the target.
    pub listing: Listing,
}

impl ProbePlan {
    /// The plan for `config` with the kind's `default_liveness` (`None`:
    /// the listing alone) and `listing`. A configured path equal to the
    /// listing's is not asked twice.
    pub fn new(config: &AdapterConfig, default_liveness: Option<&str>, listing: Listing) -> Self {
        let liveness = match config.health_path.as_str() {
            "" => default_liveness,
            path => Some(path),
        }
        .filter(|path| *path != listing.path())
        .map(str::to_owned);
        Self { liveness, listing }
    }
}

/// Runs `plan` for `target` against `config`'s provider, bounded by
/// `timeout`, with the request's opened `credential` if it has one; see the
/// module docs for the answer.
pub async fn probe_target(
    client: &ProviderClient,
    config: &AdapterConfig,
    plan: &ProbePlan,
    target: &str,
    timeout: Duration,
    credential: Option<&OpenedCredential>,
) -> ProviderHealth {
    let ask = |path: &str, want: Body| {
        get(
            client,
            probe_request(config, path, credential),
            want,
            timeout,
        )
    };
    let listing = async {
        let body = ask(plan.listing.path(), Body::List).await?;
        match plan.listing.names(&body, target) {
            Some(true) => Ok(()),
            Some(false) => Err(ProviderHealth::Unavailable),
            None => Err(ProviderHealth::Unknown),
        }
    };
    let liveness = async {
        match &plan.liveness {
            Some(path) => ask(path, Body::Status).await.map(drop),
            None => Ok(()),
        }
    };
    let (listing, liveness) = monoio::join!(listing, liveness);
    worst(listing, liveness)
}

/// The fail-closed combination of two answers (`Ok` = available).
pub fn worst(a: Result<(), ProviderHealth>, b: Result<(), ProviderHealth>) -> ProviderHealth {
    match (a, b) {
        (Ok(()), Ok(())) => ProviderHealth::Available,
        (Err(ProviderHealth::Unavailable), _) | (_, Err(ProviderHealth::Unavailable)) => {
            ProviderHealth::Unavailable
        }
        _ => ProviderHealth::Unknown,
    }
}

/// What a `GET` needs of its 2xx body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    /// A model list: the whole body, at most [`MAX_LISTING_BODY`] (past it
    /// the answer is `Unknown`).
    List,
    /// A liveness answer: the status decides; the body is read (at most
    /// [`MAX_LIVENESS_BODY`], so the connection can be reused) and dropped.
    Status,
}

/// `GET path` on `config`'s provider, with `credential` as its one header
/// of that name (replacing a configured one, as on the request).
fn probe_request(
    config: &AdapterConfig,
    path: &str,
    credential: Option<&OpenedCredential>,
) -> ProviderRequest {
    let mut request = ProviderRequest::new("GET", config.base.clone(), path.to_owned());
    for (name, value) in &config.headers {
        if credential.is_some_and(|c| name.eq_ignore_ascii_case(c.header.as_bytes())) {
            continue;
        }
        request = request.header(name.clone(), value.clone());
    }
    if let Some(credential) = credential {
        request = request.header(
            credential.header.clone(),
            Bytes::copy_from_slice(&credential.value),
        );
    }
    request
}

/// One bounded `request` (a `GET`): the 2xx body as `want` says, or the
/// health its failure means.
async fn get(
    client: &ProviderClient,
    request: ProviderRequest,
    want: Body,
    timeout: Duration,
) -> Result<Bytes, ProviderHealth> {
    let max = match want {
        Body::List => MAX_LISTING_BODY,
        Body::Status => MAX_LIVENESS_BODY,
    };
    let exchange = async {
        let mut response = client.request(request).await.map_err(error_health)?;
        let status = response.status();
        if status >= 500 {
            return Err(ProviderHealth::Unavailable);
        }
        if !(200..300).contains(&status) {
            return Err(ProviderHealth::Unknown);
        }
        let mut body = Vec::new();
        let mut read = 0usize;
        while let Some(chunk) = response.next_chunk().await {
            let chunk = chunk.map_err(error_health)?;
            read += chunk.len();
            if read > max {
                return match want {
                    Body::Status => Ok(Bytes::new()),
                    Body::List => Err(ProviderHealth::Unknown),
                };
            }
            if want == Body::List {
                body.extend_from_slice(&chunk);
            }
        }
        Ok(Bytes::from(body))
    };
    monoio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(ProviderHealth::Unknown))
}

/// The health a client error means: no connection at all is
/// `Unavailable`; anything after the connection was made is `Unknown`.
fn error_health(error: ProviderError) -> ProviderHealth {
    match error {
        ProviderError::ConnectRefused | ProviderError::ConnectFailed { .. } => {
            ProviderHealth::Unavailable
        }
        _ => ProviderHealth::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider_http::BaseUrl;

    fn config(health_path: &str) -> AdapterConfig {
        let mut c = AdapterConfig::new("a", BaseUrl::parse("http://127.0.0.1:1").unwrap());
        c.health_path = health_path.into();
        c
    }

    #[test]
    fn openai_listing_names_exact_ids_only() {
        let body = br#"{"object":"list","data":[{"id":"m"},{"id":"llama-3:8b"}]}"#;
        let l = Listing::OpenAiModels;
        assert_eq!(l.names(body, "m"), Some(true));
        assert_eq!(l.names(body, "llama-3:8b"), Some(true));
        assert_eq!(l.names(body, "M"), Some(false));
        assert_eq!(l.names(body, "llama-3"), Some(false));
        assert_eq!(l.names(br#"{"data":[]}"#, "m"), Some(false));
        for bad in [
            &b"{not json"[..],
            b"[]",
            br#"{"data":{}}"#,
            br#"{"models":[]}"#,
            b"",
        ] {
            assert_eq!(l.names(bad, "m"), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn ollama_listing_applies_the_default_tag() {
        let body = br#"{"models":[{"name":"m:latest","model":"m:latest"},{"name":"qwen3:8b"},{"model":"localhost:5000/ns/x:latest"}]}"#;
        let l = Listing::OllamaTags;
        assert_eq!(l.names(body, "m"), Some(true));
        assert_eq!(l.names(body, "m:latest"), Some(true));
        assert_eq!(l.names(body, "qwen3:8b"), Some(true));
        assert_eq!(l.names(body, "qwen3"), Some(false), "qwen3 means :latest");
        assert_eq!(l.names(body, "qwen3:4b"), Some(false));
        assert_eq!(l.names(body, "localhost:5000/ns/x"), Some(true));
        assert_eq!(l.names(body, "m:7b"), Some(false));
        assert_eq!(l.names(br#"{"data":[]}"#, "m"), None);
    }

    #[test]
    fn plans_by_kind_and_config() {
        use Listing::*;
        let plan = |path, default, listing| ProbePlan::new(&config(path), default, listing);
        let live = |p: &str| Some(p.to_owned());
        // openai_compat: the list alone unless a separate path is configured.
        assert_eq!(plan("", None, OpenAiModels).liveness, None);
        assert_eq!(plan("/v1/models", None, OpenAiModels).liveness, None);
        assert_eq!(
            plan("/health", None, OpenAiModels).liveness,
            live("/health")
        );
        // vllm: /health by default.
        let vllm = Some(VLLM_HEALTH_PATH);
        assert_eq!(plan("", vllm, OpenAiModels).liveness, live("/health"));
        assert_eq!(plan("/v1/models", vllm, OpenAiModels).liveness, None);
        // ollama: /api/tags is the list itself.
        assert_eq!(plan("/api/tags", None, OllamaTags).liveness, None);
        assert_eq!(plan("/", None, OllamaTags).liveness, live("/"));
    }

    #[test]
    fn the_worst_answer_wins() {
        use ProviderHealth::*;
        let ok = Ok(());
        assert_eq!(worst(ok, ok), Available);
        assert_eq!(worst(ok, Err(Unknown)), Unknown);
        assert_eq!(worst(Err(Unknown), ok), Unknown);
        assert_eq!(worst(Err(Unknown), Err(Unavailable)), Unavailable);
        assert_eq!(worst(Err(Unavailable), Err(Unknown)), Unavailable);
        assert_eq!(worst(ok, Err(Unavailable)), Unavailable);
    }

    #[test]
    fn no_connection_is_unavailable_anything_later_unknown() {
        assert_eq!(
            error_health(ProviderError::ConnectRefused),
            ProviderHealth::Unavailable
        );
        assert_eq!(
            error_health(ProviderError::BodyTruncated),
            ProviderHealth::Unknown
        );
    }
}
