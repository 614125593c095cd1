//! What a tunnel does with a provider's response head: which [`Tap`]
//! observes its body (usage extraction, the SSE usage strip), and which of
//! its header fields reach the Edge.

use framing::http::Headers;
use proto::v1::ProviderTunnelRequest;

use super::request::is_hop_by_hop;
use super::sse_tap::SseTap;
use super::usage::JsonTap;
use crate::provider_http::ProviderResponse;

/// How a response body is observed.
#[derive(Debug)]
pub(super) enum Tap {
    /// Relayed as read, nothing looked at.
    Plain,
    /// A non-SSE body kept aside for its usage.
    Json(JsonTap),
    /// An SSE body observed (and maybe stripped).
    Sse(Box<SseTap>),
}

/// What a tunnel's request asked of its usage (all the relay keeps of it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UsageWants {
    pub(super) extract_usage: bool,
    pub(super) strip_usage_event: bool,
}

impl UsageWants {
    pub(super) fn of(request: &ProviderTunnelRequest) -> Self {
        Self {
            extract_usage: request.extract_usage,
            strip_usage_event: request.strip_usage_event,
        }
    }
}

/// Which [`Tap`] a response gets: observation only for a 2xx,
/// identity-encoded body when the request asked for usage.
pub(super) fn choose_tap(response: &ProviderResponse, request: UsageWants) -> Tap {
    let headers = response.headers();
    let identity = headers
        .get("content-encoding")
        .is_none_or(|v| v.trim_ascii().eq_ignore_ascii_case(b"identity"));
    let wanted = request.extract_usage || request.strip_usage_event;
    if !(200..300).contains(&response.status()) || !identity || !wanted {
        return Tap::Plain;
    }
    let sse = headers.get("content-type").is_some_and(|v| {
        let v = v.trim_ascii();
        v.len() >= 17 && v[..17].eq_ignore_ascii_case(b"text/event-stream")
    });
    if sse {
        Tap::Sse(Box::new(SseTap::new(request.strip_usage_event)))
    } else if request.extract_usage {
        Tap::Json(JsonTap::default())
    } else {
        Tap::Plain
    }
}

/// The provider's fields minus hop-by-hop ones (and those the provider's
/// `Connection` names), and minus `Content-Length` when `cuts`.
pub(super) fn relayed_headers(headers: &Headers, cuts: bool) -> Vec<(&[u8], &[u8])> {
    let connection_tokens = || {
        headers
            .get_all("connection")
            .flat_map(|v| v.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
    };
    // Whether `Connection` names any field that is not hop-by-hop already
    // (it rarely does: `keep-alive` is one). Looked for once, so that a
    // field is matched against its tokens only then, not once a field.
    let names_more = connection_tokens().any(|t| !t.is_empty() && !is_hop_by_hop(t));
    let named_by_connection =
        |name: &[u8]| names_more && connection_tokens().any(|t| t.eq_ignore_ascii_case(name));
    headers
        .iter()
        .filter(|(name, _)| {
            !is_hop_by_hop(name) && !named_by_connection(name)
                || (name.eq_ignore_ascii_case(b"content-length") && !cuts)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use framing::http::{HeadLimits, parse_response_head};

    use super::relayed_headers;

    /// The names of the fields of `fields` (a response head's lines) that
    /// reach the Edge.
    fn relayed(fields: &str, cuts: bool) -> Vec<String> {
        let mut buf = BytesMut::from(format!("HTTP/1.1 200 OK\r\n{fields}\r\n").as_bytes());
        let head = parse_response_head(&mut buf, &HeadLimits::default(), false)
            .unwrap()
            .unwrap();
        relayed_headers(head.headers(), cuts)
            .into_iter()
            .map(|(name, _)| String::from_utf8_lossy(name).into_owned())
            .collect()
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_dropped() {
        let usual = "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nDate: x\r\n";
        assert_eq!(
            relayed(usual, false),
            ["Content-Type", "Content-Length", "Date"]
        );
        assert_eq!(
            relayed(usual, true),
            ["Content-Type", "Date"],
            "a body it may cut"
        );
        // Fields `Connection` names go too, over any of its lines.
        let named = "X-Hop: 1\r\nConnection: keep-alive, x-hop\r\nX-Kept: 2\r\nConnection: ,  Close \r\nClose: 3\r\nX-Other: 4\r\n";
        assert_eq!(relayed(named, false), ["X-Kept", "X-Other"]);
        // Only hop-by-hop tokens: nothing more is dropped.
        let hop_only = "X-Kept: 1\r\nConnection: Keep-Alive, TE\r\nTE: trailers\r\n";
        assert_eq!(relayed(hop_only, false), ["X-Kept"]);
    }
}
