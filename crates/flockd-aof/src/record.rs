//! The file format: header, record framing and the codec of one [`Change`].
//!
//! ```text
//! file    = header record*
//! header  = "FLOCKAO1"                      7 bytes of magic, then the format version '1'
//! record  = len:u32 LE  crc:u32 LE  payload[len]
//!           crc = crc32 (IEEE, crc32fast) of the 4 length bytes followed by the payload
//! payload = tag:u8 fields                   exactly `len` bytes, 1 <= len <= MAX_PAYLOAD
//! ```
//!
//! The checksum covers the length too, so a damaged length field is caught like a damaged
//! payload. A zero length is invalid (every payload has a tag byte): a region of zeros, what some
//! filesystems leave after a power loss, is never mistaken for records.
//!
//! Fields, in declaration order of the [`Change`] variant: `u64` and `u32` little-endian, byte
//! strings as a `u32` LE length then the bytes, `Option<Bytes>` as a flag byte (0 none, 1 some)
//! then the string. Tags: 1 Grant, 2 Renew, 3 Release, 4 Expire, 5 ForceRelease, 6 Advance,
//! 7 FenceSet, 8 Floor. Decoding checks every length against the bytes left before copying and
//! requires the payload to be consumed exactly; it never panics on any input.

use bytes::Bytes;
use flockd_core::Change;

/// The 8-byte file header: magic `FLOCKAO` and the format version `1`.
pub const HEADER: [u8; 8] = *b"FLOCKAO1";
/// The magic part of [`HEADER`] (without the version byte).
pub const MAGIC: &[u8] = b"FLOCKAO";
/// Bytes before a record's payload: length and checksum.
pub const FRAME_HEADER_LEN: usize = 8;
/// The largest payload accepted (1 GiB). Far above any record the server's limits allow (names
/// are at most a few KiB, fence values at most the bulk limit, 512 MiB by default); it keeps a
/// damaged length from being believed.
pub const MAX_PAYLOAD: usize = 1 << 30;

const TAG_GRANT: u8 = 1;
const TAG_RENEW: u8 = 2;
const TAG_RELEASE: u8 = 3;
const TAG_EXPIRE: u8 = 4;
const TAG_FORCE_RELEASE: u8 = 5;
const TAG_ADVANCE: u8 = 6;
const TAG_FENCE_SET: u8 = 7;
const TAG_FLOOR: u8 = 8;

/// Why a payload could not be encoded.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("record of {len} bytes is over the {MAX_PAYLOAD}-byte limit")]
pub struct RecordTooLarge {
    pub len: usize,
}

/// Why a payload could not be decoded.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("empty payload")]
    Empty,
    #[error("unknown record type {0}")]
    UnknownTag(u8),
    #[error("payload ends inside a field")]
    Truncated,
    #[error("bad option flag {0}")]
    BadFlag(u8),
    #[error("{0} unused bytes after the record's fields")]
    Trailing(usize),
}

/// Whether a declared payload length can be a record's (before looking at the bytes).
pub fn length_is_sane(len: u32) -> bool {
    len != 0 && len as usize <= MAX_PAYLOAD
}

/// The checksum stored in a record's frame.
pub fn checksum(len: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Splits a frame header into (payload length, checksum).
pub fn parse_frame_header(h: [u8; FRAME_HEADER_LEN]) -> (u32, u32) {
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    (len, crc)
}

fn bytes_len(b: &Bytes) -> usize {
    4 + b.len()
}

fn payload_len(change: &Change) -> usize {
    1 + match change {
        Change::Grant { name, owner, .. } => {
            bytes_len(name) + 8 + 8 + 4 + 1 + owner.as_ref().map_or(0, bytes_len) + 8
        }
        Change::Renew { name, .. } => bytes_len(name) + 8,
        Change::Release { name, .. } => bytes_len(name) + 4,
        Change::Expire { name } | Change::ForceRelease { name } => bytes_len(name),
        Change::Advance { name, .. } => bytes_len(name) + 8,
        Change::FenceSet { key, value, .. } => bytes_len(key) + 8 + bytes_len(value),
        Change::Floor { .. } => 8,
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &Bytes) {
    // Lengths fit u32: the whole payload was checked against MAX_PAYLOAD first.
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Appends the framed record of `change` to `out`. Fails (leaving `out` unchanged) only if the
/// payload would exceed [`MAX_PAYLOAD`].
pub fn encode_record(change: &Change, out: &mut Vec<u8>) -> Result<(), RecordTooLarge> {
    let len = payload_len(change);
    if len > MAX_PAYLOAD {
        return Err(RecordTooLarge { len });
    }
    let start = out.len();
    out.reserve(FRAME_HEADER_LEN + len);
    out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
    match change {
        Change::Grant {
            name,
            token,
            first_token,
            holds,
            owner,
            lease_ms,
        } => {
            out.push(TAG_GRANT);
            put_bytes(out, name);
            out.extend_from_slice(&token.to_le_bytes());
            out.extend_from_slice(&first_token.to_le_bytes());
            out.extend_from_slice(&holds.to_le_bytes());
            match owner {
                Some(o) => {
                    out.push(1);
                    put_bytes(out, o);
                }
                None => out.push(0),
            }
            out.extend_from_slice(&lease_ms.to_le_bytes());
        }
        Change::Renew { name, lease_ms } => {
            out.push(TAG_RENEW);
            put_bytes(out, name);
            out.extend_from_slice(&lease_ms.to_le_bytes());
        }
        Change::Release { name, holds_left } => {
            out.push(TAG_RELEASE);
            put_bytes(out, name);
            out.extend_from_slice(&holds_left.to_le_bytes());
        }
        Change::Expire { name } => {
            out.push(TAG_EXPIRE);
            put_bytes(out, name);
        }
        Change::ForceRelease { name } => {
            out.push(TAG_FORCE_RELEASE);
            put_bytes(out, name);
        }
        Change::Advance { name, token } => {
            out.push(TAG_ADVANCE);
            put_bytes(out, name);
            out.extend_from_slice(&token.to_le_bytes());
        }
        Change::FenceSet { key, token, value } => {
            out.push(TAG_FENCE_SET);
            put_bytes(out, key);
            out.extend_from_slice(&token.to_le_bytes());
            put_bytes(out, value);
        }
        Change::Floor { token } => {
            out.push(TAG_FLOOR);
            out.extend_from_slice(&token.to_le_bytes());
        }
    }
    let payload_start = start + FRAME_HEADER_LEN;
    debug_assert_eq!(out.len() - payload_start, len);
    let len32 = len as u32;
    let crc = checksum(len32, &out[payload_start..]);
    out[start..start + 4].copy_from_slice(&len32.to_le_bytes());
    out[start + 4..payload_start].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// A bounds-checked reader over a payload.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.u32()? as usize;
        // `take` checks the declared length against what is left before anything is copied.
        Ok(Bytes::copy_from_slice(self.take(len)?))
    }

    fn opt_bytes(&mut self) -> Result<Option<Bytes>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.bytes()?)),
            f => Err(DecodeError::BadFlag(f)),
        }
    }
}

/// Decodes one payload (without its frame header). The whole payload must be used.
pub fn decode_payload(payload: &[u8]) -> Result<Change, DecodeError> {
    let mut c = Cursor { rest: payload };
    let tag = c.u8().map_err(|_| DecodeError::Empty)?;
    let change = match tag {
        TAG_GRANT => Change::Grant {
            name: c.bytes()?,
            token: c.u64()?,
            first_token: c.u64()?,
            holds: c.u32()?,
            owner: c.opt_bytes()?,
            lease_ms: c.u64()?,
        },
        TAG_RENEW => Change::Renew {
            name: c.bytes()?,
            lease_ms: c.u64()?,
        },
        TAG_RELEASE => Change::Release {
            name: c.bytes()?,
            holds_left: c.u32()?,
        },
        TAG_EXPIRE => Change::Expire { name: c.bytes()? },
        TAG_FORCE_RELEASE => Change::ForceRelease { name: c.bytes()? },
        TAG_ADVANCE => Change::Advance {
            name: c.bytes()?,
            token: c.u64()?,
        },
        TAG_FENCE_SET => Change::FenceSet {
            key: c.bytes()?,
            token: c.u64()?,
            value: c.bytes()?,
        },
        TAG_FLOOR => Change::Floor { token: c.u64()? },
        t => return Err(DecodeError::UnknownTag(t)),
    };
    if !c.rest.is_empty() {
        return Err(DecodeError::Trailing(c.rest.len()));
    }
    Ok(change)
}

/// Whether `tag` starts some payload: a cheap filter before checksumming a candidate record.
pub(crate) fn tag_is_known(tag: u8) -> bool {
    (TAG_GRANT..=TAG_FLOOR).contains(&tag)
}

/// Why the record at the start of a buffer is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The buffer ends before the record does (it holds `have` of `need` bytes).
    CutShort { have: usize, need: usize },
    /// The length field is 0 or over [`MAX_PAYLOAD`].
    BadLength(u32),
    /// The checksum does not match.
    Checksum,
    /// The checksum matches but the payload does not decode.
    Payload(DecodeError),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::CutShort { have, need } => {
                write!(f, "record cut short ({have} of {need} bytes present)")
            }
            FrameError::BadLength(len) => write!(f, "bad record length {len}"),
            FrameError::Checksum => f.write_str("checksum mismatch"),
            FrameError::Payload(e) => write!(f, "bad payload: {e}"),
        }
    }
}

/// Decodes the framed record at the start of `buf`: the change and the record's total length.
pub fn decode_record(buf: &[u8]) -> Result<(Change, usize), FrameError> {
    if buf.len() < FRAME_HEADER_LEN {
        return Err(FrameError::CutShort {
            have: buf.len(),
            need: FRAME_HEADER_LEN,
        });
    }
    let mut h = [0u8; FRAME_HEADER_LEN];
    h.copy_from_slice(&buf[..FRAME_HEADER_LEN]);
    let (len, crc) = parse_frame_header(h);
    if !length_is_sane(len) {
        return Err(FrameError::BadLength(len));
    }
    let total = FRAME_HEADER_LEN + len as usize;
    if buf.len() < total {
        return Err(FrameError::CutShort {
            have: buf.len(),
            need: total,
        });
    }
    let payload = &buf[FRAME_HEADER_LEN..total];
    if checksum(len, payload) != crc {
        return Err(FrameError::Checksum);
    }
    let change = decode_payload(payload).map_err(FrameError::Payload)?;
    Ok((change, total))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_bytes() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from)
    }

    pub(crate) fn arb_change() -> impl Strategy<Value = Change> {
        prop_oneof![
            (
                arb_bytes(),
                any::<u64>(),
                any::<u64>(),
                any::<u32>(),
                proptest::option::of(arb_bytes()),
                any::<u64>()
            )
                .prop_map(|(name, token, first_token, holds, owner, lease_ms)| {
                    Change::Grant {
                        name,
                        token,
                        first_token,
                        holds,
                        owner,
                        lease_ms,
                    }
                }),
            (arb_bytes(), any::<u64>())
                .prop_map(|(name, lease_ms)| Change::Renew { name, lease_ms }),
            (arb_bytes(), any::<u32>())
                .prop_map(|(name, holds_left)| Change::Release { name, holds_left }),
            arb_bytes().prop_map(|name| Change::Expire { name }),
            arb_bytes().prop_map(|name| Change::ForceRelease { name }),
            (arb_bytes(), any::<u64>()).prop_map(|(name, token)| Change::Advance { name, token }),
            (arb_bytes(), any::<u64>(), arb_bytes())
                .prop_map(|(key, token, value)| Change::FenceSet { key, token, value }),
            any::<u64>().prop_map(|token| Change::Floor { token }),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(changes in proptest::collection::vec(arb_change(), 1..8)) {
            let mut buf = Vec::new();
            for c in &changes {
                encode_record(c, &mut buf).expect("small record");
            }
            let mut rest = &buf[..];
            let mut decoded = Vec::new();
            while !rest.is_empty() {
                let (c, n) = decode_record(rest).expect("valid record");
                decoded.push(c);
                rest = &rest[n..];
            }
            prop_assert_eq!(decoded, changes);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_payload(&bytes);
            let _ = decode_record(&bytes);
        }

        #[test]
        fn any_single_bit_flip_is_detected(change in arb_change(), bit in any::<proptest::sample::Index>()) {
            let mut buf = Vec::new();
            encode_record(&change, &mut buf).expect("small record");
            let i = bit.index(buf.len() * 8);
            buf[i / 8] ^= 1 << (i % 8);
            if let Ok((c, n)) = decode_record(&buf) {
                prop_assert!(n != buf.len() || c != change, "flip went unnoticed");
            }
        }

        #[test]
        fn every_proper_prefix_is_cut_short(change in arb_change(), cut in any::<proptest::sample::Index>()) {
            let mut buf = Vec::new();
            encode_record(&change, &mut buf).expect("small record");
            let cut = cut.index(buf.len());
            let is_cut_short = matches!(decode_record(&buf[..cut]), Err(FrameError::CutShort { .. }));
            prop_assert!(is_cut_short);
        }
    }

    #[test]
    fn zero_length_and_huge_length_are_invalid() {
        let mut buf = vec![0u8; 16];
        assert_eq!(decode_record(&buf), Err(FrameError::BadLength(0)));
        buf[..4].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        assert_eq!(
            decode_record(&buf),
            Err(FrameError::BadLength(MAX_PAYLOAD as u32 + 1))
        );
    }

    #[test]
    fn decode_errors() {
        assert_eq!(decode_payload(&[]), Err(DecodeError::Empty));
        assert_eq!(decode_payload(&[99]), Err(DecodeError::UnknownTag(99)));
        assert_eq!(
            decode_payload(&[TAG_EXPIRE, 5, 0, 0, 0, b'a']),
            Err(DecodeError::Truncated)
        );
        assert_eq!(
            decode_payload(&[TAG_EXPIRE, 1, 0, 0, 0, b'a', 0]),
            Err(DecodeError::Trailing(1))
        );
        // A huge declared string length is refused without allocating it.
        assert_eq!(
            decode_payload(&[TAG_EXPIRE, 255, 255, 255, 255]),
            Err(DecodeError::Truncated)
        );
        let mut grant = vec![TAG_GRANT, 0, 0, 0, 0];
        grant.extend_from_slice(&[0; 20]);
        grant.push(7);
        assert_eq!(decode_payload(&grant), Err(DecodeError::BadFlag(7)));
    }

    #[test]
    fn known_layout() {
        let mut buf = Vec::new();
        encode_record(&Change::Floor { token: 0x0102 }, &mut buf).expect("small record");
        assert_eq!(&buf[..4], &9u32.to_le_bytes());
        assert_eq!(&buf[8..], &[TAG_FLOOR, 2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&buf[4..8], &checksum(9, &buf[8..]).to_le_bytes());
    }
}
