//! Fault and shape knobs: what one request asks the mock to do.
//!
//! Every knob has a default (from [`MockConfig`](super::MockConfig), i.e. the
//! CLI flags) that a request may override with a header `x-mock-<knob>: V` or
//! a query parameter `?<knob>=V`. When both are given, the query parameter
//! wins. An unknown `x-mock-*` header or a value that does not parse is a 400,
//! so a typo in a test fails loudly instead of silently using the default.

use std::fmt;
use std::time::Duration;

use hyper::HeaderMap;

/// Largest `event-bytes` value: the size of the shared padding buffer.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// Largest `tokens` + `reasoning-tokens` of a non-streaming response, whose
/// whole text is built in memory (4 bytes a token: 64 MiB).
pub const MAX_NON_STREAM_TOKENS: u64 = 1 << 24;

/// The prefix of knob headers.
pub const HEADER_PREFIX: &str = "x-mock-";

/// Names and one-line descriptions of every knob, for `--help`-style listings
/// and error messages.
pub const KNOB_NAMES: &[(&str, &str)] = &[
    ("tokens", "content tokens to generate"),
    (
        "reasoning-tokens",
        "reasoning tokens, streamed before the content",
    ),
    (
        "cached-tokens",
        "reported prompt_tokens_details.cached_tokens",
    ),
    ("chunk-size", "tokens per SSE event / NDJSON line (>= 1)"),
    (
        "event-bytes",
        "pad each token event to about N bytes (0 = off)",
    ),
    ("delay-ms", "delay per generated token, milliseconds"),
    ("delay-us", "delay per generated token, microseconds"),
    (
        "prefill-ms",
        "delay before the first body byte (stream) or the response (non-stream)",
    ),
    ("headers-delay-ms", "delay before the response headers"),
    (
        "stall-after",
        "after N tokens stop sending; keep the connection open",
    ),
    (
        "abort-after",
        "after N tokens drop the connection without a terminator",
    ),
    (
        "status",
        "answer with this HTTP error status and an error body",
    ),
    (
        "require-auth",
        "1: the model lists and /health answer 401 without an Authorization header",
    ),
    (
        "stamp",
        "1: each chat token event carries its CLOCK_MONOTONIC send time (mock_sent_ns)",
    ),
];

/// What a single request asks for. Built from the defaults, then overridden
/// by headers and query parameters (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knobs {
    /// Content tokens to generate (`tokens`).
    pub tokens: u32,
    /// Reasoning tokens generated before the content (`reasoning-tokens`).
    pub reasoning_tokens: u32,
    /// Reported cached prompt tokens (`cached-tokens`), capped at the prompt size.
    pub cached_tokens: u32,
    /// Tokens per SSE event / NDJSON line (`chunk-size`), at least 1.
    pub chunk_size: u32,
    /// Pad every token event to about this many bytes (`event-bytes`); 0 = no padding.
    pub event_bytes: usize,
    /// Delay per generated token (`delay-ms` / `delay-us`).
    pub token_delay: Duration,
    /// Delay before the first body byte of a stream, or before a non-streaming
    /// response (`prefill-ms`).
    pub prefill: Duration,
    /// Delay before the response headers (`headers-delay-ms`).
    pub headers_delay: Duration,
    /// Stop sending after this many tokens and hold the connection open (`stall-after`).
    pub stall_after: Option<u32>,
    /// Drop the connection after this many tokens (`abort-after`).
    pub abort_after: Option<u32>,
    /// Answer with this HTTP status and an error body (`status`).
    pub status: Option<u16>,
    /// The model lists and `/health` answer 401 to a request without an
    /// `Authorization` header (`require-auth`: `1` or `0`), like a remote
    /// provider that needs its key on `/v1/models`.
    pub require_auth: bool,
    /// Each streamed chat completion token event carries the
    /// `CLOCK_MONOTONIC` nanoseconds at which the mock produced it, as the
    /// choice's `mock_sent_ns` (`stamp`: `1` or `0`; see
    /// `stamp`).
    pub stamp: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            tokens: 16,
            reasoning_tokens: 0,
            cached_tokens: 0,
            chunk_size: 1,
            event_bytes: 0,
            token_delay: Duration::ZERO,
            prefill: Duration::ZERO,
            headers_delay: Duration::ZERO,
            stall_after: None,
            abort_after: None,
            status: None,
            require_auth: false,
            stamp: false,
        }
    }
}

/// A knob that could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnobError {
    /// The knob's name as given.
    pub knob: String,
    /// What was wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for KnobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mock knob `{}`: {}", self.knob, self.reason)
    }
}

impl std::error::Error for KnobError {}

fn parse_num<T: std::str::FromStr>(knob: &str, value: &str) -> Result<T, KnobError> {
    value.trim().parse().map_err(|_| KnobError {
        knob: knob.to_owned(),
        reason: "value is not a non-negative integer in range",
    })
}

/// Parses an optional count: a number, or `none`/`off`/empty for "not set".
fn parse_opt(knob: &str, value: &str) -> Result<Option<u32>, KnobError> {
    match value.trim() {
        "" | "none" | "off" => Ok(None),
        v => parse_num(knob, v).map(Some),
    }
}

/// Parses a boolean knob: `1` or `0`.
fn parse_flag(knob: &str, value: &str) -> Result<bool, KnobError> {
    match value {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(KnobError {
            knob: knob.to_owned(),
            reason: "must be 0 or 1",
        }),
    }
}

impl Knobs {
    /// Sets one knob by name from its textual value.
    pub fn set(&mut self, knob: &str, value: &str) -> Result<(), KnobError> {
        let err = |reason| KnobError {
            knob: knob.to_owned(),
            reason,
        };
        match knob {
            "tokens" => self.tokens = parse_num(knob, value)?,
            "reasoning-tokens" => self.reasoning_tokens = parse_num(knob, value)?,
            "cached-tokens" => self.cached_tokens = parse_num(knob, value)?,
            "chunk-size" => {
                self.chunk_size = parse_num(knob, value)?;
                if self.chunk_size == 0 {
                    return Err(err("must be at least 1"));
                }
            }
            "event-bytes" => {
                self.event_bytes = parse_num(knob, value)?;
                if self.event_bytes > MAX_EVENT_BYTES {
                    return Err(err("larger than MAX_EVENT_BYTES (1 MiB)"));
                }
            }
            "delay-ms" => self.token_delay = Duration::from_millis(parse_num(knob, value)?),
            "delay-us" => self.token_delay = Duration::from_micros(parse_num(knob, value)?),
            "prefill-ms" => self.prefill = Duration::from_millis(parse_num(knob, value)?),
            "headers-delay-ms" => {
                self.headers_delay = Duration::from_millis(parse_num(knob, value)?)
            }
            "stall-after" => self.stall_after = parse_opt(knob, value)?,
            "abort-after" => self.abort_after = parse_opt(knob, value)?,
            "status" => {
                self.status = match parse_opt(knob, value)? {
                    None => None,
                    Some(s) if (100..=999).contains(&s) => Some(s as u16),
                    Some(_) => return Err(err("not an HTTP status code")),
                }
            }
            "require-auth" => self.require_auth = parse_flag(knob, value)?,
            "stamp" => self.stamp = parse_flag(knob, value)?,
            _ => return Err(err("unknown knob")),
        }
        Ok(())
    }

    /// Overrides `self` (the defaults) with the request's `x-mock-*` headers,
    /// then with its query parameters. Query parameters that are not knobs are
    /// ignored (real APIs have their own, e.g. `?api-version=`).
    pub fn apply_request(
        &mut self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<(), KnobError> {
        for (name, value) in headers {
            if let Some(knob) = name.as_str().strip_prefix(HEADER_PREFIX) {
                let value = value.to_str().map_err(|_| KnobError {
                    knob: knob.to_owned(),
                    reason: "header value is not visible ASCII",
                })?;
                self.set(knob, value)?;
            }
        }
        for pair in query.unwrap_or("").split('&') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            if KNOB_NAMES.iter().any(|(k, _)| *k == name) {
                self.set(name, value)?;
            }
        }
        Ok(())
    }

    /// Tokens generated in total (reasoning + content).
    pub fn total_tokens(&self) -> u64 {
        u64::from(self.tokens) + u64::from(self.reasoning_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn headers_then_query_override_defaults() {
        let mut h = HeaderMap::new();
        h.insert("x-mock-tokens", HeaderValue::from_static("7"));
        h.insert("x-mock-delay-us", HeaderValue::from_static("250"));
        h.insert("x-mock-stall-after", HeaderValue::from_static("3"));
        h.insert("x-mock-stamp", HeaderValue::from_static("1"));
        let mut k = Knobs::default();
        k.apply_request(
            &h,
            Some("tokens=9&api-version=1&abort-after=none&status=429"),
        )
        .unwrap();
        assert_eq!(k.tokens, 9);
        assert_eq!(k.token_delay, Duration::from_micros(250));
        assert_eq!(k.stall_after, Some(3));
        assert_eq!(k.abort_after, None);
        assert_eq!(k.status, Some(429));
        assert!(k.stamp);
    }

    #[test]
    fn bad_values_are_errors() {
        let mut k = Knobs::default();
        assert_eq!(
            k.set("chunk-size", "0").unwrap_err().reason,
            "must be at least 1"
        );
        assert!(k.set("tokens", "-1").is_err());
        assert!(k.set("status", "1000").is_err());
        assert_eq!(k.set("stamp", "yes").unwrap_err().reason, "must be 0 or 1");
        assert!(
            k.set("event-bytes", &(MAX_EVENT_BYTES + 1).to_string())
                .is_err()
        );
        k.set("event-bytes", &MAX_EVENT_BYTES.to_string()).unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-mock-tokenz", HeaderValue::from_static("1"));
        let e = k.apply_request(&h, None).unwrap_err();
        assert_eq!(e.knob, "tokenz");
    }

    #[test]
    fn every_listed_knob_is_settable() {
        for (name, _) in KNOB_NAMES {
            let v = if *name == "status" { "500" } else { "1" };
            Knobs::default().set(name, v).unwrap();
        }
    }
}
