//! The writer thread and its rounds: take everything queued, write it in one `write`, sync as
//! the policy says (group commit), apply, answer; the failed state and its retry; shutdown.

use std::fs;
use std::io::{self, Seek, SeekFrom, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flockd_log::record::encode_entry;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::FsyncPolicy;
use flockd_log::{ProposalResult, ProposeError};

use super::rewrite::write_snapshot;
use super::shared::{QueuedProposal, SECOND, WriterShared, unix_ms};
use super::state::{RewriteRun, Writer};

/// How often the writer thread looks for queued records under `everysec` and `no`, where
/// appends do not wake it: records nobody waits for (an expiry, a reclaimed name's floor) still
/// reach the file within this long.
pub(super) const POLL: Duration = Duration::from_millis(50);

/// The writer thread: sleeps until there is work (or a timer is due), then runs one round with
/// the file's state.
pub(super) fn run_writer(core: &Mutex<Writer>, sh: &WriterShared) {
    loop {
        let deadline = core.lock().next_deadline();
        {
            let mut q = sh.queue.lock();
            loop {
                if !q.proposals.is_empty()
                    || q.stop
                    || q.rewrite_requested
                    || q.rewrite_done.is_some()
                {
                    break;
                }
                let poll = (sh.policy() != FsyncPolicy::Always).then(|| Instant::now() + POLL);
                let wake_at = match (deadline, poll) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                match wake_at {
                    Some(at) => {
                        if sh.wake.wait_until(&mut q, at).timed_out() {
                            break;
                        }
                    }
                    None => sh.wake.wait(&mut q),
                }
            }
        }
        if core.lock().round() {
            return;
        }
    }
}

impl Writer {
    /// One round of the writer thread: completes a finished rewrite, writes what is queued,
    /// starts a requested rewrite, runs the timers. True once stopped.
    pub(super) fn round(&mut self) -> bool {
        let (last_position, stop, requested, done) = {
            let mut q = self.sh.queue.lock();
            self.spare.clear();
            std::mem::swap(&mut q.proposals, &mut self.spare);
            (
                q.last_position,
                q.stop,
                std::mem::take(&mut q.rewrite_requested),
                q.rewrite_done.take(),
            )
        };
        if let Some(done) = done
            && let Some(run) = self.rewrite.take()
        {
            self.complete_rewrite(done, run);
        }
        let mut batch = std::mem::take(&mut self.spare);
        self.write_batch(&mut batch, last_position);
        self.spare = batch;
        if requested {
            self.start_rewrite();
        }
        if stop {
            self.stop();
            return true;
        }
        self.timers();
        false
    }

    /// Writes what is queued, if anything (and unless stopping: the thread's last round does).
    /// True if it wrote a batch.
    pub(super) fn write_queued(&mut self) -> bool {
        let last_position = {
            let mut q = self.sh.queue.lock();
            if q.stop || q.proposals.is_empty() {
                return false;
            }
            self.spare.clear();
            std::mem::swap(&mut q.proposals, &mut self.spare);
            q.last_position
        };
        let mut batch = std::mem::take(&mut self.spare);
        self.write_batch(&mut batch, last_position);
        self.spare = batch;
        true
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let fsync = (self.sh.policy() == FsyncPolicy::EverySec && self.unsynced && !self.failed)
            .then(|| self.last_fsync + SECOND);
        let retry = (self.failed && self.rewrite.is_none()).then(|| self.last_retry + SECOND);
        match (fsync, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Writes the batch, syncs it under `always`, applies it and answers its proposers; or,
    /// failing that, answers them with the error and applies nothing. Empties `batch`.
    pub(super) fn write_batch(&mut self, batch: &mut Vec<QueuedProposal>, last_position: u64) {
        let first = self.last_taken + 1;
        self.last_taken = last_position;
        if batch.is_empty() {
            return;
        }
        if self.failed {
            let error = self.sh.failed.lock().clone().unwrap_or_default();
            refuse(batch, &ProposeError::WriteFailed(error.into()));
            self.publish_failed(first, last_position);
            return;
        }
        let good_len = self.file_len;
        self.buf.clear();
        self.buf.extend_from_slice(&self.unlogged);
        let mut replies = Vec::with_capacity(batch.len());
        for QueuedProposal { entry, reply } in batch.drain(..) {
            if let Err(e) = encode_entry(entry.position, entry.at, &entry.ops, &mut self.buf) {
                // Only this proposal is refused (the server's limits keep records far smaller).
                let _ = reply.send(Err(ProposeError::WriteFailed(e.to_string().into())));
                continue;
            }
            self.entries.push(entry);
            replies.push(reply);
        }
        if let Err(e) = self.write_buf() {
            self.fail_batch(format!("write error: {e}"), (first, last_position), replies);
            return;
        }
        let n = self.entries.len() as u64 + u64::from(!self.unlogged.is_empty());
        self.unlogged.clear();
        self.unsynced = true;
        self.unsynced_records += n;
        {
            let mut c = self.sh.counters.lock();
            c.records_written += n;
            c.batches += 1;
            c.file_size = self.file_len;
        }
        if self.sh.policy() == FsyncPolicy::Always
            && let Err(e) = self.sync()
        {
            // The batch was written but not synced: it goes, cut off with the failure.
            self.file_len = good_len;
            self.fail_batch(format!("fsync error: {e}"), (first, last_position), replies);
            return;
        }
        if let Some(run) = &mut self.rewrite {
            // Everything taken since the rewrite started is above its start.
            run.tail.extend_from_slice(&self.buf);
            run.tail_last = last_position;
        }
        self.results.clear();
        self.sh
            .applier
            .apply(&self.entries, true, &mut self.results);
        self.entries.clear();
        for (reply, results) in replies.into_iter().zip(self.results.drain(..)) {
            let _ = reply.send(Ok(results));
        }
        self.publish_durable(last_position);
        self.maybe_auto_rewrite();
    }

    /// A batch's write or sync failed: nothing of it is applied.
    pub(super) fn fail_batch(
        &mut self,
        msg: String,
        (first, last): (u64, u64),
        replies: Vec<oneshot::Sender<ProposalResult>>,
    ) {
        self.entries.clear();
        self.fail(msg.clone());
        self.publish_failed(first, last);
        let error = ProposeError::WriteFailed(msg.into());
        for reply in replies {
            let _ = reply.send(Err(error.clone()));
        }
    }

    /// Writes the encoded batch; on success the good length grows.
    pub(super) fn write_buf(&mut self) -> io::Result<()> {
        self.write_ahead(self.buf.len())?;
        #[cfg(test)]
        {
            let n = &self.sh.inject_write_failures;
            if n.load(Ordering::SeqCst) > 0 {
                n.fetch_sub(1, Ordering::SeqCst);
                // Half written, as a full disk would leave it.
                self.file.write_all(&self.buf[..self.buf.len() / 2])?;
                return Err(io::Error::other("injected: No space left on device"));
            }
        }
        self.file.write_all(&self.buf)?;
        self.file_len += self.buf.len() as u64;
        Ok(())
    }

    pub(super) fn sync(&mut self) -> io::Result<()> {
        // fdatasync also persists the file's growing length, which is all the metadata replay
        // needs.
        let started = Instant::now();
        self.file.sync_data()?;
        self.last_fsync = Instant::now();
        self.unsynced = false;
        let records = std::mem::take(&mut self.unsynced_records);
        let mut c = self.sh.counters.lock();
        c.fsyncs += 1;
        c.records_synced += records;
        c.fsync_seconds
            .observe_duration(self.last_fsync.duration_since(started));
        c.records_per_fsync.observe_value(records);
        c.last_fsync_unix_ms = Some(unix_ms());
        Ok(())
    }

    /// Enters the failed state after a write or sync error.
    pub(super) fn fail(&mut self, msg: String) {
        tracing::error!(
            file = %self.sh.path.display(),
            "AOF: {msg}; state changes are refused (MISCONF) until a rewrite of the file succeeds (retried every second)"
        );
        // Cut off whatever part of the batch reached the file so that it stays a valid prefix
        // (and a restart before recovery replays cleanly).
        let cut = self
            .file
            .set_len(self.file_len)
            .and_then(|()| self.file.seek(SeekFrom::Start(self.file_len)));
        // The zeros written ahead went with the cut.
        self.ahead.reset(self.file_len);
        if let Err(e) = cut {
            tracing::error!(file = %self.sh.path.display(), "AOF: cannot cut the file back to {} bytes: {e}", self.file_len);
        }
        self.failed = true;
        self.last_retry = Instant::now();
        {
            // Under the counters' lock, as `stats` reads both: INFO never shows the failure
            // without its error text (a disk-fault test saw `err` with an empty error).
            let mut c = self.sh.counters.lock();
            c.last_error = Some(msg.clone());
            c.write_errors += 1;
            *self.sh.failed.lock() = Some(msg.clone());
        }
        self.sh.progress.send_modify(|p| p.error = Some(msg.into()));
    }

    pub(super) fn publish_durable(&self, position: u64) {
        self.sh
            .progress
            .send_modify(|p| p.durable = p.durable.max(position));
    }

    /// Positions `first..=last` will never be durable (their batch failed or was refused).
    pub(super) fn publish_failed(&self, first: u64, last: u64) {
        if first > last {
            return;
        }
        self.sh.progress.send_modify(|p| match p.failed.last_mut() {
            Some(range) if range.1 + 1 >= first => range.1 = range.1.max(last),
            _ => p.failed.push((first, last)),
        });
    }

    /// The `everysec` sync and the failed state's retry.
    pub(super) fn timers(&mut self) {
        let now = Instant::now();
        if self.sh.policy() == FsyncPolicy::EverySec
            && self.unsynced
            && !self.failed
            && now >= self.last_fsync + SECOND
            && let Err(e) = self.sync()
        {
            self.fail(format!("fsync error: {e}"));
        }
        if self.failed && self.rewrite.is_none() && now >= self.last_retry + SECOND {
            self.last_retry = now;
            if self.claim_rewrite() {
                tracing::info!(file = %self.sh.path.display(), "AOF: trying to recover by rewriting the file");
                self.start_rewrite();
            }
        }
    }
}

impl Writer {
    pub(super) fn stop(&mut self) {
        if let Some(mut run) = self.rewrite.take() {
            // Abandon it: the current file is complete (or the failed branch below rewrites).
            run.cancel.store(true, Ordering::Release);
            if let Some(h) = run.handle.take() {
                let _ = h.join();
            }
            self.sh.queue.lock().rewrite_done = None;
            if let Err(e) = fs::remove_file(&self.sh.tmp_path)
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(file = %self.sh.tmp_path.display(), "AOF: cannot remove the rewrite file: {e}");
            }
            self.sh.rewrite_in_progress.store(false, Ordering::Release);
        }
        if self.failed {
            // Last chance to persist what the failed writes could not: the whole state.
            tracing::warn!(file = %self.sh.path.display(), "AOF: failed at shutdown, writing the whole state once more");
            let run = RewriteRun {
                tail: Vec::new(),
                tail_last: self.last_taken,
                started: Instant::now(),
                cancel: Arc::new(AtomicBool::new(false)),
                handle: None,
            };
            let result = catch_unwind(AssertUnwindSafe(|| {
                write_snapshot(&*self.sh.applier, &self.sh.tmp_path, &run.cancel)
            }))
            .unwrap_or_else(|_| Err("the snapshot source panicked".to_owned()));
            self.complete_rewrite(result, run);
        } else if self.unsynced
            && let Err(e) = self.sync()
        {
            tracing::error!(file = %self.sh.path.display(), "AOF: fsync at shutdown failed: {e}");
            self.sh.counters.lock().last_error = Some(format!("fsync error: {e}"));
            // What was written may be lost: no longer promise it.
        } else if self.ahead.any_after(self.file_len) {
            // A stopped server's file ends at its last record; a crash's zeros are cut at the
            // next start instead.
            self.cut_ahead();
            if let Err(e) = self.file.sync_data() {
                tracing::warn!(file = %self.sh.path.display(), "AOF: fsync after cutting the space written ahead failed: {e}");
            }
        }
    }
}

/// Answers every proposal of `batch` with `error`.
pub(super) fn refuse(batch: &mut Vec<QueuedProposal>, error: &ProposeError) {
    for QueuedProposal { reply, .. } in batch.drain(..) {
        let _ = reply.send(Err(error.clone()));
    }
}
