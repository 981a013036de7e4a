//! Reading the segments back at start-up: every record in order, into a [`Mem`]. The last
//! segment may end in zeros (space written ahead) or in a record cut short by a crash; both are
//! its end, and a cut record is cut off the file. Anything else that does not read is damage,
//! and the log does not open.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use flockd_log::record::{FRAME_HEADER_LEN, checksum, length_is_sane, parse_frame_header};

use super::error::{LogError, at};
use super::flush::UNFINISHED;
use super::mem::{Mem, Stored};
use super::record::{Record, SEGMENT_HEADER, segment_seq};

/// A segment on disk, as the writer needs to know it.
#[derive(Clone, Debug)]
pub struct Segment {
    pub seq: u64,
    pub path: PathBuf,
    /// The highest entry index ever written to it (its entries may since have been replaced).
    pub last_index: Option<u64>,
}

/// What the directory held.
#[derive(Debug, Default)]
pub struct Loaded {
    pub mem: Mem,
    /// In order; the last is the one appended to.
    pub segments: Vec<Segment>,
    /// Where the last segment's records end (the writer's position).
    pub end: u64,
    /// Bytes of a record cut short at the end of the last segment, cut off the file.
    pub cut: u64,
}

/// The segments in `dir`, by sequence.
pub fn segments_in(dir: &Path) -> Result<Vec<(u64, PathBuf)>, LogError> {
    let mut found = Vec::new();
    for item in fs::read_dir(dir).map_err(at(dir))? {
        let item = item.map_err(at(dir))?;
        if let Some(seq) = item.file_name().to_str().and_then(segment_seq) {
            found.push((seq, item.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// Removes segments whose creation a crash interrupted (never renamed: nothing in them counts).
fn remove_unfinished(dir: &Path) -> Result<(), LogError> {
    for item in fs::read_dir(dir).map_err(at(dir))? {
        let path = item.map_err(at(dir))?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("segment-") && path.extension().is_some_and(|e| e == UNFINISHED) {
            fs::remove_file(&path).map_err(at(&path))?;
        }
    }
    Ok(())
}

pub fn load(dir: &Path) -> Result<Loaded, LogError> {
    let mut loaded = Loaded::default();
    remove_unfinished(dir)?;
    let found = segments_in(dir)?;
    let count = found.len();
    // Entries up to this index are in removed segments, and no purge record covers them yet.
    let mut missing = None;
    for (n, (seq, path)) in found.into_iter().enumerate() {
        let last = n + 1 == count;
        let bytes = fs::read(&path).map_err(at(&path))?;
        let (end, last_index) =
            read_segment(&path, &bytes, n == 0, last, &mut loaded.mem, &mut missing)?;
        if last {
            loaded.end = end as u64;
            let after = &bytes[end..];
            if !after.iter().all(|&b| b == 0) {
                // Cut below, once the whole log has read well.
                loaded.cut = after.len() as u64;
            }
        }
        loaded.segments.push(Segment {
            seq,
            path,
            last_index,
        });
    }
    if let Some(index) = missing {
        // Refused before anything is cut: the files stay as they were.
        return Err(LogError::MissingSegments {
            dir: dir.to_owned(),
            index,
        });
    }
    if loaded.cut > 0 {
        // A record cut short by a crash: never acknowledged, so cut off.
        let path = &loaded.segments.last().expect("the segment read last").path;
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(at(path))?;
        file.set_len(loaded.end).map_err(at(path))?;
        file.sync_all().map_err(at(path))?;
    }
    Ok(loaded)
}

/// Applies one segment's records; returns where they end and the highest entry index in it.
/// Only the last segment may end early: the others were synced whole before the next began.
fn read_segment(
    path: &Path,
    bytes: &[u8],
    first: bool,
    last: bool,
    mem: &mut Mem,
    missing: &mut Option<u64>,
) -> Result<(usize, Option<u64>), LogError> {
    if bytes.len() < SEGMENT_HEADER.len() || bytes[..SEGMENT_HEADER.len()] != SEGMENT_HEADER {
        return Err(LogError::NotASegment {
            path: path.to_owned(),
        });
    }
    let mut at = SEGMENT_HEADER.len();
    let mut last_index = None;
    loop {
        let rest = &bytes[at..];
        if rest.iter().all(|&b| b == 0) {
            return Ok((at, last_index));
        }
        let damaged = |reason: &str| LogError::Damaged {
            path: path.to_owned(),
            offset: at as u64,
            reason: reason.to_owned(),
        };
        let read = frame_at(rest).and_then(|frame| {
            let record = postcard::from_bytes::<Record<'_>>(frame)
                .map_err(|_| "a payload that does not decode")?;
            Ok((frame.len(), record))
        });
        let (frame_len, record) = match read {
            Ok(read) => read,
            // A power loss leaves a prefix of the last write: nothing valid after it. Damage
            // with a valid record after it is something else, and cutting there would drop
            // what was acknowledged (the rule of flockd-log's replay).
            Err(reason) if last && !valid_record_in(&rest[1..]) => {
                tracing::warn!(
                    "Raft log: {}: a record cut short at byte {at} ({reason}): cut off",
                    path.display()
                );
                return Ok((at, last_index));
            }
            Err(reason) => return Err(damaged(reason)),
        };
        match record {
            Record::Entry { log_id, payload } => {
                last_index = Some(last_index.map_or(log_id.index, |i: u64| i.max(log_id.index)));
                mem.append(Stored {
                    log_id,
                    payload: Bytes::copy_from_slice(payload),
                })?;
            }
            Record::Vote(vote) => mem.vote = Some(vote),
            Record::TruncateAfter(last) => mem.truncate_after(last),
            Record::Purge(upto) => mem.purge(upto),
            Record::Base(last) if first => {
                // The segments before this one were removed: a purge record after this must
                // cover their entries, or the log has lost some.
                mem.begin_after(last);
                if mem.purged.is_none_or(|p| p.index < last.index) {
                    *missing = Some(last.index);
                }
            }
            Record::Base(_) => {}
        }
        if let Some(upto) = *missing
            && mem.purged.is_some_and(|p| p.index >= upto)
        {
            *missing = None;
        }
        at += FRAME_HEADER_LEN + frame_len;
    }
}

/// Whether a valid, decodable record starts anywhere in `bytes`.
fn valid_record_in(bytes: &[u8]) -> bool {
    (0..bytes.len()).any(|k| {
        frame_at(&bytes[k..]).is_ok_and(|frame| postcard::from_bytes::<Record<'_>>(frame).is_ok())
    })
}

/// The payload of the frame at the start of `rest`, or why there is none.
fn frame_at(rest: &[u8]) -> Result<&[u8], &'static str> {
    let Some(header) = rest.get(..FRAME_HEADER_LEN) else {
        return Err("a frame header cut short");
    };
    let (len, crc) = parse_frame_header(header.try_into().expect("eight bytes"));
    if !length_is_sane(len) {
        return Err("an impossible length");
    }
    let Some(payload) = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len as usize) else {
        return Err("a payload cut short");
    };
    if checksum(len, payload) != crc {
        return Err("a checksum mismatch");
    }
    Ok(payload)
}
