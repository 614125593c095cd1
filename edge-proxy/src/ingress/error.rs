//! Errors as OpenAI clients expect them: an HTTP status and
//! `{"error": {"message", "type", "param", "code"}}`.

use proto::v1::{ExecutionFailure, FailureCode, FailureSide};
use serde_json::json;

use crate::dispatch::SubmitError;
use crate::pool::AcquireError;

/// One error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// OpenAI error `type` (`invalid_request_error`, `server_error`, …).
    pub kind: &'static str,
    /// OpenAI error `code` (a closed set of snake_case names).
    pub code: &'static str,
    /// Safe, human-readable detail.
    pub message: String,
    /// Seconds for `Retry-After`, on 429 and 503.
    pub retry_after_s: Option<u32>,
}

impl ApiError {
    /// A 400 `invalid_request_error`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", code, message)
    }

    /// Any status, type and code.
    pub fn new(
        status: u16,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            kind,
            code,
            message: message.into(),
            retry_after_s: None,
        }
    }

    fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Vec<u8> {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": null,
                "code": self.code,
            }
        })
        .to_string()
        .into_bytes()
    }
}

impl From<AcquireError> for ApiError {
    fn from(error: AcquireError) -> Self {
        let message = error.to_string();
        match error {
            AcquireError::UnknownModel(_) => {
                Self::new(404, "invalid_request_error", "model_not_found", message)
            }
            AcquireError::Unavailable(_) => {
                Self::new(503, "server_error", "model_unavailable", message).retry_after(5)
            }
            AcquireError::QueueFull(_) | AcquireError::QueueTimeout(..) => {
                Self::new(429, "rate_limit_error", "capacity_exceeded", message).retry_after(1)
            }
        }
    }
}

impl ApiError {
    /// F29: the request's credential lease was refused (at the Edge or the
    /// Node); it failed closed and retrying does not help.
    fn credential_unavailable(message: String) -> Self {
        Self::new(503, "server_error", "credential_unavailable", message)
    }
}

impl From<SubmitError> for ApiError {
    fn from(error: SubmitError) -> Self {
        let message = error.to_string();
        match error {
            SubmitError::Invalid(_) => Self::bad_request("invalid_request", message),
            // F29: fail closed, no other credential; retrying does not help.
            SubmitError::Lease(_) => Self::credential_unavailable(message),
            _ => Self::new(503, "server_error", "node_unavailable", message).retry_after(1),
        }
    }
}

/// The HTTP answer for a run or tunnel that failed before any byte reached
/// the client.
pub fn from_failure(failure: &ExecutionFailure) -> ApiError {
    let message = failure.message.clone();
    match failure.code() {
        FailureCode::OverCapacity => {
            ApiError::new(429, "rate_limit_error", "capacity_exceeded", message).retry_after(1)
        }
        FailureCode::InvalidRequest => ApiError::bad_request("invalid_request", message),
        FailureCode::UnknownTarget | FailureCode::UnknownAdapter => {
            ApiError::new(404, "invalid_request_error", "model_not_found", message)
        }
        FailureCode::ProviderHttpStatus if failure.side() == FailureSide::Client => {
            let status = u16::try_from(failure.http_status)
                .ok()
                .filter(|s| (400..500).contains(s))
                .unwrap_or(400);
            ApiError::new(
                status,
                "invalid_request_error",
                "provider_rejected",
                message,
            )
        }
        FailureCode::HardTimeout | FailureCode::ResponseStalled => {
            ApiError::new(504, "server_error", "upstream_timeout", message)
        }
        FailureCode::NodeDisconnected => {
            ApiError::new(503, "server_error", "node_unavailable", message).retry_after(1)
        }
        // A draining node refused work that crossed its NodeDrainNotice.
        FailureCode::Unsupported if failure.side() == FailureSide::Node => {
            ApiError::new(503, "server_error", "node_unavailable", message).retry_after(1)
        }
        code if crate::lease::is_lease_failure(code) => ApiError::credential_unavailable(message),
        _ => ApiError::new(502, "server_error", "upstream_error", message),
    }
}
