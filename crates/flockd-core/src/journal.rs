//! Where the core hands each applied change. The server's implementation queues the record for
//! the append-only file; tests use [`NullJournal`] or a recording one.

use crate::Change;

/// Receives every state change, called while the changed entry is still locked so that the
/// records of one lock are in the order the changes were applied. Must not block or do I/O:
/// queue the record and return. Must not call back into the table or the fence register either
/// (the entry is locked).
pub trait Journal: Send + Sync {
    fn append(&self, change: Change);
}

/// Discards every change.
pub struct NullJournal;

impl Journal for NullJournal {
    fn append(&self, _change: Change) {}
}

/// Keeps every change in memory: for tests.
#[derive(Default)]
pub struct MemoryJournal {
    pub changes: parking_lot::Mutex<Vec<Change>>,
}

impl Journal for MemoryJournal {
    fn append(&self, change: Change) {
        self.changes.lock().push(change);
    }
}
