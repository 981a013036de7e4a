//! The Raft log and vote on disk, on `raft-log`: openraft's entries become raft-log records,
//! a vote or an append is acknowledged to openraft only once its flush has synced. raft-log's
//! flush worker takes every flush queued while it syncs and syncs once for all of them: group
//! commit, off the async workers.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::Instant;

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{BasicNode, OptionalSend};
use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};
use raft_log::api::raft_log_writer::RaftLogWriter;
use raft_log::codeq::{Decode, Encode};
use raft_log::{RaftLog, Types};

use crate::figures::LogFsyncDurations;
use crate::types::{EntryPayload, FlockRaft, LeaderId, LogId, RaftEntry, Vote};

/// How long raft-log's flush worker gathers more writes before it syncs. Its default, 1 ms, is
/// a millisecond added to every commit at low load (on the leader and on each follower: a
/// one-connection cycle took 3.6 ms where it now takes 1.6). Writes queued while a sync runs
/// still share the next one, so the group commit under load comes from the sync's own length;
/// this only has to be long enough to drain what is already queued.
const FLUSH_GATHER: std::time::Duration = std::time::Duration::from_micros(20);

/// Entries this close to the log's end are read on the calling task: raft-log holds them in its
/// cache (it keeps far more), so the read is a copy, not worth a hand-off to a blocking thread
/// and back. Older ones (a follower catching up from far behind) may come from disk.
const READ_INLINE_WITHIN: u64 = 4096;

/// raft-log's view of our types.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WalTypes;

impl Types for WalTypes {
    type LogId = WalLogId;
    type LogPayload = WalPayload;
    type Vote = WalVote;
    type Callback = WalCallback;
    type UserData = Vec<u8>;

    fn log_index(log_id: &WalLogId) -> u64 {
        log_id.index
    }

    fn payload_size(payload: &WalPayload) -> u64 {
        payload.0.len() as u64
    }
}

/// A log id as raft-log orders it: by leader (term, then node), then index, as openraft does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WalLogId {
    term: u64,
    node: u64,
    index: u64,
}

impl From<&LogId> for WalLogId {
    fn from(id: &LogId) -> Self {
        WalLogId {
            term: id.leader_id.term,
            node: id.leader_id.node_id,
            index: id.index,
        }
    }
}

impl From<&WalLogId> for LogId {
    fn from(id: &WalLogId) -> Self {
        LogId {
            leader_id: LeaderId {
                term: id.term,
                node_id: id.node,
            },
            index: id.index,
        }
    }
}

impl Encode for WalLogId {
    fn encode<W: io::Write>(&self, mut w: W) -> io::Result<usize> {
        Ok(self.term.encode(&mut w)? + self.node.encode(&mut w)? + self.index.encode(&mut w)?)
    }
}

impl Decode for WalLogId {
    fn decode<R: io::Read>(mut r: R) -> io::Result<Self> {
        Ok(WalLogId {
            term: u64::decode(&mut r)?,
            node: u64::decode(&mut r)?,
            index: u64::decode(&mut r)?,
        })
    }
}

/// An entry's payload, already in its postcard bytes (encoded once, on append).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalPayload(Vec<u8>);

impl Encode for WalPayload {
    fn encode<W: io::Write>(&self, w: W) -> io::Result<usize> {
        self.0.encode(w)
    }
}

impl Decode for WalPayload {
    fn decode<R: io::Read>(r: R) -> io::Result<Self> {
        Ok(WalPayload(Vec::<u8>::decode(r)?))
    }
}

/// openraft's vote, compared as openraft compares votes (raft-log refuses one that goes back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalVote(Vote);

impl PartialOrd for WalVote {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.0.partial_cmp(&other.0)
    }
}

impl Encode for WalVote {
    fn encode<W: io::Write>(&self, mut w: W) -> io::Result<usize> {
        let id = &self.0.leader_id;
        Ok(id.term.encode(&mut w)?
            + id.node_id.encode(&mut w)?
            + u8::from(self.0.committed).encode(&mut w)?)
    }
}

impl Decode for WalVote {
    fn decode<R: io::Read>(mut r: R) -> io::Result<Self> {
        let term = u64::decode(&mut r)?;
        let node_id = u64::decode(&mut r)?;
        let committed = u8::decode(&mut r)? != 0;
        Ok(WalVote(Vote {
            leader_id: LeaderId { term, node_id },
            committed,
        }))
    }
}

/// Who waits for a flush: openraft (an append) or a caller blocked on it (a vote).
pub enum FlushWaiter {
    Raft(IOFlushed<FlockRaft>),
    Blocking(SyncSender<io::Result<()>>),
}

/// A synced flush's waiter, and when it was queued: raft-log keeps its per-sync times to
/// itself (only sums), so the wait is measured from here, queue and write included.
pub struct WalCallback {
    waiter: FlushWaiter,
    queued: Instant,
    fsyncs: Arc<LogFsyncDurations>,
}

impl WalCallback {
    fn new(waiter: FlushWaiter, fsyncs: &Arc<LogFsyncDurations>) -> WalCallback {
        WalCallback {
            waiter,
            queued: Instant::now(),
            fsyncs: fsyncs.clone(),
        }
    }
}

impl raft_log::Callback for WalCallback {
    fn send(self, res: io::Result<()>) {
        if res.is_ok() {
            self.fsyncs.observe(self.queued.elapsed());
        }
        match self.waiter {
            FlushWaiter::Raft(flushed) => flushed.io_completed(res),
            FlushWaiter::Blocking(tx) => raft_log::Callback::send(tx, res),
        }
    }
}

fn encode_payload(payload: &EntryPayload) -> io::Result<WalPayload> {
    postcard::to_allocvec(payload)
        .map(WalPayload)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn decode_entry(log_id: &WalLogId, payload: &WalPayload) -> io::Result<RaftEntry> {
    let payload: EntryPayload = postcard::from_bytes(&payload.0).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("log entry {}: {e}", log_id.index),
        )
    })?;
    Ok(RaftEntry {
        log_id: log_id.into(),
        payload,
    })
}

/// The log store: one raft-log, shared by the writer (openraft's log task) and its readers
/// (replication, apply).
#[derive(Clone)]
pub struct LogStore {
    /// `None` once closed: the directory's lock is then released, so the same process may open
    /// it again (an in-process restart) without waiting for every clone of the store to go.
    log: Arc<Mutex<Option<RaftLog<WalTypes>>>>,
    /// Entries appended since the start (for entries per sync).
    appended: Arc<std::sync::atomic::AtomicU64>,
    /// A test-only wait (ms) before each synced write is queued: a slow disk, for the fault
    /// harness, which may change it while the node runs.
    sync_delay_ms: Arc<std::sync::atomic::AtomicU64>,
    /// How long votes and appends waited for their fsync, for the metrics port.
    fsyncs: Arc<LogFsyncDurations>,
}

/// How well appends share syncs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    pub entries_appended: u64,
    pub syncs: u64,
}

impl LogStore {
    /// Opens (or creates) the log in `dir`; `sync_delay_ms` stays zero outside fault tests.
    pub fn open(
        dir: &Path,
        sync_delay_ms: Arc<std::sync::atomic::AtomicU64>,
    ) -> io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let mut config = raft_log::Config::new(dir.display());
        config.wal.flush_batch_wait = Some(FLUSH_GATHER);
        let log = RaftLog::open(Arc::new(config))?;
        Ok(LogStore {
            log: Arc::new(Mutex::new(Some(log))),
            appended: Arc::default(),
            sync_delay_ms,
            fsyncs: Arc::default(),
        })
    }

    /// Closes the log: its flush worker syncs what is queued and ends, and the directory is
    /// unlocked. Every later use of any clone is an error.
    pub fn close(&self) {
        let log = self.log.lock().take();
        drop(log);
    }

    fn sync_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.sync_delay_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// How long synced writes waited for their fsync (flockd_raft_log_fsync_duration_seconds).
    pub fn fsyncs(&self) -> &LogFsyncDurations {
        &self.fsyncs
    }

    pub fn stats(&self) -> LogStats {
        LogStats {
            entries_appended: self.appended.load(std::sync::atomic::Ordering::Relaxed),
            syncs: opened(&self.log).map_or(0, |log| log.stat().flush_metrics.sync_batch_count),
        }
    }

    /// Whether nothing was ever written (no vote, no entry): a node that may form a new cluster.
    pub fn is_pristine(&self) -> io::Result<bool> {
        let log = opened(&self.log)?;
        let state = log.log_state();
        Ok(state.vote().is_none() && state.last().is_none() && state.purged().is_none())
    }

    /// Marks everything up to `log_id` as compacted away (a seeded node's log starts after its
    /// first snapshot), synced.
    pub fn start_after(&self, log_id: &LogId) -> io::Result<()> {
        let mut log = opened(&self.log)?;
        log.purge(WalLogId::from(log_id))?;
        LogStore::flush_and_wait(&mut log, &self.fsyncs)
    }

    /// Queues a flush that syncs, and blocks until it did (used for the vote: a vote must be on
    /// disk before the node acts on it).
    fn flush_and_wait(
        log: &mut RaftLog<WalTypes>,
        fsyncs: &Arc<LogFsyncDurations>,
    ) -> io::Result<()> {
        let (tx, rx) = sync_channel(1);
        log.flush(
            true,
            Some(WalCallback::new(FlushWaiter::Blocking(tx), fsyncs)),
        )?;
        rx.recv()
            .map_err(|_| io::Error::other("the log's flush worker is gone"))?
    }
}

/// The open log, or an error once it was closed.
fn opened(
    log: &Mutex<Option<RaftLog<WalTypes>>>,
) -> io::Result<MappedMutexGuard<'_, RaftLog<WalTypes>>> {
    MutexGuard::try_map(log.lock(), Option::as_mut)
        .map_err(|_| io::Error::new(io::ErrorKind::NotConnected, "the Raft log is closed"))
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

impl RaftLogReader<FlockRaft> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<RaftEntry>, io::Error> {
        let (from, to) = bounds(&range);
        let read = move |log: &RaftLog<WalTypes>| -> io::Result<Vec<RaftEntry>> {
            log.read(from, to)
                .map(|read| read.and_then(|(id, payload)| decode_entry(&id, &payload)))
                .collect()
        };
        {
            let log = opened(&self.log)?;
            let end = log.log_state().last().map_or(0, |id| id.index + 1);
            if end.saturating_sub(from) <= READ_INLINE_WITHIN {
                return read(&log);
            }
        }
        let log = self.log.clone();
        tokio::task::spawn_blocking(move || read(&*opened(&log)?))
            .await
            .map_err(io::Error::other)?
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(opened(&self.log)?.log_state().vote().map(|v| v.0))
    }
}

impl RaftLogStorage<FlockRaft> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<FlockRaft>, io::Error> {
        let log = opened(&self.log)?;
        let state = log.log_state();
        let purged = state.purged().map(LogId::from);
        let last = state.last().map(LogId::from).or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let log = self.log.clone();
        let vote = WalVote(*vote);
        let delay = self.sync_delay();
        let fsyncs = self.fsyncs.clone();
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(delay);
            let mut log = opened(&log)?;
            log.save_vote(vote)?;
            LogStore::flush_and_wait(&mut log, &fsyncs)
        })
        .await
        .map_err(io::Error::other)?
    }

    // The commit index is not kept (openraft's default): a restarted node learns it from the
    // leader, and one record fewer per commit keeps the flush worker on the entries.

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<FlockRaft>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = RaftEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let records = entries
            .into_iter()
            .map(|entry| {
                Ok((
                    WalLogId::from(&entry.log_id),
                    encode_payload(&entry.payload)?,
                ))
            })
            .collect::<io::Result<Vec<_>>>()?;
        self.appended
            .fetch_add(records.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let delay = self.sync_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let mut log = opened(&self.log)?;
        log.append(records)?;
        // Returns at once; the flush worker syncs and then tells openraft.
        log.flush(
            true,
            Some(WalCallback::new(FlushWaiter::Raft(callback), &self.fsyncs)),
        )
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let mut log = opened(&self.log)?;
        let keep_to = last_log_id.map_or(0, |id| id.index + 1);
        // Nothing after it: raft-log would look for an entry that is not there.
        let next = log.log_state().last().map_or(0, |id| id.index + 1);
        if keep_to >= next {
            return Ok(());
        }
        log.truncate(keep_to)?;
        log.flush(false, None)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut log = opened(&self.log)?;
        log.purge(WalLogId::from(&log_id))?;
        // A sync flush also removes the chunks the purge emptied.
        log.flush(true, None)
    }
}

/// A node's address as openraft keeps it in the membership.
pub fn node(addr: &str) -> BasicNode {
    BasicNode {
        addr: addr.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_log_unlocks_its_dir_while_clones_live_on() {
        let dir = std::env::temp_dir().join(format!("flockd-log-close-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = LogStore::open(&dir, Arc::default()).unwrap();
        let lingering = first.clone();
        let Err(locked) = LogStore::open(&dir, Arc::default()) else {
            panic!("a second open of a dir in use must fail");
        };
        assert_eq!(locked.kind(), io::ErrorKind::WouldBlock);
        first.close();
        let again = LogStore::open(&dir, Arc::default()).expect("the dir opens again");
        assert!(again.is_pristine().unwrap());
        let closed = lingering
            .is_pristine()
            .expect_err("a closed log is an error");
        assert_eq!(closed.kind(), io::ErrorKind::NotConnected);
        assert_eq!(lingering.stats(), LogStats::default());
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
