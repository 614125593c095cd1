//! Header fields: the zero-copy [`Headers`] view and the one-pass scan that
//! interprets the fields that frame a message (RFC 9112 §6, RFC 9110 §7.6.1,
//! §10.1.1).
//!
//! # Invariants
//! - A [`Headers`] holds the frozen head bytes and one `(name, value)` range
//!   pair per field, in wire order; ranges always lie inside those bytes
//!   (checked when built, so accessors index without panicking).
//! - Names compare ASCII-case-insensitively; values are returned as
//!   `httparse` delimited them (leading and trailing whitespace removed).
//! - List-valued fields (`Connection`, `Transfer-Encoding`,
//!   `Content-Length`) are read across all their lines, split on `,`, with
//!   optional whitespace trimmed and empty elements ignored (RFC 9110 §5.6.1).

use bytes::Bytes;

use super::HttpError;

/// A byte range inside a frozen head. `u32` keeps a header entry at 16 bytes;
/// heads are capped at [`super::MAX_HEAD_BYTES_CEILING`], far below `u32::MAX`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    start: u32,
    end: u32,
}

impl Span {
    /// The range of `part` inside `base`. `part` must be a sub-slice of
    /// `base` (httparse hands out sub-slices); an empty `part` maps to an
    /// empty range, since httparse may return a static `""` for it.
    pub(crate) fn of(base: &[u8], part: &[u8]) -> Result<Self, HttpError> {
        if part.is_empty() {
            return Ok(Self::default());
        }
        let start = (part.as_ptr() as usize)
            .checked_sub(base.as_ptr() as usize)
            .ok_or(HttpError::MalformedHead)?;
        let end = start
            .checked_add(part.len())
            .filter(|&end| end <= base.len())
            .ok_or(HttpError::MalformedHead)?;
        let start = u32::try_from(start).map_err(|_| HttpError::MalformedHead)?;
        let end = u32::try_from(end).map_err(|_| HttpError::MalformedHead)?;
        Ok(Self { start, end })
    }

    /// The bytes of this range in `block` (empty if out of range, which the
    /// constructor rules out).
    pub(crate) fn get(self, block: &[u8]) -> &[u8] {
        block
            .get(self.start as usize..self.end as usize)
            .unwrap_or_default()
    }

    /// A refcounted slice of `block` for this range.
    pub(crate) fn slice(self, block: &Bytes) -> Bytes {
        if self.end as usize <= block.len() {
            block.slice(self.start as usize..self.end as usize)
        } else {
            Bytes::new()
        }
    }
}

/// The header fields of a parsed head: zero-copy views into its bytes.
///
/// Cloning is cheap (a refcount bump and one small `Vec` copy).
#[derive(Clone, Debug, Default)]
pub struct Headers {
    block: Bytes,
    entries: Vec<(Span, Span)>,
}

impl Headers {
    pub(crate) fn new(block: Bytes, entries: Vec<(Span, Span)>) -> Self {
        Self { block, entries }
    }

    /// The whole head these fields were parsed from (start line included).
    pub(crate) fn block(&self) -> &Bytes {
        &self.block
    }

    /// Number of header fields (repeated names count each time).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no header fields.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All `(name, value)` pairs in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.entries
            .iter()
            .map(|&(n, v)| (n.get(&self.block), v.get(&self.block)))
    }

    /// All `(name, value)` pairs in wire order, each a refcounted slice of
    /// the head (no copy).
    pub fn iter_bytes(&self) -> impl Iterator<Item = (Bytes, Bytes)> + '_ {
        self.entries
            .iter()
            .map(|&(n, v)| (n.slice(&self.block), v.slice(&self.block)))
    }

    /// The value of the first field named `name` (ASCII case-insensitive).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// The values of every field named `name`, in wire order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// The first value of `name` as a refcounted slice of the head (no copy).
    pub fn get_bytes(&self, name: &str) -> Option<Bytes> {
        self.entries
            .iter()
            .find(|(n, _)| n.get(&self.block).eq_ignore_ascii_case(name.as_bytes()))
            .map(|&(_, v)| v.slice(&self.block))
    }

    /// True when any `name` field's comma-separated list holds `token`
    /// (ASCII case-insensitive), e.g. `has_token("connection", "close")`.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.get_all(name)
            .flat_map(list_elements)
            .any(|e| e.eq_ignore_ascii_case(token.as_bytes()))
    }
}

/// The comma-separated elements of a list-valued field, whitespace-trimmed,
/// empty elements skipped.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(|e| e.trim_ascii())
        .filter(|e| !e.is_empty())
}

/// What `Transfer-Encoding` says, across all its lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum TransferCoding {
    /// No `Transfer-Encoding` field.
    #[default]
    Absent,
    /// Exactly `chunked`.
    Chunked,
    /// Present, but chunked is not the final coding exactly once (400).
    Invalid,
    /// Another coding is applied before `chunked` (501).
    Unsupported,
}

/// The framing-relevant fields of a head, gathered in one pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSummary {
    /// The agreed `Content-Length`, if any.
    pub(crate) content_length: Option<u64>,
    /// The `Transfer-Encoding` verdict.
    pub(crate) transfer: TransferCoding,
    /// `Connection` lists `close`.
    pub(crate) close: bool,
    /// `Connection` lists `keep-alive`.
    pub(crate) keep_alive: bool,
    /// `Expect` is `100-continue`.
    pub(crate) expect_continue: bool,
}

/// Running state for `Transfer-Encoding` across several lines.
#[derive(Default)]
struct TeScan {
    present: bool,
    last_is_chunked: bool,
    chunked: u32,
    other: u32,
}

impl FieldSummary {
    /// Scan `(name, value)` pairs once. Malformed `Content-Length` values are
    /// errors here; what the framing fields mean *together* is decided by the
    /// caller, which knows the message kind.
    pub(crate) fn scan<'a, I>(fields: I) -> Result<Self, HttpError>
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        let mut out = Self::default();
        let mut te = TeScan::default();
        for (name, value) in fields {
            if name.eq_ignore_ascii_case(b"content-length") {
                let mut any = false;
                for element in list_elements(value) {
                    any = true;
                    let n = parse_decimal(element)?;
                    match out.content_length {
                        Some(prev) if prev != n => return Err(HttpError::ConflictingContentLength),
                        _ => out.content_length = Some(n),
                    }
                }
                if !any {
                    return Err(HttpError::InvalidContentLength);
                }
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                te.present = true;
                for element in list_elements(value) {
                    te.last_is_chunked = element.eq_ignore_ascii_case(b"chunked");
                    if te.last_is_chunked {
                        te.chunked += 1;
                    } else {
                        te.other += 1;
                    }
                }
            } else if name.eq_ignore_ascii_case(b"connection") {
                for element in list_elements(value) {
                    out.close |= element.eq_ignore_ascii_case(b"close");
                    out.keep_alive |= element.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name.eq_ignore_ascii_case(b"expect") {
                out.expect_continue |= value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
            }
        }
        out.transfer = match te {
            TeScan { present: false, .. } => TransferCoding::Absent,
            TeScan {
                last_is_chunked: true,
                chunked: 1,
                other: 0,
                ..
            } => TransferCoding::Chunked,
            TeScan {
                last_is_chunked: true,
                chunked: 1,
                ..
            } => TransferCoding::Unsupported,
            _ => TransferCoding::Invalid,
        };
        Ok(out)
    }
}

/// `1*DIGIT` as a `u64`, overflow-checked; no sign, no whitespace inside.
/// The agreed `Content-Length` of a message's fields (every such field, and
/// every element of a list, the same decimal), `None` when there is none;
/// a malformed or conflicting one is an error, by the rules every head
/// parsed here follows. For a relay that gets a head's fields one by one
/// (the Edge from a Node's tunnel frames) rather than as a parsed head.
pub fn content_length<'a, I>(fields: I) -> Result<Option<u64>, HttpError>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    FieldSummary::scan(fields).map(|summary| summary.content_length)
}

fn parse_decimal(digits: &[u8]) -> Result<u64, HttpError> {
    if digits.is_empty() {
        return Err(HttpError::InvalidContentLength);
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return Err(HttpError::InvalidContentLength);
        }
        acc.checked_mul(10)
            .and_then(|acc| acc.checked_add(u64::from(b - b'0')))
            .ok_or(HttpError::InvalidContentLength)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(fields: &[(&str, &str)]) -> Result<FieldSummary, HttpError> {
        FieldSummary::scan(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    fn te(values: &[&str]) -> TransferCoding {
        let fields: Vec<_> = values.iter().map(|v| ("Transfer-Encoding", *v)).collect();
        scan(&fields).unwrap().transfer
    }

    #[test]
    fn transfer_encoding_verdicts() {
        assert_eq!(te(&[]), TransferCoding::Absent);
        assert_eq!(te(&["chunked"]), TransferCoding::Chunked);
        assert_eq!(te(&["CHUNKED"]), TransferCoding::Chunked);
        assert_eq!(te(&[" , chunked ,"]), TransferCoding::Chunked);
        assert_eq!(te(&["gzip, chunked"]), TransferCoding::Unsupported);
        assert_eq!(te(&["gzip", "chunked"]), TransferCoding::Unsupported);
        assert_eq!(te(&["identity, chunked"]), TransferCoding::Unsupported);
        assert_eq!(te(&["chunked, gzip"]), TransferCoding::Invalid);
        assert_eq!(te(&["chunked", "gzip"]), TransferCoding::Invalid);
        assert_eq!(te(&["gzip"]), TransferCoding::Invalid);
        assert_eq!(te(&["chunked, chunked"]), TransferCoding::Invalid);
        assert_eq!(te(&["chunked", "chunked"]), TransferCoding::Invalid);
        assert_eq!(te(&[""]), TransferCoding::Invalid);
        assert_eq!(te(&["chunked;q=1"]), TransferCoding::Invalid);
    }

    #[test]
    fn content_length_rules() {
        let cl = |v: &[&str]| {
            let f: Vec<_> = v.iter().map(|v| ("content-length", *v)).collect();
            scan(&f).map(|s| s.content_length)
        };
        assert_eq!(cl(&[]), Ok(None));
        assert_eq!(cl(&["0"]), Ok(Some(0)));
        assert_eq!(cl(&["007"]), Ok(Some(7)));
        assert_eq!(cl(&["42", "42"]), Ok(Some(42)));
        assert_eq!(cl(&["42, 42"]), Ok(Some(42)));
        assert_eq!(cl(&["18446744073709551615"]), Ok(Some(u64::MAX)));
        assert_eq!(
            cl(&["18446744073709551616"]),
            Err(HttpError::InvalidContentLength)
        );
        assert_eq!(cl(&["42", "43"]), Err(HttpError::ConflictingContentLength));
        assert_eq!(cl(&["42, 43"]), Err(HttpError::ConflictingContentLength));
        for bad in ["", "-1", "+1", "1 2", "0x10", "1.0", "abc", " , "] {
            assert_eq!(cl(&[bad]), Err(HttpError::InvalidContentLength), "{bad:?}");
        }
        let public = |f: &[(&str, &str)]| {
            content_length(f.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
        };
        assert_eq!(
            public(&[("Content-Length", "42"), ("x", "1")]),
            Ok(Some(42))
        );
        assert_eq!(public(&[("x", "1")]), Ok(None));
        assert_eq!(
            public(&[("content-length", "1"), ("CONTENT-LENGTH", "2")]),
            Err(HttpError::ConflictingContentLength)
        );
    }

    #[test]
    fn connection_and_expect_tokens() {
        let s = scan(&[
            ("Connection", "Upgrade, Keep-Alive"),
            ("connection", "CLOSE"),
        ])
        .unwrap();
        assert!(s.close && s.keep_alive);
        let s = scan(&[("Expect", "100-Continue")]).unwrap();
        assert!(s.expect_continue);
        let s = scan(&[("Expect", "200-ok")]).unwrap();
        assert!(!s.expect_continue);
    }

    #[test]
    fn span_of_rejects_foreign_slices() {
        let base = b"hello world";
        assert_eq!(
            Span::of(base, &base[6..]).unwrap().get(base),
            b"world".as_slice()
        );
        assert_eq!(Span::of(base, b"").unwrap().get(base), b"".as_slice());
        let other = b"elsewhere";
        assert_eq!(Span::of(base, other), Err(HttpError::MalformedHead));
    }
}
