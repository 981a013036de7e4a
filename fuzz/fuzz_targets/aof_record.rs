//! Fuzz target for the AOF record layer: framing (`decode_record`) over arbitrary bytes read as
//! a file body of either format, and payload decoding (`decode_payload`) of arbitrary bytes.
//! Nothing may panic; a decoded record must fit in the bytes it came from; a payload that
//! decodes must encode back to exactly the same bytes (the format has one spelling per record,
//! so a decoder that accepts something the encoder never writes is a bug); and no input may
//! make the decoder allocate more than a small multiple of its size.
//!
//! The first byte picks the version and the mode; in the framing mode with "sealed" set, every
//! frame's checksum is fixed up first, so the fuzzer reaches the payload decoders through the
//! frames instead of stopping at the CRC.
#![no_main]

#[path = "alloc_limit.rs"]
mod alloc_limit;
#[path = "seal.rs"]
mod seal;

use flockd_aof::Version;
use flockd_aof::record::{
    FRAME_HEADER_LEN, Payload, Record, decode_payload, decode_record, encode_entry, encode_item,
    encode_snapshot_begin, encode_v1,
};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: alloc_limit::Counting = alloc_limit::Counting;

/// Allowed peak: the decoded form may copy names and values out of the input, a few times over,
/// and an entry holds at most one `Op` per input byte (`EndAllSessions` is one byte on disk),
/// twice over while its vector grows. Linear in the input either way.
fn allowance(input_len: usize) -> usize {
    (64 + 2 * std::mem::size_of::<flockd_core::Op>()) * input_len + 64 * 1024
}

/// The payload bytes the encoder writes for a decoded payload (its frame stripped).
fn encoded(payload: &Payload<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    match payload {
        Payload::V1(change) => encode_v1(change, &mut out).expect("fits: it was decoded"),
        Payload::V2(Record::Entry { position, at, ops }) => {
            encode_entry(*position, *at, ops, &mut out).expect("fits: it was decoded")
        }
        Payload::V2(Record::SnapshotBegin { position, at }) => {
            encode_snapshot_begin(*position, *at, &mut out)
        }
        Payload::V2(Record::Item(item)) => encode_item(item, &mut out).expect("fits"),
    }
    out.split_off(FRAME_HEADER_LEN)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let version = if mode & 1 == 0 {
        Version::V2
    } else {
        Version::V1
    };
    let ((), peak) = alloc_limit::peak_during(|| {
        if mode & 2 == 0 {
            if let Ok(payload) = decode_payload(version, rest) {
                assert_eq!(encoded(&payload), rest, "decoded {payload:?}");
            }
            return;
        }
        let mut body = rest.to_vec();
        if mode & 4 != 0 {
            seal::seal(&mut body, 0);
        }
        let mut at = 0;
        while at < body.len() {
            match decode_record(version, &body[at..]) {
                Ok((payload, total)) => {
                    assert!(total > FRAME_HEADER_LEN && at + total <= body.len());
                    assert_eq!(encoded(&payload), &body[at + FRAME_HEADER_LEN..at + total]);
                    at += total;
                }
                Err(_) => break,
            }
        }
    });
    assert!(
        peak <= allowance(data.len()),
        "{peak} bytes allocated for a {}-byte input",
        data.len()
    );
});
