//! The log entry both logs carry (an AOF record, a Raft entry's payload once committed) and the
//! one seam through which either log drives the state machine.

use flockd_core::{Millis, Op, OpResult, Snapshot, StateMachine};

/// One committed log entry: its ops, where it stands in the log, and the log's time for it.
pub struct Entry {
    pub position: u64,
    pub at: Millis,
    pub ops: Vec<Op>,
}

/// The state machine a log drives: the server's, or a test's.
pub trait Apply: Send + Sync + 'static {
    /// Applies committed entries, in log order, and pushes each entry's results onto `results`
    /// (one `Vec` per entry, one result per op). `proposed_here`: this node proposed them, so the
    /// waits they queue belong to connections parked here. Called by whoever committed the
    /// batch, in commit order. Must not block.
    fn apply(&self, entries: &[Entry], proposed_here: bool, results: &mut Vec<Vec<OpResult>>);
    /// The whole state now, detached: must be cheap (a rewrite or a Raft snapshot takes it
    /// while applying goes on) and reflect at least every entry already applied.
    fn snapshot(&self) -> Snapshot;
    /// Replaces the whole state with one loaded from a snapshot (a Raft peer's).
    fn replace(&self, machine: StateMachine);
    /// The latest op time applied.
    fn time(&self) -> Millis;
}
