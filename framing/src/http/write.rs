//! Writing request and response heads.
//!
//! # Contract
//! - Heads are always `HTTP/1.1`, CRLF-terminated, fields written in the
//!   order given, names and values byte for byte (no case folding).
//! - Everything is validated before it can reach the wire: names must be
//!   tokens; values may hold HTAB, visible ASCII, SP and obs-text but no
//!   CR, LF, NUL or other controls (response-splitting defence); methods are
//!   tokens; request targets are visible ASCII. On any error `dst` is
//!   truncated back to its length on entry, so no half head is ever sent.
//! - Framing fields (`Content-Length`, `Transfer-Encoding`) are the
//!   caller's; this module does not add or check them.
//! - No allocation besides growing `dst`; the status code is formatted by
//!   hand.

use bytes::BytesMut;

use super::HttpError;

/// The canonical reason phrase for `status` (RFC 9110 §15 and the IANA
/// registry), or `None` for codes without one; those are written with an
/// empty reason, which RFC 9112 §4 allows.
pub fn reason_phrase(status: u16) -> Option<&'static str> {
    Some(match status {
        100 => "Continue",
        101 => "Switching Protocols",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        511 => "Network Authentication Required",
        _ => return None,
    })
}

/// Append `HTTP/1.1 <status> <reason>\r\n`, the fields and the blank line.
///
/// `headers` yields `(name, value)` pairs of anything byte-like (`&str`,
/// `&[u8]`, `Bytes`, ...). Errors: [`HttpError::InvalidStatusCode`] outside
/// `100..=999`, [`HttpError::InvalidHeaderName`],
/// [`HttpError::InvalidHeaderValue`]; `dst` is then left as it was.
pub fn write_response_head<I, N, V>(
    dst: &mut BytesMut,
    status: u16,
    headers: I,
) -> Result<(), HttpError>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    if !(100..=999).contains(&status) {
        return Err(HttpError::InvalidStatusCode { status });
    }
    let start = dst.len();
    dst.extend_from_slice(b"HTTP/1.1 ");
    // Three digits by hand: `status` is in 100..=999.
    let digits = [status / 100, status / 10 % 10, status % 10].map(|d| b'0' + d as u8);
    dst.extend_from_slice(&digits);
    dst.extend_from_slice(b" ");
    dst.extend_from_slice(reason_phrase(status).unwrap_or_default().as_bytes());
    dst.extend_from_slice(b"\r\n");
    write_fields(dst, start, headers)
}

/// Append `<method> <path> HTTP/1.1\r\n`, the fields and the blank line.
///
/// Errors: [`HttpError::InvalidMethod`] (not a token),
/// [`HttpError::InvalidRequestTarget`] (empty or not visible ASCII),
/// [`HttpError::InvalidHeaderName`], [`HttpError::InvalidHeaderValue`];
/// `dst` is then left as it was.
pub fn write_request_head<I, N, V>(
    dst: &mut BytesMut,
    method: &str,
    path: &str,
    headers: I,
) -> Result<(), HttpError>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    if !is_token(method.as_bytes()) {
        return Err(HttpError::InvalidMethod);
    }
    if path.is_empty() || !path.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(HttpError::InvalidRequestTarget);
    }
    let start = dst.len();
    dst.extend_from_slice(method.as_bytes());
    dst.extend_from_slice(b" ");
    dst.extend_from_slice(path.as_bytes());
    dst.extend_from_slice(b" HTTP/1.1\r\n");
    write_fields(dst, start, headers)
}

/// Append validated field lines and the blank line; on error truncate `dst`
/// to `start`.
fn write_fields<I, N, V>(dst: &mut BytesMut, start: usize, headers: I) -> Result<(), HttpError>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    for (name, value) in headers {
        let (name, value) = (name.as_ref(), value.as_ref());
        let error = if !is_token(name) {
            Some(HttpError::InvalidHeaderName)
        } else if !value.iter().all(|&b| is_value_byte(b)) {
            Some(HttpError::InvalidHeaderValue)
        } else {
            None
        };
        if let Some(error) = error {
            dst.truncate(start);
            return Err(error);
        }
        dst.extend_from_slice(name);
        dst.extend_from_slice(b": ");
        dst.extend_from_slice(value);
        dst.extend_from_slice(b"\r\n");
    }
    dst.extend_from_slice(b"\r\n");
    Ok(())
}

/// `1*tchar` (RFC 9110 §5.6.2): an HTTP method or field name.
pub fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| BYTE_CLASS[usize::from(b)] & TCHAR != 0)
}

/// `field-vchar / SP / HTAB` including obs-text: what `httparse` accepts.
fn is_value_byte(b: u8) -> bool {
    BYTE_CLASS[usize::from(b)] & VALUE != 0
}

/// [`BYTE_CLASS`] bit: a `tchar`.
const TCHAR: u8 = 1;
/// [`BYTE_CLASS`] bit: a byte a field value may hold.
const VALUE: u8 = 2;

/// Each byte's classes, one lookup a byte: the heads of every answer pass
/// through here, and the comparisons a byte had cost more than the copy.
const BYTE_CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        let tchar = byte.is_ascii_alphanumeric()
            || matches!(
                byte,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        let value = byte == b'\t' || (byte >= b' ' && byte <= b'~') || byte >= 0x80;
        table[b] = if tchar { TCHAR } else { 0 } | if value { VALUE } else { 0 };
        b += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_classes_are_rfc_9110s() {
        for b in 0..=u8::MAX {
            let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(is_token(&[b]), tchar, "tchar {b:#04x}");
            let value = b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80;
            assert_eq!(is_value_byte(b), value, "field value byte {b:#04x}");
        }
        assert!(!is_token(b""));
    }

    #[test]
    fn response_head_bytes() {
        let mut dst = BytesMut::new();
        write_response_head(
            &mut dst,
            200,
            [
                ("content-type", &b"text/event-stream"[..]),
                ("Transfer-Encoding", b"chunked"),
            ],
        )
        .unwrap();
        assert_eq!(
            &dst[..],
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
    }

    #[test]
    fn status_codes_and_reasons() {
        let line = |status| {
            let mut dst = BytesMut::new();
            write_response_head(&mut dst, status, std::iter::empty::<(&str, &str)>()).map(|()| dst)
        };
        assert_eq!(&line(100).unwrap()[..], b"HTTP/1.1 100 Continue\r\n\r\n");
        assert_eq!(&line(431).unwrap()[..14], b"HTTP/1.1 431 R");
        assert_eq!(&line(599).unwrap()[..], b"HTTP/1.1 599 \r\n\r\n");
        assert_eq!(&line(999).unwrap()[..], b"HTTP/1.1 999 \r\n\r\n");
        for bad in [0, 99, 1000, u16::MAX] {
            assert_eq!(line(bad), Err(HttpError::InvalidStatusCode { status: bad }));
        }
    }

    #[test]
    fn request_head_bytes() {
        let mut dst = BytesMut::new();
        write_request_head(&mut dst, "POST", "/v1/chat/completions", [("host", "x:1")]).unwrap();
        assert_eq!(
            &dst[..],
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x:1\r\n\r\n"
        );
    }

    #[test]
    fn response_splitting_is_refused_and_dst_untouched() {
        let mut dst = BytesMut::from(&b"earlier"[..]);
        let cases: [(&str, &str, HttpError); 6] = [
            ("x", "a\r\nSet-Cookie: y", HttpError::InvalidHeaderValue),
            ("x", "a\nb", HttpError::InvalidHeaderValue),
            ("x", "a\rb", HttpError::InvalidHeaderValue),
            ("x", "a\0b", HttpError::InvalidHeaderValue),
            ("x\r\ny", "v", HttpError::InvalidHeaderName),
            ("", "v", HttpError::InvalidHeaderName),
        ];
        for (name, value, error) in cases {
            let fields = [("ok", "fine"), (name, value)];
            assert_eq!(
                write_response_head(&mut dst, 200, fields),
                Err(error.clone())
            );
            assert_eq!(write_request_head(&mut dst, "GET", "/", fields), Err(error));
            assert_eq!(&dst[..], b"earlier");
        }
        assert_eq!(
            write_request_head(&mut dst, "GET /x", "/", [("a", "b")]),
            Err(HttpError::InvalidMethod)
        );
        for path in ["", "/a b", "/a\r\nb", "/\u{e9}"] {
            assert_eq!(
                write_request_head(&mut dst, "GET", path, [("a", "b")]),
                Err(HttpError::InvalidRequestTarget)
            );
        }
        assert_eq!(&dst[..], b"earlier");
    }

    #[test]
    fn obs_text_and_tabs_are_allowed_in_values() {
        let mut dst = BytesMut::new();
        write_response_head(&mut dst, 204, [("x", &b"a\tb \xff"[..])]).unwrap();
        assert!(dst.ends_with(b"x: a\tb \xff\r\n\r\n"));
    }
}
