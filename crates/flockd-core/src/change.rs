//! The record of one applied state change: what the append-only file stores and what a replica
//! would receive.
//!
//! Commands are not deterministic (a WAIT may or may not be granted, a token depends on history,
//! a lease on the clock), so like Redis propagating PEXPIREAT for EXPIRE we record the applied
//! effect, never the request. Every record is absolute: it carries the state it leaves behind
//! (the holding's first token and hold count, the holds left after a release), so replaying a
//! record on top of a snapshot that already contains it converges to the same state. The AOF
//! rewrite relies on that.

use bytes::Bytes;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A grant, first or reentrant. After it the lock is held with `holds` holds by `owner`,
    /// tokens `first_token..=token` belong to this holding, and the lease is `lease_ms` long.
    /// The name's counter becomes at least `token`.
    Grant {
        name: Bytes,
        token: u64,
        first_token: u64,
        holds: u32,
        owner: Option<Bytes>,
        lease_ms: u64,
    },
    /// The current holding's lease was reset to `lease_ms` from the moment of the change.
    Renew { name: Bytes, lease_ms: u64 },
    /// One hold was removed; `holds_left` remain (0: the lock is free).
    Release { name: Bytes, holds_left: u32 },
    /// The lease ran out and the holding was removed.
    Expire { name: Bytes },
    /// An admin removed the holding.
    ForceRelease { name: Bytes },
    /// The name's counter becomes at least `token` (ADVANCE, and the counter of an idle name in
    /// a snapshot).
    Advance { name: Bytes, token: u64 },
    /// A fence write was accepted: `key` now holds `value` at `token`.
    FenceSet {
        key: Bytes,
        token: u64,
        value: Bytes,
    },
    /// Every name's counter is at least `token` (the global floor raised when idle names are
    /// forgotten to bound memory).
    Floor { token: u64 },
}

impl Change {
    /// The lock name or fence key the change is about (`None` for the global floor).
    pub fn key(&self) -> Option<&Bytes> {
        match self {
            Change::Grant { name, .. }
            | Change::Renew { name, .. }
            | Change::Release { name, .. }
            | Change::Expire { name }
            | Change::ForceRelease { name }
            | Change::Advance { name, .. } => Some(name),
            Change::FenceSet { key, .. } => Some(key),
            Change::Floor { .. } => None,
        }
    }
}
