//! The writer: group commit, fsync policies, background rewrite, failure recovery, shutdown.
//!
//! [`Journal::append`] only takes a mutex and pushes the change with the next sequence number:
//! it is called while the core holds a lock entry, so it must never wait for a disk. The file's
//! state sits behind one mutex; whoever holds it takes *everything* queued at once, encodes the
//! batch into one buffer and writes it with one `write_all`, then publishes the batch's last
//! sequence number through a `tokio::sync::watch`, which is what [`Aof::wait_durable`] awaits.
//! Under `appendfsync always` only the writer thread (a plain `std::thread`, so no fsync ever
//! runs on a tokio worker) does this, woken by each append, and it syncs once per batch before
//! publishing (group commit: concurrent clients share an fsync, like raft-log's flush worker).
//! Under `everysec` and `no` the waiter writes the queue itself ([`Aof::write_now`]: a write to
//! the page cache, no thread hand-off); the writer thread syncs at most once a second
//! (`everysec`; never under `no`, but at rewrite and shutdown) and polls for records nobody
//! waits for.
//!
//! **Rewrite.** The writer notes the last sequence number S it has taken; a rewrite thread asks
//! the [`SnapshotSource`] for the whole state and writes it to `<path>.rewrite.tmp`, synced. Every
//! record with a sequence number above S meanwhile goes to the old file as usual *and* is copied
//! (already encoded) into a tail buffer. When the snapshot is done the writer, between two
//! batches, appends the tail to the temporary file, syncs it, renames it over the AOF, syncs the
//! directory and carries on with the new file. The snapshot sees every change up to S (those were
//! queued, under the core's entry locks, before it started) and maybe some later ones; records
//! are absolute, so replaying the whole tail on top converges. If anything fails, the temporary
//! file is deleted and the old file kept.
//!
//! **Failure.** If a write or fsync fails, the writer cuts the file back to its last good length,
//! enters the failed state ([`Aof::check_writable`] errs, so the server answers state changes with
//! `-MISCONF` and keeps serving reads), and fails the waiters of the batch. While failed it
//! writes nothing to the old file (records are only copied to a running rewrite's tail) and, once
//! a second, tries a rewrite: the in-memory state is the truth and contains every change,
//! including those of the failed batches, so a successful rewrite is a complete recovery; it
//! clears the failed state and makes every record up to its end durable.
//!
//! **Shutdown** writes and syncs what is queued (whatever the policy), abandons a running
//! rewrite, tries a last rewrite if the writer is failed, and stops the thread. Later appends
//! are dropped; waiters for records that were never written get [`AofError::ShuttingDown`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flockd_core::{Change, Journal};
use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use crate::error::AofError;
use crate::fsutil::{read_exact_at, rewrite_tmp_path, sync_parent_dir};
use crate::record::{HEADER, encode_record};
use crate::{AofOptions, FsyncPolicy, SnapshotSource};

/// How long the failed writer waits between recovery attempts, and the `everysec` interval.
const SECOND: Duration = Duration::from_secs(1);

/// The append-only file. Share it as `Arc<Aof>`; dropping the last reference shuts it down.
pub struct Aof {
    sh: Arc<Shared>,
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
}

struct Shared {
    path: PathBuf,
    tmp_path: PathBuf,
    policy: FsyncPolicy,
    rewrite_min_size: u64,
    rewrite_percentage: u64,
    source: Arc<dyn SnapshotSource>,
    queue: Mutex<Queue>,
    /// Wakes the writer: a change was queued, a rewrite requested or finished, or stop.
    wake: Condvar,
    appended: AtomicU64,
    progress: watch::Sender<Progress>,
    rewrite_in_progress: AtomicBool,
    /// The failed state's message, for `check_writable`.
    failed: Mutex<Option<String>>,
    stopped: AtomicBool,
    counters: Mutex<Counters>,
    /// Test hook: the next this-many batch writes fail as if the disk had.
    #[cfg(test)]
    inject_write_failures: std::sync::atomic::AtomicU32,
}

#[derive(Default)]
struct Queue {
    changes: Vec<Change>,
    /// Sequence number of the last change queued (the first is 1).
    last_seq: u64,
    stop: bool,
    rewrite_requested: bool,
    rewrite_done: Option<Result<Snapshot, String>>,
}

/// What waiters watch.
#[derive(Clone, Debug, Default)]
struct Progress {
    /// Every record up to here is durable.
    durable: u64,
    /// Records above `durable` and up to here were in batches that failed.
    failed_upto: u64,
    error: Option<Arc<str>>,
    /// The writer has stopped: nothing above `durable` will become durable.
    closed: bool,
}

impl Progress {
    fn decided(&self, seq: u64) -> bool {
        seq <= self.durable || seq <= self.failed_upto || self.closed
    }

    fn outcome(&self, seq: u64) -> Result<(), AofError> {
        if seq <= self.durable {
            Ok(())
        } else if seq <= self.failed_upto {
            Err(AofError::WriteFailed(
                self.error.as_deref().unwrap_or("write failed").to_owned(),
            ))
        } else {
            Err(AofError::ShuttingDown)
        }
    }
}

#[derive(Default)]
struct Counters {
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

/// A rewrite's temporary file, complete with the snapshot and synced.
struct Snapshot {
    file: File,
    len: u64,
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
    /// turn it into a damaged middle. A stale `<path>.rewrite.tmp` is deleted.
    pub fn open(opts: AofOptions, source: Arc<dyn SnapshotSource>) -> Result<Arc<Aof>, AofError> {
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
            let ok =
                len >= h.len() as u64 && read_exact_at(&file, 0, &mut h).is_ok() && h == HEADER;
            if !ok {
                return Err(AofError::Corrupt {
                    path,
                    offset: 0,
                    reason: "not a flockd AOF file (bad or cut header); run load() on it first"
                        .to_owned(),
                });
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

        let (progress, _) = watch::channel(Progress::default());
        let sh = Arc::new(Shared {
            path: path.clone(),
            tmp_path,
            policy: opts.fsync,
            rewrite_min_size: opts.rewrite_min_size,
            rewrite_percentage: opts.rewrite_percentage,
            source,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            appended: AtomicU64::new(0),
            progress,
            rewrite_in_progress: AtomicBool::new(false),
            failed: Mutex::new(None),
            stopped: AtomicBool::new(false),
            counters: Mutex::new(Counters {
                file_size: len,
                size_at_last_rewrite: len,
                ..Counters::default()
            }),
            #[cfg(test)]
            inject_write_failures: std::sync::atomic::AtomicU32::new(0),
        });
        let writer = Writer {
            sh: sh.clone(),
            file,
            file_len: len,
            size_at_last_rewrite: len,
            last_taken: 0,
            unsynced: false,
            unsynced_records: 0,
            last_fsync: Instant::now(),
            failed: false,
            last_retry: Instant::now(),
            rewrite: None,
            buf: Vec::new(),
            spare: Vec::new(),
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

    /// Sequence number of the last record queued so far (0: none). After a command, waiting
    /// for this number covers the command's records (and maybe a few of other clients').
    pub fn appended_seq(&self) -> u64 {
        self.sh.appended.load(Ordering::Acquire)
    }

    /// Resolves when every record up to `seq` is durable: written (`no`, `everysec`) or written
    /// and synced (`always`). `Err(WriteFailed)` if the batch holding it failed (and no rewrite
    /// has recovered it since), `Err(ShuttingDown)` if the writer stopped before writing it.
    pub async fn wait_durable(&self, seq: u64) -> Result<(), AofError> {
        if seq == 0 {
            return Ok(());
        }
        if self.sh.policy != FsyncPolicy::Always && self.sh.progress.borrow().durable < seq {
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
        if self.sh.policy == FsyncPolicy::Always {
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

    pub fn stats(&self) -> AofStats {
        let c = self.sh.counters.lock();
        let durable_seq = self.sh.progress.borrow().durable;
        AofStats {
            fsync_policy: self.sh.policy,
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

impl Journal for Aof {
    /// Queues the change with the next sequence number; never blocks on I/O. Dropped after
    /// shutdown.
    fn append(&self, change: Change) {
        {
            let mut q = self.sh.queue.lock();
            if q.stop {
                return;
            }
            q.last_seq += 1;
            q.changes.push(change);
            self.sh.appended.store(q.last_seq, Ordering::Release);
        }
        // Under `everysec` and `no` whoever waits for the record writes it (`write_now`), and
        // the writer thread polls for records nobody waits for: no wake-up per append.
        if self.sh.policy == FsyncPolicy::Always {
            self.sh.wake.notify_one();
        }
    }
}

/// The writer thread's state: it alone touches the file.
struct Writer {
    sh: Arc<Shared>,
    file: File,
    /// Bytes of the file known to be good (written completely).
    file_len: u64,
    size_at_last_rewrite: u64,
    /// Sequence number of the last change taken from the queue.
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
    spare: Vec<Change>,
}

/// How often the writer thread looks for queued records under `everysec` and `no`, where
/// appends do not wake it: records nobody waits for (an expiry, a reclaimed name's floor) still
/// reach the file within this long.
const POLL: Duration = Duration::from_millis(50);

/// The writer thread: sleeps until there is work (or a timer is due), then runs one round with
/// the file's state.
fn run_writer(core: &Mutex<Writer>, sh: &Shared) {
    loop {
        let deadline = core.lock().next_deadline();
        {
            let mut q = sh.queue.lock();
            loop {
                if !q.changes.is_empty()
                    || q.stop
                    || q.rewrite_requested
                    || q.rewrite_done.is_some()
                {
                    break;
                }
                let poll = (sh.policy != FsyncPolicy::Always).then(|| Instant::now() + POLL);
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
            std::mem::swap(&mut q.changes, &mut self.spare);
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
        let batch = std::mem::take(&mut self.spare);
        self.write_batch(&batch, last_seq);
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
            if q.stop || q.changes.is_empty() {
                return false;
            }
            self.spare.clear();
            std::mem::swap(&mut q.changes, &mut self.spare);
            q.last_seq
        };
        let batch = std::mem::take(&mut self.spare);
        self.write_batch(&batch, last_seq);
        self.spare = batch;
        true
    }

    fn next_deadline(&self) -> Option<Instant> {
        let fsync = (self.sh.policy == FsyncPolicy::EverySec && self.unsynced && !self.failed)
            .then(|| self.last_fsync + SECOND);
        let retry = (self.failed && self.rewrite.is_none()).then(|| self.last_retry + SECOND);
        match (fsync, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn write_batch(&mut self, batch: &[Change], last_seq: u64) {
        self.last_taken = last_seq;
        if batch.is_empty() {
            return;
        }
        self.buf.clear();
        let mut too_large = None;
        for change in batch {
            if let Err(e) = encode_record(change, &mut self.buf) {
                too_large = Some(e);
            }
        }
        if let Some(run) = &mut self.rewrite {
            // Everything taken since the rewrite started is above its start.
            run.tail.extend_from_slice(&self.buf);
            run.tail_last = last_seq;
        }
        if self.failed {
            // The recovery rewrite's snapshot (or the tail above) covers these records.
            self.publish_failed(last_seq, None);
            return;
        }
        if let Some(e) = too_large {
            self.fail(format!("cannot store a record: {e}"), last_seq);
            return;
        }
        if let Err(e) = self.write_buf() {
            self.fail(format!("write error: {e}"), last_seq);
            return;
        }
        let n = batch.len() as u64;
        self.unsynced = true;
        self.unsynced_records += n;
        {
            let mut c = self.sh.counters.lock();
            c.records_written += n;
            c.batches += 1;
            c.file_size = self.file_len;
        }
        if self.sh.policy == FsyncPolicy::Always
            && let Err(e) = self.sync()
        {
            self.fail(format!("fsync error: {e}"), last_seq);
            return;
        }
        self.publish_durable(last_seq);
        self.maybe_auto_rewrite();
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
        self.file.sync_data()?;
        self.last_fsync = Instant::now();
        self.unsynced = false;
        let mut c = self.sh.counters.lock();
        c.fsyncs += 1;
        c.records_synced += std::mem::take(&mut self.unsynced_records);
        c.last_fsync_unix_ms = Some(unix_ms());
        Ok(())
    }

    /// Enters the failed state after a write or sync error.
    fn fail(&mut self, msg: String, last_seq: u64) {
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
        *self.sh.failed.lock() = Some(msg.clone());
        self.sh.counters.lock().last_error = Some(msg.clone());
        self.publish_failed(last_seq, Some(msg));
    }

    fn publish_durable(&self, seq: u64) {
        self.sh
            .progress
            .send_modify(|p| p.durable = p.durable.max(seq));
    }

    fn publish_failed(&self, seq: u64, msg: Option<String>) {
        self.sh.progress.send_modify(|p| {
            p.failed_upto = p.failed_upto.max(seq);
            if let Some(m) = msg {
                p.error = Some(m.into());
            }
        });
    }

    /// The `everysec` sync and the failed state's retry.
    fn timers(&mut self) {
        let now = Instant::now();
        if self.sh.policy == FsyncPolicy::EverySec
            && self.unsynced
            && !self.failed
            && now >= self.last_fsync + SECOND
            && let Err(e) = self.sync()
        {
            self.fail(format!("fsync error: {e}"), self.last_taken);
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
        let pct = self.sh.rewrite_percentage;
        if self.failed
            || self.rewrite.is_some()
            || pct == 0
            || self.file_len <= self.sh.rewrite_min_size
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
                    write_snapshot(&*sh.source, &sh.tmp_path, &cancel2)
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
    fn complete_rewrite(&mut self, result: Result<Snapshot, String>, mut run: RewriteRun) {
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
    fn install(&mut self, snap: Snapshot, run: &RewriteRun) -> Result<(), String> {
        let Snapshot { mut file, len } = snap;
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
        // From here the path names the new file: switch to it whatever happens next.
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
            self.fail(msg.clone(), self.last_taken);
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
                write_snapshot(&*self.sh.source, &self.sh.tmp_path, &run.cancel)
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

/// Writes the snapshot to `tmp` (header and records), synced. Runs on the rewrite thread.
fn write_snapshot(
    source: &dyn SnapshotSource,
    tmp: &Path,
    cancel: &AtomicBool,
) -> Result<Snapshot, String> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let werr = |e: io::Error| format!("writing {}: {e}", tmp.display());
    w.write_all(&HEADER).map_err(werr)?;
    let mut len = HEADER.len() as u64;
    let mut err: Option<String> = None;
    let mut enc = Vec::new();
    source.snapshot(&mut |change| {
        // The source cannot be stopped midway: after an error, skip the rest cheaply.
        if err.is_some() || cancel.load(Ordering::Relaxed) {
            return;
        }
        enc.clear();
        if let Err(e) = encode_record(&change, &mut enc) {
            err = Some(format!("cannot store a record: {e}"));
        } else if let Err(e) = w.write_all(&enc) {
            err = Some(werr(e));
        } else {
            len += enc.len() as u64;
        }
    });
    if cancel.load(Ordering::Relaxed) {
        return Err("cancelled".to_owned());
    }
    if let Some(e) = err {
        return Err(e);
    }
    let file = w.into_inner().map_err(|e| werr(e.into_error()))?;
    file.sync_all()
        .map_err(|e| format!("syncing {}: {e}", tmp.display()))?;
    Ok(Snapshot { file, len })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load;

    /// A snapshot source holding a list of changes, as a fake state.
    struct ListSource(parking_lot::Mutex<Vec<Change>>);

    impl SnapshotSource for ListSource {
        fn snapshot(&self, emit: &mut dyn FnMut(Change)) {
            for c in self.0.lock().iter() {
                emit(c.clone());
            }
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("flockd-aof-unit-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).expect("temp dir");
        d
    }

    fn floor(t: u64) -> Change {
        Change::Floor { token: t }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn a_failed_write_refuses_then_recovers_by_rewrite() {
        let dir = temp_dir("fail");
        let path = dir.join("a.aof");
        let source = Arc::new(ListSource(parking_lot::Mutex::new(Vec::new())));
        let aof = Aof::open(AofOptions::new(&path), source.clone()).expect("open");
        let rt = rt();
        // The "state" and the journal stay in step, as the core keeps them.
        let push = |t: u64| {
            source.0.lock().push(floor(t));
            aof.append(floor(t));
        };
        push(1);
        rt.block_on(aof.wait_durable(aof.appended_seq()))
            .expect("durable");

        aof.inject_write_failures(1);
        push(2);
        let seq = aof.appended_seq();
        let err = rt
            .block_on(aof.wait_durable(seq))
            .expect_err("the write failed");
        assert!(
            matches!(err, AofError::WriteFailed(ref m) if m.contains("No space left")),
            "{err}"
        );
        assert!(matches!(
            aof.check_writable(),
            Err(AofError::WriteFailed(_))
        ));
        assert!(aof.stats().write_failed);
        // The file was cut back to its good part.
        let mut got = Vec::new();
        load(&path, &mut |c| got.push(c)).expect("load");
        assert_eq!(got, vec![floor(1)]);

        // A change slipping in while failed is covered by the recovery too.
        push(3);
        let deadline = Instant::now() + Duration::from_secs(10);
        while aof.check_writable().is_err() {
            assert!(Instant::now() < deadline, "no recovery");
            thread::sleep(Duration::from_millis(20));
        }
        rt.block_on(aof.wait_durable(aof.appended_seq()))
            .expect("durable after recovery");
        rt.block_on(aof.wait_durable(seq))
            .expect("the failed record is durable now");
        push(4);
        rt.block_on(aof.wait_durable(aof.appended_seq()))
            .expect("durable");
        aof.shutdown();
        let mut got = Vec::new();
        load(&path, &mut |c| got.push(c)).expect("load");
        assert_eq!(got, vec![floor(1), floor(2), floor(3), floor(4)]);
        let st = aof.stats();
        assert!(st.rewrites >= 1 && !st.write_failed, "{st:?}");
        drop(aof);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn failed_at_shutdown_writes_the_state() {
        let dir = temp_dir("failstop");
        let path = dir.join("a.aof");
        let source = Arc::new(ListSource(parking_lot::Mutex::new(Vec::new())));
        let aof = Aof::open(AofOptions::new(&path), source.clone()).expect("open");
        aof.inject_write_failures(1);
        source.0.lock().push(floor(7));
        aof.append(floor(7));
        let rt = rt();
        assert!(rt.block_on(aof.wait_durable(1)).is_err());
        aof.shutdown();
        let mut got = Vec::new();
        load(&path, &mut |c| got.push(c)).expect("load");
        assert_eq!(got, vec![floor(7)]);
        drop(aof);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn wait_durable_future_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let dir = temp_dir("send");
        let aof = Aof::open(
            AofOptions::new(dir.join("a.aof")),
            Arc::new(ListSource(Default::default())),
        )
        .expect("open");
        let fut = aof.wait_durable(0);
        assert_send(&fut);
        drop(fut);
        drop(aof);
        let _ = fs::remove_dir_all(&dir);
    }
}
