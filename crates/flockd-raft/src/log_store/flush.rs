//! One log's writing: a [`Writer`] gathers what its log queued, in order, and writes and syncs
//! it when the flush thread ([`super::flusher`]) ends a round. Whatever queues while one sync
//! runs is written and synced by the next, together (group commit without a timed wait).
//! Records go into space already written with zeros (flockd-log's `written_ahead`), so that a
//! sync writes the records' blocks and not the file's size too.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use flockd_histogram::Histogram;
use flockd_log::fsutil::sync_parent_dir;
use flockd_log::written_ahead::WrittenAhead;
use openraft::storage::IOFlushed;

use super::record::SEGMENT_HEADER;
use crate::types::FlockRaft;

/// The extension of a segment being created (see [`Writer::create`]).
pub const UNFINISHED: &str = "new";

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
    /// What this round gathered: bytes to write, whether they need a sync, who to tell.
    batch: Vec<u8>,
    sync: bool,
    waiters: Vec<Waiter>,
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
            batch: Vec::new(),
            sync: false,
            waiters: Vec::new(),
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

    /// Takes one job of the round; returns whether it left something gathered for the round's
    /// end ([`Writer::write_gathered`], [`Writer::sync_gathered`]).
    pub fn take(&mut self, job: Job) -> bool {
        match job {
            Job::Write {
                bytes,
                sync,
                waiter,
            } => {
                self.batch.extend_from_slice(&bytes);
                self.sync |= sync;
                self.waiters.push(waiter);
                true
            }
            Job::Roll { path, first } => {
                self.sync = true;
                self.flush_gathered();
                self.attempt(|w| w.roll(&path, &first));
                false
            }
            Job::Remove(paths) => {
                self.sync = true;
                self.flush_gathered();
                if self.failure.is_none()
                    && let Err(e) = remove(&paths)
                {
                    // Not the log's failure: the segments left are read again at the next
                    // start, and their entries purged again.
                    tracing::warn!("Raft log: purged segments not removed: {e}");
                }
                false
            }
        }
    }

    /// Writes what was gathered, and syncs and tells its waiters.
    fn flush_gathered(&mut self) {
        self.write_gathered();
        self.sync_gathered();
    }

    /// Writes what was gathered, without a sync (the flush thread writes every log's batch
    /// before it syncs any).
    pub fn write_gathered(&mut self) {
        if !self.batch.is_empty() {
            let bytes = std::mem::take(&mut self.batch);
            self.attempt(|w| w.write(&bytes));
            self.batch = bytes;
            self.batch.clear();
        }
    }

    /// Syncs what was written if the round asked for a sync, and tells its waiters.
    pub fn sync_gathered(&mut self) {
        if std::mem::take(&mut self.sync) {
            self.attempt(|w| {
                w.file.sync_data()?;
                w.shared.syncs.fetch_add(1, Ordering::Relaxed);
                Ok(())
            });
        }
        let result = match &self.failure {
            None => Ok(()),
            Some(why) => Err(why.clone()),
        };
        for waiter in self.waiters.drain(..) {
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

    /// The log closes: writes and syncs what is gathered, cuts the zeros and syncs.
    pub fn finish(&mut self) {
        self.flush_gathered();
        self.attempt(|w| {
            w.ahead.cut(&w.file, w.end)?;
            w.file.sync_data()
        });
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

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let len = bytes.len() as u64;
        self.ahead.prepare(&self.file, &self.path, self.end, len)?;
        self.file.write_all_at(bytes, self.end)?;
        self.end += len;
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
