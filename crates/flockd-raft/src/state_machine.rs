//! openraft's state machine: committed entries go to flockd-core's `apply` (through the
//! server's state machine through [`flockd_log::Apply`], which also routes their events), once each ([`Dedup`]). A snapshot is a
//! file in the AOF rewrite format plus a small meta file (the last log id applied, the
//! membership and the dedup table); it is written from a detached copy of the state, so apply
//! goes on meanwhile.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flockd_core::StateMachine;
use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use flockd_log::{Apply, Entry};

use crate::apply_trace::{ApplyTrace, Index, Position};
use crate::dedup::Dedup;
use crate::pending::PendingTable;
use crate::types::{FlockRaft, LogId, NodeId, RaftResponse, SnapshotMeta, StoredMembership};
use flockd_log::ProposeError;

/// A snapshot as openraft passes it around: its data file and the dedup table it goes with.
#[derive(Debug, Clone)]
pub struct SnapshotData {
    pub path: PathBuf,
    pub dedup: Dedup,
}

/// The meta file beside a snapshot's data file.
#[derive(Serialize, Deserialize)]
struct MetaFile {
    data_file: String,
    meta: SnapshotMeta,
    dedup: Dedup,
}

struct Inner {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    dedup: Dedup,
    current: Option<(SnapshotMeta, SnapshotData)>,
}

/// This node's identity, to tell its own proposals from the others'.
#[derive(Clone, Copy, Debug)]
pub struct Me {
    pub node: NodeId,
    pub incarnation: u64,
}

#[derive(Clone)]
pub struct MachineStore {
    inner: Arc<Mutex<Inner>>,
    host: Arc<dyn Apply>,
    pending: Arc<PendingTable>,
    me: Me,
    dir: PathBuf,
    /// Entries applied as no-ops because their proposal had taken effect already.
    duplicates: Arc<AtomicU64>,
    /// Held while a snapshot is made the current one (its files and `Inner::current`): a build
    /// (a task of its own, see `build_snapshot`) and an install may finish at the same time.
    keeping: Arc<Mutex<()>>,
    /// Test-only ([`crate::apply_trace`]).
    trace: Option<Arc<ApplyTrace>>,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{}: {e}", path.display()))
}

const META_FILE: &str = "current.meta";

impl MachineStore {
    /// Opens the snapshot directory `dir`; the latest snapshot in it, if any, becomes the
    /// host's state (the log after it is applied again by openraft).
    pub fn open(
        dir: &Path,
        host: Arc<dyn Apply>,
        pending: Arc<PendingTable>,
        me: Me,
    ) -> io::Result<MachineStore> {
        fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let mut inner = Inner {
            last_applied: None,
            membership: StoredMembership::default(),
            dedup: Dedup::default(),
            current: None,
        };
        let meta_path = dir.join(META_FILE);
        match fs::read(&meta_path) {
            Ok(bytes) => {
                let meta: MetaFile =
                    postcard::from_bytes(&bytes).map_err(|e| io_err(&meta_path, e))?;
                let data = dir.join(&meta.data_file);
                let machine = load(&data)?;
                host.replace(machine);
                info!(
                    file = %data.display(),
                    last_log = ?meta.meta.last_log_id,
                    "loaded the last snapshot"
                );
                inner.last_applied = meta.meta.last_log_id;
                inner.membership = meta.meta.last_membership.clone();
                inner.dedup = meta.dedup.clone();
                inner.current = Some((
                    meta.meta,
                    SnapshotData {
                        path: data,
                        dedup: meta.dedup,
                    },
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&meta_path, e)),
        }
        remove_strays(
            dir,
            inner.current.as_ref().map(|(_, f)| f.path.as_path()),
            Strays::AndUnfinished,
        );
        Ok(MachineStore {
            inner: Arc::new(Mutex::new(inner)),
            host,
            pending,
            me,
            dir: dir.to_owned(),
            duplicates: Arc::new(AtomicU64::new(0)),
            keeping: Arc::default(),
            trace: None,
        })
    }

    /// Test-only: from now on every applied entry and every snapshot gets a line in `trace`,
    /// which starts with the position this node starts from.
    pub fn trace_to(&mut self, trace: ApplyTrace) {
        trace.line(format_args!(
            "START {} pid {}",
            Index(self.inner.lock().last_applied),
            std::process::id()
        ));
        self.trace = Some(Arc::new(trace));
    }

    fn trace(&self, line: std::fmt::Arguments<'_>) {
        if let Some(trace) = &self.trace {
            trace.line(line);
        }
    }

    /// Entries this node applied as no-ops because their proposal had taken effect already
    /// (sent again after a leader change or a lost answer).
    pub fn duplicates_skipped(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    /// Makes `machine` (a single node's state, loaded from its AOF) this node's first
    /// snapshot, at log position `log_id` with `membership`: the log of the new cluster goes on
    /// after it, and every counter in it is kept.
    pub fn seed(
        &self,
        machine: StateMachine,
        log_id: LogId,
        membership: crate::types::Membership,
    ) -> io::Result<()> {
        let meta = SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::new(Some(log_id), membership),
        };
        let building = self.dir.join("building-seed.tmp");
        flockd_log::save_snapshot(&machine.snapshot(), &building)
            .map_err(|e| io_err(&building, e))?;
        self.keep(
            &meta,
            &SnapshotData {
                path: building,
                dedup: Dedup::default(),
            },
        )?;
        self.host.replace(machine);
        let mut inner = self.inner.lock();
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        Ok(())
    }

    /// Whether this node has a snapshot (so it is past its first start).
    pub fn has_snapshot(&self) -> bool {
        self.inner.lock().current.is_some()
    }

    /// Where a snapshot received from the leader is assembled.
    pub fn receiving_path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("receiving-{id}.tmp"))
    }

    /// Proposals remembered by the dedup table.
    pub fn remembered(&self) -> usize {
        self.inner.lock().dedup.remembered()
    }

    /// Makes `data` (a finished data file) the current snapshot under `meta`: renamed to its
    /// final name, then the meta file written and renamed over the last one, then the older
    /// data files removed.
    fn keep(&self, meta: &SnapshotMeta, data: &SnapshotData) -> io::Result<SnapshotData> {
        let one_at_a_time = self.keeping.lock();
        self.keep_now(&one_at_a_time, meta, data)
    }

    /// As [`Self::keep`] for a snapshot this node built, unless a later one is current by now:
    /// an install from the leader that finished while this one was being written. Kept, the
    /// older one would be what a restart loads, behind a log the install purged up to its own
    /// position; openraft would then apply the log from the older position on, and the purged
    /// entries would be missing from the state without a word. `None`: not kept (its file is
    /// removed).
    fn keep_built(
        &self,
        meta: &SnapshotMeta,
        data: &SnapshotData,
    ) -> io::Result<Option<SnapshotData>> {
        let one_at_a_time = self.keeping.lock();
        let current = self
            .inner
            .lock()
            .current
            .as_ref()
            .and_then(|(current, _)| current.last_log_id);
        if current.is_some() && current >= meta.last_log_id {
            let _ = fs::remove_file(&data.path);
            return Ok(None);
        }
        self.keep_now(&one_at_a_time, meta, data).map(Some)
    }

    fn keep_now(
        &self,
        _one_at_a_time: &parking_lot::MutexGuard<'_, ()>,
        meta: &SnapshotMeta,
        data: &SnapshotData,
    ) -> io::Result<SnapshotData> {
        let name = match &meta.last_log_id {
            Some(id) => format!(
                "snap-{}-{}-{}.aof",
                id.leader_id.term, id.leader_id.node_id, id.index
            ),
            None => "snap-empty.aof".to_owned(),
        };
        let path = self.dir.join(&name);
        if data.path.parent() == Some(self.dir.as_path()) {
            if data.path != path {
                fs::rename(&data.path, &path).map_err(|e| io_err(&data.path, e))?;
            }
        } else {
            // Another store's file (in-process tests hand one over): ours is a copy.
            fs::copy(&data.path, &path).map_err(|e| io_err(&data.path, e))?;
            fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_err(&path, e))?;
        }
        let bytes = postcard::to_allocvec(&MetaFile {
            data_file: name,
            meta: meta.clone(),
            dedup: data.dedup.clone(),
        })
        .map_err(|e| io_err(&path, e))?;
        let tmp = self.dir.join("current.meta.tmp");
        let mut file = fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        file.write_all(&bytes).map_err(|e| io_err(&tmp, e))?;
        file.sync_all().map_err(|e| io_err(&tmp, e))?;
        fs::rename(&tmp, self.dir.join(META_FILE)).map_err(|e| io_err(&tmp, e))?;
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(&self.dir, e))?;
        // Not the unfinished files: a build or a transfer may be writing one.
        remove_strays(&self.dir, Some(&path), Strays::Older);
        let kept = SnapshotData {
            path,
            dedup: data.dedup.clone(),
        };
        self.inner.lock().current = Some((meta.clone(), kept.clone()));
        Ok(kept)
    }
}

/// Loads a snapshot data file into a new state machine; a file cut short is refused.
fn load(path: &Path) -> io::Result<StateMachine> {
    let mut machine = StateMachine::new();
    let report = flockd_log::load(path, &mut machine).map_err(|e| io_err(path, e))?;
    if report.truncated_at.is_some() || report.records == 0 {
        return Err(io_err(path, "the snapshot file is incomplete"));
    }
    machine.reset_stats();
    Ok(machine)
}

/// Which files [`remove_strays`] removes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strays {
    /// Older snapshots.
    Older,
    /// Older snapshots and unfinished builds and transfers (at start, when none is running).
    AndUnfinished,
}

/// Removes data files other than `keep`.
fn remove_strays(dir: &Path, keep: Option<&Path>, which: Strays) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let stray = (name.starts_with("snap-") && name.ends_with(".aof"))
            || (which == Strays::AndUnfinished
                && (name.starts_with("receiving-") || name.starts_with("building-")));
        if stray
            && Some(path.as_path()) != keep
            && let Err(e) = fs::remove_file(&path)
        {
            warn!(file = %path.display(), "cannot remove an old snapshot file: {e}");
        }
    }
}

impl RaftSnapshotBuilder<FlockRaft> for MachineStore {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(
        &mut self,
    ) -> Result<openraft::alias::SnapshotOf<FlockRaft, SnapshotData>, io::Error> {
        // Taken together, so the state, the log id and the dedup table match.
        let (snapshot, meta, dedup) = {
            let inner = self.inner.lock();
            let meta = SnapshotMeta {
                last_log_id: inner.last_applied,
                last_membership: inner.membership.clone(),
            };
            (self.host.snapshot(), meta, inner.dedup.clone())
        };
        let store = self.clone();
        let building = self.dir.join(format!(
            "building-{}.tmp",
            meta.last_log_id.map_or(0, |id| id.index)
        ));
        let built = meta.last_log_id;
        self.trace(format_args!("BUILD {}", Index(built)));
        let kept = tokio::task::spawn_blocking(move || {
            flockd_log::save_snapshot(&snapshot, &building).map_err(|e| io_err(&building, e))?;
            let file = SnapshotData {
                path: building,
                dedup,
            };
            store.keep_built(&meta, &file)
        })
        .await
        .map_err(io::Error::other)??;
        if let Some(file) = &kept {
            info!(last_log = ?built, file = %file.path.display(), "snapshot built");
        }
        // Not kept: the later one installed meanwhile is the snapshot.
        let (meta, snapshot) = self
            .inner
            .lock()
            .current
            .clone()
            .ok_or_else(|| io::Error::other("no current snapshot after a build"))?;
        if kept.is_none() {
            info!(built = ?built, current = ?meta.last_log_id, "a snapshot built while a later one was installed is dropped");
        }
        Ok(openraft::alias::SnapshotOf::<FlockRaft, SnapshotData> { meta, snapshot })
    }
}

impl RaftStateMachine<FlockRaft> for MachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = MachineStore;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let inner = self.inner.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<FlockRaft>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let log_id = entry.log_id;
            let mut inner = self.inner.lock();
            match entry.payload {
                EntryPayload::Blank => {
                    self.trace(format_args!("APPLY {} blank", Position(&log_id)));
                }
                EntryPayload::Membership(membership) => {
                    self.trace(format_args!(
                        "APPLY {} membership {membership:?}",
                        Position(&log_id)
                    ));
                    inner.membership = StoredMembership::new(Some(log_id), membership);
                }
                EntryPayload::Normal(proposal) => {
                    if inner.dedup.admit(&proposal.origin) {
                        let proposed_here = proposal.origin.node == self.me.node
                            && proposal.origin.incarnation == self.me.incarnation;
                        // Log time never goes back, whatever order the leader's stamps
                        // reached the log in: a later start only lengthens a lease.
                        let at = proposal.at.max(self.host.time());
                        let applied = Entry {
                            position: log_id.index,
                            at,
                            ops: proposal.ops,
                        };
                        let mut results = Vec::with_capacity(1);
                        self.host.apply(
                            std::slice::from_ref(&applied),
                            proposed_here,
                            &mut results,
                        );
                        let results = results.pop().unwrap_or_default();
                        self.trace(format_args!(
                            "APPLY {} {:?} at {} ops {:?} results {results:?}",
                            Position(&log_id),
                            proposal.origin,
                            at.0,
                            applied.ops
                        ));
                        if proposed_here {
                            self.pending.resolve(proposal.origin.seq, Ok(results));
                        }
                    } else {
                        self.duplicates.fetch_add(1, Ordering::Relaxed);
                        self.trace(format_args!(
                            "APPLY {} {:?} duplicate",
                            Position(&log_id),
                            proposal.origin
                        ));
                    }
                }
            }
            inner.last_applied = Some(log_id);
            drop(inner);
            if let Some(responder) = responder {
                responder.send(RaftResponse);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> MachineStore {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let store = self.clone();
        let meta_owned = meta.clone();
        let (machine, kept) = tokio::task::spawn_blocking(move || {
            let machine = load(&snapshot.path)?;
            let kept = store.keep(&meta_owned, &snapshot)?;
            Ok::<_, io::Error>((machine, kept))
        })
        .await
        .map_err(io::Error::other)??;
        let mut inner = self.inner.lock();
        self.host.replace(machine);
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.dedup = kept.dedup;
        // This node's proposals the snapshot decided will not be applied here: their results
        // are not in it.
        for seq in self.pending.waiting() {
            if inner.dedup.decided(self.me.node, self.me.incarnation, seq) {
                self.pending.resolve(seq, Err(ProposeError::OutcomeUnknown));
            }
        }
        info!(last_log = ?meta.last_log_id, "installed a snapshot from the leader");
        self.trace(format_args!("INSTALL {}", Index(meta.last_log_id)));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<openraft::alias::SnapshotOf<FlockRaft, SnapshotData>>, io::Error> {
        Ok(self
            .inner
            .lock()
            .current
            .clone()
            .map(
                |(meta, snapshot)| openraft::alias::SnapshotOf::<FlockRaft, SnapshotData> {
                    meta,
                    snapshot,
                },
            ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LeaderId;
    use flockd_core::{Millis, OpResult, Snapshot};

    /// Only what keeping a snapshot touches.
    #[derive(Default)]
    struct Host(parking_lot::RwLock<StateMachine>);

    impl Apply for Host {
        fn apply(&self, _: &[Entry], _: bool, _: &mut Vec<Vec<OpResult>>) {}
        fn snapshot(&self) -> Snapshot {
            self.0.read().snapshot()
        }
        fn replace(&self, machine: StateMachine) {
            *self.0.write() = machine;
        }
        fn time(&self) -> Millis {
            self.0.read().time()
        }
    }

    fn open(dir: &Path) -> MachineStore {
        let me = Me {
            node: 1,
            incarnation: 1,
        };
        MachineStore::open(dir, Arc::new(Host::default()), Arc::default(), me).unwrap()
    }

    /// A snapshot file of an empty state, and its meta at log index `index`.
    fn snapshot_at(store: &MachineStore, index: u64) -> (SnapshotMeta, SnapshotData) {
        let log_id = LogId {
            leader_id: LeaderId {
                term: 1,
                node_id: 1,
            },
            index,
        };
        let path = store.dir.join(format!("building-{index}.tmp"));
        flockd_log::save_snapshot(&StateMachine::new().snapshot(), &path).unwrap();
        let meta = SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::default(),
        };
        let data = SnapshotData {
            path,
            dedup: Dedup::default(),
        };
        (meta, data)
    }

    fn current_index(store: &MachineStore) -> Option<u64> {
        let inner = store.inner.lock();
        inner
            .current
            .as_ref()
            .and_then(|(m, _)| m.last_log_id.map(|id| id.index))
    }

    #[test]
    fn a_build_that_ends_after_a_later_install_is_not_kept() {
        let dir = std::env::temp_dir().join(format!("flockd-keep-built-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let store = open(&dir);
        // A build of the state at 5 starts; an install of the leader's snapshot at 9 ends
        // while its file is written; then the build ends.
        let (built_meta, built) = snapshot_at(&store, 5);
        let (installed_meta, installed) = snapshot_at(&store, 9);
        store.keep(&installed_meta, &installed).unwrap();
        assert!(store.keep_built(&built_meta, &built).unwrap().is_none());
        assert_eq!(current_index(&store), Some(9));
        assert!(!built.path.exists(), "the dropped build's file is removed");
        // A later build is kept.
        let (later_meta, later) = snapshot_at(&store, 12);
        assert!(store.keep_built(&later_meta, &later).unwrap().is_some());
        assert_eq!(current_index(&store), Some(12));
        drop(store);
        // What a restart loads: the latest, never one behind the purged log.
        let reopened = open(&dir);
        assert_eq!(current_index(&reopened), Some(12));
        let _ = fs::remove_dir_all(&dir);
    }
}
