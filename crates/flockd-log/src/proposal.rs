//! What a proposal comes back with, from either log: the results of its ops, in order, or why
//! this node cannot give them. One type for the AOF and the Raft log alike, so the server maps
//! one error to one reply.

use std::sync::Arc;

use flockd_core::OpResult;

/// The results of a proposal's ops, in order, once applied; or why there are none.
pub type ProposalResult = Result<Vec<OpResult>, ProposeError>;

/// Why a proposal got no results. The first two mean nothing of it was applied (a single node
/// replies `-MISCONF`); the others only that this node cannot tell the client what became of
/// it (a cluster node replies `-CLUSTERDOWN`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// The file's write or sync failed, or the writer is still failed from an earlier one:
    /// nothing of the proposal was applied. Reads like Redis's `MISCONF Errors writing...`.
    #[error("Errors writing to the AOF file: {0}")]
    WriteFailed(Arc<str>),
    /// The single node's log stopped before the proposal was written: it never will be.
    #[error("the AOF is shutting down")]
    Stopped,
    /// No leader committed it within `waited_ms` (`cluster-wait-leader-ms`).
    #[error("no leader could commit the command within {waited_ms} ms ({why})")]
    NoLeader { waited_ms: u64, why: String },
    /// This node caught up from a snapshot that holds the proposal's effect, not its result.
    #[error("the command's outcome is unknown: this node caught up from a snapshot")]
    OutcomeUnknown,
    /// The cluster node stopped before it learned the outcome.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The node was taken out of its cluster: it serves nothing (the text says why and what
    /// to do).
    #[error("{0}")]
    NotServing(String),
    /// The ops name lock names of more than one Raft group (`cluster-groups`), which no one
    /// entry can change together: nothing was proposed.
    #[error("CROSSSLOT Keys in request don't hash to the same slot")]
    CrossSlot,
}

impl ProposeError {
    /// True when nothing of the proposal was applied and the log itself refused it (a single
    /// node's `-MISCONF`); false when the outcome is unknown to this node (`-CLUSTERDOWN`).
    pub fn is_refusal(&self) -> bool {
        matches!(self, ProposeError::WriteFailed(_) | ProposeError::Stopped)
    }
}
