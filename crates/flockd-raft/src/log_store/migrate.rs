//! Logs written by earlier versions, in raft-log's chunk files, are moved into segments once, at
//! the first start of this version: the vote, the purge point and every entry, written to a new
//! segment under a temporary name, synced and renamed, and only then raft-log's files removed.
//! A crash before the rename leaves raft-log's files as they were (the next start moves them
//! again); after it, the segment is what opens, and leftover chunk files are removed.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use flockd_log::fsutil::sync_parent_dir;
use raft_log::codeq::{Decode, Encode};
use raft_log::{RaftLog, Types};

use super::error::{LogError, at};
use super::record::{Record, SEGMENT_HEADER, push_record, segment_path};
use crate::types::{LeaderId, LogId, Vote};

/// raft-log's chunk files (`r-<offset>.wal`) and its lock file.
fn is_raft_log_file(name: &str) -> bool {
    (name.starts_with("r-") && name.ends_with(".wal")) || name == "LOCK"
}

fn raft_log_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, LogError> {
    let mut found = Vec::new();
    for item in fs::read_dir(dir).map_err(at(dir))? {
        let item = item.map_err(at(dir))?;
        if item.file_name().to_str().is_some_and(is_raft_log_file) {
            found.push(item.path());
        }
    }
    Ok(found)
}

/// Moves raft-log's log in `dir` into the first segment, when there is one and no segment yet.
/// Returns how many entries moved.
pub fn from_raft_log(dir: &Path, has_segments: bool) -> Result<Option<usize>, LogError> {
    let old = raft_log_files(dir)?;
    if old.is_empty() {
        return Ok(None);
    }
    if has_segments {
        // Moved already; the crash came before these were removed.
        remove_all(&old)?;
        return Ok(None);
    }
    let mut bytes = SEGMENT_HEADER.to_vec();
    let moved = {
        let config = raft_log::Config::new(dir.display());
        let log = RaftLog::<WalTypes>::open(Arc::new(config)).map_err(at(dir))?;
        let state = log.log_state();
        if let Some(vote) = state.vote() {
            push_record(&Record::Vote(vote.0), &mut bytes);
        }
        let purged = state.purged().map(LogId::from);
        if let Some(purged) = purged {
            push_record(&Record::Purge(purged), &mut bytes);
        }
        let from = purged.map_or(0, |p| p.index + 1);
        let to = state.last().map_or(0, |last| last.index + 1);
        let mut moved = 0;
        for read in log.read(from, to) {
            let (id, payload) = read.map_err(at(dir))?;
            push_record(
                &Record::Entry {
                    log_id: LogId::from(&id),
                    payload: &payload.0,
                },
                &mut bytes,
            );
            moved += 1;
        }
        moved
    };
    let path = segment_path(dir, 1);
    let tmp = path.with_extension("moving");
    fs::write(&tmp, &bytes).map_err(at(&tmp))?;
    fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(at(&tmp))?;
    fs::rename(&tmp, &path).map_err(at(&path))?;
    sync_parent_dir(&path).map_err(at(&path))?;
    remove_all(&old)?;
    Ok(Some(moved))
}

fn remove_all(paths: &[std::path::PathBuf]) -> Result<(), LogError> {
    for path in paths {
        fs::remove_file(path).map_err(at(path))?;
    }
    if let Some(path) = paths.first() {
        sync_parent_dir(path).map_err(at(path))?;
    }
    Ok(())
}

/// raft-log's view of our types.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct WalTypes;

impl Types for WalTypes {
    type LogId = WalLogId;
    type LogPayload = WalPayload;
    type Vote = WalVote;
    type Callback = SyncSender<io::Result<()>>;
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
struct WalLogId {
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
struct WalPayload(Vec<u8>);

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
struct WalVote(Vote);

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

#[cfg(test)]
mod tests {
    use std::sync::mpsc::sync_channel;

    use openraft::storage::{RaftLogReader, RaftLogStorage};
    use raft_log::api::raft_log_writer::RaftLogWriter;

    use super::*;
    use crate::log_store::LogStore;
    use crate::log_store::codec::encode_payload;
    use crate::types::EntryPayload;

    fn id(index: u64) -> LogId {
        LogId {
            leader_id: LeaderId {
                term: 3,
                node_id: 2,
            },
            index,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_log_of_raft_log_moves_into_a_segment_once() {
        let dir = std::env::temp_dir().join(format!("flockd-log-migrate-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        {
            let config = raft_log::Config::new(dir.display());
            let mut log = RaftLog::<WalTypes>::open(Arc::new(config)).unwrap();
            log.save_vote(WalVote(Vote::new(3, 2))).unwrap();
            let blank = encode_payload(&EntryPayload::Blank).unwrap();
            log.append((0..6).map(|i| (WalLogId::from(&id(i)), WalPayload(blank.clone()))))
                .unwrap();
            log.purge(WalLogId::from(&id(1))).unwrap();
            let (tx, rx) = sync_channel(1);
            log.flush(true, Some(tx)).unwrap();
            rx.recv().unwrap().unwrap();
        }
        assert!(!raft_log_files(&dir).unwrap().is_empty());

        for _ in 0..2 {
            let mut store = LogStore::open(&dir, Arc::default()).unwrap();
            let entries = store.try_get_log_entries(0..100).await.unwrap();
            let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
            assert_eq!(indexes, [2, 3, 4, 5]);
            assert_eq!(entries[0].log_id, id(2));
            assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
            let state = store.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id, Some(id(1)));
            assert!(raft_log_files(&dir).unwrap().is_empty());
            store.close();
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
