//! Rewriting the file in the background: a snapshot of the state to a temporary file while
//! the writer goes on, the entries written meanwhile kept as a tail, then the swap; also the
//! one-time upgrade of a first-format file.

use std::fs::{self};
use std::io::{self, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Instant;

use flockd_log::fsutil::{rewrite_tmp_path, sync_parent_dir};
use flockd_log::{Apply, SnapshotFile, write_snapshot_of};

use crate::error::AofError;

use super::state::{RewriteRun, Writer};

impl Writer {
    pub(super) fn claim_rewrite(&self) -> bool {
        self.sh
            .rewrite_in_progress
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Starts a rewrite once the file has grown enough since the last one.
    pub(super) fn maybe_auto_rewrite(&mut self) {
        let pct = self.sh.rewrite_percentage.load(Ordering::Relaxed);
        if self.failed
            || self.rewrite.is_some()
            || pct == 0
            || self.file_len <= self.sh.rewrite_min_size.load(Ordering::Relaxed)
        {
            return;
        }
        let threshold = u128::from(self.size_at_last_rewrite) * (100 + u128::from(pct)) / 100;
        if u128::from(self.file_len) > threshold && self.claim_rewrite() {
            tracing::info!(
                file = %self.sh.path.display(),
                size = self.file_len,
                base = self.size_at_last_rewrite,
                "AOF: starting an automatic rewrite"
            );
            self.start_rewrite();
        }
    }

    /// Starts the snapshot thread. The caller has set `rewrite_in_progress`.
    pub(super) fn start_rewrite(&mut self) {
        if self.rewrite.is_some() {
            return;
        }
        let cancel = Arc::new(AtomicBool::new(false));
        let sh = self.sh.clone();
        let cancel2 = cancel.clone();
        let spawned = thread::Builder::new()
            .name("flockd-aof-rewrite".to_owned())
            .spawn(move || {
                let result = catch_unwind(AssertUnwindSafe(|| {
                    write_snapshot(&*sh.applier, &sh.tmp_path, &cancel2)
                }))
                .unwrap_or_else(|_| Err("the snapshot source panicked".to_owned()));
                sh.queue.lock().rewrite_done = Some(result);
                sh.wake.notify_one();
            });
        match spawned {
            Ok(handle) => {
                self.rewrite = Some(RewriteRun {
                    tail: Vec::new(),
                    tail_last: self.last_taken,
                    started: Instant::now(),
                    cancel,
                    handle: Some(handle),
                });
            }
            Err(e) => {
                self.rewrite_failed(&format!("cannot start the rewrite thread: {e}"));
                self.sh.rewrite_in_progress.store(false, Ordering::Release);
            }
        }
    }

    /// Finishes a rewrite whose snapshot thread reported `result`.
    pub(super) fn complete_rewrite(
        &mut self,
        result: Result<SnapshotFile, String>,
        mut run: RewriteRun,
    ) {
        if let Some(h) = run.handle.take() {
            let _ = h.join();
        }
        match result.and_then(|snap| self.install(snap, &run)) {
            Ok(()) => {
                let took = run.started.elapsed();
                tracing::info!(
                    file = %self.sh.path.display(),
                    size = self.file_len,
                    tail_bytes = run.tail.len(),
                    took_ms = took.as_millis() as u64,
                    "AOF: rewrite done"
                );
                let mut c = self.sh.counters.lock();
                c.rewrites += 1;
                c.last_rewrite_duration = Some(took);
                c.last_rewrite_failed = false;
            }
            Err(msg) => self.rewrite_failed(&msg),
        }
        self.sh.rewrite_in_progress.store(false, Ordering::Release);
    }

    pub(super) fn rewrite_failed(&mut self, msg: &str) {
        tracing::error!(file = %self.sh.path.display(), "AOF: rewrite failed, keeping the current file: {msg}");
        if let Err(e) = fs::remove_file(&self.sh.tmp_path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(file = %self.sh.tmp_path.display(), "AOF: cannot remove the rewrite file: {e}");
        }
        let mut c = self.sh.counters.lock();
        c.failed_rewrites += 1;
        c.last_rewrite_failed = true;
        c.last_error = Some(format!("rewrite failed: {msg}"));
    }

    /// Appends the tail to the snapshot, renames it over the AOF and switches to it.
    pub(super) fn install(&mut self, snap: SnapshotFile, run: &RewriteRun) -> Result<(), String> {
        let SnapshotFile { mut file, len } = snap;
        let tmp = &self.sh.tmp_path;
        file.write_all(&run.tail)
            .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
        file.sync_all()
            .map_err(|e| format!("syncing {}: {e}", tmp.display()))?;
        fs::rename(tmp, &self.sh.path).map_err(|e| {
            format!(
                "renaming {} to {}: {e}",
                tmp.display(),
                self.sh.path.display()
            )
        })?;
        // From here the path names the new file: switch to it whatever happens next. Its
        // snapshot reflects any entry applied but not logged yet.
        self.unlogged.clear();
        self.file = file;
        self.file_len = len + run.tail.len() as u64;
        self.ahead.reset(self.file_len);
        self.size_at_last_rewrite = self.file_len;
        self.unsynced = false;
        self.unsynced_records = 0;
        self.last_fsync = Instant::now();
        {
            let mut c = self.sh.counters.lock();
            c.file_size = self.file_len;
            c.size_at_last_rewrite = self.file_len;
        }
        if let Err(e) = sync_parent_dir(&self.sh.path) {
            // The rename may not survive a power loss: stay (or become) failed and retry.
            let msg = format!("syncing the directory after the rewrite's rename: {e}");
            self.fail(msg.clone());
            return Err(msg);
        }
        if self.failed {
            self.failed = false;
            *self.sh.failed.lock() = None;
            tracing::info!(file = %self.sh.path.display(), "AOF: recovered, the file is writable again");
        }
        self.publish_durable(run.tail_last);
        Ok(())
    }
}

/// Writes a snapshot of the applier's state to `tmp` (header, snapshot records), synced. Runs
/// on the rewrite thread (and at start, to upgrade a file of an older format).
pub(super) fn write_snapshot(
    applier: &dyn Apply,
    tmp: &Path,
    cancel: &AtomicBool,
) -> Result<SnapshotFile, String> {
    write_snapshot_of(&applier.snapshot(), tmp, cancel)
}

/// Rewrites a file of an older format in the current one, from the state loaded from it:
/// snapshot to the temporary file, synced, renamed over it, directory synced.
pub(super) fn upgrade(path: &Path, applier: &dyn Apply) -> Result<(), AofError> {
    let tmp = rewrite_tmp_path(path);
    let started = Instant::now();
    let snap = write_snapshot(applier, &tmp, &AtomicBool::new(false)).map_err(|reason| {
        let _ = fs::remove_file(&tmp);
        AofError::Upgrade {
            path: path.to_owned(),
            reason,
        }
    })?;
    drop(snap);
    fs::rename(&tmp, path).map_err(|e| AofError::io(path, e))?;
    sync_parent_dir(path).map_err(|e| AofError::io(path, e))?;
    tracing::warn!(
        file = %path.display(),
        took_ms = started.elapsed().as_millis() as u64,
        "AOF: upgraded a first-format file to format 2 by a rewrite (older flockd releases cannot read it now)"
    );
    Ok(())
}
