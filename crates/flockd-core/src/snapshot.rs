//! Snapshots: the whole state at one log position, as items that rebuild it.
//!
//! A [`Snapshot`] is taken in an instant (a copy of the tables' stripe pointers, see
//! `stripes`), so apply goes on while it is written out: an AOF rewrite writes one, and a Raft
//! snapshot will be the same items. Every item is absolute (it carries the state it sets), so
//! items of different names may be restored in any order; a name's waiters keep theirs.

use crate::Millis;
use crate::fence::FenceRegister;
use crate::item::SnapshotItem;
use crate::table::LockTable;

/// The state at log position [`Snapshot::position`], detached from the machine.
pub struct Snapshot {
    pub(crate) position: u64,
    pub(crate) at: Millis,
    pub(crate) locks: LockTable,
    pub(crate) fences: FenceRegister,
}

impl Snapshot {
    /// The log position of the last op the snapshot reflects.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The time of that op.
    pub fn at(&self) -> Millis {
        self.at
    }

    /// Emits every item: the floor first (if any), then names and fence keys.
    pub fn emit(&self, emit: &mut dyn FnMut(SnapshotItem<'_>)) {
        if self.locks.floor > 0 {
            emit(SnapshotItem::Floor {
                token: self.locks.floor,
            });
        }
        self.locks.snapshot(emit);
        self.fences.snapshot(emit);
    }
}
