use super::*;

/// Decode all of `input` at once: concatenated data, whether `End` came,
/// and what is left in the buffer.
fn decode_all(input: &[u8]) -> Result<(Vec<u8>, bool, Vec<u8>), HttpError> {
    let mut decoder = ChunkedDecoder::new();
    let mut buf = BytesMut::from(input);
    let mut data = Vec::new();
    let mut ended = false;
    while let Some(item) = decoder.decode(&mut buf)? {
        match item {
            BodyItem::Data(d) => {
                assert!(!d.is_empty());
                data.extend_from_slice(&d);
            }
            BodyItem::End => ended = true,
        }
    }
    Ok((data, ended, buf.to_vec()))
}

fn err(input: &[u8]) -> HttpError {
    decode_all(input).err().unwrap()
}

fn frame_bytes(frame: ChunkFrame) -> Vec<u8> {
    frame.into_parts().concat()
}

#[test]
fn encoder_writes_hex_sizes_beside_the_body() {
    let mut enc = ChunkedEncoder::new();
    for (len, line) in [
        (1, "1\r\n"),
        (15, "f\r\n"),
        (255, "ff\r\n"),
        (0x10000, "10000\r\n"),
    ] {
        let body = Bytes::from(vec![b'x'; len]);
        let frame = enc.encode(body.clone()).unwrap();
        assert_eq!(&frame.head()[..], line.as_bytes());
        assert_eq!(
            frame.body().as_ptr(),
            body.as_ptr(),
            "the body is not copied"
        );
        assert_eq!(&frame.tail()[..], b"\r\n");
        assert_eq!(frame.remaining(), line.len() + len + 2);
    }
    assert_eq!(
        enc.encode(Bytes::new()),
        None,
        "an empty body never becomes a chunk"
    );
    assert_eq!(&ChunkedEncoder::last_chunk()[..], LAST_CHUNK);
}

#[test]
fn a_lone_chunk_is_the_encoders_chunk() {
    let mut enc = ChunkedEncoder::new();
    for len in [1u64, 15, 16, 255, 0x1_0000, u64::from(u32::MAX), u64::MAX] {
        assert_eq!(ChunkedEncoder::lone_size_line(len), enc.size_line(len));
    }
    let body = Bytes::from_static(b"hello");
    let lone = ChunkedEncoder::lone_chunk(body.clone()).unwrap();
    assert_eq!(
        lone.body().as_ptr(),
        body.as_ptr(),
        "the body is not copied"
    );
    assert_eq!(frame_bytes(lone), frame_bytes(enc.encode(body).unwrap()));
    assert_eq!(ChunkedEncoder::lone_size_line(0), None);
    assert_eq!(ChunkedEncoder::lone_chunk(Bytes::new()), None);
}

#[test]
fn a_chunk_of_several_slices_decodes_as_their_concatenation() {
    let mut enc = ChunkedEncoder::new();
    let slices = [&b"data: a"[..], b"bc\n", b"\n"];
    let len = slices.iter().map(|s| s.len() as u64).sum();
    let mut wire = enc.size_line(len).unwrap().to_vec();
    assert_eq!(&wire[..], b"b\r\n");
    for slice in slices {
        wire.extend_from_slice(slice);
    }
    wire.extend_from_slice(&ChunkedEncoder::crlf());
    wire.extend_from_slice(LAST_CHUNK);
    let (body, ended, rest) = decode_all(&wire).unwrap();
    assert_eq!(body, b"data: abc\n\n");
    assert!(ended && rest.is_empty());
    assert_eq!(
        enc.size_line(0),
        None,
        "a zero size line would end the body"
    );
}

#[test]
fn size_lines_share_one_scratch_block() {
    let mut enc = ChunkedEncoder::new();
    let a = enc.encode(Bytes::from_static(b"abc")).unwrap();
    let b = enc.encode(Bytes::from_static(b"defg")).unwrap();
    assert_eq!(
        a.head().as_ptr() as usize + a.head().len(),
        b.head().as_ptr() as usize
    );
    // Many frames later the encoder has moved on to a fresh block, fine.
    for _ in 0..1000 {
        assert!(enc.encode(Bytes::from_static(b"z")).is_some());
    }
}

#[test]
fn chunk_frame_is_a_buf() {
    let mut enc = ChunkedEncoder::new();
    let frame = enc.encode(Bytes::from_static(b"hello")).unwrap();
    let mut slices = [IoSlice::new(&[]); 4];
    assert_eq!(frame.chunks_vectored(&mut slices), 3);
    assert_eq!(&*slices[1], b"hello");
    assert_eq!(frame.io_slices().map(|s| s.len()), [3, 5, 2]);

    let mut buf = frame.clone();
    let mut out = Vec::new();
    while buf.has_remaining() {
        let n = buf.chunk().len().min(2);
        out.extend_from_slice(&buf.chunk()[..n]);
        buf.advance(n);
    }
    assert_eq!(out, b"5\r\nhello\r\n");

    let mut buf = frame.clone();
    buf.advance(3);
    let body = buf.copy_to_bytes(5);
    assert_eq!(
        body.as_ptr(),
        frame.body().as_ptr(),
        "copy_to_bytes inside a part is zero-copy"
    );
    let mut buf = frame.clone();
    buf.advance(1);
    assert_eq!(&buf.copy_to_bytes(6)[..], b"\r\nhell");
    assert_eq!(&buf.copy_to_bytes(3)[..], b"o\r\n");
    assert_eq!(buf.remaining(), 0);
    assert_eq!(buf.chunk(), b"");
    assert_eq!(frame_bytes(frame), b"5\r\nhello\r\n");
}

#[test]
fn decodes_chunks_then_trailers_and_stops_at_the_body_end() {
    let input = b"5\r\nhello\r\n6;name=value\r\n world\r\n0\r\nX-Usage: 12\r\n\r\nHTTP/1.1 200";
    assert_eq!(
        decode_all(input),
        Ok((b"hello world".to_vec(), true, b"HTTP/1.1 200".to_vec()))
    );
    assert_eq!(decode_all(b"0\r\n\r\n"), Ok((vec![], true, vec![])));
    assert_eq!(
        decode_all(b"A\r\n0123456789\r\n000;x\r\n\r\n").unwrap().0,
        b"0123456789"
    );
}

#[test]
fn partial_chunks_stream_and_share_the_receive_buffer() {
    let body: Vec<u8> = (0..64 * 1024).map(|i| i as u8).collect();
    let mut wire = b"10000\r\n".to_vec();
    wire.extend_from_slice(&body);
    wire.extend_from_slice(b"\r\n0\r\n\r\n");

    let mut decoder = ChunkedDecoder::new();
    let mut buf = BytesMut::with_capacity(wire.len());
    let mut out = Vec::new();
    for read in wire.chunks(1000) {
        buf.extend_from_slice(read);
        let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
        while let Some(item) = decoder.decode(&mut buf).unwrap() {
            if let BodyItem::Data(data) = item {
                let start = data.as_ptr() as usize;
                assert!(
                    range.contains(&start) && start + data.len() <= range.end,
                    "zero copy"
                );
                out.extend_from_slice(&data);
            }
        }
        assert!(buf.len() < 1000, "data is handed out, not buffered");
    }
    assert!(decoder.is_done());
    assert_eq!(out, body);
}

#[test]
fn every_split_point_gives_the_same_result() {
    let input: &[u8] = b"3;a=\"q\"\r\nabc\r\n1\r\nd\r\n0\r\nT: 1\r\n\r\nrest";
    let whole = decode_all(input).unwrap();
    for cut in 0..=input.len() {
        let mut decoder = ChunkedDecoder::new();
        let mut buf = BytesMut::new();
        let mut data = Vec::new();
        let mut ended = false;
        for part in [&input[..cut], &input[cut..]] {
            buf.extend_from_slice(part);
            while let Some(item) = decoder.decode(&mut buf).unwrap() {
                match item {
                    BodyItem::Data(d) => data.extend_from_slice(&d),
                    BodyItem::End => ended = true,
                }
            }
        }
        assert_eq!((data, ended, buf.to_vec()), whole, "cut at {cut}");
    }
}

#[test]
fn chunk_sizes() {
    assert_eq!(
        decode_all(b"0000000000000000000001\r\nx\r\n0\r\n\r\n")
            .unwrap()
            .0,
        b"x"
    );
    let mut d = ChunkedDecoder::new();
    let mut buf = BytesMut::from(&b"ffffffffffffffff\r\nabc"[..]);
    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(BodyItem::Data(Bytes::from_static(b"abc"))))
    );
    assert_eq!(err(b"10000000000000000\r\n"), HttpError::ChunkSizeOverflow);
    for bad in [
        &b"\r\n"[..],
        b"-1\r\n",
        b"0x5\r\n",
        b" 5\r\n",
        b"5 \r\n",
        b"5x\r\n",
        b"+5\r\n",
        b"g\r\n",
    ] {
        assert_eq!(
            err(bad),
            HttpError::InvalidChunkSize,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn chunk_extensions() {
    assert_eq!(decode_all(b"1 ;a\r\nx\r\n0\r\n\r\n").unwrap().0, b"x");
    assert_eq!(
        decode_all(b"1\t; a = \"b c\"\r\nx\r\n0\r\n\r\n").unwrap().0,
        b"x"
    );
    assert_eq!(err(b"1;a\x00\r\n"), HttpError::InvalidChunkExtension);
    assert_eq!(err(b"1;a\x7f\r\n"), HttpError::InvalidChunkExtension);
}

#[test]
fn line_endings_must_be_crlf() {
    use HttpError::*;
    assert_eq!(err(b"5\nhello\r\n0\r\n\r\n"), InvalidChunkLineEnding);
    assert_eq!(err(b"\n"), InvalidChunkLineEnding);
    assert_eq!(err(b"5\r\r\nhello"), InvalidChunkLineEnding);
    assert_eq!(err(b"5;a\rb\r\nhello"), InvalidChunkLineEnding);
    assert_eq!(err(b"5;a\nhello\r\n"), InvalidChunkLineEnding);
    assert_eq!(err(b"5\r\nhelloX"), MissingChunkTerminator);
    assert_eq!(err(b"5\r\nhello\n0\r\n\r\n"), MissingChunkTerminator);
    assert_eq!(err(b"5\r\nhello\rX"), MissingChunkTerminator);
    assert_eq!(err(b"5\r\nhello world\r\n"), MissingChunkTerminator);
    assert_eq!(err(b"0\r\nA: b\n\r\n"), InvalidChunkLineEnding);
    assert_eq!(err(b"0\r\n\n"), InvalidChunkLineEnding);
    assert_eq!(err(b"0\r\nA: b\rc\r\n\r\n"), InvalidChunkLineEnding);
    // Incomplete but valid so far: need more.
    assert_eq!(
        decode_all(b"5\r\nhello\r"),
        Ok((b"hello".to_vec(), false, b"\r".to_vec()))
    );
}

#[test]
fn trailer_lines_must_look_like_fields() {
    assert_eq!(err(b"0\r\n folded: x\r\n\r\n"), HttpError::InvalidTrailer);
    assert_eq!(err(b"0\r\nno colon\r\n\r\n"), HttpError::InvalidTrailer);
    assert_eq!(err(b"0\r\nA: \x01\r\n\r\n"), HttpError::InvalidTrailer);
}

/// A size line `1;xxxx...\r\n` of exactly `len` bytes.
fn size_line_of_len(len: usize) -> Vec<u8> {
    let mut line = b"1;".to_vec();
    line.extend(std::iter::repeat_n(b'e', len - 4));
    line.extend_from_slice(b"\r\n");
    line
}

#[test]
fn size_line_limit_at_the_bound_and_one_past() {
    let mut ok = size_line_of_len(MAX_CHUNK_SIZE_LINE);
    ok.extend_from_slice(b"x\r\n0\r\n\r\n");
    assert_eq!(decode_all(&ok).unwrap().0, b"x");

    let too_long = HttpError::ChunkSizeLineTooLong {
        limit: MAX_CHUNK_SIZE_LINE,
    };
    assert_eq!(err(&size_line_of_len(MAX_CHUNK_SIZE_LINE + 1)), too_long);
    // Without any line end, the limit stops buffering as soon as it is full.
    let mut d = ChunkedDecoder::new();
    let mut buf = BytesMut::from(&vec![b'0'; MAX_CHUNK_SIZE_LINE - 1][..]);
    assert_eq!(d.decode(&mut buf), Ok(None));
    buf.extend_from_slice(b"0");
    assert_eq!(d.decode(&mut buf), Err(too_long));
}

#[test]
fn extension_budget_at_the_bound_and_one_past() {
    // Each line `1;<ext>\r\n` carries ext_len = line_len - 3 extension bytes.
    let per_line = MAX_CHUNK_SIZE_LINE - 3;
    let full_lines = CHUNKED_EXTENSIONS_LIMIT / per_line;
    let rest = CHUNKED_EXTENSIONS_LIMIT - full_lines * per_line;
    let body = |last_ext: usize| {
        let mut wire = Vec::new();
        for _ in 0..full_lines {
            wire.extend(size_line_of_len(MAX_CHUNK_SIZE_LINE));
            wire.extend_from_slice(b"x\r\n");
        }
        wire.extend(size_line_of_len(last_ext + 3));
        wire.extend_from_slice(b"x\r\n0\r\n\r\n");
        wire
    };
    assert_eq!(decode_all(&body(rest)).unwrap().0.len(), full_lines + 1);
    assert_eq!(
        err(&body(rest + 1)),
        HttpError::ChunkExtensionsTooLarge {
            limit: CHUNKED_EXTENSIONS_LIMIT
        }
    );
}

#[test]
fn trailer_limit_at_the_bound_and_one_past() {
    // Trailer section = one field line of `len - 2` bytes + the final CRLF.
    let body = |len: usize| {
        let mut wire = b"0\r\nx:".to_vec();
        wire.extend(std::iter::repeat_n(b'v', len - 2 - 4));
        wire.extend_from_slice(b"\r\n\r\n");
        wire
    };
    assert_eq!(
        decode_all(&body(MAX_TRAILER_BYTES)),
        Ok((vec![], true, vec![]))
    );
    assert_eq!(
        err(&body(MAX_TRAILER_BYTES + 1)),
        HttpError::TrailersTooLarge {
            limit: MAX_TRAILER_BYTES
        }
    );
    // Many short lines count together.
    let mut wire = b"0\r\n".to_vec();
    for _ in 0..=MAX_TRAILER_BYTES / 5 {
        wire.extend_from_slice(b"a:b\r\n");
    }
    assert!(matches!(err(&wire), HttpError::TrailersTooLarge { .. }));
}

#[test]
fn done_decoder_leaves_the_buffer_alone() {
    let mut d = ChunkedDecoder::new();
    let mut buf = BytesMut::from(&b"0\r\n\r\n"[..]);
    assert_eq!(d.decode(&mut buf), Ok(Some(BodyItem::End)));
    buf.extend_from_slice(b"1\r\nx\r\n");
    assert_eq!(d.decode(&mut buf), Ok(None));
    assert_eq!(buf.len(), 6);
    assert!(d.is_done());
}
