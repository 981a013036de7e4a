//! The Raft log and vote on disk in segment files of flockd's own, written into space filled
//! with zeros ahead of the records (see [`flush`]): a sync then writes the records' blocks and
//! not the file's size as well, which an appending log (raft-log's chunks) pays on every sync.
//! docs/benchmarks.md measured that at 10-17% of a leader's throughput on this kind of disk.
//!
//! * [`record`]: the file format (the AOF's framing, records in postcard).
//! * [`mem`]: the log as it stands, kept in memory and changed the same way live and at
//!   start-up; reads are served from it.
//! * [`load`]: the segments read back at start-up.
//! * [`flush`]: a log's writing: it writes, syncs, starts segments and removes purged ones.
//! * [`flusher`]: the thread that does it, for one log or for every group's log of a node.
//!
//! Changes are made to the memory and queued to the flush thread under one lock, so the file
//! holds them in the order openraft made them. An append or a vote is acknowledged once the
//! sync that covers it returns.

mod codec;
pub mod error;
pub mod flush;
pub mod flusher;
pub mod load;
pub mod mem;
mod migrate;
pub mod record;

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flockd_histogram::Histogram;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{BasicNode, OptionalSend};
use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};

use crate::counters::log_fsync_histogram;
use crate::types::{FlockRaft, LogId, RaftEntry, Vote};
use codec::{decode_entry, encode_payload};
use error::{LogError, at};
use flush::{Job, Waiter, Writer};
use flusher::{Flusher, Slot};
use load::Segment;
use mem::{Mem, Stored};
use record::{Record, SEGMENT_HEADER, push_record, segment_path};

/// How well appends share syncs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    pub entries_appended: u64,
    pub syncs: u64,
}

/// A segment this large is closed and the next begun; purged ones are removed whole.
pub const SEGMENT_BYTES: u64 = 64 << 20;

/// The file whose lock says the directory is in use.
const LOCK_FILE: &str = "flockd.lock";

/// The log store: shared by the writer (openraft's log task) and its readers (replication,
/// apply).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Inner>,
}

struct Inner {
    mem: Mutex<Mem>,
    /// `None` once closed: the directory is then unlocked, so the same process may open it again
    /// (an in-process restart) without waiting for every clone of the store to go.
    writer: Mutex<Option<WriterSide>>,
    flush: Arc<flush::Shared>,
    /// Entries appended since the start (for entries per sync).
    appended: AtomicU64,
    /// A test-only wait (ms) before each synced write is queued: a slow disk, for the fault
    /// harness, which may change it while the node runs.
    sync_delay_ms: Arc<AtomicU64>,
}

/// What only changes of the log touch: the queue to the flush thread and the segments.
struct WriterSide {
    flush: Slot,
    _lock: File,
    dir: PathBuf,
    segments: Vec<Segment>,
    /// Bytes queued to the last segment: its size once written.
    size: u64,
    /// When the next segment begins ([`SEGMENT_BYTES`] but in tests).
    segment_bytes: u64,
}

impl LogStore {
    /// Opens (or creates) the log in `dir`; `sync_delay_ms` stays zero outside fault tests.
    pub fn open(dir: &Path, sync_delay_ms: Arc<AtomicU64>) -> io::Result<LogStore> {
        LogStore::open_on(dir, sync_delay_ms, &Flusher::start()?)
    }

    /// As [`LogStore::open`], written and synced by `flusher`'s thread, which other logs may
    /// share (a multi-group node's groups: one thread for all, each log in its own files).
    pub fn open_on(
        dir: &Path,
        sync_delay_ms: Arc<AtomicU64>,
        flusher: &Flusher,
    ) -> io::Result<LogStore> {
        Ok(LogStore::open_in(
            dir,
            sync_delay_ms,
            SEGMENT_BYTES,
            flusher,
        )?)
    }

    fn open_in(
        dir: &Path,
        sync_delay_ms: Arc<AtomicU64>,
        segment_bytes: u64,
        flusher: &Flusher,
    ) -> Result<LogStore, LogError> {
        std::fs::create_dir_all(dir).map_err(at(dir))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(at(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(LogError::Locked {
                    dir: dir.to_owned(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(at(&lock_path)(e)),
        }
        let moved = migrate::from_raft_log(dir, !load::segments_in(dir)?.is_empty())?;
        let mut loaded = load::load(dir)?;
        if let Some(moved) = moved {
            tracing::info!(
                "Raft log: moved {moved} entries from raft-log's files in {} into segments",
                dir.display()
            );
        }
        if loaded.cut > 0 {
            tracing::warn!(
                "Raft log: cut {} bytes of a record that was never synced off the end",
                loaded.cut
            );
        }
        if loaded.segments.is_empty() {
            let path = segment_path(dir, 1);
            Writer::create(&path, &[]).map_err(at(&path))?;
            loaded.segments.push(Segment {
                seq: 1,
                path,
                last_index: None,
            });
            loaded.end = SEGMENT_HEADER.len() as u64;
        }
        let flush = Arc::new(flush::Shared {
            syncs: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            fsyncs: Arc::new(log_fsync_histogram()),
        });
        let current = &loaded.segments.last().expect("one at least").path;
        let writer = Writer::open(current, loaded.end, flush.clone()).map_err(at(current))?;
        let slot = flusher.add(writer)?;
        Ok(LogStore {
            inner: Arc::new(Inner {
                mem: Mutex::new(loaded.mem),
                writer: Mutex::new(Some(WriterSide {
                    flush: slot,
                    _lock: lock,
                    dir: dir.to_owned(),
                    segments: loaded.segments,
                    size: loaded.end,
                    segment_bytes,
                })),
                flush,
                appended: AtomicU64::new(0),
                sync_delay_ms,
            }),
        })
    }

    /// Closes the log: the flush thread writes and syncs what is queued, and the directory is
    /// unlocked. Every later use of any clone is an error.
    pub fn close(&self) {
        let side = self.inner.writer.lock().take();
        if let Some(side) = side {
            let WriterSide { flush, _lock, .. } = side;
            flush.close();
        }
    }

    /// How long synced writes waited for their fsync (flockd_raft_log_fsync_duration_seconds).
    pub fn fsyncs(&self) -> &Histogram {
        &self.inner.flush.fsyncs
    }

    pub fn stats(&self) -> LogStats {
        if self.inner.writer.lock().is_none() {
            return LogStats::default();
        }
        LogStats {
            entries_appended: self.inner.appended.load(Ordering::Relaxed),
            syncs: self.inner.flush.syncs.load(Ordering::Relaxed),
        }
    }

    /// Whether nothing was ever written (no vote, no entry): a node that may form a new cluster.
    pub fn is_pristine(&self) -> io::Result<bool> {
        drop(self.writer()?);
        let mem = self.inner.mem.lock();
        Ok(mem.vote.is_none() && mem.entries.is_empty() && mem.purged.is_none())
    }

    /// Marks everything up to `log_id` as compacted away (a seeded node's log starts after its
    /// first snapshot), synced.
    pub fn start_after(&self, log_id: &LogId) -> io::Result<()> {
        let (tx, rx) = sync_channel(1);
        self.purge_now(*log_id, Waiter::Blocking(tx, Instant::now()))?;
        rx.recv()
            .map_err(|_| io::Error::other("the Raft log's flush thread is gone"))?
    }

    fn sync_delay(&self) -> Duration {
        Duration::from_millis(self.inner.sync_delay_ms.load(Ordering::Relaxed))
    }

    /// The writer's side, or an error once closed or failed.
    fn writer(&self) -> Result<MappedMutexGuard<'_, WriterSide>, LogError> {
        if self.inner.flush.failed.load(Ordering::Relaxed) {
            return Err(LogError::Failed(
                "see the error logged by the flush thread".to_owned(),
            ));
        }
        MutexGuard::try_map(self.inner.writer.lock(), Option::as_mut).map_err(|_| LogError::Closed)
    }

    /// Queues a purge up to `upto`, and the removal of the segments it empties.
    fn purge_now(&self, upto: LogId, waiter: Waiter) -> Result<(), LogError> {
        let mut side = self.writer()?;
        let mut bytes = Vec::new();
        push_record(&Record::Purge(upto), &mut bytes);
        self.inner.mem.lock().purge(upto);
        side.queue(Job::Write {
            bytes,
            sync: true,
            waiter,
        })?;
        let closed = side.segments.len() - 1;
        let gone = side.segments[..closed]
            .iter()
            .take_while(|s| s.last_index.is_none_or(|i| i <= upto.index))
            .count();
        if gone > 0 {
            let paths = side.segments.drain(..gone).map(|s| s.path).collect();
            side.queue(Job::Remove(paths))?;
        }
        Ok(())
    }
}

impl WriterSide {
    fn queue(&mut self, job: Job) -> Result<(), LogError> {
        if let Job::Write { bytes, .. } = &job {
            self.size += bytes.len() as u64;
        }
        self.flush.send(job)
    }

    /// Begins the next segment once this one is full. Its first records are the vote and where
    /// the log ended, so the ones before can be removed once their entries are purged.
    fn roll_if_full(&mut self, mem: &Mem) -> Result<(), LogError> {
        if self.size < self.segment_bytes {
            return Ok(());
        }
        let mut first = Vec::new();
        if let Some(vote) = mem.vote {
            push_record(&Record::Vote(vote), &mut first);
        }
        if let Some(last) = mem.last_log_id() {
            push_record(&Record::Base(last), &mut first);
        }
        let seq = self.segments.last().map_or(1, |s| s.seq + 1);
        let path = segment_path(&self.dir, seq);
        self.size = (SEGMENT_HEADER.len() + first.len()) as u64;
        self.segments.push(Segment {
            seq,
            path: path.clone(),
            last_index: None,
        });
        self.flush.send(Job::Roll { path, first })
    }
}

impl RaftLogReader<FlockRaft> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<RaftEntry>, io::Error> {
        let (from, to) = bounds(&range);
        let stored = self.inner.mem.lock().range(from, to);
        stored
            .iter()
            .map(|s| decode_entry(s.log_id, &s.payload))
            .collect()
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.inner.mem.lock().vote)
    }
}

impl RaftLogStorage<FlockRaft> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<FlockRaft>, io::Error> {
        let mem = self.inner.mem.lock();
        Ok(LogState {
            last_purged_log_id: mem.purged,
            last_log_id: mem.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let delay = self.sync_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let (tx, rx) = sync_channel(1);
        {
            let mut side = self.writer()?;
            let mut bytes = Vec::new();
            push_record(&Record::Vote(*vote), &mut bytes);
            self.inner.mem.lock().vote = Some(*vote);
            side.queue(Job::Write {
                bytes,
                sync: true,
                waiter: Waiter::Blocking(tx, Instant::now()),
            })?;
        }
        // A vote must be on disk before the node acts on it.
        tokio::task::spawn_blocking(move || rx.recv())
            .await
            .map_err(io::Error::other)?
            .map_err(|_| io::Error::other("the Raft log's flush thread is gone"))?
    }

    // The commit index is not kept (openraft's default): a restarted node learns it from the
    // leader, and one record fewer per commit keeps the flush thread on the entries.

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<FlockRaft>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = RaftEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut bytes = Vec::new();
        let mut stored = Vec::new();
        for entry in entries {
            let payload = Bytes::from(encode_payload(&entry.payload)?);
            push_record(
                &Record::Entry {
                    log_id: entry.log_id,
                    payload: &payload,
                },
                &mut bytes,
            );
            stored.push(Stored {
                log_id: entry.log_id,
                payload,
            });
        }
        self.inner
            .appended
            .fetch_add(stored.len() as u64, Ordering::Relaxed);
        let delay = self.sync_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let mut side = self.writer()?;
        let mut mem = self.inner.mem.lock();
        let current = side.segments.len() - 1;
        for entry in stored {
            let index = entry.log_id.index;
            mem.append(entry)?;
            let last = &mut side.segments[current].last_index;
            *last = Some(last.map_or(index, |i| i.max(index)));
        }
        side.queue(Job::Write {
            bytes,
            sync: true,
            waiter: Waiter::Raft(callback, Instant::now()),
        })?;
        Ok(side.roll_if_full(&mem)?)
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let mut side = self.writer()?;
        let mut mem = self.inner.mem.lock();
        if last_log_id.map_or(0, |id| id.index + 1) >= mem.next_index() {
            return Ok(());
        }
        mem.truncate_after(last_log_id);
        let mut bytes = Vec::new();
        push_record(&Record::TruncateAfter(last_log_id), &mut bytes);
        // Synced with the next append, which is queued after it.
        Ok(side.queue(Job::Write {
            bytes,
            sync: false,
            waiter: Waiter::None,
        })?)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        Ok(self.purge_now(log_id, Waiter::None)?)
    }
}

/// A node's address as openraft keeps it in the membership.
pub fn node(addr: &str) -> BasicNode {
    BasicNode {
        addr: addr.to_owned(),
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let from = match range.start_bound() {
        Bound::Included(i) => *i,
        Bound::Excluded(i) => i + 1,
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(i) => i + 1,
        Bound::Excluded(i) => *i,
        Bound::Unbounded => u64::MAX,
    };
    (from, to)
}

#[cfg(test)]
mod tests;
