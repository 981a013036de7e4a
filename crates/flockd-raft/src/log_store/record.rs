//! What a segment file holds: an 8-byte header, then records framed as the AOF's are
//! (`[u32 LE payload length][u32 LE crc32 of length and payload][payload]`), each payload one
//! [`Record`] in postcard. A run of zeros after the last record is space written ahead, not
//! damage.

use std::path::{Path, PathBuf};

use flockd_log::record::{FRAME_HEADER_LEN, checksum};
use serde::{Deserialize, Serialize};

use crate::types::{LogId, Vote};

/// The first bytes of every segment file.
pub const SEGMENT_HEADER: [u8; 8] = *b"FLOCKRL1";

/// One change to the log, in the order it was made.
#[derive(Debug, Serialize, Deserialize)]
pub enum Record<'a> {
    /// An entry, with its payload as encoded on append. It replaces the entry at its index and
    /// every one after it, as an append after a conflict does in Raft.
    Entry {
        log_id: LogId,
        #[serde(borrow, with = "serde_bytes")]
        payload: &'a [u8],
    },
    /// The vote, as it is from now on.
    Vote(Vote),
    /// Every entry after this one is gone (all of them with `None`).
    TruncateAfter(Option<LogId>),
    /// Every entry up to and including this one is gone: a snapshot holds them.
    Purge(LogId),
    /// The first record of a segment after the first: the log's last entry when it began. Read
    /// only when the segments before it were removed (their entries purged).
    Base(LogId),
}

/// Appends one framed record to `out`.
pub fn push_record(record: &Record<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
    // Encoding into a Vec of plain data cannot fail.
    let mut filled =
        postcard::to_extend(record, std::mem::take(out)).expect("a log record always encodes");
    let len = (filled.len() - start - FRAME_HEADER_LEN) as u32;
    let crc = checksum(len, &filled[start + FRAME_HEADER_LEN..]);
    filled[start..start + 4].copy_from_slice(&len.to_le_bytes());
    filled[start + 4..start + FRAME_HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    *out = filled;
}

/// A segment's file: `segment-<sequence, 20 digits>.log`, so names sort as sequences do.
pub fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("segment-{seq:020}.log"))
}

/// The sequence number in a segment file's name, or `None` for any other file.
pub fn segment_seq(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("segment-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LeaderId;
    use flockd_log::record::parse_frame_header;

    #[test]
    fn a_record_is_framed_with_its_length_and_checksum() {
        let log_id = LogId {
            leader_id: LeaderId {
                term: 3,
                node_id: 2,
            },
            index: 41,
        };
        let mut out = b"before".to_vec();
        push_record(
            &Record::Entry {
                log_id,
                payload: b"ops",
            },
            &mut out,
        );
        let frame = &out[6..];
        let (len, crc) = parse_frame_header(frame[..FRAME_HEADER_LEN].try_into().unwrap());
        let payload = &frame[FRAME_HEADER_LEN..];
        assert_eq!(len as usize, payload.len());
        assert_eq!(crc, checksum(len, payload));
        match postcard::from_bytes::<Record<'_>>(payload).unwrap() {
            Record::Entry {
                log_id: id,
                payload,
            } => {
                assert_eq!(id, log_id);
                assert_eq!(payload, b"ops");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn segment_names_round_trip_and_nothing_else_is_one() {
        let path = segment_path(Path::new("/d"), 7);
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(name, "segment-00000000000000000007.log");
        assert_eq!(segment_seq(name), Some(7));
        assert_eq!(segment_seq("segment-7.log"), None);
        assert_eq!(segment_seq("segment-0000000000000000000x.log"), None);
        assert_eq!(segment_seq("flockd.lock"), None);
    }
}
