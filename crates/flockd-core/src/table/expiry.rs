//! The schedule of lease deadlines: a min-heap of (deadline, name) and the hook that wakes the
//! server's expiry task when an earlier deadline appears.
//!
//! Heap items may be stale (the lease was renewed or released since): whoever pops one checks
//! the real deadline under the entry's lock. Lock order is always entry, then heap (a push
//! happens under the entry guard); popping takes the heap lock alone and lets go of it before
//! the entry is locked. The hook runs under neither.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::Millis;

pub(super) type DeadlineHook = Arc<dyn Fn(Millis) + Send + Sync>;

#[derive(Default)]
pub(super) struct Deadlines {
    heap: Mutex<BinaryHeap<Reverse<(Millis, Bytes)>>>,
    hook: RwLock<Option<DeadlineHook>>,
}

impl Deadlines {
    pub fn set_hook(&self, hook: DeadlineHook) {
        *self.hook.write() = Some(hook);
    }

    /// Schedules `name` at `at`. True if `at` is earlier than everything scheduled before: the
    /// caller then calls [`Self::notify`] once it holds no lock.
    pub fn push(&self, at: Millis, name: Bytes) -> bool {
        let mut heap = self.heap.lock();
        let earliest = heap.peek().is_none_or(|Reverse((first, _))| at < *first);
        heap.push(Reverse((at, name)));
        earliest
    }

    /// Takes the earliest item if it is due at `now`.
    pub fn pop_due(&self, now: Millis) -> Option<(Millis, Bytes)> {
        let mut heap = self.heap.lock();
        if heap.peek().is_some_and(|Reverse((at, _))| *at <= now) {
            heap.pop().map(|Reverse(item)| item)
        } else {
            None
        }
    }

    pub fn next(&self) -> Option<Millis> {
        self.heap.lock().peek().map(|Reverse((at, _))| *at)
    }

    pub fn len(&self) -> usize {
        self.heap.lock().len()
    }

    /// Calls the hook, if any. The hook is cloned out first so it may call back into the table.
    pub fn notify(&self, at: Millis) {
        let hook = self.hook.read().clone();
        if let Some(hook) = hook {
            hook(at);
        }
    }
}
