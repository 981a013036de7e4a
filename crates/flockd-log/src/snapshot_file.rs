//! Snapshot files: the whole state as records of the current format, what an AOF rewrite
//! writes before its tail and what the Raft log keeps as its snapshot.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use flockd_core::Snapshot;

use crate::error::FileError;
use crate::record::{HEADER, encode_item, encode_snapshot_begin};

/// A snapshot written to a file, complete and synced: the file (open, positioned at its end)
/// and its length.
pub struct SnapshotFile {
    pub file: File,
    pub len: u64,
}

/// Writes `snapshot` as a file of the current format to `path`, synced, and returns its length:
/// what a rewrite writes, for others that keep snapshots (the replicated log's).
pub fn save_snapshot(snapshot: &Snapshot, path: &Path) -> Result<u64, FileError> {
    write_snapshot_of(snapshot, path, &AtomicBool::new(false))
        .map(|written| written.len)
        .map_err(|reason| FileError::Snapshot {
            path: path.to_owned(),
            reason,
        })
}

/// Writes `snapshot` to `tmp` (header, snapshot records), synced; stops early with
/// `cancelled` once `cancel` is set. Errors are the reason, in words.
pub fn write_snapshot_of(
    snapshot: &Snapshot,
    tmp: &Path,
    cancel: &AtomicBool,
) -> Result<SnapshotFile, String> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let werr = |e: io::Error| format!("writing {}: {e}", tmp.display());
    let mut enc = Vec::with_capacity(64 * 1024);
    enc.extend_from_slice(&HEADER);
    encode_snapshot_begin(snapshot.position(), snapshot.at(), &mut enc);
    let mut len = 0u64;
    let mut err: Option<String> = None;
    snapshot.emit(&mut |item| {
        // The snapshot cannot be stopped midway: after an error, skip the rest cheaply.
        if err.is_some() || cancel.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = encode_item(&item, &mut enc) {
            err = Some(format!("cannot store a record: {e}"));
        } else if enc.len() >= 60 * 1024 {
            if let Err(e) = w.write_all(&enc) {
                err = Some(werr(e));
            }
            len += enc.len() as u64;
            enc.clear();
        }
    });
    if cancel.load(Ordering::Relaxed) {
        return Err("cancelled".to_owned());
    }
    if let Some(e) = err {
        return Err(e);
    }
    w.write_all(&enc).map_err(werr)?;
    len += enc.len() as u64;
    let file = w.into_inner().map_err(|e| werr(e.into_error()))?;
    file.sync_all()
        .map_err(|e| format!("syncing {}: {e}", tmp.display()))?;
    Ok(SnapshotFile { file, len })
}
