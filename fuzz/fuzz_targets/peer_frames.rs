//! Fuzz target for what a peer can send on the cluster port once connected: the framing
//! (`read_frame`, `[u32 length][u64 id][body]`) over an arbitrary byte stream, and the decode
//! of every request (`decode_request`, what the serving side runs) and every response
//! (`decode_response`, what the dialing side runs) from arbitrary bodies.
//!
//! Nothing may panic; a frame read must fit in the bytes that came; a body that decodes must
//! encode, frame and read back to the same message, and encoding it again must give the same
//! bytes (the encoding is a fixed point after one round); and no input may make the reader or
//! the decoders allocate more than a small multiple of its size: a length or count a peer
//! declares must run out of bytes, never reserve memory.
//!
//! The first byte picks the mode: the low two bits a raw stream of frames, one request body,
//! one response body, or a valid message of each kind (built here) with the input's bytes
//! written over it; bit 2 fixes up the checksums of AOF entry records embedded in the bytes
//! (a proposal's ops travel as one), so the fuzzer gets through to the ops' decoder.
#![no_main]

#[path = "alloc_limit.rs"]
mod alloc_limit;
#[path = "peer_seeds.rs"]
mod peer_seeds;

use std::fmt::Debug;
use std::io;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use flockd_raft::network::{
    MAX_FRAME, Request, Response, decode_request, decode_response, frame, read_frame,
};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;

#[global_allocator]
static ALLOC: alloc_limit::Counting = alloc_limit::Counting;

/// Allowed peak: the decoded form may copy the bytes a few times over, and a sequence may be
/// reserved for as many elements as bytes remain (postcard's size hint, capped by serde at
/// 1 MiB), the largest element being a log entry. Linear in the input either way.
fn allowance(input_len: usize) -> usize {
    let element = std::mem::size_of::<flockd_raft::types::RaftEntry>()
        .max(std::mem::size_of::<flockd_core::Op>());
    (64 + 2 * element) * input_len + 256 * 1024
}

/// One frame from bytes in memory: such a read never waits, so one poll settles it.
fn read_now(input: &mut &[u8]) -> io::Result<Option<(u64, Vec<u8>)>> {
    let mut read = pin!(read_frame(input));
    match read.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => result,
        Poll::Pending => panic!("a frame read from memory waited"),
    }
}

/// A decoded message, encoded, framed and read back, decodes to the same message, and its
/// encoding is then stable.
fn round_trip<T: Serialize + Debug>(
    id: u64,
    message: &T,
    decode: fn(&[u8]) -> postcard::Result<T>,
) {
    let framed = frame(id, message).expect("a decoded message encodes");
    let mut rest = &framed[..];
    let (back_id, body) = read_now(&mut rest)
        .expect("our own frame reads")
        .expect("our own frame is there");
    assert!(rest.is_empty(), "one frame, read whole");
    assert_eq!(back_id, id);
    let again = decode(&body).expect("our own encoding decodes");
    assert_eq!(format!("{message:?}"), format!("{again:?}"));
    assert_eq!(frame(id, &again).expect("encodes"), framed);
}

/// Decodes `body` both ways, as either side of a connection would, checking what decodes.
fn decode_both(id: u64, body: &[u8]) {
    if let Ok(request) = decode_request(body) {
        round_trip::<Request>(id, &request, decode_request);
    }
    if let Ok(response) = decode_response(body) {
        round_trip::<Response>(id, &response, decode_response);
    }
}

/// Reads frames off `stream` as the cluster port does, until it ends or goes bad.
fn read_stream(stream: &[u8]) {
    let mut rest = stream;
    loop {
        let before = rest.len();
        match read_now(&mut rest) {
            Ok(Some((id, body))) => {
                // The length prefix, the id and the body: exactly what was consumed.
                assert_eq!(before - rest.len(), 12 + body.len());
                assert!(body.len() + 8 <= MAX_FRAME);
                decode_both(id, &body);
            }
            Ok(None) => {
                // A clean end only where a frame could start.
                assert!(before < 4, "a clean end with {before} bytes left");
                return;
            }
            Err(e) => {
                assert!(
                    matches!(
                        e.kind(),
                        io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
                    ),
                    "{e}"
                );
                return;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let ((), peak) = alloc_limit::peak_during(|| {
        let mut bytes = match mode & 3 {
            3 => peer_seeds::overwrite(rest),
            _ => rest.to_vec(),
        };
        if mode & 4 != 0 {
            peer_seeds::seal_entries(&mut bytes);
        }
        match mode & 3 {
            0 | 3 => read_stream(&bytes),
            1 => {
                if let Ok(request) = decode_request(&bytes) {
                    round_trip::<Request>(7, &request, decode_request);
                }
            }
            _ => {
                if let Ok(response) = decode_response(&bytes) {
                    round_trip::<Response>(7, &response, decode_response);
                }
            }
        }
    });
    assert!(
        peak <= allowance(data.len()),
        "{peak} bytes allocated for a {}-byte input",
        data.len()
    );
});
