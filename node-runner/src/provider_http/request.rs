//! What the client sends: the provider's base URL and one request, and the
//! encoding of its head.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use framing::http::{NameSet, write_request_head};
use rustls::pki_types::ServerName;

use super::error::ProviderError;
use super::pool::PoolKey;

/// Request bodies up to this size are copied behind the head and sent in one
/// write; larger bodies are written as they are, after the head (never
/// copied).
pub const INLINE_BODY_MAX: usize = 16 * 1024;

/// Hop-by-hop and framing fields the client sets itself; caller headers
/// with these names are dropped.
const OWN_FIELDS: NameSet = NameSet::new(&[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "upgrade",
]);

/// How a provider is reached: the base URL's scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `http://`: plain TCP, port 80 by default.
    Http,
    /// `https://`: TLS (rustls) over TCP, port 443 by default.
    Https,
}

impl Scheme {
    /// `"http"` or `"https"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }

    /// The port used when the URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider's base URL, parsed: `http[s]://host[:port][/prefix]`.
///
/// The prefix (without a trailing `/`) is prepended to every request's
/// path, so `http://h:8000/v1` plus `/chat/completions` asks for
/// `/v1/chat/completions`. For `https` the host is also the TLS server
/// name (SNI and certificate check; an IP literal is checked against the
/// certificate's IP addresses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl {
    scheme: Scheme,
    // Shared, not owned: every request holds its base URL and every pooled
    // connection its key, and a clone should not copy strings.
    host: Arc<str>,
    port: u16,
    prefix: Arc<str>,
    /// The `Host` field value: `host` for the scheme's default port,
    /// `host:port` otherwise.
    host_field: Arc<str>,
}

/// Why a base URL was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid provider base URL {url:?}: {reason}")]
pub struct BaseUrlError {
    /// The URL as given.
    pub url: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl BaseUrl {
    /// Parses `http[s]://host[:port][/prefix]` (port 80 or 443 by default;
    /// IPv6 hosts in brackets). No userinfo, query or fragment; for `https`
    /// the host must be a valid TLS server name (DNS name or IP literal).
    pub fn parse(url: &str) -> Result<Self, BaseUrlError> {
        let fail = |reason| BaseUrlError {
            url: url.to_owned(),
            reason,
        };
        let (scheme, rest) = if let Some(rest) = strip_prefix_ci(url, "http://") {
            (Scheme::Http, rest)
        } else if let Some(rest) = strip_prefix_ci(url, "https://") {
            (Scheme::Https, rest)
        } else {
            return Err(fail("scheme must be http:// or https://"));
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.contains('@') || path.contains(['?', '#']) || url.contains('#') {
            return Err(fail("userinfo, query and fragment are not allowed"));
        }
        if !path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(fail("path has a byte outside visible ASCII"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| fail("unclosed IPv6 bracket"))?;
            let after = &v6[end + 1..];
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(fail("junk after the IPv6 host")),
            };
            (&authority[..end + 2], port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() || !host.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(fail("empty or invalid host"));
        }
        let port = match port {
            None => scheme.default_port(),
            Some(p) => p.parse::<u16>().map_err(|_| fail("invalid port"))?,
        };
        let host = host.to_ascii_lowercase();
        let host_field = if port == scheme.default_port() {
            host.clone()
        } else {
            format!("{host}:{port}")
        };
        let base = Self {
            scheme,
            host: host.into(),
            port,
            prefix: path.trim_end_matches('/').into(),
            host_field: host_field.into(),
        };
        if scheme == Scheme::Https && base.server_name().is_none() {
            return Err(fail("host is not a valid TLS server name"));
        }
        Ok(base)
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host (lower-cased; an IPv6 literal keeps its brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The path prefix, without a trailing `/` (may be empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The pool key of this origin (scheme, host and port: a TLS and a
    /// plain connection are never interchanged).
    pub fn pool_key(&self) -> PoolKey {
        PoolKey {
            scheme: self.scheme,
            host: Arc::clone(&self.host),
            port: self.port,
        }
    }

    /// The host without IPv6 brackets, for name resolution.
    pub(crate) fn connect_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }

    /// The TLS server name of the host (`None` when it is neither a DNS
    /// name nor an IP literal).
    pub(crate) fn server_name(&self) -> Option<ServerName<'static>> {
        ServerName::try_from(self.connect_host().to_owned()).ok()
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}:{}{}",
            self.scheme, self.host, self.port, self.prefix
        )
    }
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// One request to a provider.
#[derive(Clone, Debug)]
pub struct ProviderRequest {
    /// The method token (`GET`, `POST`, …).
    pub method: Cow<'static, str>,
    /// Where the provider is.
    pub base: BaseUrl,
    /// Path and query, starting with `/`, appended to the base's prefix.
    pub path_and_query: String,
    /// End-to-end fields to send. `Host`, `Content-Length`, `Connection` and
    /// the other hop-by-hop/framing fields are the client's and are dropped
    /// from this list.
    pub headers: Vec<(Bytes, Bytes)>,
    /// The whole body (may be empty); sent with `Content-Length`.
    pub body: RequestBody,
}

/// A request body: `Bytes` slices sent in order, as they are. A normalized
/// run's long texts are slices of its frame here, written into no buffer
/// of the body (`adapter::request_body`); anything else is one slice. A
/// body of one slice holds no `Vec`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestBody {
    first: Bytes,
    rest: Vec<Bytes>,
}

impl RequestBody {
    /// The body of `parts` in order (empty ones dropped).
    pub fn from_parts(parts: impl IntoIterator<Item = Bytes>) -> Self {
        let mut parts = parts.into_iter().filter(|part| !part.is_empty());
        let first = parts.next().unwrap_or_default();
        Self {
            first,
            rest: parts.collect(),
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.first.len() + self.rest.iter().map(Bytes::len).sum::<usize>()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }

    /// Its slices, in order, none empty.
    pub fn parts(&self) -> impl Iterator<Item = &Bytes> {
        std::iter::once(&self.first)
            .filter(|first| !first.is_empty())
            .chain(&self.rest)
    }

    /// Its bytes in one slice: the one it has, or a copy of its slices
    /// joined (for a caller that needs them contiguous, such as a test).
    pub fn to_bytes(&self) -> Bytes {
        if self.rest.is_empty() {
            return self.first.clone();
        }
        let mut joined = BytesMut::with_capacity(self.len());
        self.parts().for_each(|part| joined.extend_from_slice(part));
        joined.freeze()
    }

    /// `head`, then its slices: what one vectored write sends.
    pub(crate) fn after(self, head: Bytes) -> Vec<Bytes> {
        let mut slices = Vec::with_capacity(2 + self.rest.len());
        slices.push(head);
        slices.push(self.first);
        slices.extend(self.rest);
        slices
    }
}

impl From<Bytes> for RequestBody {
    fn from(body: Bytes) -> Self {
        Self {
            first: body,
            rest: Vec::new(),
        }
    }
}

impl From<Vec<u8>> for RequestBody {
    fn from(body: Vec<u8>) -> Self {
        Bytes::from(body).into()
    }
}

impl From<String> for RequestBody {
    fn from(body: String) -> Self {
        Bytes::from(body).into()
    }
}

impl From<&'static str> for RequestBody {
    fn from(body: &'static str) -> Self {
        Bytes::from_static(body.as_bytes()).into()
    }
}

impl ProviderRequest {
    /// A request with no headers and an empty body.
    pub fn new(
        method: impl Into<Cow<'static, str>>,
        base: BaseUrl,
        path_and_query: impl Into<String>,
    ) -> Self {
        Self {
            method: method.into(),
            base,
            path_and_query: path_and_query.into(),
            headers: Vec::new(),
            body: RequestBody::default(),
        }
    }

    /// Adds a header field.
    pub fn header(mut self, name: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<RequestBody>) -> Self {
        self.body = body.into();
        self
    }

    /// Whether the response to this request has no body (`HEAD`).
    pub(crate) fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    /// The head, and the body when it is small enough to go in the same
    /// write (then the returned body is empty).
    pub(crate) fn encode(&self) -> Result<(BytesMut, RequestBody), ProviderError> {
        // Borrowed when the base URL has no path of its own (the usual
        // case): no allocation nor `format!` a request.
        let joined;
        let path: &str = if self.base.prefix.is_empty() {
            &self.path_and_query
        } else {
            joined = [&*self.base.prefix, &self.path_and_query].concat();
            &joined
        };
        let host = &self.base.host_field;
        let body_len = self.body.len();
        let sends_length = body_len > 0
            || !matches!(
                self.method.as_ref(),
                "GET" | "HEAD" | "DELETE" | "OPTIONS" | "TRACE"
            );
        let mut length_digits = itoa::Buffer::new();
        let length = sends_length.then(|| length_digits.format(body_len));
        let own = [
            (&b"Host"[..], host.as_bytes()),
            (b"Connection", b"keep-alive"),
        ];
        let caller = self.headers.iter().filter_map(|(name, value)| {
            (!OWN_FIELDS.contains(name)).then_some((&name[..], &value[..]))
        });
        let length = length.map(|l| (&b"Content-Length"[..], l.as_bytes()));
        let fields = own.into_iter().chain(length).chain(caller);
        let inline = body_len <= INLINE_BODY_MAX;
        let mut head =
            BytesMut::with_capacity(256 + path.len() + if inline { body_len } else { 0 });
        write_request_head(&mut head, &self.method, path, fields)
            .map_err(ProviderError::InvalidRequest)?;
        if inline {
            self.body
                .parts()
                .for_each(|part| head.extend_from_slice(part));
            Ok((head, RequestBody::default()))
        } else {
            Ok((head, self.body.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_forms() {
        let b = BaseUrl::parse("http://127.0.0.1:8000").unwrap();
        assert_eq!((b.host(), b.port(), b.prefix()), ("127.0.0.1", 8000, ""));
        let b = BaseUrl::parse("HTTP://Model.Local/v1/").unwrap();
        assert_eq!((b.host(), b.port(), b.prefix()), ("model.local", 80, "/v1"));
        let b = BaseUrl::parse("http://[::1]:9/x").unwrap();
        assert_eq!((b.host(), b.connect_host(), b.port()), ("[::1]", "::1", 9));
        assert_eq!(b.scheme(), Scheme::Http);
        for bad in [
            "ftp://h",
            "https://bad_name!",
            "http://",
            "http://h:99999",
            "http://u@h",
            "http://h/?q",
            "http://[::1",
        ] {
            assert!(BaseUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn https_base_urls_default_to_443_and_key_the_pool_apart() {
        let tls = BaseUrl::parse("HTTPS://API.Example.com/v1").unwrap();
        assert_eq!(
            (tls.scheme(), tls.host(), tls.port(), tls.prefix()),
            (Scheme::Https, "api.example.com", 443, "/v1")
        );
        assert_eq!(tls.to_string(), "https://api.example.com:443/v1");
        let (head, _) = ProviderRequest::new("GET", tls.clone(), "/models")
            .encode()
            .unwrap();
        assert!(head.starts_with(b"GET /v1/models HTTP/1.1\r\nHost: api.example.com\r\n"));
        let v6 = BaseUrl::parse("https://[::1]:8443").unwrap();
        assert_eq!((v6.scheme(), v6.port()), (Scheme::Https, 8443));
        assert!(v6.server_name().is_some());
        let plain = BaseUrl::parse("http://api.example.com:443").unwrap();
        assert_ne!(plain.pool_key(), tls.pool_key());
        let (head, _) = ProviderRequest::new("GET", plain, "/").encode().unwrap();
        assert!(head.starts_with(b"GET / HTTP/1.1\r\nHost: api.example.com:443\r\n"));
    }

    #[test]
    fn head_has_own_fields_and_drops_callers_framing() {
        let base = BaseUrl::parse("http://h:8000/v1").unwrap();
        let req = ProviderRequest::new("POST", base, "/chat/completions?tokens=2")
            .header("content-type", "application/json")
            .header("Content-Length", "999")
            .header("connection", "close")
            .body("{}");
        let (head, rest) = req.encode().unwrap();
        assert!(rest.is_empty());
        assert_eq!(
            &head[..],
            &b"POST /v1/chat/completions?tokens=2 HTTP/1.1\r\nHost: h:8000\r\n\
               Connection: keep-alive\r\nContent-Length: 2\r\n\
               content-type: application/json\r\n\r\n{}"[..]
        );
    }

    #[test]
    fn large_body_is_not_copied() {
        let base = BaseUrl::parse("http://h").unwrap();
        let body = Bytes::from(vec![b'x'; INLINE_BODY_MAX + 1]);
        let req = ProviderRequest::new("POST", base, "/").body(body.clone());
        let (head, rest) = req.encode().unwrap();
        assert_eq!(rest.to_bytes().as_ptr(), body.as_ptr());
        assert!(head.ends_with(b"Content-Length: 16385\r\n\r\n"));
        assert!(head.starts_with(b"POST / HTTP/1.1\r\nHost: h\r\n"));
    }

    #[test]
    fn a_body_in_slices_is_sent_as_they_are_or_inline_when_small() {
        let base = BaseUrl::parse("http://h").unwrap();
        let long = Bytes::from(vec![b'x'; INLINE_BODY_MAX]);
        let parts = [Bytes::from_static(b"{\"a\":\""), Bytes::new(), long.clone()];
        let body = RequestBody::from_parts(parts.into_iter().chain([Bytes::from_static(b"\"}")]));
        assert_eq!(body.len(), INLINE_BODY_MAX + 8);
        assert_eq!(body.parts().count(), 3);
        let (head, rest) = ProviderRequest::new("POST", base.clone(), "/")
            .body(body.clone())
            .encode()
            .unwrap();
        assert!(head.ends_with(b"Content-Length: 16392\r\n\r\n"));
        assert_eq!(rest, body);
        let slices = rest.after(head.freeze());
        assert_eq!(slices[2].as_ptr(), long.as_ptr());
        assert_eq!(slices[1..].concat(), body.to_bytes());
        // Small: the slices are copied behind the head, in order.
        let small = RequestBody::from_parts([Bytes::from_static(b"ab"), Bytes::from_static(b"c")]);
        let (head, rest) = ProviderRequest::new("POST", base, "/")
            .body(small)
            .encode()
            .unwrap();
        assert!(rest.is_empty() && head.ends_with(b"Content-Length: 3\r\n\r\nabc"));
        assert!(RequestBody::from_parts([Bytes::new()]).is_empty());
    }

    #[test]
    fn get_has_no_content_length_and_bad_method_is_node_side() {
        let base = BaseUrl::parse("http://h").unwrap();
        let (head, _) = ProviderRequest::new("GET", base.clone(), "/health")
            .encode()
            .unwrap();
        assert!(!head.windows(14).any(|w| w == b"Content-Length"));
        let err = ProviderRequest::new("B AD", base, "/")
            .encode()
            .unwrap_err();
        assert_eq!(err.side(), super::super::error::Side::Node);
    }
}
