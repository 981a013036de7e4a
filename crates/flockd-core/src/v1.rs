//! The records of the first append-only file format (header `FLOCKAO1`): one applied *change*
//! per record rather than one operation. Files written by flockd before the state machine still
//! load: each record is absolute (it carries the state it leaves behind), and
//! [`crate::StateMachine::restore_v1`] sets that state. A start that loads such a file rewrites
//! it in the current format.

use bytes::Bytes;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum V1Change {
    /// After it the lock is held with `holds` holds by `owner`, tokens `first_token..=token`
    /// belong to the holding, and the lease is `lease_ms` long.
    Grant {
        name: Bytes,
        token: u64,
        first_token: u64,
        holds: u32,
        owner: Option<Bytes>,
        lease_ms: u64,
    },
    /// The holding's lease length became `lease_ms`.
    Renew {
        name: Bytes,
        lease_ms: u64,
    },
    /// One hold was removed; `holds_left` remain (0: the lock is free).
    Release {
        name: Bytes,
        holds_left: u32,
    },
    Expire {
        name: Bytes,
    },
    ForceRelease {
        name: Bytes,
    },
    /// The name's counter became at least `token`.
    Advance {
        name: Bytes,
        token: u64,
    },
    FenceSet {
        key: Bytes,
        token: u64,
        value: Bytes,
    },
    /// Every name's counter became at least `token`.
    Floor {
        token: u64,
    },
}
