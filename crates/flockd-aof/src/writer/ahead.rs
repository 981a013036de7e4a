//! Space written ahead: under `appendfsync always` the file's next bytes are zeros, written
//! before the records that will cover them (flockd-log's `written_ahead`: a sync per batch is
//! what `always` pays, and a sync over space already written does not write the file's size).

use std::io;

use super::state::Writer;
use crate::FsyncPolicy;

impl Writer {
    /// Before `next` bytes of records are written at the file's end: under `always`, makes sure
    /// zeros lie ahead of them. An error writing the zeros is a failed write of the file, and
    /// so the batch's.
    pub(super) fn write_ahead(&mut self, next: usize) -> io::Result<()> {
        if self.sh.policy() != FsyncPolicy::Always {
            return Ok(());
        }
        self.ahead
            .prepare(&self.file, &self.sh.path, self.file_len, next as u64)
    }

    /// Cuts the zeros after the records off (the file then ends at its last record), as the
    /// shutdown needs.
    pub(super) fn cut_ahead(&mut self) {
        if let Err(e) = self.ahead.cut(&self.file, self.file_len) {
            tracing::warn!(file = %self.sh.path.display(), "AOF: cannot cut the space written ahead: {e}");
        }
    }
}
