//! The writer: the local log behind `propose`. Group commit, fsync policies, apply after
//! durability, background rewrite, failure recovery, shutdown.
//!
//! [`Aof::propose`] only takes a mutex and queues the ops with the next log position and their
//! time. The file's state sits behind one mutex; whoever holds it takes *everything* queued at
//! once, encodes the batch into one buffer and writes it with one `write_all`, syncs if the
//! policy says so, and only then hands the batch to the [`Apply`] (the state machine), in log
//! order, and answers each proposer with its results. So memory never runs ahead of the file: a
//! change whose write failed was never applied, and nobody ever saw it.
//! Under `appendfsync always` only the writer thread (a plain `std::thread`, so no fsync ever
//! runs on a tokio worker) does this, woken by each proposal (group commit: concurrent clients
//! share an fsync, like raft-log's flush worker). Under `everysec` and `no` the proposer writes
//! the queue itself ([`Aof::write_now`]: a write to the page cache, no thread hand-off); the
//! writer thread syncs at most once a second (`everysec`; never under `no`, but at rewrite and
//! shutdown) and polls for proposals nobody pushed.
//! The policy can change at run time ([`Aof::set_fsync_policy`]): the switch happens with the
//! file's state held, and a switch to `always` first syncs what was written before it.
//!
//! **Rewrite.** Between two batches (everything taken is applied) the writer notes the last
//! position S; a rewrite thread takes a [`Snapshot`] from the applier (at some position P >= S:
//! a copy of stripe pointers, so apply goes on) and writes it to `<path>.rewrite.tmp`, synced.
//! Every entry above S meanwhile goes to the old file as usual *and*, once written, is copied
//! (already encoded) into a tail buffer. When the snapshot is done the writer, between two
//! batches, appends the tail to the temporary file, syncs it, renames it over the AOF, syncs the
//! directory and carries on with the new file. Replay skips tail entries at or below P, which the
//! snapshot reflects. If anything fails, the temporary file is deleted and the old file kept.
//!
//! **Failure.** If a write or fsync fails, the writer cuts the file back to its last good length,
//! enters the failed state ([`Aof::check_writable`] errs, so the server answers state changes with
//! `-MISCONF` and keeps serving reads) and answers the batch's proposers with
//! [`ProposeError::WriteFailed`]: nothing of the batch is applied. While failed it refuses every
//! proposal and, once a second, tries a rewrite from the state machine (which holds exactly what
//! was acknowledged) into a new file: the old file is never trusted again, not even by a later
//! fsync, since the kernel may have dropped the pages of the failed write.
//!
//! **Shutdown** writes and syncs what is queued (whatever the policy), abandons a running
//! rewrite, tries a last rewrite if the writer is failed, and stops the thread. Later proposals
//! get [`ProposeError::Stopped`].
//!
//! The rooms: this file is the handle ([`Aof`]: open, propose, policy, stats, shutdown);
//! `shared` what the handle and the writer thread share (queue, progress, counters); `flush`
//! the writer thread (group commit, fsync policy, the failed state, shutdown); `rewrite` the
//! background rewrite and the upgrade of a first-format file.

mod ahead;
mod flush;
mod rewrite;
mod shared;
mod state;
#[cfg(test)]
mod tests;

use std::fs::{self, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use flockd_core::{Millis, Op};
use flockd_log::fsutil::{read_exact_at, rewrite_tmp_path, sync_parent_dir};
use flockd_log::record::{HEADER, encode_entry};
use flockd_log::{Apply, Entry, FileError};
use parking_lot::{Condvar, Mutex};
use tokio::sync::{oneshot, watch};

use crate::error::AofError;
use crate::{AofOptions, FsyncPolicy};
use flockd_histogram::Counts;
use flockd_log::{ProposalResult, ProposeError};

use flush::run_writer;
use rewrite::upgrade;
use shared::{Progress, Queue, QueuedProposal, WriterCounters, WriterShared, policy_to_u8};
use state::Writer;

/// The append-only file. Share it as `Arc<Aof>`; dropping the last reference shuts it down.
pub struct Aof {
    sh: Arc<WriterShared>,
    /// The file's state. The writer thread takes it for each round; under `everysec` and `no`
    /// a waiter for durability takes it too and writes the queue itself (see [`Aof::write_now`]).
    core: Arc<Mutex<Writer>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// A snapshot of the writer's counters, for `INFO persistence`.
#[derive(Clone, Debug, PartialEq)]
pub struct AofStats {
    pub fsync_policy: FsyncPolicy,
    /// Current length of the file, in bytes.
    pub file_size: u64,
    /// Length after the last rewrite (or at open): the base of automatic rewrites.
    pub size_at_last_rewrite: u64,
    pub rewrite_in_progress: bool,
    /// Completed rewrites (including failure recoveries).
    pub rewrites: u64,
    pub failed_rewrites: u64,
    pub last_rewrite_duration: Option<Duration>,
    /// Whether the last rewrite succeeded (true before any).
    pub last_rewrite_ok: bool,
    /// When the file was last synced, as Unix time in milliseconds.
    pub last_fsync_unix_ms: Option<u64>,
    /// Records written to the file by the writer (rewrites not counted).
    pub records_written: u64,
    /// Batches written (each one `write`).
    pub batches: u64,
    pub fsyncs: u64,
    /// Average records made durable per fsync: the effect of group commit.
    pub acks_per_fsync: f64,
    /// Sequence number of the last record queued.
    pub appended_position: u64,
    /// Every record up to this sequence number is durable (per the policy).
    pub durable_position: u64,
    /// The writer is in the failed state (`aof_last_write_status:err`).
    pub write_failed: bool,
    /// The last write, fsync or rewrite error.
    pub last_error: Option<String>,
    /// Failed writes and fsyncs (each one puts the writer in the failed state).
    pub write_errors: u64,
    /// How long each fsync took, in seconds.
    pub fsync_seconds: Counts,
    /// How many records each fsync made durable.
    pub records_per_fsync: Counts,
}

impl Aof {
    /// Opens the file for appending (creating it, with its header, if missing or empty, and
    /// syncing the directory after creating it) and starts the writer thread.
    ///
    /// Call [`crate::load`] first: it replays the file and cuts a damaged tail, which `open`
    /// does not look for (it only checks the header), and appending after a damaged tail would
    /// turn it into a damaged middle. A file in an older format is rewritten in the current one
    /// before anything is appended. Positions continue after `start_position`, times after
    /// `start_at` (the loaded state's). A stale `<path>.rewrite.tmp` is deleted.
    pub fn open(
        opts: AofOptions,
        applier: Arc<dyn Apply>,
        start_position: u64,
        start_at: Millis,
    ) -> Result<Arc<Aof>, AofError> {
        let path = opts.path;
        let io = |e| AofError::io(&path, e);
        let existed = match fs::symlink_metadata(&path) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(io(e)),
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let mut len = file.metadata().map_err(io)?.len();
        if len == 0 {
            file.write_all(&HEADER).map_err(io)?;
            file.sync_all().map_err(io)?;
            len = HEADER.len() as u64;
        } else {
            let mut h = [0u8; HEADER.len()];
            let read = len >= h.len() as u64 && read_exact_at(&file, 0, &mut h).is_ok();
            if read && h == flockd_log::record::HEADER_V1 {
                drop(file);
                upgrade(&path, &*applier)?;
                file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(io)?;
                len = file.metadata().map_err(io)?.len();
            } else if !(read && h == HEADER) {
                return Err(AofError::File(FileError::Corrupt {
                    path,
                    offset: 0,
                    reason: "not a flockd AOF file (bad or cut header); run load() on it first"
                        .to_owned(),
                }));
            }
        }
        if !existed {
            sync_parent_dir(&path).map_err(io)?;
        }
        file.seek(SeekFrom::Start(len)).map_err(io)?;

        let tmp_path = rewrite_tmp_path(&path);
        match fs::remove_file(&tmp_path) {
            Ok(()) => {
                tracing::info!(file = %tmp_path.display(), "AOF: removed a stale rewrite file")
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(file = %tmp_path.display(), "AOF: cannot remove a stale rewrite file: {e}")
            }
        }

        let (progress, _) = watch::channel(Progress {
            durable: start_position,
            ..Progress::default()
        });
        let sh = Arc::new(WriterShared {
            path: path.clone(),
            tmp_path,
            policy: AtomicU8::new(policy_to_u8(opts.fsync)),
            rewrite_min_size: AtomicU64::new(opts.rewrite_min_size),
            rewrite_percentage: AtomicU64::new(opts.rewrite_percentage),
            applier,
            queue: Mutex::new(Queue {
                last_position: start_position,
                last_at: start_at,
                ..Queue::default()
            }),
            wake: Condvar::new(),
            appended: AtomicU64::new(start_position),
            progress,
            rewrite_in_progress: AtomicBool::new(false),
            failed: Mutex::new(None),
            stopped: AtomicBool::new(false),
            counters: Mutex::new(WriterCounters {
                file_size: len,
                size_at_last_rewrite: len,
                ..WriterCounters::default()
            }),
            #[cfg(test)]
            inject_write_failures: std::sync::atomic::AtomicU32::new(0),
        });
        let writer = Writer {
            sh: sh.clone(),
            file,
            file_len: len,
            ahead: flockd_log::written_ahead::WrittenAhead::new(len),
            size_at_last_rewrite: len,
            last_taken: start_position,
            unsynced: false,
            unsynced_records: 0,
            last_fsync: Instant::now(),
            failed: false,
            last_retry: Instant::now(),
            rewrite: None,
            buf: Vec::new(),
            spare: Vec::new(),
            unlogged: Vec::new(),
            entries: Vec::new(),
            results: Vec::new(),
        };
        let core = Arc::new(Mutex::new(writer));
        let (sh2, core2) = (sh.clone(), core.clone());
        let handle = thread::Builder::new()
            .name("flockd-aof-writer".to_owned())
            .spawn(move || {
                if catch_unwind(AssertUnwindSafe(|| run_writer(&core2, &sh2))).is_err() {
                    // A bug, not an I/O error: make sure nobody waits forever, and refuse writes.
                    let msg = "the AOF writer thread panicked".to_owned();
                    tracing::error!(file = %sh2.path.display(), "{msg}");
                    let mut c = sh2.counters.lock();
                    c.last_error = Some(msg.clone());
                    *sh2.failed.lock() = Some(msg);
                }
                sh2.stopped.store(true, Ordering::Release);
                sh2.queue.lock().stop = true;
                sh2.progress.send_modify(|p| p.closed = true);
            })
            .map_err(io)?;
        Ok(Arc::new(Aof {
            sh,
            core,
            writer: Mutex::new(Some(handle)),
        }))
    }

    /// Queues `ops` as one log entry taking effect at `at` (or at the previous entry's time, if
    /// that is later: log time never goes back). The receiver gets the ops' results once the
    /// entry is durable and applied, or why it never will be. Never blocks on I/O; under
    /// `everysec` and `no` call [`Aof::write_now`] (or wait for the writer's poll).
    pub fn propose(&self, at: Millis, ops: Vec<Op>) -> oneshot::Receiver<ProposalResult> {
        let (reply, receiver) = oneshot::channel();
        {
            let mut q = self.sh.queue.lock();
            if q.stop {
                let _ = reply.send(Err(ProposeError::Stopped));
                return receiver;
            }
            q.last_position += 1;
            q.last_at = q.last_at.max(at);
            let entry = Entry {
                position: q.last_position,
                at: q.last_at,
                ops,
            };
            q.proposals.push(QueuedProposal { entry, reply });
            self.sh.appended.store(q.last_position, Ordering::Release);
        }
        // Under `everysec` and `no` the proposer writes the queue itself (`write_now`), and the
        // writer thread polls for what nobody pushed: no wake-up per proposal.
        if self.sh.policy() == FsyncPolicy::Always {
            self.sh.wake.notify_one();
        }
        receiver
    }

    /// Logs `entry`, which the caller has already applied to the state machine, in front of the
    /// next batch that is written (not on its own). For the re-arm of leases at start: the file
    /// right after a start is exactly the file before it, and if nothing else is ever written
    /// the next start re-arms again, which is all the entry would have done. Call it right after
    /// [`Aof::open`], before any proposal; `entry.position` must be the next position.
    pub fn prepend_applied(&self, entry: Entry) {
        // The writer's order: the file, then the queue.
        let mut core = self.core.lock();
        let mut q = self.sh.queue.lock();
        if entry.position != q.last_position + 1 {
            tracing::error!(
                position = entry.position,
                expected = q.last_position + 1,
                "AOF: an applied entry out of order was not logged"
            );
            return;
        }
        if let Err(e) = encode_entry(entry.position, entry.at, &entry.ops, &mut core.unlogged) {
            tracing::error!("AOF: cannot log the entry applied at start: {e}");
            return;
        }
        q.last_position = entry.position;
        q.last_at = q.last_at.max(entry.at);
        core.last_taken = entry.position;
        self.sh.appended.store(q.last_position, Ordering::Release);
        self.sh
            .progress
            .send_modify(|p| p.durable = p.durable.max(entry.position));
    }

    /// Position of the last entry queued so far (0: none).
    pub fn appended_position(&self) -> u64 {
        self.sh.appended.load(Ordering::Acquire)
    }

    /// Resolves when every entry up to `position` is durable: written (`no`, `everysec`) or
    /// written and synced (`always`), and applied. `Err(WriteFailed)` if the batch holding it failed (and no rewrite
    /// has recovered it since), `Err(ShuttingDown)` if the writer stopped before writing it.
    pub async fn wait_durable(&self, position: u64) -> Result<(), AofError> {
        if position == 0 {
            return Ok(());
        }
        if self.sh.policy() != FsyncPolicy::Always && self.sh.progress.borrow().durable < position {
            self.write_now();
        }
        let mut rx = self.sh.progress.subscribe();
        match rx.wait_for(|p| p.decided(position)).await {
            Ok(p) => p.outcome(position),
            Err(_) => Err(AofError::ShuttingDown),
        }
    }

    /// Under `everysec` and `no`: writes whatever is queued, on the caller's thread, unless
    /// someone else holds the file (then that holder writes it: each holder looks at the queue
    /// again after letting go, so no record is left behind). A `write` to the page cache takes
    /// microseconds; handing every batch to the writer thread and back cost two thread wake-ups
    /// per request, which dominated the latency of a lone client. Syncs stay on the writer
    /// thread. Under `always` the writer thread does everything (write and sync as one batch).
    pub fn write_now(&self) {
        if self.sh.policy() == FsyncPolicy::Always {
            return;
        }
        while let Some(mut core) = self.core.try_lock() {
            let wrote = core.write_queued();
            drop(core);
            if !wrote || self.sh.progress.borrow().durable >= self.appended_position() {
                return;
            }
        }
    }

    /// Ok unless the writer is failed (`Err(WriteFailed)`: refuse state changes with
    /// `-MISCONF`, keep serving reads) or shut down (`Err(ShuttingDown)`).
    pub fn check_writable(&self) -> Result<(), ProposeError> {
        if let Some(msg) = self.sh.failed.lock().clone() {
            return Err(ProposeError::WriteFailed(msg.into()));
        }
        if self.sh.stopped.load(Ordering::Acquire) {
            return Err(ProposeError::Stopped);
        }
        Ok(())
    }

    /// Starts a background rewrite (BGREWRITEAOF). `Err(RewriteInProgress)` if one runs.
    pub fn rewrite(&self) -> Result<(), AofError> {
        if self.sh.stopped.load(Ordering::Acquire) {
            return Err(AofError::ShuttingDown);
        }
        if self
            .sh
            .rewrite_in_progress
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(AofError::RewriteInProgress);
        }
        self.sh.queue.lock().rewrite_requested = true;
        self.sh.wake.notify_one();
        Ok(())
    }

    /// Changes the fsync policy at run time (CONFIG SET appendfsync). Blocking: it takes the
    /// file's state, so no batch is being written while the policy changes. Switching to
    /// `always` first syncs what was written before (under `everysec` or `no`), so once this
    /// returns every acknowledged entry is on disk, and every later batch is synced before it
    /// is acknowledged. A failed sync enters the failed state (`-MISCONF` until a rewrite
    /// recovers), as a failed `everysec` sync does.
    pub fn set_fsync_policy(&self, policy: FsyncPolicy) {
        // The writer's order: the file, then the queue.
        let mut core = self.core.lock();
        if policy == FsyncPolicy::Always
            && self.sh.policy() != FsyncPolicy::Always
            && core.unsynced
            && !core.failed
            && let Err(e) = core.sync()
        {
            core.fail(format!("fsync error: {e}"));
        }
        {
            // Under the queue's lock, so the writer thread, which reads the policy under it
            // before it sleeps, cannot miss the wake-up below.
            let _q = self.sh.queue.lock();
            self.sh
                .policy
                .store(policy_to_u8(policy), Ordering::Release);
        }
        drop(core);
        // Whatever is queued now is the writer thread's under `always` (proposers no longer
        // write it), and under `everysec`/`no` the thread must start polling.
        self.sh.wake.notify_all();
    }

    /// Changes the automatic rewrite's thresholds at run time (CONFIG SET
    /// auto-aof-rewrite-min-size / auto-aof-rewrite-percentage); they count from the next
    /// batch written.
    pub fn set_auto_rewrite(&self, min_size: u64, percentage: u64) {
        self.sh.rewrite_min_size.store(min_size, Ordering::Relaxed);
        self.sh
            .rewrite_percentage
            .store(percentage, Ordering::Relaxed);
    }

    pub fn stats(&self) -> AofStats {
        let c = self.sh.counters.lock();
        let durable_position = self.sh.progress.borrow().durable;
        AofStats {
            fsync_policy: self.sh.policy(),
            file_size: c.file_size,
            size_at_last_rewrite: c.size_at_last_rewrite,
            rewrite_in_progress: self.sh.rewrite_in_progress.load(Ordering::Acquire),
            rewrites: c.rewrites,
            failed_rewrites: c.failed_rewrites,
            last_rewrite_duration: c.last_rewrite_duration,
            last_rewrite_ok: !c.last_rewrite_failed,
            last_fsync_unix_ms: c.last_fsync_unix_ms,
            records_written: c.records_written,
            batches: c.batches,
            fsyncs: c.fsyncs,
            acks_per_fsync: if c.fsyncs == 0 {
                0.0
            } else {
                c.records_synced as f64 / c.fsyncs as f64
            },
            appended_position: self.appended_position(),
            durable_position,
            write_failed: self.sh.failed.lock().is_some(),
            last_error: c.last_error.clone(),
            write_errors: c.write_errors,
            fsync_seconds: c.fsync_seconds.read(),
            records_per_fsync: c.records_per_fsync.read(),
        }
    }

    /// Blocking: writes and syncs everything queued, stops the writer (abandoning a running
    /// rewrite) and waits for it. Idempotent; later appends are dropped.
    pub fn shutdown(&self) {
        self.sh.queue.lock().stop = true;
        self.sh.wake.notify_all();
        let handle = self.writer.lock().take();
        if let Some(h) = handle
            && h.join().is_err()
        {
            tracing::error!(file = %self.sh.path.display(), "AOF: the writer thread panicked");
        }
        self.sh.stopped.store(true, Ordering::Release);
    }

    /// Test hook: makes the next `n` batch writes fail as a full disk would.
    #[cfg(test)]
    pub(crate) fn inject_write_failures(&self, n: u32) {
        self.sh.inject_write_failures.store(n, Ordering::SeqCst);
    }
}

impl Drop for Aof {
    fn drop(&mut self) {
        self.shutdown();
    }
}
