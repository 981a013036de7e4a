//! One item of a snapshot: a piece of state that rebuilds itself (see [`crate::Snapshot`]).

use crate::conditions::Conditions;
use crate::{Millis, WaitId};

/// One piece of state. Borrowed, so that writing a snapshot of ten million names copies no
/// name, and reading one decodes in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotItem<'a> {
    /// Every name's counter is at least `token`.
    Floor { token: u64 },
    /// The name's counter is at least `token`.
    Counter { name: &'a [u8], token: u64 },
    /// A holding of the name: tokens `first_token..=token` belong to it. A name's holdings come
    /// in grant order.
    Holding {
        name: &'a [u8],
        first_token: u64,
        token: u64,
        holds: u32,
        owner: Option<&'a [u8]>,
        lease_ms: u64,
        deadline: Millis,
        grants: Vec<(WaitId, u64)>,
        conditions: Conditions,
    },
    /// A queued waiter; a name's waiters come in queue order.
    Waiter {
        name: &'a [u8],
        wait: WaitId,
        owner: Option<&'a [u8]>,
        lease_ms: u64,
        conditions: Conditions,
        /// When the log drops it (`None`: when its proposer cancels it).
        deadline: Option<Millis>,
        /// The cluster node whose connection waits (0: none named).
        node: u64,
    },
    /// A FLOCK.ACQUIREALL waiter (after every name's items), in wait order.
    MultiWaiter {
        wait: WaitId,
        names: Vec<&'a [u8]>,
        owner: Option<&'a [u8]>,
        lease_ms: u64,
        conditions: Conditions,
    },
    /// The name grants nothing before `until` (lock-delay).
    Delay { name: &'a [u8], until: Millis },
    /// A fence key's highest accepted token and its value.
    Fence {
        key: &'a [u8],
        token: u64,
        value: &'a [u8],
    },
}
