//! flockd-core: the lock table, per-lock fencing-token counters, leases, hold counts, FIFO wait
//! queues and the fence register.
//!
//! Pure on purpose: no sockets, no files, no clock. Every operation takes the current time as a
//! [`Millis`] from the caller, and every state change is handed to a [`Journal`] while the entry
//! it changed is still locked, so the append-only file sees the changes of one lock in the order
//! they were applied. That makes every rule here testable without sleeping or touching a disk.

pub mod change;
pub mod error;
pub mod fence;
pub mod journal;
pub mod table;
pub mod time;

pub use change::Change;
pub use error::LockError;
pub use fence::{FenceRegister, FenceStats};
pub use journal::{Journal, MemoryJournal, NullJournal};
pub use table::{
    AcquireOutcome, AcquireRequest, CancelOutcome, LockStats, LockStatus, LockTable, WaitTicket,
};
pub use time::Millis;

/// The largest token or counter value: tokens must fit a signed 64-bit integer (a SQL BIGINT).
pub const MAX_TOKEN: u64 = i64::MAX as u64;

/// Everything the server keeps in memory: locks and fences. The AOF replays into this and
/// snapshots out of it.
#[derive(Default)]
pub struct State {
    pub locks: LockTable,
    pub fences: FenceRegister,
}

impl State {
    /// Replays one record from the append-only file. Records are absolute (they carry the state
    /// they set, not a delta), so replaying a record that a snapshot already reflects is harmless.
    pub fn apply_change(&self, change: &Change) {
        match change {
            Change::FenceSet { .. } => self.fences.apply_change(change),
            _ => self.locks.apply_change(change),
        }
    }

    /// The replay lane (of `lanes`) of a record: records of one name or key always share a
    /// lane, so lanes can be applied by separate threads (see [`LockTable::replay_lane`]).
    /// Floor records commute with everything (the floor only rises), so any lane will do.
    pub fn replay_lane(&self, change: &Change, lanes: usize) -> usize {
        match change {
            Change::FenceSet { key, .. } => self.fences.replay_lane(key, lanes),
            Change::Floor { .. } => 0,
            other => other
                .key()
                .map_or(0, |name| self.locks.replay_lane(name, lanes)),
        }
    }

    /// Emits records that rebuild the whole state: what an AOF rewrite writes.
    pub fn snapshot(&self, emit: &mut dyn FnMut(Change)) {
        self.locks.snapshot(emit);
        self.fences.snapshot(emit);
    }
}
