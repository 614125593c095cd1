use super::*;

fn req(bytes: &[u8]) -> Result<Option<RequestHead>, HttpError> {
    parse_request_head(&mut BytesMut::from(bytes), &HeadLimits::default())
}

fn req_ok(bytes: &[u8]) -> RequestHead {
    req(bytes).unwrap().unwrap()
}

fn res(bytes: &[u8], head_request: bool) -> Result<Option<ResponseHead>, HttpError> {
    parse_response_head(
        &mut BytesMut::from(bytes),
        &HeadLimits::default(),
        head_request,
    )
}

fn res_ok(bytes: &[u8]) -> ResponseHead {
    res(bytes, false).unwrap().unwrap()
}

/// A complete request head of exactly `len` bytes (`len >= 26`).
fn head_of_len(len: usize) -> Vec<u8> {
    let fixed = b"GET / HTTP/1.1\r\nx: \r\n\r\n".len() + 1;
    let mut head = b"GET / HTTP/1.1\r\nx: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', len - fixed + 1));
    head.extend_from_slice(b"\r\n\r\n");
    assert_eq!(head.len(), len);
    head
}

#[test]
fn parses_a_request_and_splits_only_the_head() {
    let mut buf = BytesMut::from(
        &b"POST /v1/chat?stream=1 HTTP/1.1\r\nHost: edge\r\nContent-Length: 2\r\nX-A: 1\r\nx-a: 2\r\n\r\n{}GET"[..],
    );
    let head = parse_request_head(&mut buf, &HeadLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..], b"{}GET");
    assert_eq!(head.method(), Method::Post);
    assert_eq!(head.method_bytes(), b"POST");
    assert_eq!(head.path(), b"/v1/chat?stream=1");
    assert_eq!(&head.path_bytes()[..], b"/v1/chat?stream=1");
    assert_eq!(head.version(), Version::Http11);
    assert_eq!(head.body(), BodyFraming::Length(2));
    assert!(head.keep_alive());
    assert!(!head.expects_continue());
    let h = head.headers();
    assert_eq!(h.len(), 4);
    assert_eq!(h.get("HOST"), Some(&b"edge"[..]));
    assert_eq!(h.get("x-a"), Some(&b"1"[..]));
    assert_eq!(h.get_all("X-a").collect::<Vec<_>>(), [b"1", b"2"]);
    assert_eq!(h.get("missing"), None);
    assert_eq!(h.get_bytes("host").as_deref(), Some(&b"edge"[..]));
    assert!(head.as_bytes().ends_with(b"\r\n\r\n"));
}

#[test]
fn head_views_share_the_receive_buffer() {
    let mut buf = BytesMut::with_capacity(256);
    buf.extend_from_slice(b"GET /models HTTP/1.1\r\nHost: a\r\n\r\n");
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    let head = parse_request_head(&mut buf, &HeadLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!(head.as_bytes().as_ptr() as usize, range.start);
    let path = head.path_bytes();
    assert!(range.contains(&(path.as_ptr() as usize)));
    let host = head.headers().get_bytes("host").unwrap();
    assert!(range.contains(&(host.as_ptr() as usize)));
    let all: Vec<_> = head.headers().iter_bytes().collect();
    assert_eq!(all.len(), 1);
    assert_eq!((&all[0].0[..], &all[0].1[..]), (&b"Host"[..], &b"a"[..]));
    assert!(range.contains(&(all[0].0.as_ptr() as usize)));
    assert_eq!(
        all[0].1.as_ptr(),
        host.as_ptr(),
        "the same slice, not a copy"
    );
}

#[test]
fn incomplete_head_needs_more_and_leaves_the_buffer() {
    let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\n"[..]);
    assert!(matches!(
        parse_request_head(&mut buf, &HeadLimits::default()),
        Ok(None)
    ));
    assert_eq!(buf.len(), 25);
    assert!(req(b"").unwrap().is_none());
}

#[test]
fn keep_alive_by_version_and_connection() {
    let cases: [(&[u8], bool); 7] = [
        (b"GET / HTTP/1.1\r\n\r\n", true),
        (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
        (
            b"GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n",
            false,
        ),
        (b"GET / HTTP/1.0\r\n\r\n", false),
        (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
            false,
        ),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
            false,
        ),
    ];
    for (bytes, keep_alive) in cases {
        assert_eq!(
            req_ok(bytes).keep_alive(),
            keep_alive,
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    assert_eq!(req_ok(b"GET / HTTP/1.0\r\n\r\n").version(), Version::Http10);
}

#[test]
fn expect_100_continue_only_in_http11() {
    let head = req_ok(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    assert!(head.expects_continue());
    assert!(req_ok(b"POST / HTTP/1.1\r\nexpect: 100-CONTINUE\r\n\r\n").expects_continue());
    assert!(!req_ok(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expects_continue());
    assert!(!req_ok(b"POST / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n").expects_continue());
}

#[test]
fn request_body_framing() {
    let framing = |fields: &str| req(format!("POST / HTTP/1.1\r\n{fields}\r\n").as_bytes());
    let body = |fields: &str| framing(fields).map(|h| h.unwrap().body());
    assert_eq!(body(""), Ok(BodyFraming::Empty));
    assert_eq!(body("Content-Length: 0\r\n"), Ok(BodyFraming::Length(0)));
    assert_eq!(body("Content-Length: 10\r\n"), Ok(BodyFraming::Length(10)));
    assert_eq!(
        body("Content-Length: 10\r\ncontent-length: 10\r\n"),
        Ok(BodyFraming::Length(10))
    );
    assert_eq!(
        body("Transfer-Encoding: chunked\r\n"),
        Ok(BodyFraming::Chunked)
    );
    assert_eq!(
        body("Transfer-Encoding: Chunked\r\n"),
        Ok(BodyFraming::Chunked)
    );
}

#[test]
fn request_smuggling_defences() {
    let err = |fields: &str| {
        req(format!("POST / HTTP/1.1\r\n{fields}\r\n").as_bytes())
            .err()
            .unwrap()
    };
    use HttpError::*;
    assert_eq!(
        err("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
        ContentLengthWithTransferEncoding
    );
    assert_eq!(
        err("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"),
        ContentLengthWithTransferEncoding
    );
    assert_eq!(
        err("Content-Length: 5\r\nContent-Length: 6\r\n"),
        ConflictingContentLength
    );
    assert_eq!(err("Content-Length: 5, 6\r\n"), ConflictingContentLength);
    assert_eq!(err("Content-Length: -5\r\n"), InvalidContentLength);
    assert_eq!(err("Content-Length: 5x\r\n"), InvalidContentLength);
    assert_eq!(err("Content-Length:\r\n"), InvalidContentLength);
    assert_eq!(
        err("Content-Length: 99999999999999999999\r\n"),
        InvalidContentLength
    );
    assert_eq!(
        err("Transfer-Encoding: gzip, chunked\r\n"),
        UnsupportedTransferEncoding
    );
    assert_eq!(
        err("Transfer-Encoding: chunked, gzip\r\n"),
        InvalidTransferEncoding
    );
    assert_eq!(err("Transfer-Encoding: gzip\r\n"), InvalidTransferEncoding);
    assert_eq!(
        err("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
        InvalidTransferEncoding
    );
    assert_eq!(
        err("Transfer-Encoding: xchunked\r\n"),
        InvalidTransferEncoding
    );
    // obs-fold, whitespace before the colon, and control bytes never parse.
    assert_eq!(
        err("Transfer-Encoding: gzip\r\n , chunked\r\n"),
        InvalidHeaderName
    );
    assert_eq!(err("Transfer-Encoding : chunked\r\n"), InvalidHeaderName);
    assert_eq!(err("X-A: b\0c\r\n"), InvalidHeaderValue);
    assert_eq!(err("X-A: b\rc\r\n"), InvalidHeaderValue);
    assert_eq!(err("X\x01A: b\r\n"), InvalidHeaderName);
    assert_eq!(UnsupportedTransferEncoding.suggested_status(), 501);
    assert_eq!(ContentLengthWithTransferEncoding.suggested_status(), 400);

    let http10 = req(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(http10.err(), Some(TransferEncodingInHttp10));
}

#[test]
fn malformed_start_lines() {
    assert_eq!(
        req(b"GET / HTTP/2.0\r\n\r\n").err(),
        Some(HttpError::UnsupportedVersion)
    );
    assert_eq!(
        req(b"GET / HTTX/1.1\r\n\r\n").err(),
        Some(HttpError::UnsupportedVersion)
    );
    assert_eq!(
        req(b"G(T / HTTP/1.1\r\n\r\n").err(),
        Some(HttpError::MalformedHead)
    );
    assert_eq!(
        req(b"GET  HTTP/1.1\r\n\r\n").err(),
        Some(HttpError::MalformedHead)
    );
    assert_eq!(
        req(b"GET /a\rb HTTP/1.1\r\n\r\n").err(),
        Some(HttpError::MalformedHead)
    );
    assert_eq!(HttpError::UnsupportedVersion.suggested_status(), 505);
    // Bare LF line endings in heads are accepted (RFC 9112 §2.2).
    assert_eq!(
        req_ok(b"GET / HTTP/1.1\nHost: a\n\n").headers().get("host"),
        Some(&b"a"[..])
    );
}

#[test]
fn head_size_limit_at_the_bound_and_one_past() {
    let limits = HeadLimits {
        max_head_bytes: 100,
        ..HeadLimits::default()
    };
    // Exactly the limit parses, even with more bytes behind it.
    let mut buf = BytesMut::from(&head_of_len(100)[..]);
    buf.extend_from_slice(b"body");
    assert!(parse_request_head(&mut buf, &limits).unwrap().is_some());
    assert_eq!(&buf[..], b"body");
    // One byte more does not.
    let mut buf = BytesMut::from(&head_of_len(101)[..]);
    let error = HttpError::HeadTooLarge { limit: 100 };
    assert_eq!(
        parse_request_head(&mut buf, &limits).err(),
        Some(error.clone())
    );
    assert_eq!(error.suggested_status(), 431);
    // An incomplete head may fill the limit, not pass it.
    let head = head_of_len(200);
    let mut buf = BytesMut::from(&head[..100]);
    assert!(parse_request_head(&mut buf, &limits).unwrap().is_none());
    buf.extend_from_slice(&head[100..101]);
    assert_eq!(parse_request_head(&mut buf, &limits).err(), Some(error));
    // The same bound applies to responses.
    let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nx: "[..]);
    buf.extend_from_slice(&[b'a'; 81]);
    assert_eq!(
        parse_response_head(&mut buf, &limits, false).err(),
        Some(HttpError::HeadTooLarge { limit: 100 })
    );
}

#[test]
fn head_size_limit_is_clamped() {
    let limits = HeadLimits {
        max_head_bytes: usize::MAX,
        ..HeadLimits::default()
    };
    assert_eq!(limits.effective_head_bytes(), MAX_HEAD_BYTES_CEILING);
    let mut buf = BytesMut::from(&head_of_len(MAX_HEAD_BYTES_CEILING)[..]);
    assert!(parse_request_head(&mut buf, &limits).unwrap().is_some());
    let mut buf = BytesMut::from(&head_of_len(MAX_HEAD_BYTES_CEILING + 1)[..]);
    assert_eq!(
        parse_request_head(&mut buf, &limits).err(),
        Some(HttpError::HeadTooLarge {
            limit: MAX_HEAD_BYTES_CEILING
        })
    );
}

fn with_fields(n: usize) -> Vec<u8> {
    let mut head = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..n {
        head.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    head
}

#[test]
fn header_count_at_the_bound_and_one_past() {
    for max in [0, 3, DEFAULT_MAX_HEADERS, MAX_HEADERS_CEILING] {
        let limits = HeadLimits {
            max_headers: max,
            max_head_bytes: MAX_HEAD_BYTES_CEILING,
        };
        let mut buf = BytesMut::from(&with_fields(max)[..]);
        let head = parse_request_head(&mut buf, &limits).unwrap().unwrap();
        assert_eq!(head.headers().len(), max);
        let mut buf = BytesMut::from(&with_fields(max + 1)[..]);
        assert_eq!(
            parse_request_head(&mut buf, &limits).err(),
            Some(HttpError::TooManyHeaders { limit: max })
        );
    }
    let clamped = HeadLimits {
        max_headers: 10_000,
        max_head_bytes: MAX_HEAD_BYTES_CEILING,
    };
    let mut buf = BytesMut::from(&with_fields(MAX_HEADERS_CEILING + 1)[..]);
    assert_eq!(
        parse_request_head(&mut buf, &clamped).err(),
        Some(HttpError::TooManyHeaders {
            limit: MAX_HEADERS_CEILING
        })
    );
}

#[test]
fn response_heads_and_framing() {
    let head = res_ok(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    assert_eq!((head.status(), head.reason()), (200, &b"OK"[..]));
    assert_eq!(head.body(), BodyFraming::Chunked);
    assert!(head.keep_alive());

    let head = res_ok(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n");
    assert_eq!(
        (head.body(), head.reason()),
        (BodyFraming::Length(9), &b"Not Found"[..])
    );

    let head = res_ok(b"HTTP/1.1 200 OK\r\n\r\n");
    assert_eq!(head.body(), BodyFraming::CloseDelimited);
    assert!(
        !head.keep_alive(),
        "a close-delimited body ends the connection"
    );

    let head = res_ok(b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(
        (head.reason(), head.body()),
        (&b""[..], BodyFraming::Length(0))
    );

    let head = res_ok(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n");
    assert!(!head.keep_alive());
    assert_eq!(head.version(), Version::Http10);
    let head = res_ok(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n");
    assert!(head.keep_alive());
    let head = res_ok(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n");
    assert!(!head.keep_alive());
}

#[test]
fn responses_without_bodies() {
    for status in [
        "100 Continue",
        "103 Early Hints",
        "204 No Content",
        "304 Not Modified",
    ] {
        let bytes = format!(
            "HTTP/1.1 {status}\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let head = res(bytes.as_bytes(), false).unwrap().unwrap();
        assert_eq!(head.body(), BodyFraming::Empty, "{status}");
        assert!(head.keep_alive());
    }
    let bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
    assert_eq!(
        res(bytes, true).unwrap().unwrap().body(),
        BodyFraming::Empty
    );
    assert_eq!(
        res(bytes, false).unwrap().unwrap().body(),
        BodyFraming::Length(10)
    );
}

#[test]
fn response_errors() {
    let err = |bytes: &[u8]| res(bytes, false).err().unwrap();
    assert_eq!(err(b"HTTP/1.1 099 Odd\r\n\r\n"), HttpError::InvalidStatus);
    assert_eq!(err(b"HTTP/1.1 20 OK\r\n\r\n"), HttpError::MalformedHead);
    assert_eq!(
        err(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
        HttpError::ContentLengthWithTransferEncoding
    );
    assert_eq!(
        err(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        HttpError::UnsupportedTransferEncoding
    );
    assert_eq!(
        err(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
        HttpError::InvalidTransferEncoding
    );
    assert_eq!(
        err(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
        HttpError::TransferEncodingInHttp10
    );
    assert_eq!(
        err(b"HTTP/1.1 200 OK\r\nA: 1\r\n folded\r\n\r\n"),
        HttpError::InvalidHeaderName
    );
    assert_eq!(
        err(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
        HttpError::ConflictingContentLength
    );
}
