//! The flush thread: it writes what the log queued, in order, and syncs. Whatever queues while
//! one sync runs is written and synced by the next, together (group commit without a timed
//! wait). Records go into space already written with zeros (flockd-log's `written_ahead`), so
//! that a sync writes the records' blocks and not the file's size too.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Instant;

use flockd_histogram::Histogram;
use flockd_log::fsutil::sync_parent_dir;
use flockd_log::written_ahead::WrittenAhead;
use openraft::storage::IOFlushed;

use super::record::SEGMENT_HEADER;
use crate::types::FlockRaft;

/// The extension of a segment being created (see [`Writer::create`]).
pub const UNFINISHED: &str = "new";

/// Jobs handled in one round at most (a round's writes share one sync).
const ROUND_JOBS: usize = 4096;

/// Who is told that a write is durable.
pub enum Waiter {
    None,
    Raft(IOFlushed<FlockRaft>, Instant),
    Blocking(std::sync::mpsc::SyncSender<io::Result<()>>, Instant),
}

pub enum Job {
    Write {
        bytes: Vec<u8>,
        sync: bool,
        waiter: Waiter,
    },
    /// Start the next segment, its first records already framed (the vote and the purge point,
    /// so that older segments can go once their entries are purged).
    Roll { path: PathBuf, first: Vec<u8> },
    /// Delete these segments once everything before is synced (their entries were purged).
    Remove(Vec<PathBuf>),
}

/// What the thread shares with the log.
pub struct Shared {
    pub syncs: AtomicU64,
    pub failed: AtomicBool,
    pub fsyncs: Arc<Histogram>,
}

pub struct Writer {
    file: File,
    path: PathBuf,
    /// Where the records end.
    end: u64,
    ahead: WrittenAhead,
    shared: Arc<Shared>,
    /// Why the log stopped writing, once it did.
    failure: Option<String>,
}

impl Writer {
    /// The writer of the segment at `path`, whose records end at `end`.
    pub fn open(path: &Path, end: u64, shared: Arc<Shared>) -> io::Result<Writer> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(Writer {
            file,
            path: path.to_owned(),
            end,
            ahead: WrittenAhead::new(len.max(end)),
            shared,
            failure: None,
        })
    }

    /// Creates a segment with its header and `first` records, whole or not at all: written under
    /// another name, synced, then renamed and the directory synced.
    pub fn create(path: &Path, first: &[u8]) -> io::Result<File> {
        let unfinished = path.with_extension(UNFINISHED);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&unfinished)?;
        let mut head = SEGMENT_HEADER.to_vec();
        head.extend_from_slice(first);
        file.write_all_at(&head, 0)?;
        file.sync_data()?;
        std::fs::rename(&unfinished, path)?;
        sync_parent_dir(path)?;
        Ok(file)
    }

    /// Serves jobs until every sender is gone; then cuts the zeros and syncs.
    pub fn run(mut self, jobs: Receiver<Job>) {
        let mut batch = Vec::new();
        let mut waiters = Vec::new();
        while let Ok(first) = jobs.recv() {
            let mut sync = false;
            let mut next = Some(first);
            let mut handled = 0;
            while let Some(job) = next.take() {
                match job {
                    Job::Write {
                        bytes,
                        sync: wants_sync,
                        waiter,
                    } => {
                        batch.extend_from_slice(&bytes);
                        sync |= wants_sync;
                        waiters.push(waiter);
                    }
                    Job::Roll { path, first } => {
                        self.round(&mut batch, true, &mut waiters);
                        sync = false;
                        self.attempt(|w| w.roll(&path, &first));
                    }
                    Job::Remove(paths) => {
                        self.round(&mut batch, true, &mut waiters);
                        sync = false;
                        if self.failure.is_none()
                            && let Err(e) = remove(&paths)
                        {
                            // Not the log's failure: the segments left are read again at the
                            // next start, and their entries purged again.
                            tracing::warn!("Raft log: purged segments not removed: {e}");
                        }
                    }
                }
                handled += 1;
                if handled < ROUND_JOBS {
                    next = jobs.try_recv().ok();
                }
            }
            self.round(&mut batch, sync, &mut waiters);
        }
        self.attempt(|w| {
            w.ahead.cut(&w.file, w.end)?;
            w.file.sync_data()
        });
    }

    /// Writes the batch, syncs if asked, and tells its waiters.
    fn round(&mut self, batch: &mut Vec<u8>, sync: bool, waiters: &mut Vec<Waiter>) {
        if !batch.is_empty() || sync {
            let bytes = std::mem::take(batch);
            self.attempt(|w| w.write(&bytes, sync));
            *batch = bytes;
            batch.clear();
        }
        let result = match &self.failure {
            None => Ok(()),
            Some(why) => Err(why.clone()),
        };
        for waiter in waiters.drain(..) {
            let answer = || result.clone().map_err(io::Error::other);
            match waiter {
                Waiter::None => {}
                Waiter::Raft(flushed, queued) => {
                    if result.is_ok() {
                        self.shared.fsyncs.observe_duration(queued.elapsed());
                    }
                    flushed.io_completed(answer());
                }
                Waiter::Blocking(tx, queued) => {
                    if result.is_ok() {
                        self.shared.fsyncs.observe_duration(queued.elapsed());
                    }
                    let _ = tx.send(answer());
                }
            }
        }
    }

    /// Runs `step` unless the log already failed; a failure stops all writing for good (after
    /// a failed sync what reached the disk is unknown, so nothing may be acknowledged again).
    fn attempt(&mut self, step: impl FnOnce(&mut Writer) -> io::Result<()>) {
        if self.failure.is_some() {
            return;
        }
        if let Err(e) = step(self) {
            tracing::error!("the Raft log cannot write {}: {e}", self.path.display());
            self.failure = Some(format!("{}: {e}", self.path.display()));
            self.shared.failed.store(true, Ordering::Relaxed);
        }
    }

    fn write(&mut self, bytes: &[u8], sync: bool) -> io::Result<()> {
        let len = bytes.len() as u64;
        self.ahead.prepare(&self.file, &self.path, self.end, len)?;
        self.file.write_all_at(bytes, self.end)?;
        self.end += len;
        if sync {
            self.file.sync_data()?;
            self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Ends this segment where its records end and starts the next.
    fn roll(&mut self, path: &Path, first: &[u8]) -> io::Result<()> {
        self.ahead.cut(&self.file, self.end)?;
        self.file.sync_data()?;
        self.file = Writer::create(path, first)?;
        self.path = path.to_owned();
        self.end = (SEGMENT_HEADER.len() + first.len()) as u64;
        self.ahead.reset(self.end);
        Ok(())
    }
}

/// Removes the oldest segments first and stops at a failure, so what is left is never older
/// than a segment removed.
fn remove(paths: &[PathBuf]) -> io::Result<()> {
    for path in paths {
        std::fs::remove_file(path)?;
    }
    if let Some(path) = paths.first() {
        // Removed for good before anything else: a segment that came back after a power loss
        // while a later removed one did not would leave a hole in the log.
        sync_parent_dir(path)?;
    }
    Ok(())
}
