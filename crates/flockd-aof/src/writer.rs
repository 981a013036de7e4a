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
//! a copy of shard pointers, so apply goes on) and writes it to `<path>.rewrite.tmp`, synced.
//! Every entry above S meanwhile goes to the old file as usual *and*, once written, is copied
//! (already encoded) into a tail buffer. When the snapshot is done the writer, between two
//! batches, appends the tail to the temporary file, syncs it, renames it over the AOF, syncs the
//! directory and carries on with the new file. Replay skips tail entries at or below P, which the
//! snapshot reflects. If anything fails, the temporary file is deleted and the old file kept.
//!
//! **Failure.** If a write or fsync fails, the writer cuts the file back to its last good length,
//! enters the failed state ([`Aof::check_writable`] errs, so the server answers state changes with
//! `-MISCONF` and keeps serving reads) and answers the batch's proposers with
//! [`CommitError::WriteFailed`]: nothing of the batch is applied. While failed it refuses every
//! proposal and, once a second, tries a rewrite from the state machine (which holds exactly what
//! was acknowledged) into a new file: the old file is never trusted again, not even by a later
//! fsync, since the kernel may have dropped the pages of the failed write.
//!
//! **Shutdown** writes and syncs what is queued (whatever the policy), abandons a running
//! rewrite, tries a last rewrite if the writer is failed, and stops the thread. Later proposals
//! get [`CommitError::ShuttingDown`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};

use crate::histogram::{FSYNC_SECONDS_BOUNDS, FixedHistogram, RECORDS_PER_FSYNC_BOUNDS};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flockd_core::{Millis, Op, OpResult};
use parking_lot::{Condvar, Mutex};
use tokio::sync::{oneshot, watch};

use flockd_log::fsutil::{read_exact_at, rewrite_tmp_path, sync_parent_dir};
use flockd_log::record::{HEADER, encode_entry};
use flockd_log::{Apply, Entry, FileError, SnapshotFile, write_snapshot_of};

use crate::error::{AofError, CommitError};
use crate::{AofOptions, FsyncPolicy};

/// What a proposer receives: the results of its ops, in order, once they are durable and
/// applied.
pub type Committed = Result<Vec<OpResult>, CommitError>;

/// A queued proposal.
struct QueuedProposal {
    entry: Entry,
    reply: oneshot::Sender<Committed>,
}

/// How long the failed writer waits between recovery attempts, and the `everysec` interval.
const SECOND: Duration = Duration::from_secs(1);

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
    pub appended_seq: u64,
    /// Every record up to this sequence number is durable (per the policy).
    pub durable_seq: u64,
    /// The writer is in the failed state (`aof_last_write_status:err`).
    pub write_failed: bool,
    /// The last write, fsync or rewrite error.
    pub last_error: Option<String>,
    /// Failed writes and fsyncs (each one puts the writer in the failed state).
    pub write_errors: u64,
    /// How long each fsync took, in seconds.
    pub fsync_seconds: FixedHistogram,
    /// How many records each fsync made durable.
    pub records_per_fsync: FixedHistogram,
}

struct WriterShared {
    path: PathBuf,
    tmp_path: PathBuf,
    /// The fsync policy (an [`FsyncPolicy`] as `policy_to_u8` spells it): read on every
    /// proposal, changed at run time by [`Aof::set_fsync_policy`].
    policy: AtomicU8,
    /// Automatic rewrites (changed at run time by [`Aof::set_auto_rewrite`]).
    rewrite_min_size: AtomicU64,
    rewrite_percentage: AtomicU64,
    applier: Arc<dyn Apply>,
    queue: Mutex<Queue>,
    /// Wakes the writer: a change was queued, a rewrite requested or finished, or stop.
    wake: Condvar,
    appended: AtomicU64,
    progress: watch::Sender<Progress>,
    rewrite_in_progress: AtomicBool,
    /// The failed state's message, for `check_writable`.
    failed: Mutex<Option<String>>,
    stopped: AtomicBool,
    counters: Mutex<WriterCounters>,
    /// Test hook: the next this-many batch writes fail as if the disk had.
    #[cfg(test)]
    inject_write_failures: std::sync::atomic::AtomicU32,
}

#[derive(Default)]
struct Queue {
    proposals: Vec<QueuedProposal>,
    /// Log position of the last proposal queued (positions continue the loaded file's).
    last_seq: u64,
    /// Time of the last proposal queued: log time never goes back.
    last_at: Millis,
    stop: bool,
    rewrite_requested: bool,
    rewrite_done: Option<Result<SnapshotFile, String>>,
}

/// What waiters watch.
#[derive(Clone, Debug, Default)]
struct Progress {
    /// Every entry up to here is decided, and durable unless it is in `failed`.
    durable: u64,
    /// Ranges (first, last) of positions whose batches failed or were refused: never applied,
    /// never durable. Contiguous ranges are merged, so this stays about one range per failure.
    failed: Vec<(u64, u64)>,
    error: Option<Arc<str>>,
    /// The writer has stopped: nothing above `durable` will become durable.
    closed: bool,
}

impl Progress {
    fn failed(&self, seq: u64) -> bool {
        self.failed
            .iter()
            .any(|&(first, last)| first <= seq && seq <= last)
    }

    fn decided(&self, seq: u64) -> bool {
        seq <= self.durable || self.failed(seq) || self.closed
    }

    fn outcome(&self, seq: u64) -> Result<(), AofError> {
        if self.failed(seq) {
            Err(AofError::WriteFailed(
                self.error.as_deref().unwrap_or("write failed").to_owned(),
            ))
        } else if seq <= self.durable {
            Ok(())
        } else {
            Err(AofError::ShuttingDown)
        }
    }
}

struct WriterCounters {
    write_errors: u64,
    fsync_seconds: FixedHistogram,
    records_per_fsync: FixedHistogram,
    file_size: u64,
    size_at_last_rewrite: u64,
    rewrites: u64,
    failed_rewrites: u64,
    last_rewrite_duration: Option<Duration>,
    last_rewrite_failed: bool,
    last_fsync_unix_ms: Option<u64>,
    records_written: u64,
    batches: u64,
    fsyncs: u64,
    records_synced: u64,
    last_error: Option<String>,
}

/// The writer's side of a running rewrite.
struct RewriteRun {
    /// Records above this sequence number go to the tail.
    tail: Vec<u8>,
    /// The last sequence number in the tail (or the start, while it is empty).
    tail_last: u64,
    started: Instant,
    cancel: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Default for WriterCounters {
    fn default() -> Self {
        WriterCounters {
            write_errors: 0,
            fsync_seconds: FixedHistogram::new(FSYNC_SECONDS_BOUNDS),
            records_per_fsync: FixedHistogram::new(RECORDS_PER_FSYNC_BOUNDS),
            file_size: 0,
            size_at_last_rewrite: 0,
            rewrites: 0,
            failed_rewrites: 0,
            last_rewrite_duration: None,
            last_rewrite_failed: false,
            last_fsync_unix_ms: None,
            records_written: 0,
            batches: 0,
            fsyncs: 0,
            records_synced: 0,
            last_error: None,
        }
    }
}

fn policy_to_u8(policy: FsyncPolicy) -> u8 {
    match policy {
        FsyncPolicy::Always => 0,
        FsyncPolicy::EverySec => 1,
        FsyncPolicy::No => 2,
    }
}

impl WriterShared {
    fn policy(&self) -> FsyncPolicy {
        match self.policy.load(Ordering::Acquire) {
            0 => FsyncPolicy::Always,
            1 => FsyncPolicy::EverySec,
            _ => FsyncPolicy::No,
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
                last_seq: start_position,
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
    pub fn propose(&self, at: Millis, ops: Vec<Op>) -> oneshot::Receiver<Committed> {
        let (reply, receiver) = oneshot::channel();
        {
            let mut q = self.sh.queue.lock();
            if q.stop {
                let _ = reply.send(Err(CommitError::ShuttingDown));
                return receiver;
            }
            q.last_seq += 1;
            q.last_at = q.last_at.max(at);
            let entry = Entry {
                position: q.last_seq,
                at: q.last_at,
                ops,
            };
            q.proposals.push(QueuedProposal { entry, reply });
            self.sh.appended.store(q.last_seq, Ordering::Release);
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
        if entry.position != q.last_seq + 1 {
            tracing::error!(
                position = entry.position,
                expected = q.last_seq + 1,
                "AOF: an applied entry out of order was not logged"
            );
            return;
        }
        if let Err(e) = encode_entry(entry.position, entry.at, &entry.ops, &mut core.unlogged) {
            tracing::error!("AOF: cannot log the entry applied at start: {e}");
            return;
        }
        q.last_seq = entry.position;
        q.last_at = q.last_at.max(entry.at);
        core.last_taken = entry.position;
        self.sh.appended.store(q.last_seq, Ordering::Release);
        self.sh
            .progress
            .send_modify(|p| p.durable = p.durable.max(entry.position));
    }

    /// Position of the last entry queued so far (0: none).
    pub fn appended_seq(&self) -> u64 {
        self.sh.appended.load(Ordering::Acquire)
    }

    /// Resolves when every entry up to position `seq` is durable: written (`no`, `everysec`) or
    /// written and synced (`always`), and applied. `Err(WriteFailed)` if the batch holding it failed (and no rewrite
    /// has recovered it since), `Err(ShuttingDown)` if the writer stopped before writing it.
    pub async fn wait_durable(&self, seq: u64) -> Result<(), AofError> {
        if seq == 0 {
            return Ok(());
        }
        if self.sh.policy() != FsyncPolicy::Always && self.sh.progress.borrow().durable < seq {
            self.write_now();
        }
        let mut rx = self.sh.progress.subscribe();
        match rx.wait_for(|p| p.decided(seq)).await {
            Ok(p) => p.outcome(seq),
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
            if !wrote || self.sh.progress.borrow().durable >= self.appended_seq() {
                return;
            }
        }
    }

    /// Ok unless the writer is failed (`Err(WriteFailed)`: refuse state changes with
    /// `-MISCONF`, keep serving reads) or shut down (`Err(ShuttingDown)`).
    pub fn check_writable(&self) -> Result<(), AofError> {
        if let Some(msg) = self.sh.failed.lock().clone() {
            return Err(AofError::WriteFailed(msg));
        }
        if self.sh.stopped.load(Ordering::Acquire) {
            return Err(AofError::ShuttingDown);
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
        let durable_seq = self.sh.progress.borrow().durable;
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
            appended_seq: self.appended_seq(),
            durable_seq,
            write_failed: self.sh.failed.lock().is_some(),
            last_error: c.last_error.clone(),
            write_errors: c.write_errors,
            fsync_seconds: c.fsync_seconds.clone(),
            records_per_fsync: c.records_per_fsync.clone(),
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

/// The writer thread's state: it alone touches the file.
struct Writer {
    sh: Arc<WriterShared>,
    file: File,
    /// Bytes of the file known to be good (written completely).
    file_len: u64,
    size_at_last_rewrite: u64,
    /// Position of the last entry taken from the queue.
    last_taken: u64,
    /// Written since the last sync.
    unsynced: bool,
    unsynced_records: u64,
    last_fsync: Instant,
    failed: bool,
    last_retry: Instant,
    rewrite: Option<RewriteRun>,
    /// Encoding buffer, reused.
    buf: Vec<u8>,
    /// Swapped with the queue's vector so neither reallocates per batch.
    spare: Vec<QueuedProposal>,
    /// An entry applied without being logged yet (see [`Aof::prepend_applied`]), encoded: it
    /// goes out in front of the next batch.
    unlogged: Vec<u8>,
    /// The entries of a batch being applied, and their results (reused).
    entries: Vec<Entry>,
    results: Vec<Vec<OpResult>>,
}

/// How often the writer thread looks for queued records under `everysec` and `no`, where
/// appends do not wake it: records nobody waits for (an expiry, a reclaimed name's floor) still
/// reach the file within this long.
const POLL: Duration = Duration::from_millis(50);

/// The writer thread: sleeps until there is work (or a timer is due), then runs one round with
/// the file's state.
fn run_writer(core: &Mutex<Writer>, sh: &WriterShared) {
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
    fn round(&mut self) -> bool {
        let (last_seq, stop, requested, done) = {
            let mut q = self.sh.queue.lock();
            self.spare.clear();
            std::mem::swap(&mut q.proposals, &mut self.spare);
            (
                q.last_seq,
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
        self.write_batch(&mut batch, last_seq);
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
    fn write_queued(&mut self) -> bool {
        let last_seq = {
            let mut q = self.sh.queue.lock();
            if q.stop || q.proposals.is_empty() {
                return false;
            }
            self.spare.clear();
            std::mem::swap(&mut q.proposals, &mut self.spare);
            q.last_seq
        };
        let mut batch = std::mem::take(&mut self.spare);
        self.write_batch(&mut batch, last_seq);
        self.spare = batch;
        true
    }

    fn next_deadline(&self) -> Option<Instant> {
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
    fn write_batch(&mut self, batch: &mut Vec<QueuedProposal>, last_seq: u64) {
        let first = self.last_taken + 1;
        self.last_taken = last_seq;
        if batch.is_empty() {
            return;
        }
        if self.failed {
            let error = self.sh.failed.lock().clone().unwrap_or_default();
            refuse(batch, &CommitError::WriteFailed(error.into()));
            self.publish_failed(first, last_seq);
            return;
        }
        let good_len = self.file_len;
        self.buf.clear();
        self.buf.extend_from_slice(&self.unlogged);
        let mut replies = Vec::with_capacity(batch.len());
        for QueuedProposal { entry, reply } in batch.drain(..) {
            if let Err(e) = encode_entry(entry.position, entry.at, &entry.ops, &mut self.buf) {
                // Only this proposal is refused (the server's limits keep records far smaller).
                let _ = reply.send(Err(CommitError::WriteFailed(e.to_string().into())));
                continue;
            }
            self.entries.push(entry);
            replies.push(reply);
        }
        if let Err(e) = self.write_buf() {
            self.fail_batch(format!("write error: {e}"), (first, last_seq), replies);
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
            self.fail_batch(format!("fsync error: {e}"), (first, last_seq), replies);
            return;
        }
        if let Some(run) = &mut self.rewrite {
            // Everything taken since the rewrite started is above its start.
            run.tail.extend_from_slice(&self.buf);
            run.tail_last = last_seq;
        }
        self.results.clear();
        self.sh
            .applier
            .apply(&self.entries, true, &mut self.results);
        self.entries.clear();
        for (reply, results) in replies.into_iter().zip(self.results.drain(..)) {
            let _ = reply.send(Ok(results));
        }
        self.publish_durable(last_seq);
        self.maybe_auto_rewrite();
    }

    /// A batch's write or sync failed: nothing of it is applied.
    fn fail_batch(
        &mut self,
        msg: String,
        (first, last): (u64, u64),
        replies: Vec<oneshot::Sender<Committed>>,
    ) {
        self.entries.clear();
        self.fail(msg.clone());
        self.publish_failed(first, last);
        let error = CommitError::WriteFailed(msg.into());
        for reply in replies {
            let _ = reply.send(Err(error.clone()));
        }
    }

    /// Writes the encoded batch; on success the good length grows.
    fn write_buf(&mut self) -> io::Result<()> {
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

    fn sync(&mut self) -> io::Result<()> {
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
            .observe(self.last_fsync.duration_since(started).as_secs_f64());
        c.records_per_fsync.observe(records as f64);
        c.last_fsync_unix_ms = Some(unix_ms());
        Ok(())
    }

    /// Enters the failed state after a write or sync error.
    fn fail(&mut self, msg: String) {
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

    fn publish_durable(&self, seq: u64) {
        self.sh
            .progress
            .send_modify(|p| p.durable = p.durable.max(seq));
    }

    /// Positions `first..=last` will never be durable (their batch failed or was refused).
    fn publish_failed(&self, first: u64, last: u64) {
        if first > last {
            return;
        }
        self.sh.progress.send_modify(|p| match p.failed.last_mut() {
            Some(range) if range.1 + 1 >= first => range.1 = range.1.max(last),
            _ => p.failed.push((first, last)),
        });
    }

    /// The `everysec` sync and the failed state's retry.
    fn timers(&mut self) {
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

    fn claim_rewrite(&self) -> bool {
        self.sh
            .rewrite_in_progress
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Starts a rewrite once the file has grown enough since the last one.
    fn maybe_auto_rewrite(&mut self) {
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
    fn start_rewrite(&mut self) {
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
    fn complete_rewrite(&mut self, result: Result<SnapshotFile, String>, mut run: RewriteRun) {
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

    fn rewrite_failed(&mut self, msg: &str) {
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
    fn install(&mut self, snap: SnapshotFile, run: &RewriteRun) -> Result<(), String> {
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

    fn stop(&mut self) {
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
        }
    }
}

/// Answers every proposal of `batch` with `error`.
fn refuse(batch: &mut Vec<QueuedProposal>, error: &CommitError) {
    for QueuedProposal { reply, .. } in batch.drain(..) {
        let _ = reply.send(Err(error.clone()));
    }
}

/// Writes a snapshot of the applier's state to `tmp` (header, snapshot records), synced. Runs
/// on the rewrite thread (and at start, to upgrade a file of an older format).
fn write_snapshot(
    applier: &dyn Apply,
    tmp: &Path,
    cancel: &AtomicBool,
) -> Result<SnapshotFile, String> {
    write_snapshot_of(&applier.snapshot(), tmp, cancel)
}

/// Rewrites a file of an older format in the current one, from the state loaded from it:
/// snapshot to the temporary file, synced, renamed over it, directory synced.
fn upgrade(path: &Path, applier: &dyn Apply) -> Result<(), AofError> {
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

#[cfg(test)]
mod tests {
    //! Write failures, through the test hook only unit tests reach: a failed write answers its
    //! batch with `WriteFailed` and applies nothing (on the writer thread and on a proposer's
    //! thread), proposals made while failed are refused, and a rewrite from the applier's state
    //! recovers (the failed proposals are not in the new file); a failure during a running
    //! rewrite is recovered by it; failed at shutdown writes the state; the futures are Send.

    use super::*;
    use crate::load;
    use crate::record::{Payload, Record, Version, decode_record};
    use bytes::Bytes;
    use flockd_core::{Snapshot, StateMachine};

    /// The state machine as the log's applier.
    struct Host {
        machine: Mutex<StateMachine>,
        /// Sleep before taking a snapshot, to keep a rewrite running for a while.
        snapshot_delay: Duration,
    }

    impl Host {
        fn new(snapshot_delay: Duration) -> Arc<Host> {
            Arc::new(Host {
                machine: Mutex::new(StateMachine::new()),
                snapshot_delay,
            })
        }
    }

    impl Apply for Host {
        fn apply(&self, entries: &[Entry], _local: bool, results: &mut Vec<Vec<OpResult>>) {
            let mut m = self.machine.lock();
            let mut events = Vec::new();
            for e in entries {
                let r = e
                    .ops
                    .iter()
                    .enumerate()
                    .map(|(i, op)| m.apply_in_entry(e.position, i as u32, e.at, op, &mut events))
                    .collect();
                results.push(r);
            }
        }

        fn snapshot(&self) -> Snapshot {
            thread::sleep(self.snapshot_delay);
            self.machine.lock().snapshot()
        }

        fn replace(&self, machine: StateMachine) {
            *self.machine.lock() = machine;
        }

        fn time(&self) -> Millis {
            self.machine.lock().time()
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("flockd-aof-unit-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).expect("temp dir");
        d
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    fn fence(key: &str, token: u64) -> Op {
        Op::FenceSet {
            lock: None,
            key: Bytes::copy_from_slice(key.as_bytes()),
            token,
            value: Bytes::from(format!("value-{token}")),
        }
    }

    fn open(path: &Path, fsync: FsyncPolicy, host: &Arc<Host>) -> Arc<Aof> {
        let opts = AofOptions {
            fsync,
            ..AofOptions::new(path)
        };
        let (position, at) = {
            let m = host.machine.lock();
            (m.position(), m.time())
        };
        Aof::open(opts, host.clone(), position, at).expect("open")
    }

    /// Proposes `ops` and waits for the answer (pushing the write under `everysec`/`no`).
    fn commit(rt: &tokio::runtime::Runtime, aof: &Aof, at: u64, ops: Vec<Op>) -> Committed {
        let rx = aof.propose(Millis(at), ops);
        aof.write_now();
        rt.block_on(rx).expect("answered")
    }

    fn loaded(path: &Path) -> StateMachine {
        let mut m = StateMachine::new();
        load(path, &mut m).expect("load");
        m
    }

    /// The file's records: `Some(position)` for a snapshot start, entry positions as `Ok`.
    fn layout(path: &Path) -> (Option<u64>, Vec<u64>) {
        let bytes = fs::read(path).expect("read");
        assert_eq!(bytes[..8], HEADER);
        let (mut snapshot, mut entries) = (None, Vec::new());
        let mut rest = &bytes[8..];
        while !rest.is_empty() {
            let (p, n) = decode_record(Version::V2, rest).expect("valid record");
            match p {
                Payload::V2(Record::SnapshotBegin { position, .. }) => snapshot = Some(position),
                Payload::V2(Record::Entry { position, .. }) => entries.push(position),
                _ => {}
            }
            rest = &rest[n..];
        }
        (snapshot, entries)
    }

    fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn assert_write_failed(r: &Committed) {
        match r {
            Err(CommitError::WriteFailed(m)) => assert!(m.contains("No space left"), "{m}"),
            other => panic!("expected WriteFailed, got {other:?}"),
        }
    }

    #[test]
    fn a_failed_write_refuses_applies_nothing_and_recovers_by_rewrite() {
        let dir = temp_dir("fail");
        let path = dir.join("a.aof");
        let host = Host::new(Duration::ZERO);
        let aof = open(&path, FsyncPolicy::Always, &host);
        let rt = rt();
        assert_eq!(
            commit(&rt, &aof, 10, vec![fence("a", 1)]),
            Ok(vec![OpResult::FenceSet(true)])
        );

        aof.inject_write_failures(1);
        let failed = commit(
            &rt,
            &aof,
            20,
            vec![
                fence("b", 2),
                Op::Advance {
                    name: Bytes::from_static(b"n"),
                    token: 5,
                },
            ],
        );
        assert_write_failed(&failed);
        let failed_seq = aof.appended_seq();
        assert_eq!(failed_seq, 2);
        let err = rt
            .block_on(aof.wait_durable(failed_seq))
            .expect_err("the write failed");
        assert!(
            matches!(err, AofError::WriteFailed(ref m) if m.contains("No space left")),
            "{err}"
        );
        assert!(matches!(
            aof.check_writable(),
            Err(AofError::WriteFailed(ref m)) if m.contains("No space left")
        ));
        let st = aof.stats();
        assert!(st.write_failed, "{st:?}");
        assert!(
            st.last_error
                .as_deref()
                .is_some_and(|e| e.contains("No space left")),
            "{st:?}"
        );
        // Nothing of the failed entry was applied.
        {
            let m = host.machine.lock();
            assert_eq!(m.fence_token(b"a"), 1);
            assert_eq!(m.fence_token(b"b"), 0);
            assert_eq!(m.last_token(b"n"), 0);
            assert_eq!(m.position(), 1);
        }
        // The file was cut back to its good part: exactly the applied state.
        let disk = loaded(&path);
        assert_eq!(disk.digest(), host.machine.lock().digest());
        assert_eq!(layout(&path), (None, vec![1]));

        // A proposal made while failed is refused, and not applied either.
        let refused = commit(&rt, &aof, 30, vec![fence("c", 3)]);
        assert!(
            matches!(refused, Err(CommitError::WriteFailed(_))),
            "{refused:?}"
        );
        assert!(rt.block_on(aof.wait_durable(aof.appended_seq())).is_err());
        assert_eq!(host.machine.lock().fence_token(b"c"), 0);

        // A rewrite from the applier's state recovers (retried every second).
        wait_until("recovery", || aof.check_writable().is_ok());
        let st = aof.stats();
        assert!(st.rewrites >= 1 && !st.write_failed, "{st:?}");
        assert!(!dir.join("a.aof.rewrite.tmp").exists());
        assert_eq!(
            layout(&path),
            (Some(1), vec![]),
            "a new file: a snapshot of the state, without the failed proposals"
        );

        assert_eq!(
            commit(&rt, &aof, 40, vec![fence("d", 4)]),
            Ok(vec![OpResult::FenceSet(true)])
        );
        let last = aof.appended_seq();
        assert_eq!(last, 4, "positions go on after the refused ones");
        rt.block_on(aof.wait_durable(last)).expect("durable");
        aof.shutdown();

        let disk = loaded(&path);
        let live = host.machine.lock();
        assert_eq!(disk.digest(), live.digest());
        assert_eq!((disk.fence_token(b"a"), disk.fence_token(b"d")), (1, 4));
        assert_eq!(
            (
                disk.fence_token(b"b"),
                disk.last_token(b"n"),
                disk.fence_token(b"c")
            ),
            (0, 0, 0),
            "the failed and the refused proposals are not on disk"
        );
        assert_eq!(layout(&path), (Some(1), vec![4]));
        drop(live);
        drop(aof);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_write_on_the_proposers_thread() {
        let dir = temp_dir("fail-no");
        let path = dir.join("a.aof");
        let host = Host::new(Duration::ZERO);
        let aof = open(&path, FsyncPolicy::No, &host);
        let rt = rt();
        assert_eq!(
            commit(&rt, &aof, 10, vec![fence("a", 1)]),
            Ok(vec![OpResult::FenceSet(true)])
        );
        aof.inject_write_failures(1);
        assert_write_failed(&commit(&rt, &aof, 20, vec![fence("b", 2)]));
        assert!(aof.check_writable().is_err());
        assert_eq!(host.machine.lock().fence_token(b"b"), 0);
        assert!(matches!(
            commit(&rt, &aof, 25, vec![fence("c", 3)]),
            Err(CommitError::WriteFailed(_))
        ));
        wait_until("recovery", || aof.check_writable().is_ok());
        assert_eq!(
            commit(&rt, &aof, 30, vec![fence("d", 4)]),
            Ok(vec![OpResult::FenceSet(true)])
        );
        aof.shutdown();
        let disk = loaded(&path);
        assert_eq!(disk.digest(), host.machine.lock().digest());
        assert_eq!((disk.fence_token(b"b"), disk.fence_token(b"c")), (0, 0));
        assert_eq!(disk.fence_token(b"d"), 4);
        drop(aof);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failure_during_a_rewrite_is_recovered_by_it() {
        let dir = temp_dir("fail-rewrite");
        let path = dir.join("a.aof");
        let host = Host::new(Duration::from_millis(300));
        let aof = open(&path, FsyncPolicy::Always, &host);
        let rt = rt();
        assert!(commit(&rt, &aof, 10, vec![fence("a", 1)]).is_ok());
        aof.rewrite().expect("rewrite starts");
        // Into the old file and the rewrite's tail.
        assert!(commit(&rt, &aof, 20, vec![fence("b", 2)]).is_ok());
        aof.inject_write_failures(1);
        assert_write_failed(&commit(&rt, &aof, 30, vec![fence("c", 3)]));
        wait_until("the rewrite", || aof.stats().rewrites >= 1);
        aof.check_writable().expect("recovered by the rewrite");
        assert!(commit(&rt, &aof, 40, vec![fence("d", 4)]).is_ok());
        aof.shutdown();
        let disk = loaded(&path);
        assert_eq!(disk.digest(), host.machine.lock().digest());
        assert_eq!(
            [b"a", b"b", b"c", b"d"].map(|k| disk.fence_token(k)),
            [1, 2, 0, 4]
        );
        drop(aof);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn failed_at_shutdown_writes_the_state() {
        let dir = temp_dir("failstop");
        let path = dir.join("a.aof");
        let host = Host::new(Duration::ZERO);
        let aof = open(&path, FsyncPolicy::Always, &host);
        let rt = rt();
        assert!(commit(&rt, &aof, 10, vec![fence("a", 7)]).is_ok());
        aof.inject_write_failures(1);
        assert_write_failed(&commit(&rt, &aof, 20, vec![fence("b", 8)]));
        assert!(rt.block_on(aof.wait_durable(2)).is_err());
        aof.shutdown();
        // The last rewrite at shutdown wrote the whole state: a snapshot, nothing failed.
        assert_eq!(layout(&path), (Some(1), vec![]));
        let disk = loaded(&path);
        assert_eq!(disk.digest(), host.machine.lock().digest());
        assert_eq!((disk.fence_token(b"a"), disk.fence_token(b"b")), (7, 0));
        let st = aof.stats();
        assert!(st.rewrites >= 1 && !st.write_failed, "{st:?}");
        assert!(!dir.join("a.aof.rewrite.tmp").exists());
        drop(aof);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_policy_changes_at_run_time() {
        let dir = temp_dir("policy");
        let path = dir.join("a.aof");
        let host = Host::new(Duration::ZERO);
        let aof = open(&path, FsyncPolicy::No, &host);
        let rt = rt();
        assert!(commit(&rt, &aof, 10, vec![fence("a", 1)]).is_ok());
        let st = aof.stats();
        assert_eq!((st.fsync_policy, st.fsyncs), (FsyncPolicy::No, 0));
        // To `always`: what `no` wrote is synced before the switch returns ...
        aof.set_fsync_policy(FsyncPolicy::Always);
        let st = aof.stats();
        assert_eq!((st.fsync_policy, st.fsyncs), (FsyncPolicy::Always, 1));
        // ... and each later batch is synced before it is answered, by the writer thread
        // (the proposal is not pushed: `write_now` does nothing under `always`).
        let rx = aof.propose(Millis(20), vec![fence("a", 2)]);
        assert!(rt.block_on(rx).expect("answered").is_ok());
        assert_eq!(aof.stats().fsyncs, 2);
        // Back to `no`: the proposer writes, nothing syncs; a record nobody pushes is still
        // written by the writer thread's poll.
        aof.set_fsync_policy(FsyncPolicy::No);
        assert!(commit(&rt, &aof, 30, vec![fence("a", 3)]).is_ok());
        let rx = aof.propose(Millis(40), vec![fence("a", 4)]);
        assert!(rt.block_on(rx).expect("answered").is_ok());
        let st = aof.stats();
        assert_eq!(
            (st.fsync_policy, st.fsyncs, st.durable_seq),
            (FsyncPolicy::No, 2, 4)
        );
        // Switching to the policy in force changes nothing.
        aof.set_fsync_policy(FsyncPolicy::No);
        aof.set_auto_rewrite(0, 0);
        aof.shutdown();
        assert_eq!(loaded(&path).fence_token(b"a"), 4);
        drop(aof);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Aof>();
        let dir = temp_dir("send");
        let host = Host::new(Duration::ZERO);
        let aof = open(&dir.join("a.aof"), FsyncPolicy::Always, &host);
        let fut = aof.wait_durable(0);
        assert_send(&fut);
        drop(fut);
        let rx = aof.propose(Millis(1), vec![fence("a", 1)]);
        assert_send(&rx);
        drop(rx);
        drop(aof);
        let _ = fs::remove_dir_all(&dir);
    }
}
