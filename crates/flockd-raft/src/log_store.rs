//! The Raft log and vote on disk, on `raft-log`: openraft's entries become raft-log records,
//! a vote or an append is acknowledged to openraft only once its flush has synced, off the
//! async workers (raft-log's flush thread syncs).
//!
//! Group commit is done here, not by a timed wait: at most one synced flush of appends is in
//! flight ([`SyncGroup`]); appends that come while it syncs wait for the next one, which covers
//! them all and is queued the moment the first completes. raft-log's own gathering waits for
//! more writes with a timeout, and on a busy 2-core machine a 20 µs timeout came back after
//! 60 to 370 µs (strace of the flush thread): a wait nobody needs at low load, and at high load
//! the sync in flight gathers the next batch by itself.

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

use crate::counters::log_fsync_histogram;
use crate::types::{EntryPayload, FlockRaft, LeaderId, LogId, RaftEntry, Vote};
use flockd_histogram::Histogram;

/// raft-log's flush worker syncs what it has at once: its default gathering wait, 1 ms, added a
/// millisecond to every commit at low load (on the leader and on each follower).
const FLUSH_GATHER: std::time::Duration = std::time::Duration::ZERO;

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

/// Who waits for a flush: openraft (appends) or a caller blocked on it (a vote).
pub enum FlushWaiter {
    /// openraft's appends, each with when it was queued (the fsync wait it saw).
    Raft(Vec<(IOFlushed<FlockRaft>, Instant)>),
    Blocking(SyncSender<io::Result<()>>, Instant),
}

/// A synced flush's waiters: raft-log keeps its per-sync times to itself (only sums), so each
/// wait is measured from when it was queued, queue and write included.
pub struct WalCallback {
    waiter: FlushWaiter,
    fsyncs: Arc<Histogram>,
    /// Set for the appends' flush: the group to tell that it completed.
    group: Option<Arc<SyncGroup>>,
}

impl raft_log::Callback for WalCallback {
    fn send(self, res: io::Result<()>) {
        let observe = |queued: Instant| {
            if res.is_ok() {
                self.fsyncs.observe_duration(queued.elapsed());
            }
        };
        match self.waiter {
            FlushWaiter::Raft(appends) => {
                for (flushed, queued) in appends {
                    observe(queued);
                    flushed.io_completed(match &res {
                        Ok(()) => Ok(()),
                        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                    });
                }
            }
            FlushWaiter::Blocking(tx, queued) => {
                observe(queued);
                raft_log::Callback::send(tx, res);
            }
        }
        if let Some(group) = self.group {
            group.completed();
        }
    }
}

/// The appends' group commit: whether a synced flush of appends is in flight, and the appends
/// that came meanwhile, waiting for the next.
#[derive(Default)]
pub struct SyncGroup {
    state: Mutex<GroupState>,
    /// Wakes the task that queues the next flush (see [`LogStore::queue_parked`]).
    next: tokio::sync::Notify,
}

#[derive(Default)]
struct GroupState {
    syncing: bool,
    parked: Vec<(IOFlushed<FlockRaft>, Instant)>,
}

impl SyncGroup {
    /// The flush in flight completed (on raft-log's flush thread, which must not take the log's
    /// lock: a vote holds it while it waits for that thread). Appends parked meanwhile get the
    /// next flush from the flusher task.
    fn completed(&self) {
        let mut state = self.state.lock();
        if state.parked.is_empty() {
            state.syncing = false;
        } else {
            drop(state);
            self.next.notify_one();
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
    fsyncs: Arc<Histogram>,
    group: Arc<SyncGroup>,
    /// Set once the task that queues the parked appends' flush runs (on the first append: the
    /// store may be opened outside a runtime).
    flusher: Arc<std::sync::Once>,
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
            fsyncs: Arc::new(log_fsync_histogram()),
            group: Arc::default(),
            flusher: Arc::new(std::sync::Once::new()),
        })
    }

    /// Closes the log: its flush worker syncs what is queued and ends, and the directory is
    /// unlocked. Every later use of any clone is an error; appends still parked fail.
    pub fn close(&self) {
        let log = self.log.lock().take();
        drop(log);
        let parked = std::mem::take(&mut self.group.state.lock().parked);
        for (flushed, _) in parked {
            flushed.io_completed(Err(closed()));
        }
        // The flusher finds the log closed and ends (it would wait for a completion otherwise).
        self.group.next.notify_one();
    }

    /// Queues one synced flush for the appends parked while the last one synced, each time that
    /// one completes; ends when the log is closed.
    async fn queue_parked(
        log: Arc<Mutex<Option<RaftLog<WalTypes>>>>,
        group: Arc<SyncGroup>,
        fsyncs: Arc<Histogram>,
    ) {
        loop {
            group.next.notified().await;
            let mut opened_log = match opened(&log) {
                Ok(opened_log) => opened_log,
                Err(_) => return,
            };
            let parked = std::mem::take(&mut group.state.lock().parked);
            if parked.is_empty() {
                group.state.lock().syncing = false;
                continue;
            }
            let callback = WalCallback {
                waiter: FlushWaiter::Raft(parked),
                fsyncs: fsyncs.clone(),
                group: Some(group.clone()),
            };
            if let Err(e) = opened_log.flush(true, Some(callback)) {
                // The flush worker is gone (it failed, or the log is closing): the parked appends
                // are never acknowledged, and the next append fails with the same error, which
                // stops openraft on a storage error.
                tracing::error!("the Raft log cannot queue a flush: {e}");
                group.state.lock().syncing = false;
            }
        }
    }

    fn sync_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.sync_delay_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// How long synced writes waited for their fsync (flockd_raft_log_fsync_duration_seconds).
    pub fn fsyncs(&self) -> &Histogram {
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
    fn flush_and_wait(log: &mut RaftLog<WalTypes>, fsyncs: &Arc<Histogram>) -> io::Result<()> {
        let (tx, rx) = sync_channel(1);
        log.flush(
            true,
            Some(WalCallback {
                waiter: FlushWaiter::Blocking(tx, Instant::now()),
                fsyncs: fsyncs.clone(),
                group: None,
            }),
        )?;
        rx.recv()
            .map_err(|_| io::Error::other("the log's flush worker is gone"))?
    }
}

/// The open log, or an error once it was closed.
fn opened(
    log: &Mutex<Option<RaftLog<WalTypes>>>,
) -> io::Result<MappedMutexGuard<'_, RaftLog<WalTypes>>> {
    MutexGuard::try_map(log.lock(), Option::as_mut).map_err(|_| closed())
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the Raft log is closed")
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

/// openraft's contract for a read: entries may be missing at the start (purged) or at the end
/// (not yet appended), never between two it returns. raft-log reads an index range from a map,
/// which skips whatever is not there: a hole would be applied or replicated as if it were not
/// one, and leave the state without its entries for good. Refused here instead.
fn no_hole(from: u64, entries: &[RaftEntry]) -> io::Result<()> {
    match entries
        .windows(2)
        .find(|pair| pair[1].log_id.index != pair[0].log_id.index + 1)
    {
        None => Ok(()),
        Some(pair) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the Raft log has a hole: a read from index {from} got entry {} after {}",
                pair[1].log_id.index, pair[0].log_id.index
            ),
        )),
    }
}

impl RaftLogReader<FlockRaft> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<RaftEntry>, io::Error> {
        let (from, to) = bounds(&range);
        let read = move |log: &RaftLog<WalTypes>| -> io::Result<Vec<RaftEntry>> {
            let entries = log
                .read(from, to)
                .map(|read| read.and_then(|(id, payload)| decode_entry(&id, &payload)))
                .collect::<io::Result<Vec<_>>>()?;
            no_hole(from, &entries)?;
            Ok(entries)
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
        self.flusher.call_once(|| {
            tokio::spawn(LogStore::queue_parked(
                self.log.clone(),
                self.group.clone(),
                self.fsyncs.clone(),
            ));
        });
        let mut log = opened(&self.log)?;
        log.append(records)?;
        let queued = Instant::now();
        {
            let mut group = self.group.state.lock();
            if group.syncing {
                // The next flush covers these records: they are queued before it.
                group.parked.push((callback, queued));
                return Ok(());
            }
            group.syncing = true;
        }
        // Returns at once; the flush worker syncs and then tells openraft.
        let flushed = log.flush(
            true,
            Some(WalCallback {
                waiter: FlushWaiter::Raft(vec![(callback, queued)]),
                fsyncs: self.fsyncs.clone(),
                group: Some(self.group.clone()),
            }),
        );
        if flushed.is_err() {
            self.group.state.lock().syncing = false;
        }
        flushed
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
    fn a_read_with_a_hole_is_refused() {
        let at = |index| RaftEntry {
            log_id: LogId {
                leader_id: LeaderId {
                    term: 1,
                    node_id: 1,
                },
                index,
            },
            payload: EntryPayload::Blank,
        };
        assert!(
            no_hole(3, &[at(5), at(6), at(7)]).is_ok(),
            "purged before 5"
        );
        assert!(no_hole(3, &[]).is_ok());
        let err = no_hole(3, &[at(5), at(7)]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("entry 7 after 5"), "{err}");
    }

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
