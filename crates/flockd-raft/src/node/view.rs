//! What ROLE, INFO replication, FLOCK.CLUSTER and the console show of a node: its role, the
//! members as it knows them, term and indexes.

use super::*;

/// A node's role as Redis clients see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    Learner,
    Shutdown,
    /// Taken out of the cluster: it serves nothing (see `members`).
    Removed,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Learner => "learner",
            Role::Shutdown => "shutdown",
            Role::Removed => "removed",
        }
    }
}

/// One member as this node knows it.
#[derive(Clone, Debug)]
pub struct Member {
    pub id: NodeId,
    pub peer: Peer,
    pub voter: bool,
    /// The highest log index known to be on it (its own applied index for this node; what it
    /// acknowledged, on the leader; unknown elsewhere).
    pub index: Option<u64>,
    /// Whether it answered this node lately (a probe, an append, a vote): `down` in
    /// FLOCK.CLUSTER NODES when not.
    pub up: bool,
}

/// What ROLE, INFO replication and FLOCK.CLUSTER show.
#[derive(Clone, Debug)]
pub struct ClusterView {
    pub node_id: NodeId,
    pub role: Role,
    /// The leader this node hears from (itself, if it leads); `None` while it hears none.
    pub leader: Option<NodeId>,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub members: Vec<Member>,
    /// Set when this node was taken out of the cluster (its role is then `Removed`).
    pub removed: Option<super::Removal>,
    pub log: crate::log_store::LogStats,
    /// Entries applied here as no-ops: their proposal had taken effect already.
    pub duplicates_skipped: u64,
}

impl ClusterView {
    pub fn member(&self, id: NodeId) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// What `member` is as this node sees it: `leader`, `follower` (a voter) or `learner`
    /// (`removed` for this node once it was taken out).
    pub fn role_of(&self, member: &Member) -> &'static str {
        if member.id == self.node_id && self.removed.is_some() {
            "removed"
        } else if Some(member.id) == self.leader {
            "leader"
        } else if member.voter {
            "follower"
        } else {
            "learner"
        }
    }
}

impl Node {
    pub(super) fn view(&self) -> ClusterView {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        let removed = self.removal();
        let role = match m.state {
            _ if removed.is_some() => Role::Removed,
            ServerState::Leader => Role::Leader,
            ServerState::Follower => Role::Follower,
            ServerState::Candidate => Role::Candidate,
            ServerState::Learner => Role::Learner,
            ServerState::Shutdown => Role::Shutdown,
        };
        let applied_index = m.last_applied.map_or(0, |id| id.index);
        let voters: BTreeSet<NodeId> = m.membership_config.voter_ids().collect();
        let mut members: Vec<Member> = m
            .membership_config
            .nodes()
            .map(|(id, n)| {
                let index = if *id == self.me.node {
                    Some(applied_index)
                } else {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(id).cloned())
                        .flatten()
                        .map(|id| id.index)
                };
                Member {
                    id: *id,
                    peer: parse_addr(*id, &n.addr).unwrap_or(Peer {
                        id: *id,
                        host: n.addr.clone(),
                        port: 0,
                        cport: 0,
                    }),
                    voter: voters.contains(id),
                    index,
                    up: self.member_up(*id),
                }
            })
            .collect();
        // A removed node may still hold a membership that lists it (the entry that removed it
        // never reached it): it shows itself, as removed, and the others as it knows them.
        if let Some(removal) = &removed {
            members.retain(|m| m.id == self.me.node || removal.members.contains(&m.id));
            if members.iter().all(|m| m.id != self.me.node)
                && let Some(me) = self.settings.me()
            {
                members.push(Member {
                    id: self.me.node,
                    peer: me.clone(),
                    voter: false,
                    index: Some(applied_index),
                    up: true,
                });
            }
        }
        // openraft keeps naming the last leader while no other is elected; a follower that
        // has not heard from it for two election timeouts knows no leader.
        let heard = self.last_append.lock().is_some_and(|at| {
            at.elapsed() < Duration::from_millis(self.settings.election_timeout_ms * 2)
        });
        let leader = m.current_leader.filter(|id| *id == self.me.node || heard);
        ClusterView {
            node_id: self.me.node,
            role,
            leader,
            term: m.current_term,
            commit_index: m.local_committed.map_or(0, |id| id.index),
            applied_index,
            members,
            removed,
            log: self.log.stats(),
            duplicates_skipped: self.store.duplicates_skipped(),
        }
    }
}
