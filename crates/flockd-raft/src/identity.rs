//! Which data dir each member runs from. A node's Raft dir gets a random id when it is first
//! used; every cluster-port connection starts with both ends naming (node id, dir id), and each
//! node remembers, in `dir/peer-dirs`, the dir id it first saw for every member.
//!
//! A member that comes back with another dir id lost its dir, and its vote with it: a node
//! that forgot whom it voted for may vote again in the same term, and two candidates can then
//! both win it. So it is refused in both directions and told why, and it stops with the
//! procedure (replace it under a new id), instead of being quietly caught up with a snapshot.
//! An id that is no longer (or not yet) a member may come with a new dir: that is how an id
//! removed with FLOCK.CLUSTER REMOVE is added again.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use openraft::async_runtime::WatchReceiver;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::types::{FlockRaft, NodeId};

/// One end of a cluster-port connection: a node id and the dir it runs from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub node: NodeId,
    pub dir: u64,
}

type Metrics = openraft::alias::WatchReceiverOf<FlockRaft, openraft::RaftMetrics<FlockRaft>>;

pub struct Identities {
    me: Identity,
    seen_path: PathBuf,
    seen: Mutex<BTreeMap<NodeId, u64>>,
    /// The membership, once Raft runs (before that no id is a member).
    metrics: OnceLock<Metrics>,
    refused: watch::Sender<Option<String>>,
}

impl Identities {
    /// Reads this node's dir id from `dir` (making one on a first start) and the dir ids it
    /// has seen of its peers.
    pub fn open(dir: &Path, node: NodeId) -> io::Result<Identities> {
        let id_path = dir.join("dir-id");
        let dir_id = match std::fs::read_to_string(&id_path) {
            Ok(text) => u64::from_str_radix(text.trim(), 16).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", id_path.display()),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // RandomState is seeded from the OS's randomness; the time and pid only make
                // two ids drawn in one process differ.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let id = std::collections::hash_map::RandomState::new()
                    .hash_one((nanos, std::process::id(), dir))
                    .max(1);
                write_synced(dir, &id_path, &format!("{id:016x}\n"))?;
                id
            }
            Err(e) => return Err(e),
        };
        let seen_path = dir.join("peer-dirs");
        let mut seen = BTreeMap::new();
        match std::fs::read_to_string(&seen_path) {
            Ok(text) => {
                for line in text.lines() {
                    let parsed = line.split_once(' ').and_then(|(n, d)| {
                        Some((n.parse::<NodeId>().ok()?, u64::from_str_radix(d, 16).ok()?))
                    });
                    let Some((n, d)) = parsed else {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{}: a bad line {line:?}", seen_path.display()),
                        ));
                    };
                    seen.insert(n, d);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Identities {
            me: Identity { node, dir: dir_id },
            seen_path,
            seen: Mutex::new(seen),
            metrics: OnceLock::new(),
            refused: watch::channel(None).0,
        })
    }

    pub fn me(&self) -> Identity {
        self.me
    }

    /// From now on a returning member is told apart from a new one by the membership.
    pub fn watch_membership(&self, metrics: Metrics) {
        let _ = self.metrics.set(metrics);
    }

    fn is_member(&self, node: NodeId) -> bool {
        self.metrics.get().is_some_and(|m| {
            m.borrow_watched()
                .membership_config
                .nodes()
                .any(|(id, _)| *id == node)
        })
    }

    /// Whether this node talks with `peer`: `Err` is the reason to give both ends.
    pub fn check(&self, peer: Identity) -> Result<(), String> {
        if peer.node == self.me.node {
            return if peer.dir == self.me.dir {
                Ok(())
            } else {
                Err(format!(
                    "two processes run as node {} from different dirs",
                    peer.node
                ))
            };
        }
        let mut seen = self.seen.lock();
        match seen.get(&peer.node) {
            Some(dir) if *dir == peer.dir => return Ok(()),
            Some(dir) if self.is_member(peer.node) => {
                // The dir ids go to DEBUG: the reason and the procedure keep the ERROR lines
                // that carry them within the log's 300 characters.
                tracing::debug!(
                    node = peer.node,
                    "dir id {:016x}, node {} knew {dir:016x}",
                    peer.dir,
                    self.me.node
                );
                return Err(format!(
                    "node {n} is back with another data dir, so without its vote: refused. \
                     Replace it: FLOCK.CLUSTER REMOVE {n} on the leader, start it with a new \
                     node-id and an empty dir, FLOCK.CLUSTER ADD it",
                    n = peer.node,
                ));
            }
            _ => {}
        }
        seen.insert(peer.node, peer.dir);
        let text: String = seen
            .iter()
            .map(|(n, d)| format!("{n} {d:016x}\n"))
            .collect();
        let dir = self.seen_path.parent().unwrap_or(Path::new("."));
        write_synced(dir, &self.seen_path, &text)
            .map_err(|e| format!("{}: {e}", self.seen_path.display()))
    }

    /// A peer refused this node (the first reason is kept).
    pub fn refused_by_peer(&self, why: String) {
        self.refused.send_if_modified(|slot| {
            if slot.is_none() {
                *slot = Some(why);
                true
            } else {
                false
            }
        });
    }

    /// Set once a peer refused this node: it must stop.
    pub fn refusals(&self) -> watch::Receiver<Option<String>> {
        self.refused.subscribe()
    }
}

fn write_synced(dir: &Path, path: &Path, text: &str) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("flockd-identity-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_dir_keeps_its_id_and_what_it_saw_across_opens() {
        let dir = temp_dir("keep");
        let first = Identities::open(&dir, 1).unwrap();
        first.check(Identity { node: 2, dir: 7 }).unwrap();
        let again = Identities::open(&dir, 1).unwrap();
        assert_eq!(again.me(), first.me());
        // no membership known: a new dir for 2 is taken (an id not a member may come anew)
        again.check(Identity { node: 2, dir: 7 }).unwrap();
        again.check(Identity { node: 2, dir: 8 }).unwrap();
        let other = temp_dir("other");
        assert_ne!(
            Identities::open(&other, 1).unwrap().me().dir,
            first.me().dir
        );
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&other);
    }

    #[test]
    fn a_second_process_with_this_nodes_id_is_refused() {
        let dir = temp_dir("self");
        let ids = Identities::open(&dir, 1).unwrap();
        let me = ids.me();
        ids.check(me).unwrap();
        let why = ids
            .check(Identity {
                node: 1,
                dir: me.dir ^ 1,
            })
            .unwrap_err();
        assert!(why.contains("two processes run as node 1"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_first_refusal_is_kept() {
        let dir = temp_dir("refused");
        let ids = Identities::open(&dir, 1).unwrap();
        let seen = ids.refusals();
        ids.refused_by_peer("first".into());
        ids.refused_by_peer("second".into());
        assert_eq!(seen.borrow().as_deref(), Some("first"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
