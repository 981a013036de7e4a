//! Space written ahead: under `appendfsync always` the file's next bytes are zeros, written
//! before the records that will cover them.
//!
//! An `fdatasync` after an append that grew the file writes the records' blocks and then the
//! inode (its length changed); after records written over space already there, it writes the
//! blocks alone. On this project's test machine that is about a third less CPU and a fifth less
//! wait per sync (docs/benchmarks.md, "What a sync costs when the file grows"), and a sync per
//! batch is what `always` pays. `fallocate` alone would not do: ext4 marks such space
//! unwritten, and the first write to it changes the inode's extents again. So the space is
//! allocated and then written with zeros, a step at a time, and synced with the batch that
//! first needs it.
//!
//! Replay takes zeros after the last record for the file's end, not for damage (no record has
//! length 0), and cuts them; a clean shutdown cuts them too, so a stopped server's file ends at
//! its last record.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use super::state::Writer;
use crate::FsyncPolicy;

/// How far ahead of the records the zeros reach once written: one larger sync per this many
/// bytes of records.
pub(super) const WRITE_AHEAD: u64 = 1 << 20;

/// Zeros written in pieces of this size (a static buffer, no allocation).
const PIECE: usize = 64 * 1024;
static ZEROS: [u8; PIECE] = [0; PIECE];

impl Writer {
    /// Before `next` bytes of records are written at the file's end: under `always`, makes sure
    /// zeros lie ahead of them. The space is allocated first, so that a disk without room (or a
    /// file system without `fallocate`) says so before anything is written: the records then go
    /// on as before, and no space is tried again until they have grown by a step (never, where
    /// `fallocate` is not supported). An error writing the zeros is a failed write of the file,
    /// and so the batch's.
    pub(super) fn write_ahead(&mut self, next: usize) -> io::Result<()> {
        let needed = self.file_len + next as u64;
        if needed <= self.written_ahead
            || needed < self.write_ahead_after
            || self.sh.policy() != FsyncPolicy::Always
        {
            return Ok(());
        }
        let from = self.written_ahead.max(self.file_len);
        let to = needed + WRITE_AHEAD;
        if let Err(e) = allocate(&self.file, from, to - from) {
            tracing::debug!(file = %self.sh.path.display(), "AOF: no space written ahead: {e}");
            // A failed allocation may have grown the file in part: back to where it was.
            if let Err(e) = self.file.set_len(from) {
                tracing::warn!(file = %self.sh.path.display(), "AOF: cannot cut a failed allocation back: {e}");
            }
            let unsupported = matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS));
            self.write_ahead_after = if unsupported {
                u64::MAX
            } else {
                self.file_len + WRITE_AHEAD
            };
            return Ok(());
        }
        // Written, not only allocated: ext4 keeps allocated space "unwritten" until it is
        // written, and the first write to each block would change the inode again.
        self.written_ahead = to;
        write_zeros(&self.file, from, to)
    }

    /// Cuts the zeros after the records off (the file then ends at its last record), as the
    /// shutdown needs.
    pub(super) fn cut_ahead(&mut self) {
        if self.written_ahead > self.file_len {
            if let Err(e) = self.file.set_len(self.file_len) {
                tracing::warn!(file = %self.sh.path.display(), "AOF: cannot cut the space written ahead: {e}");
                return;
            }
            self.written_ahead = self.file_len;
        }
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
