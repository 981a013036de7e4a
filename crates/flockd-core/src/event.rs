//! Events: what applying an op changed, as values. The server wakes blocked connections from
//! them, and pub/sub and metrics read the same stream.

use bytes::Bytes;

use crate::WaitId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A holding was granted or reentered: `token` is the new token. `wait` names the queued
    /// waiter it went to; `None` when the acquire itself was answered with the token.
    Granted {
        name: Bytes,
        token: u64,
        wait: Option<WaitId>,
    },
    /// A FLOCK.ACQUIREALL waiter was granted every name; each also has its own `Granted`
    /// (with no wait). `tokens` in the order of the names.
    AllGranted { wait: WaitId, tokens: Vec<u64> },
    /// A lease was reset; `token` is the holding's latest token.
    Renewed { name: Bytes, token: u64 },
    /// A hold was released (`free`: the holding is gone). `held_ms`, here and in the two
    /// below: how long the holding lasted, from its grant to its end, when it ended and this
    /// machine saw the grant (a holding restored from a snapshot has no known start).
    Released {
        name: Bytes,
        token: u64,
        free: bool,
        held_ms: Option<u64>,
    },
    Expired {
        name: Bytes,
        token: u64,
        held_ms: Option<u64>,
    },
    ForceReleased {
        name: Bytes,
        token: u64,
        held_ms: Option<u64>,
    },
    /// A queued waiter left the queue without being granted (cancelled, or dropped by a
    /// re-arm).
    WaitEnded { name: Bytes, wait: WaitId },
}

impl Event {
    /// Drops the hold time: what a machine rebuilt from a snapshot (which does not keep grant
    /// times) would report, so its events can be compared with the original's.
    pub fn forget_hold_time(&mut self) {
        if let Event::Released { held_ms, .. }
        | Event::Expired { held_ms, .. }
        | Event::ForceReleased { held_ms, .. } = self
        {
            *held_ms = None;
        }
    }
}
