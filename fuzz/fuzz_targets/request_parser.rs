//! Fuzz target for flockd's request parser: arbitrary bytes, fed in arbitrary chunks
//! with small limits (so the limit paths are reached), must never panic, must respect
//! the limits, and must give exactly the same requests and error as feeding everything
//! at once: chunking is not allowed to change what a client's bytes mean.
#![no_main]

use bytes::BytesMut;
use flockd_proto::{Limits, ProtocolError, Request, RequestParser};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    max_bulk_len: 64,
    max_args: 8,
    max_inline_len: 48,
};

/// Feeds `chunks` one after another, parsing everything available after each.
fn run<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> (Vec<Request>, Option<ProtocolError>) {
    let mut parser = RequestParser::new();
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    let mut fed = 0usize;
    let mut consumed_before = 0usize;
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        fed += chunk.len();
        loop {
            match parser.parse(&mut buf, &LIMITS) {
                Ok(Some(request)) => {
                    assert!(!request.args.is_empty());
                    assert!(request.args.len() <= LIMITS.max_args);
                    assert!(request.args.iter().all(|a| a.len() <= LIMITS.max_bulk_len));
                    requests.push(request);
                }
                Ok(None) => break,
                Err(e) => {
                    assert!(!e.to_reply_text().contains(['\r', '\n']));
                    return (requests, Some(e));
                }
            }
            // What the parser holds plus what is left can never exceed what was fed.
            assert!(buf.len() + parser.pending_bytes() <= fed);
        }
        assert!(buf.len() + parser.pending_bytes() <= fed);
        // Consumption only moves forward.
        let consumed = fed - buf.len();
        assert!(consumed >= consumed_before);
        consumed_before = consumed;
    }
    (requests, None)
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunking; the rest is the client's input.
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    let whole = run(std::iter::once(input));
    let step = usize::from(seed % 17) + 1;
    let chunked = run(input.chunks(step));
    assert_eq!(whole, chunked, "chunking by {step} changed the outcome");
    if seed & 0x80 != 0 {
        let bytewise = run(input.chunks(1));
        assert_eq!(whole, bytewise, "byte-by-byte feeding changed the outcome");
    }
});
