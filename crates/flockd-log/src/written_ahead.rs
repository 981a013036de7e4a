//! Space written ahead of a log's records: the file's next bytes are zeros, written before the
//! records that will cover them. Both logs use it: the AOF under `appendfsync always`, and
//! the Raft log's segments.
//!
//! An `fdatasync` after an append that grew the file writes the records' blocks and then the
//! inode (its length changed); after records written over space already there, it writes the
//! blocks alone. On this project's test machine that is about a third less CPU and a fifth less
//! wait per sync (docs/benchmarks.md, "What a sync costs when the file grows"). `fallocate`
//! alone would not do: ext4 marks such space unwritten, and the first write to it changes the
//! inode's extents again. So the space is allocated and then written with zeros, a step at a
//! time, and synced with the batch that first needs it.
//!
//! Replay takes zeros after the last record for the file's end, not for damage (no record has
//! length 0); a clean stop cuts them, so a stopped server's file ends at its last record.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// How far ahead of the records the zeros reach once written: one larger sync per this many
/// bytes of records.
pub const WRITE_AHEAD: u64 = 1 << 20;

/// Zeros written in pieces of this size (a static buffer, no allocation).
const PIECE: usize = 64 * 1024;
static ZEROS: [u8; PIECE] = [0; PIECE];

/// Where a file's zeros ahead of its records end, and when space is tried again after it could
/// not be had.
#[derive(Debug)]
pub struct WrittenAhead {
    /// Where the zeros end (where the file ends, when there are none).
    end: u64,
    /// No space is tried again before the records reach this (after a failed allocation).
    retry_at: u64,
}

impl WrittenAhead {
    /// A file `len` bytes long, whose bytes after its records (if any) are zeros.
    pub fn new(len: u64) -> WrittenAhead {
        WrittenAhead {
            end: len,
            retry_at: 0,
        }
    }

    /// The file was cut or replaced and is now `len` bytes long.
    pub fn reset(&mut self, len: u64) {
        *self = WrittenAhead::new(len);
    }

    /// Before `next` bytes of records are written at `records_end`: makes sure zeros lie ahead
    /// of them. The space is allocated first, so that a disk without room (or a file system
    /// without `fallocate`) says so before anything is written: the records then grow the file
    /// as before, and no space is tried again until they have grown by a step (never, where
    /// `fallocate` is not supported). An error writing the zeros is a failed write of the file.
    pub fn prepare(
        &mut self,
        file: &File,
        path: &Path,
        records_end: u64,
        next: u64,
    ) -> io::Result<()> {
        let needed = records_end + next;
        if needed <= self.end || needed < self.retry_at {
            return Ok(());
        }
        let from = self.end.max(records_end);
        let to = needed + WRITE_AHEAD;
        if let Err(e) = allocate(file, from, to - from) {
            tracing::debug!(file = %path.display(), "no space written ahead: {e}");
            // A failed allocation may have grown the file in part: back to where it was.
            if let Err(e) = file.set_len(from) {
                tracing::warn!(file = %path.display(), "cannot cut a failed allocation back: {e}");
            }
            let unsupported = matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS));
            self.retry_at = if unsupported {
                u64::MAX
            } else {
                records_end + WRITE_AHEAD
            };
            return Ok(());
        }
        // Written, not only allocated: ext4 keeps allocated space "unwritten" until it is
        // written, and the first write to each block would change the inode again.
        self.end = to;
        write_zeros(file, from, to)
    }

    /// Whether zeros lie after `records_end`.
    pub fn any_after(&self, records_end: u64) -> bool {
        self.end > records_end
    }

    /// Cuts the zeros off, so that the file ends at `records_end` (not synced here).
    pub fn cut(&mut self, file: &File, records_end: u64) -> io::Result<()> {
        if self.end > records_end {
            file.set_len(records_end)?;
            self.end = records_end;
        }
        Ok(())
    }
}

/// Allocates `len` bytes of the file from `offset` (growing it, the new bytes reading as zeros).
fn allocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let too_big = |_| io::Error::from(io::ErrorKind::InvalidInput);
    let (offset, len) = (
        libc::off_t::try_from(offset).map_err(too_big)?,
        libc::off_t::try_from(len).map_err(too_big)?,
    );
    // SAFETY: a plain system call on a file descriptor this `File` owns; no memory is passed.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes zeros over `from..to` without moving the file's cursor.
fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    let mut at = from;
    while at < to {
        let n = (to - at).min(PIECE as u64) as usize;
        file.write_all_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_reach_a_step_past_the_records_and_are_cut_back() {
        let path = std::env::temp_dir().join(format!("flockd-ahead-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        file.write_all_at(b"head", 0).unwrap();
        let mut ahead = WrittenAhead::new(4);
        ahead.prepare(&file, &path, 4, 10).unwrap();
        let len = file.metadata().unwrap().len();
        assert_eq!(len, 14 + WRITE_AHEAD);
        assert!(ahead.any_after(14));
        // Within the zeros: nothing more is written.
        ahead.prepare(&file, &path, 14, 1000).unwrap();
        assert_eq!(file.metadata().unwrap().len(), len);
        let mut tail = vec![1u8; 64];
        file.read_exact_at(&mut tail, len - 64).unwrap();
        assert!(tail.iter().all(|&b| b == 0));
        ahead.cut(&file, 1014).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1014);
        assert!(!ahead.any_after(1014));
        let _ = std::fs::remove_file(&path);
    }
}
