//! Reading a file back: replay at start-up ([`load`]) and `check-aof` ([`check`], [`fix`]).
//!
//! The file is read sequentially, record by record. At the first record that is not valid
//! (header or payload cut short by the end of the file, length 0 or over the limit, checksum
//! mismatch, payload that does not decode) at offset X, the scanner decides whether this is a
//! *damaged tail* or a *damaged middle*:
//!
//! > The damage is a tail iff no valid record starts anywhere after X: the bytes from X+1 to
//! > the end are searched at every offset for a frame whose length is sane, that fits in the
//! > file, whose checksum matches and whose payload decodes.
//!
//! A power loss leaves a prefix of the last write (or zeros, which never form a record: length
//! 0 is invalid), so its damage is always a tail, and a tail was never acknowledged: cutting it
//! off loses nothing a client was promised. Damage with valid records after it is something
//! else (a flipped bit, a bad sector, a damaged length field): cutting there would drop
//! acknowledged records and could let a fencing token be issued twice, so it is refused.
//!
//! The same rule covers a record cut short by the end of the file: were its length field
//! damaged instead, the records after it would be found and the file refused. The price is a
//! theoretical false alarm: a torn record whose own payload (a fence value) happens to contain a
//! complete valid frame is reported as a damaged middle, and the operator must cut it by hand.
//!
//! A file shorter than the 8-byte header whose bytes are a prefix of it is a torn header: a
//! damaged tail at offset 0 (the file is emptied, and the writer writes a fresh header).
//!
//! **Zeros to the end are the file's end, not damage.** Under `appendfsync always` the writer
//! keeps zeros written ahead of its records ([`crate::written_ahead`]), so a file left by
//! a crash ends in them. When everything from the first invalid spot to the end is zero, replay
//! stops there as at the end of the file and cuts the zeros off without a warning; `check`
//! reports them apart. (A power loss can also leave zeros where an unacknowledged write was:
//! nothing a client was promised is lost either way.)

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

use flockd_core::StateMachine;

use crate::error::FileError;
use crate::fsutil::read_exact_at;
use crate::record::{
    FRAME_HEADER_LEN, HEADER, MAGIC, Payload, Record, Version, checksum, decode_payload,
    decode_record, length_is_sane, parse_frame_header, tag_is_known,
};

/// What [`load`] replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayReport {
    /// Valid records read (snapshot items, and entries a snapshot already reflected, included).
    pub records: u64,
    /// Length of the valid part of the file (the whole file after any truncation).
    pub bytes: u64,
    /// Where a damaged tail was cut off (the file's length before was larger).
    pub truncated_at: Option<u64>,
    pub elapsed: Duration,
    /// The file's format (`None`: no file, or an empty one).
    pub version: Option<Version>,
}

/// What [`check`] (or [`fix`], before repairing) found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// Valid records before the first problem (all of them if there is none).
    pub records: u64,
    /// Bytes up to the first problem (the file length if there is none).
    pub valid_len: u64,
    pub file_len: u64,
    /// The first problem: its byte offset and what is wrong.
    pub problem: Option<(u64, String)>,
    /// True when the problem is a damaged tail that [`fix`] can cut off (see the module docs).
    pub tail_only: bool,
    /// Bytes of zeros after the last record (space a running server wrote ahead, or a
    /// crash left): not a problem; `valid_len` ends before them.
    pub zeros_after: u64,
}

/// The first invalid spot in a file.
struct Problem {
    offset: u64,
    reason: String,
    /// A damaged tail: nothing valid follows.
    tail: bool,
    /// Offset of the first valid record after the damage, if found.
    next_valid: Option<u64>,
}

impl Problem {
    /// The reason, completed with why it cannot be cut off when it is not a tail.
    fn full_reason(&self) -> String {
        match self.next_valid {
            Some(next) => format!(
                "{}; a valid record follows at byte offset {next}, so this is not a torn tail",
                self.reason
            ),
            None => self.reason.clone(),
        }
    }
}

struct Scan {
    version: Option<Version>,
    records: u64,
    valid_len: u64,
    file_len: u64,
    problem: Option<Problem>,
    /// Zeros from `valid_len` to the end (see the module docs).
    zeros_after: u64,
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn check_header(file: &File, file_len: u64) -> io::Result<Result<Version, Problem>> {
    let n = file_len.min(HEADER.len() as u64) as usize;
    let mut h = [0u8; 8];
    read_exact_at(file, 0, &mut h[..n])?;
    let h = &h[..n];
    let problem = |reason: String, tail: bool| {
        Err(Problem {
            offset: 0,
            reason,
            tail,
            next_valid: None,
        })
    };
    if n < HEADER.len() {
        return Ok(if HEADER.starts_with(h) {
            problem(
                format!("file header cut short ({n} of {} bytes)", HEADER.len()),
                true,
            )
        } else {
            problem("not a flockd AOF file (bad magic)".to_owned(), false)
        });
    }
    if &h[..MAGIC.len()] != MAGIC {
        return Ok(problem(
            "not a flockd AOF file (bad magic)".to_owned(),
            false,
        ));
    }
    match Version::of_header(h) {
        Some(version) => Ok(Ok(version)),
        None => Ok(problem(
            format!(
                "unsupported AOF format version {:?}",
                char::from(h[MAGIC.len()])
            ),
            false,
        )),
    }
}

/// Reads every valid record in order, handing each to `apply`, up to the end or the first
/// problem, which it classifies (see the module docs).
fn scan(file: &File, apply: &mut dyn FnMut(Payload<'_>)) -> io::Result<Scan> {
    let file_len = file.metadata()?.len();
    let mut out = Scan {
        version: None,
        records: 0,
        valid_len: 0,
        file_len,
        problem: None,
        zeros_after: 0,
    };
    if file_len == 0 {
        return Ok(out);
    }
    let version = match check_header(file, file_len)? {
        Ok(version) => version,
        Err(p) => {
            out.problem = Some(p);
            return Ok(out);
        }
    };
    out.version = Some(version);
    let mut pos = HEADER.len() as u64;
    // Up to 1 MiB, never more than the file: a small file costs a small buffer.
    let capacity = usize::try_from(file_len).map_or(1 << 20, |n| n.clamp(64, 1 << 20));
    let mut reader = BufReader::with_capacity(capacity, file);
    reader.seek(SeekFrom::Start(pos))?;
    let mut payload = Vec::new();
    let failure: Option<String> = loop {
        out.valid_len = pos;
        if pos >= file_len {
            break None;
        }
        let left = file_len - pos;
        let mut h = [0u8; FRAME_HEADER_LEN];
        let got = read_full(&mut reader, &mut h)?;
        if got < FRAME_HEADER_LEN {
            break Some(format!(
                "record header cut short ({got} of {FRAME_HEADER_LEN} bytes present)"
            ));
        }
        let (len, crc) = parse_frame_header(h);
        if !length_is_sane(len) {
            break Some(format!("bad record length {len}"));
        }
        let total = FRAME_HEADER_LEN as u64 + u64::from(len);
        if total > left {
            break Some(format!(
                "record cut short ({left} of {total} bytes present)"
            ));
        }
        // Allocated only now that the file is known to hold that many bytes.
        payload.resize(len as usize, 0);
        let got = read_full(&mut reader, &mut payload)?;
        if got < payload.len() {
            // The file shrank while being read.
            break Some(format!(
                "record cut short ({} of {total} bytes present)",
                got + FRAME_HEADER_LEN
            ));
        }
        if checksum(len, &payload) != crc {
            break Some("checksum mismatch".to_owned());
        }
        match decode_payload(version, &payload) {
            Ok(decoded) => apply(decoded),
            Err(e) => break Some(format!("bad payload: {e}")),
        }
        out.records += 1;
        pos += total;
    };
    drop(reader);
    if failure.is_some() && zeros_to(file, pos, file_len)? {
        out.zeros_after = file_len - pos;
        return Ok(out);
    }
    if let Some(reason) = failure {
        let next_valid = find_valid_record(file, version, pos + 1, file_len)?;
        out.problem = Some(Problem {
            offset: pos,
            reason,
            tail: next_valid.is_none(),
            next_valid,
        });
    }
    Ok(out)
}

/// How much of the file the search for a valid record holds in memory at once.
const WINDOW: usize = 1 << 20;

/// Whether every byte from `from` to `to` is zero (read a window at a time).
fn zeros_to(file: &File, from: u64, to: u64) -> io::Result<bool> {
    let mut win = vec![0u8; usize::try_from(to - from).map_or(WINDOW, |n| n.min(WINDOW))];
    let mut at = from;
    while at < to {
        let n = (to - at).min(win.len() as u64) as usize;
        read_exact_at(file, at, &mut win[..n])?;
        if win[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        at += n as u64;
    }
    Ok(true)
}

/// The first offset at or after `from` where a valid record starts, searching every offset.
fn find_valid_record(
    file: &File,
    version: Version,
    from: u64,
    file_len: u64,
) -> io::Result<Option<u64>> {
    let min_record = FRAME_HEADER_LEN as u64 + 1;
    let mut win: Vec<u8> = Vec::new();
    let mut win_start = from;
    let refill = |win: &mut Vec<u8>, win_start: &mut u64, p: u64| -> io::Result<()> {
        let n = (file_len - p).min(WINDOW as u64) as usize;
        win.resize(n, 0);
        read_exact_at(file, p, win)?;
        *win_start = p;
        Ok(())
    };
    let mut p = from;
    while p + min_record <= file_len {
        if p + min_record > win_start + win.len() as u64 {
            refill(&mut win, &mut win_start, p)?;
        }
        let off = (p - win_start) as usize;
        let mut h = [0u8; FRAME_HEADER_LEN];
        h.copy_from_slice(&win[off..off + FRAME_HEADER_LEN]);
        let (len, crc) = parse_frame_header(h);
        let total = FRAME_HEADER_LEN as u64 + u64::from(len);
        // Cheap filters first: most offsets fail on the length or the tag byte.
        if length_is_sane(len)
            && p + total <= file_len
            && tag_is_known(version, win[off + FRAME_HEADER_LEN])
        {
            let valid = if total <= WINDOW as u64 {
                if p + total > win_start + win.len() as u64 {
                    refill(&mut win, &mut win_start, p)?;
                }
                let off = (p - win_start) as usize;
                decode_record(version, &win[off..off + total as usize]).is_ok()
            } else {
                large_record_is_valid(file, version, p, len, crc)?
            };
            if valid {
                return Ok(Some(p));
            }
        }
        p += 1;
    }
    Ok(None)
}

/// Checks a candidate record too large for the window: the checksum is computed in chunks, and
/// the payload is read whole (to decode it) only once the checksum matched.
fn large_record_is_valid(
    file: &File,
    version: Version,
    p: u64,
    len: u32,
    crc: u32,
) -> io::Result<bool> {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    let mut chunk = vec![0u8; WINDOW];
    let mut done = 0u64;
    let start = p + FRAME_HEADER_LEN as u64;
    while done < u64::from(len) {
        let n = (u64::from(len) - done).min(WINDOW as u64) as usize;
        read_exact_at(file, start + done, &mut chunk[..n])?;
        h.update(&chunk[..n]);
        done += n as u64;
    }
    if h.finalize() != crc {
        return Ok(false);
    }
    let mut payload = vec![0u8; len as usize];
    read_exact_at(file, start, &mut payload)?;
    Ok(decode_payload(version, &payload).is_ok())
}

/// Cuts the file to `len` bytes and syncs it.
fn truncate(path: &Path, len: u64) -> Result<(), FileError> {
    let io = |e| FileError::io(path, e);
    let f = OpenOptions::new().write(true).open(path).map_err(io)?;
    f.set_len(len).map_err(io)?;
    f.sync_all().map_err(io)
}

/// Replays the file at `path` into `machine` (which should be new): a first-format file's
/// changes are restored; a snapshot is restored, and every log entry after it applied in order,
/// with its own position and time, exactly as when it was first applied. Ends with
/// [`StateMachine::restore_end`].
///
/// A missing file is an empty AOF. A damaged tail (see the module docs) is cut off the file,
/// with a warning naming the file and offset, and reported in `truncated_at`. Damage followed by
/// valid records is `Err(FileError::Corrupt)` naming the file and offset; records before it have
/// been applied by then, so the caller should not go on with that state.
pub fn load(path: &Path, machine: &mut StateMachine) -> Result<ReplayReport, FileError> {
    let started = Instant::now();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(ReplayReport {
                records: 0,
                bytes: 0,
                truncated_at: None,
                elapsed: started.elapsed(),
                version: None,
            });
        }
        Err(e) => return Err(FileError::io(path, e)),
    };
    let mut events = Vec::new();
    let scan = scan(&file, &mut |payload| {
        replay_one(machine, payload, &mut events)
    })
    .map_err(|e| FileError::io(path, e))?;
    drop(file);
    machine.restore_end();
    if scan.zeros_after > 0 {
        truncate(path, scan.valid_len)?;
        tracing::info!(
            file = %path.display(),
            offset = scan.valid_len,
            cut_bytes = scan.zeros_after,
            "AOF: cut the zeros after the last record (space written ahead before a crash)"
        );
    }
    let truncated_at = match scan.problem {
        None => None,
        Some(p) if p.tail => {
            truncate(path, p.offset)?;
            tracing::warn!(
                file = %path.display(),
                offset = p.offset,
                cut_bytes = scan.file_len - p.offset,
                "AOF: damaged tail cut off at byte offset {} of {} ({}): a write that was never acknowledged",
                p.offset,
                path.display(),
                p.reason,
            );
            Some(p.offset)
        }
        Some(p) => {
            return Err(FileError::Corrupt {
                path: path.to_owned(),
                offset: p.offset,
                reason: p.full_reason(),
            });
        }
    };
    Ok(ReplayReport {
        records: scan.records,
        bytes: scan.valid_len,
        truncated_at,
        elapsed: started.elapsed(),
        version: scan.version,
    })
}

/// Replays one record. Entries the machine already reflects (at or below a snapshot's
/// position) are skipped: a rewrite's tail may repeat a few of them.
fn replay_one(
    machine: &mut StateMachine,
    payload: Payload<'_>,
    events: &mut Vec<flockd_core::Event>,
) {
    match payload {
        Payload::V1(change) => machine.restore_v1(&change),
        Payload::V2(Record::SnapshotBegin { position, at }) => machine.restore_begin(position, at),
        Payload::V2(Record::Item(item)) => machine.restore(&item),
        Payload::V2(Record::Entry { position, at, ops }) => {
            if position <= machine.position() {
                return;
            }
            for (index, op) in ops.iter().enumerate() {
                machine.apply_in_entry(position, index as u32, at, op, events);
            }
            // Replay wakes nobody: the events of the past are dropped.
            events.clear();
        }
    }
}

/// Reads the whole file and reports its first problem, changing nothing.
pub fn check(path: &Path) -> Result<CheckReport, FileError> {
    let file = File::open(path).map_err(|e| FileError::io(path, e))?;
    let scan = scan(&file, &mut |_| {}).map_err(|e| FileError::io(path, e))?;
    Ok(CheckReport {
        records: scan.records,
        valid_len: scan.valid_len,
        file_len: scan.file_len,
        tail_only: scan.problem.as_ref().is_some_and(|p| p.tail),
        zeros_after: scan.zeros_after,
        problem: scan.problem.map(|p| {
            let reason = p.full_reason();
            (p.offset, reason)
        }),
    })
}

/// Like [`check`], then cuts off a damaged tail (truncate and fsync). Returns what was found
/// (the file is now `valid_len` bytes long). Damage followed by valid records is refused with
/// `Err(FileError::Corrupt)`, the file left untouched: cutting there would drop acknowledged
/// records.
pub fn fix(path: &Path) -> Result<CheckReport, FileError> {
    let report = check(path)?;
    match &report.problem {
        None => {}
        Some((offset, _)) if report.tail_only => {
            truncate(path, *offset)?;
            tracing::warn!(file = %path.display(), offset, "AOF: damaged tail cut off");
        }
        Some((offset, reason)) => {
            return Err(FileError::Corrupt {
                path: path.to_owned(),
                offset: *offset,
                reason: format!(
                    "{reason}; refusing to repair: only a damaged tail can be cut off without \
                     losing acknowledged records (restore a backup, or cut the file by hand)"
                ),
            });
        }
    }
    Ok(report)
}
