//! What a node shows of its log and its members: ROLE, INFO replication, FLOCK.CLUSTER NODES,
//! the Sentinel port and the console render it. A single node is shown as what it is to a
//! Redis client, a master of one: itself, leading, with no id.

/// A member's id as Redis Cluster shows node ids (CLUSTER NODES, SHARDS, SLOTS, MYID): 40
/// hex digits, here the member's number in hex, so stable across restarts and the same on
/// every node (member 3 is `000…0003`).
pub fn node_name(id: u64) -> String {
    format!("{id:040x}")
}

/// This node's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogRole {
    /// A single node: the only writer of its own log.
    Single,
    Leader,
    Follower,
    Candidate,
    Learner,
    Shutdown,
    /// Taken out of its cluster: it serves nothing.
    Removed,
}

impl LogRole {
    pub fn as_str(self) -> &'static str {
        match self {
            LogRole::Single => "single",
            LogRole::Leader => "leader",
            LogRole::Follower => "follower",
            LogRole::Candidate => "candidate",
            LogRole::Learner => "learner",
            LogRole::Shutdown => "shutdown",
            LogRole::Removed => "removed",
        }
    }

    /// Whether this node takes the writes itself (Redis's `master`).
    pub fn leads(self) -> bool {
        matches!(self, LogRole::Single | LogRole::Leader)
    }
}

/// One member as this node knows it (a single node: itself).
#[derive(Clone, Debug)]
pub struct LogMember {
    /// `None` for a single node, which has no id.
    pub id: Option<u64>,
    pub host: String,
    pub port: u16,
    /// `host:port@cport` for a cluster member, `host:port` for a single node.
    pub addr: String,
    /// `leader`, `follower`, `learner` or `removed` (a single node: `single`).
    pub role: &'static str,
    /// The highest log index known to be on it (this node's applied index; what a follower
    /// acknowledged, on the leader; unknown elsewhere).
    pub index: Option<u64>,
    /// Whether it answered this node lately.
    pub up: bool,
    pub is_me: bool,
}

/// A node's log as ROLE, INFO, FLOCK.CLUSTER, Sentinel and the console show it.
#[derive(Clone, Debug)]
pub struct LogView {
    /// `None` for a single node.
    pub node_id: Option<u64>,
    pub role: LogRole,
    /// The leader this node hears from, by id (itself, if it leads; never for a single node,
    /// which has no id: see [`LogView::leader`]).
    pub leader_id: Option<u64>,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub members: Vec<LogMember>,
    /// Why this node serves nothing, once it was taken out of its cluster.
    pub removed: Option<String>,
}

impl LogView {
    /// The member that takes the writes, when this node knows one and its address.
    pub fn leader(&self) -> Option<&LogMember> {
        match self.role {
            LogRole::Single => self.me(),
            _ => self
                .leader_id
                .and_then(|id| self.members.iter().find(|m| m.id == Some(id))),
        }
    }

    /// Whether a write can be committed now as far as this node knows: it has a leader.
    pub fn knows_leader(&self) -> bool {
        self.role == LogRole::Single || self.leader_id.is_some()
    }

    pub fn me(&self) -> Option<&LogMember> {
        self.members.iter().find(|m| m.is_me)
    }

    pub fn member(&self, id: u64) -> Option<&LogMember> {
        self.members.iter().find(|m| m.id == Some(id))
    }
}
