//! What a long answer keeps of its connection: the request's own copies
//! (see the module docs of `ingress::http`; the small watching read is
//! tested with `ClientRead`).

use super::*;

fn limits(max_head_bytes: usize) -> HeadLimits {
    HeadLimits {
        max_head_bytes,
        ..HeadLimits::default()
    }
}

/// `parse_head_owned` answers exactly as `parse_request_head` on the same
/// bytes, and consumes the same bytes.
#[test]
fn an_owned_head_parses_as_the_buffer_would() {
    let inputs: [&[u8]; 7] = [
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\n{}",
        b"GET / HTTP/1.1\r\nhost: a\r\n\r\nGET /next HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\nhost: a\n\n{\"a\":\"\r\n\r\n\"}",
        b"GET / HTTP/1.1\r\nhost: a\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\nx-long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\nx-long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        b"BAD\x01 / HTTP/1.1\r\n\r\n",
    ];
    for input in inputs {
        for limit in [48, 4096] {
            let limits = limits(limit);
            let mut plain = BytesMut::from(input);
            let mut owned = BytesMut::from(input);
            let expected = parse_request_head(&mut plain, &limits);
            let got = parse_head_owned(&mut owned, &limits);
            let shown = String::from_utf8_lossy(input);
            assert_eq!(
                format!("{got:?}"),
                format!("{expected:?}"),
                "{shown:?} at {limit}"
            );
            assert_eq!(owned, plain, "{shown:?} at {limit}: bytes left");
        }
    }
}

#[test]
fn an_owned_head_and_small_body_pin_no_read_buffer() {
    let input = b"POST /v1/x HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\n{}";
    let mut buf = BytesMut::with_capacity(4096);
    buf.extend_from_slice(input);
    let buffer = buf.as_ptr() as usize..buf.as_ptr() as usize + 4096;
    let head = parse_head_owned(&mut buf, &limits(4096)).unwrap().unwrap();
    assert_eq!(head.path(), b"/v1/x");
    assert!(!buffer.contains(&(head.path().as_ptr() as usize)));
    assert_eq!(&buf[..], b"{}", "the body stays to be read");
}
