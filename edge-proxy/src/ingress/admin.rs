//! The operator's admin API on the ingress (issue 7, F29): revoke
//! credential leases and disable a provider's credential over HTTP.
//!
//! | route | answer |
//! |---|---|
//! | `POST /admin/leases/revoke` | 200 `{"revoked": {"kind", "value"}}` |
//! | `POST /admin/providers/{id}/disable` | 200 `{"disabled": "<id>"}` |
//!
//! Checks, in order: no `admin.keys` configured → 404 (the routes do not
//! exist); no or wrong `Authorization: Bearer <admin key>` → 401 (client API
//! keys are never admin keys); unknown path → 404; wrong method → 405; bad
//! body → 400; unknown provider or node → 404; leases off or a provider
//! without a credential → 409. Bodies are bounded by the ingress limits
//! like any request. There is no re-enable: the lease authority has no such
//! operation, and a disable survives a restart (`leases.state_dir`).

use framing::http::Method;
use proto::v1::LeaseRevocationKind;
use serde::Deserialize;
use serde_json::{Value, json};

use super::IngressShared;
use super::error::ApiError;
use super::http::{Request, Responder};
use crate::config::{AdminKeys, EdgeConfig};

/// Longest selector value accepted.
const MAX_VALUE_LEN: usize = 256;

/// Answers one request whose path starts with `/admin/`.
pub(crate) async fn serve(shared: &IngressShared, request: &Request, responder: &mut Responder) {
    match handle(shared, request) {
        Ok(body) => {
            responder
                .full(200, "application/json", body.to_string().into_bytes())
                .await;
        }
        Err(error) => responder.error(&error).await,
    }
}

/// The admin route `request` names, once authorized.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route<'p> {
    Revoke,
    Disable(&'p str),
}

fn handle(shared: &IngressShared, request: &Request) -> Result<Value, ApiError> {
    let directory = shared.registry.directory();
    let path = request.head.path();
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    let path = std::str::from_utf8(path).map_err(|_| not_found("the admin path"))?;
    let admin = authorize(
        directory.admin_keys(),
        request.head.headers().get("authorization"),
    )?;
    let route = route(path)?;
    if request.head.method() != Method::Post {
        return Err(ApiError::new(
            405,
            "invalid_request_error",
            "method_not_allowed",
            "admin routes take POST",
        ));
    }
    match route {
        Route::Revoke => {
            let (kind, value) = parse_revoke(&request.body)?;
            check_known(&directory, kind, &value)?;
            if !shared.dispatcher.revoke_leases(kind, &value) {
                return Err(leases_off());
            }
            let kind = kind_name(kind);
            tracing::info!(event = "admin_lease_revoked", admin, kind, value = %value, "admin revoked leases");
            Ok(json!({"revoked": {"kind": kind, "value": value}}))
        }
        Route::Disable(provider) => {
            check_known(&directory, LeaseRevocationKind::Provider, provider)?;
            let Some(leases) = shared.registry.leases() else {
                return Err(leases_off());
            };
            if !leases.needs_lease(provider) {
                return Err(ApiError::new(
                    409,
                    "invalid_request_error",
                    "no_credential",
                    format!("provider {provider:?} has no managed credential to disable"),
                ));
            }
            if !shared.dispatcher.disable_provider(provider) {
                return Err(leases_off());
            }
            tracing::info!(event = "admin_provider_disabled", admin, kind = "provider", value = %provider, "admin disabled a provider");
            Ok(json!({"disabled": provider}))
        }
    }
}

/// The admin key's name, or 404 when the admin API is off, 401 when the
/// key is missing or not an admin key.
fn authorize<'k>(keys: &'k AdminKeys, header: Option<&[u8]>) -> Result<&'k str, ApiError> {
    if keys.is_empty() {
        return Err(not_found("the admin API (no admin.keys configured)"));
    }
    match crate::config::bearer_token(header) {
        None => Err(ApiError::new(
            401,
            "invalid_request_error",
            "missing_admin_key",
            "an admin key is required: send `Authorization: Bearer <admin key>`",
        )),
        Some(key) => keys.check(key).ok_or_else(|| {
            ApiError::new(
                401,
                "invalid_request_error",
                "invalid_admin_key",
                "the admin key is not valid",
            )
        }),
    }
}

fn route(path: &str) -> Result<Route<'_>, ApiError> {
    if path == "/admin/leases/revoke" {
        return Ok(Route::Revoke);
    }
    if let Some(id) = path
        .strip_prefix("/admin/providers/")
        .and_then(|rest| rest.strip_suffix("/disable"))
        && !id.is_empty()
        && !id.contains('/')
    {
        return Ok(Route::Disable(id));
    }
    Err(not_found(&format!("no admin route {path}")))
}

/// `POST /admin/leases/revoke`'s body: exactly one selector.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RevokeBody {
    lease_id: Option<String>,
    principal: Option<String>,
    provider: Option<String>,
    node: Option<String>,
}

/// The one selector of a revoke body, its value checked (a lease id is
/// normalized to lowercase hex, as nodes name it).
fn parse_revoke(body: &[u8]) -> Result<(LeaseRevocationKind, String), ApiError> {
    let body: RevokeBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request("invalid_body", format!("the body is not a revoke: {e}"))
    })?;
    let selectors = [
        (LeaseRevocationKind::LeaseId, body.lease_id),
        (LeaseRevocationKind::Principal, body.principal),
        (LeaseRevocationKind::Provider, body.provider),
        (LeaseRevocationKind::Node, body.node),
    ];
    let mut chosen = selectors.into_iter().filter_map(|(k, v)| Some((k, v?)));
    let (Some((kind, value)), None) = (chosen.next(), chosen.next()) else {
        return Err(ApiError::bad_request(
            "invalid_selector",
            "name exactly one of `lease_id`, `principal`, `provider`, `node`",
        ));
    };
    let field = kind_name(kind);
    let ok = match kind {
        LeaseRevocationKind::LeaseId => {
            value.len() % 2 == 0 && value.bytes().all(|b| b.is_ascii_hexdigit())
        }
        _ => value
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\'),
    };
    if value.is_empty() || value.len() > MAX_VALUE_LEN || !ok {
        let want = if kind == LeaseRevocationKind::LeaseId {
            "hex digits"
        } else {
            "printable ASCII without spaces"
        };
        return Err(ApiError::bad_request(
            "invalid_selector",
            format!("`{field}` must be 1 to {MAX_VALUE_LEN} {want}"),
        ));
    }
    let value = if kind == LeaseRevocationKind::LeaseId {
        value.to_ascii_lowercase()
    } else {
        value
    };
    Ok((kind, value))
}

/// 404 for a provider or node id that is not in the config. Principals are
/// not checked: a key removed from the config may still hold live leases.
fn check_known(
    config: &EdgeConfig,
    kind: LeaseRevocationKind,
    value: &str,
) -> Result<(), ApiError> {
    let (known, what) = match kind {
        LeaseRevocationKind::Provider => (config.nodes().provider(value).is_some(), "provider"),
        LeaseRevocationKind::Node => (config.nodes().get(value).is_some(), "node"),
        _ => return Ok(()),
    };
    if known {
        Ok(())
    } else {
        Err(ApiError::new(
            404,
            "invalid_request_error",
            if what == "provider" {
                "unknown_provider"
            } else {
                "unknown_node"
            },
            format!("no {what} {value:?} in the config"),
        ))
    }
}

fn kind_name(kind: LeaseRevocationKind) -> &'static str {
    match kind {
        LeaseRevocationKind::LeaseId => "lease_id",
        LeaseRevocationKind::Principal => "principal",
        LeaseRevocationKind::Provider | LeaseRevocationKind::ProviderDisabled => "provider",
        LeaseRevocationKind::Node => "node",
        LeaseRevocationKind::Unspecified => "unspecified",
    }
}

fn not_found(what: &str) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        "not_found",
        format!("not found: {what}"),
    )
}

fn leases_off() -> ApiError {
    ApiError::new(
        409,
        "invalid_request_error",
        "leases_disabled",
        "credential leases are off on this edge (leases.enabled: false)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EdgeConfig;

    fn keys() -> EdgeConfig {
        EdgeConfig::from_yaml_str(
            "api_keys:\n  - name: team-a\n    key: client-key\n\
             admin:\n  keys:\n    - name: ops\n      key: admin-key\n\
             nodes:\n  - id: n1\n    token: tok\n",
            "edge.yaml",
        )
        .unwrap()
    }

    #[test]
    fn only_an_admin_key_authorizes() {
        let config = keys();
        let keys = config.admin_keys();
        assert_eq!(authorize(keys, Some(b"Bearer admin-key")), Ok("ops"));
        assert_eq!(authorize(keys, Some(b"bearer  admin-key ")), Ok("ops"));
        let code = |h: Option<&[u8]>| authorize(keys, h).map_err(|e| (e.status, e.code));
        assert_eq!(code(None), Err((401, "missing_admin_key")));
        assert_eq!(code(Some(b"admin-key")), Err((401, "missing_admin_key")));
        assert_eq!(
            code(Some(b"Basic admin-key")),
            Err((401, "missing_admin_key"))
        );
        assert_eq!(
            code(Some(b"Bearer client-key")),
            Err((401, "invalid_admin_key"))
        );
        assert_eq!(code(Some(b"Bearer ")), Err((401, "missing_admin_key")));
        let off = AdminKeys::default();
        let err = authorize(&off, Some(b"Bearer admin-key")).unwrap_err();
        assert_eq!((err.status, err.code), (404, "not_found"));
    }

    #[test]
    fn routes() {
        assert_eq!(route("/admin/leases/revoke"), Ok(Route::Revoke));
        assert_eq!(
            route("/admin/providers/remote/disable"),
            Ok(Route::Disable("remote"))
        );
        for bad in [
            "/admin/providers//disable",
            "/admin/providers/a/b/disable",
            "/admin/providers/remote/enable",
            "/admin/leases",
            "/admin/",
        ] {
            assert_eq!(route(bad).unwrap_err().status, 404, "{bad}");
        }
    }

    #[test]
    fn a_revoke_names_exactly_one_valid_selector() {
        let ok = |body: &str| parse_revoke(body.as_bytes()).unwrap();
        assert_eq!(
            ok(r#"{"principal":"team-a"}"#),
            (LeaseRevocationKind::Principal, "team-a".into())
        );
        assert_eq!(
            ok(r#"{"lease_id":"00AbFF"}"#),
            (LeaseRevocationKind::LeaseId, "00abff".into())
        );
        assert_eq!(ok(r#"{"provider":"p"}"#).0, LeaseRevocationKind::Provider);
        assert_eq!(ok(r#"{"node":"n1"}"#).0, LeaseRevocationKind::Node);
        for bad in [
            "",
            "not json",
            "[]",
            "{}",
            r#"{"principal":null}"#,
            r#"{"principal":"a","node":"b"}"#,
            r#"{"principal":"a","extra":1}"#,
            r#"{"principal":""}"#,
            r#"{"principal":"a b"}"#,
            r#"{"principal":7}"#,
            r#"{"lease_id":"xyz"}"#,
            r#"{"lease_id":"abc"}"#,
        ] {
            let err = parse_revoke(bad.as_bytes()).unwrap_err();
            assert_eq!(err.status, 400, "{bad}");
        }
        let long = format!(r#"{{"principal":"{}"}}"#, "a".repeat(MAX_VALUE_LEN + 1));
        assert_eq!(parse_revoke(long.as_bytes()).unwrap_err().status, 400);
    }

    #[test]
    fn unknown_providers_and_nodes_are_404() {
        let config = keys();
        let err = check_known(&config, LeaseRevocationKind::Provider, "nope").unwrap_err();
        assert_eq!((err.status, err.code), (404, "unknown_provider"));
        let err = check_known(&config, LeaseRevocationKind::Node, "nope").unwrap_err();
        assert_eq!((err.status, err.code), (404, "unknown_node"));
        assert!(check_known(&config, LeaseRevocationKind::Node, "n1").is_ok());
        assert!(check_known(&config, LeaseRevocationKind::Principal, "gone").is_ok());
    }
}
