//! Request parser tests through the public API: every accepted form and every error,
//! chunking independence, hostile sizes, and property tests.

use bytes::{Bytes, BytesMut};
use flockd_proto::{Limits, ProtocolError, Request, RequestParser};
use proptest::prelude::*;

fn req(args: &[&[u8]]) -> Request {
    Request {
        args: args.iter().map(|a| Bytes::copy_from_slice(a)).collect(),
    }
}

/// Feeds `input` in chunks of `step` bytes, collecting requests until the first error.
fn feed_chunked(
    input: &[u8],
    step: usize,
    limits: &Limits,
) -> (Vec<Request>, Option<ProtocolError>) {
    let mut parser = RequestParser::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in input.chunks(step.max(1)) {
        buf.extend_from_slice(chunk);
        loop {
            match parser.parse(&mut buf, limits) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fn parse_all(input: &[u8]) -> (Vec<Request>, Option<ProtocolError>) {
    feed_chunked(input, input.len().max(1), &Limits::default())
}

fn parse_err(input: &[u8], limits: &Limits) -> ProtocolError {
    let (_, err) = feed_chunked(input, input.len().max(1), limits);
    err.unwrap_or_else(|| panic!("expected an error for {:?}", String::from_utf8_lossy(input)))
}

/// Encodes a request as a client would.
fn encode_request(args: &[Bytes]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[test]
fn multibulk_basic() {
    let (reqs, err) = parse_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\n\0x\r\n");
    assert_eq!(err, None);
    assert_eq!(reqs, vec![req(&[b"SET", b"k", b"v\r\n\0x"])]);
    let (reqs, _) = parse_all(b"*1\r\n$0\r\n\r\n");
    assert_eq!(reqs, vec![req(&[b""])]);
}

#[test]
fn needs_more_then_completes_and_consumes_exactly() {
    let mut p = RequestParser::new();
    let mut buf = BytesMut::from(&b"*2\r\n$4\r\nECHO\r\n$5\r\nhel"[..]);
    let limits = Limits::default();
    assert_eq!(p.parse(&mut buf, &limits), Ok(None));
    // The finished argument and both headers left the buffer; the partial payload stayed.
    assert_eq!(&buf[..], b"hel");
    assert_eq!(p.pending_bytes(), 4 + 4 + 6 + 4);
    buf.extend_from_slice(b"lo\r\n*1\r\n$4\r\nPING\r\n");
    assert_eq!(
        p.parse(&mut buf, &limits),
        Ok(Some(req(&[b"ECHO", b"hello"])))
    );
    assert_eq!(p.pending_bytes(), 0);
    assert_eq!(p.parse(&mut buf, &limits), Ok(Some(req(&[b"PING"]))));
    assert!(buf.is_empty());
    assert_eq!(p.parse(&mut buf, &limits), Ok(None));
}

#[test]
fn empty_multibulks_are_skipped() {
    let (reqs, err) = parse_all(b"*0\r\n*-1\r\n*-5\r\n*1\r\n$4\r\nPING\r\n*0\r\n");
    assert_eq!(err, None);
    assert_eq!(reqs, vec![req(&[b"PING"])]);
    // A long run of them is handled in a loop, not by recursion.
    let input = b"*0\r\n".repeat(200_000);
    assert_eq!(parse_all(&input), (vec![], None));
}

#[test]
fn multibulk_length_errors() {
    let l = Limits::default();
    for bad in [
        &b"*x\r\n"[..],
        b"*\r\n",
        b"*1x\r\n",
        b"*01\r\n",
        b"*+1\r\n",
        b"*-0\r\n",
        b"*1\n",
        b"*99999999999999999999\r\n",
    ] {
        assert_eq!(
            parse_err(bad, &l),
            ProtocolError::InvalidMultibulkLength,
            "{bad:?}"
        );
    }
    let small = Limits {
        max_args: 3,
        ..Limits::default()
    };
    assert_eq!(
        parse_err(b"*4\r\n", &small),
        ProtocolError::InvalidMultibulkLength
    );
    let (reqs, err) = feed_chunked(&encode_request(&vec![Bytes::new(); 3]), 100, &small);
    assert_eq!((reqs.len(), err), (1, None));
}

#[test]
fn bulk_length_errors() {
    let l = Limits::default();
    for bad in [
        &b"*1\r\n$-1\r\n"[..],
        b"*1\r\n$x\r\n",
        b"*1\r\n$\r\n",
        b"*1\r\n$01\r\n",
        b"*1\r\n$1 \r\n",
        b"*1\r\n$3\n",
        b"*1\r\n$999999999999\r\n",
        b"*1\r\n$99999999999999999999999\r\n",
        b"*1\r\n$536870913\r\n",
    ] {
        assert_eq!(
            parse_err(bad, &l),
            ProtocolError::InvalidBulkLength,
            "{bad:?}"
        );
    }
    // Exactly the limit is fine (and waits for the data).
    let mut p = RequestParser::new();
    let mut buf = BytesMut::from(&b"*1\r\n$536870912\r\n"[..]);
    assert_eq!(p.parse(&mut buf, &l), Ok(None));
    let small = Limits {
        max_bulk_len: 4,
        ..Limits::default()
    };
    assert_eq!(
        parse_err(b"*1\r\n$5\r\nhello\r\n", &small),
        ProtocolError::InvalidBulkLength
    );
}

#[test]
fn expected_dollar() {
    let l = Limits::default();
    assert_eq!(
        parse_err(b"*1\r\n:1\r\n", &l),
        ProtocolError::ExpectedDollar(b':')
    );
    assert_eq!(
        parse_err(b"*2\r\n$1\r\na\r\nx", &l),
        ProtocolError::ExpectedDollar(b'x')
    );
    assert_eq!(
        ProtocolError::ExpectedDollar(b'x').to_string(),
        "expected '$', got 'x'"
    );
    assert_eq!(
        ProtocolError::ExpectedDollar(b'*').to_reply_text(),
        "ERR Protocol error: expected '$', got '*'"
    );
    assert_eq!(
        ProtocolError::ExpectedDollar(0xff).to_string(),
        "expected '$', got '?'"
    );
}

#[test]
fn deep_nesting_is_just_an_error() {
    let input = b"*1\r\n".repeat(100_000);
    for step in [1, 7, input.len()] {
        let (reqs, err) = feed_chunked(&input, step, &Limits::default());
        assert!(reqs.is_empty());
        assert_eq!(err, Some(ProtocolError::ExpectedDollar(b'*')));
    }
}

#[test]
fn payload_must_end_with_crlf() {
    let l = Limits::default();
    for bad in [
        &b"*1\r\n$1\r\nab\r\n"[..],
        b"*1\r\n$1\r\na\n\r",
        b"*1\r\n$0\r\nxx",
    ] {
        assert_eq!(
            parse_err(bad, &l),
            ProtocolError::MissingBulkCrlf,
            "{bad:?}"
        );
    }
    // Incomplete is not an error yet.
    assert_eq!(parse_all(b"*1\r\n$1\r\na\r"), (vec![], None));
}

#[test]
fn header_lines_are_bounded() {
    let l = Limits::default();
    let mut long = b"*".to_vec();
    long.extend(std::iter::repeat_n(b'1', 64 * 1024 + 10));
    assert_eq!(parse_err(&long, &l), ProtocolError::TooBigMbulkCountString);
    let mut long = b"*1\r\n$".to_vec();
    long.extend(std::iter::repeat_n(b'1', 64 * 1024 + 10));
    assert_eq!(parse_err(&long, &l), ProtocolError::TooBigBulkCountString);
    // Same error however it trickles in.
    let small = Limits {
        max_inline_len: 16,
        ..Limits::default()
    };
    let input = b"*1\r\n$00000000000000000000000000\r\n";
    for step in 1..input.len() {
        assert_eq!(
            feed_chunked(input, step, &small).1,
            Some(ProtocolError::TooBigBulkCountString)
        );
    }
    // Up to 64 KiB without a newline is just "need more".
    let mut p = RequestParser::new();
    let mut buf = BytesMut::from(&b"*1"[..]);
    buf.extend(std::iter::repeat_n(b'1', 1000));
    assert_eq!(p.parse(&mut buf, &l), Ok(None));
}

#[test]
fn inline_requests() {
    let (reqs, err) = parse_all(b"PING\r\nSET k \"a b\\x41\"\nGET 'it\\'s'\r\n");
    assert_eq!(err, None);
    assert_eq!(
        reqs,
        vec![
            req(&[b"PING"]),
            req(&[b"SET", b"k", b"a bA"]),
            req(&[b"GET", b"it's"]),
        ]
    );
    // Blank lines are skipped; a line is complete only at its \n.
    let (reqs, err) = parse_all(b"\r\n\n   \r\n\t\nPING\r\nPING");
    assert_eq!(err, None);
    assert_eq!(reqs, vec![req(&[b"PING"])]);
    // A bare \r inside a line belongs to the line (only the final one is stripped).
    let (reqs, _) = parse_all(b"A\rB\r\r\n");
    assert_eq!(reqs, vec![req(&[b"A", b"B"])]);
    // Inline and multibulk mix on one connection.
    let (reqs, _) = parse_all(b"PING\r\n*1\r\n$4\r\nPING\r\nPING\n");
    assert_eq!(reqs.len(), 3);
}

#[test]
fn inline_errors() {
    let l = Limits::default();
    assert_eq!(
        parse_err(b"SET \"abc\r\n", &l),
        ProtocolError::UnbalancedQuotes
    );
    assert_eq!(
        parse_err(b"SET 'a'b\r\n", &l),
        ProtocolError::UnbalancedQuotes
    );
    let long = vec![b'a'; 64 * 1024 + 1];
    assert_eq!(parse_err(&long, &l), ProtocolError::TooBigInlineRequest);
    let mut long_line = vec![b'a'; 64 * 1024 + 1];
    long_line.extend_from_slice(b"\r\n");
    assert_eq!(
        parse_err(&long_line, &l),
        ProtocolError::TooBigInlineRequest
    );
    let mut fits = vec![b'a'; 64 * 1024];
    fits.push(b'\n');
    let (reqs, err) = parse_all(&fits);
    assert_eq!((reqs.len(), err), (1, None));
    let small = Limits {
        max_args: 2,
        ..Limits::default()
    };
    assert_eq!(
        parse_err(b"a b c\r\n", &small),
        ProtocolError::InvalidMultibulkLength
    );
    assert_eq!(
        ProtocolError::UnbalancedQuotes.to_reply_text(),
        "ERR Protocol error: unbalanced quotes in request"
    );
}

#[test]
fn error_texts_are_redis_texts() {
    let texts = [
        (
            ProtocolError::InvalidMultibulkLength,
            "invalid multibulk length",
        ),
        (ProtocolError::InvalidBulkLength, "invalid bulk length"),
        (ProtocolError::TooBigInlineRequest, "too big inline request"),
        (
            ProtocolError::TooBigMbulkCountString,
            "too big mbulk count string",
        ),
        (
            ProtocolError::TooBigBulkCountString,
            "too big bulk count string",
        ),
        (
            ProtocolError::UnbalancedQuotes,
            "unbalanced quotes in request",
        ),
    ];
    for (e, text) in texts {
        assert_eq!(e.to_string(), text);
        assert_eq!(e.to_reply_text(), format!("ERR Protocol error: {text}"));
    }
}

/// A pipeline mixing every accepted form, split at every offset, gives the same requests.
#[test]
fn split_at_every_offset() {
    let mut input = Vec::new();
    input.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$10\r\nva\r\nl\0ue!!\r\n");
    input.extend_from_slice(b"*0\r\n\r\nPING\r\n*1\r\n$0\r\n\r\n");
    input.extend_from_slice(b"ECHO \"x\\ny\" 'z'\n*-1\r\n*2\r\n$4\r\nECHO\r\n$1\r\n*\r\n");
    let (expected, err) = parse_all(&input);
    assert_eq!(err, None);
    assert_eq!(expected.len(), 5);
    for cut in 0..=input.len() {
        let mut p = RequestParser::new();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for part in [&input[..cut], &input[cut..]] {
            buf.extend_from_slice(part);
            while let Some(r) = p.parse(&mut buf, &Limits::default()).unwrap() {
                got.push(r);
            }
        }
        assert_eq!(got, expected, "cut at {cut}");
    }
    for step in 1..=16 {
        assert_eq!(
            feed_chunked(&input, step, &Limits::default()),
            (expected.clone(), None),
            "step {step}"
        );
    }
}

#[test]
fn large_bulk_in_small_chunks() {
    let payload: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let args = [Bytes::from_static(b"SET"), Bytes::from(payload.clone())];
    let input = encode_request(&args);
    for step in [1, 16 * 1024] {
        let mut p = RequestParser::new();
        let mut buf = BytesMut::new();
        let mut got = None;
        let mut max_buf = 0;
        for chunk in input.chunks(step) {
            buf.extend_from_slice(chunk);
            max_buf = max_buf.max(buf.len());
            if let Some(r) = p.parse(&mut buf, &Limits::default()).unwrap() {
                got = Some(r);
            }
        }
        let got = got.expect("request completes");
        assert_eq!(got.args[1].len(), payload.len());
        assert!(got.args[1] == payload);
        assert!(buf.is_empty());
        // The parser never asked the buffer to hold more than what arrived.
        assert!(max_buf <= input.len());
    }
}

#[test]
fn many_args_incrementally() {
    let args: Vec<Bytes> = (0..1_000_000u32)
        .map(|i| Bytes::from(format!("{}", i % 1000)))
        .collect();
    let input = encode_request(&args);
    let mut p = RequestParser::new();
    let mut buf = BytesMut::new();
    let mut got = None;
    for chunk in input.chunks(4096) {
        buf.extend_from_slice(chunk);
        if let Some(r) = p.parse(&mut buf, &Limits::default()).unwrap() {
            got = Some(r);
        }
        // Finished arguments never stay in the buffer to be looked at again.
        assert!(buf.len() < 4096 + 32);
    }
    assert_eq!(got.unwrap().args, args);
}

#[test]
fn declared_sizes_are_not_allocated() {
    let l = Limits {
        max_args: usize::MAX,
        max_bulk_len: usize::MAX,
        ..Limits::default()
    };
    // Two billion declared arguments: accepted as a header, nothing reserved for them.
    let mut p = RequestParser::new();
    let mut buf = BytesMut::from(&b"*2000000000\r\n"[..]);
    assert_eq!(p.parse(&mut buf, &l), Ok(None));
    assert_eq!(p.pending_bytes(), 13);
    // A huge declared bulk: the buffer is not grown for it.
    let mut buf = BytesMut::from(&b"*1\r\n$999999999999\r\nabc"[..]);
    let cap = buf.capacity();
    let mut p = RequestParser::new();
    assert_eq!(p.parse(&mut buf, &l), Ok(None));
    assert_eq!(&buf[..], b"abc");
    assert!(buf.capacity() <= cap);
    // And with the default limits it is refused outright.
    assert_eq!(
        parse_err(b"*2000000000\r\n", &Limits::default()),
        ProtocolError::InvalidMultibulkLength
    );
    assert_eq!(
        parse_err(b"*1\r\n$999999999999\r\n", &Limits::default()),
        ProtocolError::InvalidBulkLength
    );
    // The largest representable length just waits for data (no overflow, no reservation).
    assert_eq!(
        feed_chunked(b"*1\r\n$9223372036854775807\r\nab", 1, &l),
        (vec![], None)
    );
}

fn arg_strategy() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from),
        "[a-zA-Z0-9]{1,8}".prop_map(Bytes::from),
        Just(Bytes::from_static(b"\r\n*1\r\n$")),
    ]
}

fn request_strategy() -> impl Strategy<Value = Vec<Bytes>> {
    proptest::collection::vec(arg_strategy(), 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Requests encoded by a client and fed in random chunks come back unchanged.
    #[test]
    fn round_trip_in_random_chunks(
        requests in proptest::collection::vec(request_strategy(), 1..10),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let mut input = Vec::new();
        for r in &requests {
            input.extend_from_slice(&encode_request(r));
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
        cuts.push(0);
        cuts.push(input.len());
        cuts.sort_unstable();
        let mut p = RequestParser::new();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for w in cuts.windows(2) {
            buf.extend_from_slice(&input[w[0]..w[1]]);
            while let Some(r) = p.parse(&mut buf, &Limits::default()).unwrap() {
                got.push(r.args);
            }
        }
        prop_assert_eq!(got, requests);
        prop_assert!(buf.is_empty());
        prop_assert_eq!(p.pending_bytes(), 0);
    }

    /// Junk never panics, and chunking never changes the outcome.
    #[test]
    fn junk_never_panics(
        input in proptest::collection::vec(
            prop_oneof![any::<u8>(), Just(b'*'), Just(b'$'), Just(b'\r'), Just(b'\n'), Just(b'1'), Just(b'"')],
            0..300,
        ),
        step in 1usize..20,
    ) {
        let limits = Limits { max_bulk_len: 16, max_args: 4, max_inline_len: 24 };
        let whole = feed_chunked(&input, input.len().max(1), &limits);
        let chunked = feed_chunked(&input, step, &limits);
        prop_assert_eq!(whole, chunked);
    }
}
