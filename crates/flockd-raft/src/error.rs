//! What can go wrong in the replicated log, as its callers see it.

use std::path::PathBuf;

/// Why a proposal got no result. None of these says the ops did not take effect, only that this
/// node cannot tell the client they did.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// No leader could commit it within `cluster-wait-leader-ms` (Redis's `-CLUSTERDOWN`).
    #[error("no leader could commit the command within {waited_ms} ms ({why})")]
    NoLeader { waited_ms: u64, why: String },
    /// This node caught up from a snapshot that contains the proposal's effect, not its result.
    #[error("the command's outcome is unknown: this node caught up from a snapshot")]
    OutcomeUnknown,
    /// The node is stopping.
    #[error("the node is shutting down")]
    ShuttingDown,
}

/// Why a node could not start or change the membership.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad cluster peer {peer:?}: {why}")]
    BadPeer { peer: String, why: String },
    #[error("cannot listen for peers on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("the snapshot {path} cannot be loaded: {why}")]
    Snapshot { path: PathBuf, why: String },
    #[error("seeding: {0}")]
    Seed(String),
    #[error("raft: {0}")]
    Raft(String),
}
