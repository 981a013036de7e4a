//! The lock table: per-name token counters, the current holding with its lease, and the FIFO
//! queue of waiters. (Skeleton: the helper implementing it replaces every `todo!()`.)

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::{Change, Journal, LockError, Millis};

/// What FLOCK.ACQUIRE asks for, already validated by the server (lease 1..=max, names non-empty).
#[derive(Clone, Debug)]
pub struct AcquireRequest {
    pub name: Bytes,
    pub lease_ms: u64,
    pub owner: Option<Bytes>,
    /// Queue if the lock is held (WAIT > 0). The deadline of the wait is the caller's business:
    /// it calls [`LockTable::cancel_wait`] when it gives up.
    pub wait: bool,
}

/// Identifies one queued waiter, to cancel it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitTicket {
    pub id: u64,
}

#[derive(Debug)]
pub enum AcquireOutcome {
    /// Granted now (first or reentrant acquire): the token.
    Granted(u64),
    /// Held by someone else and the request did not ask to wait.
    Busy,
    /// Queued. The receiver gets the token the moment the lock is handed to this waiter.
    Queued { ticket: WaitTicket, grant: oneshot::Receiver<u64> },
}

#[derive(Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The waiter was still queued and is gone now.
    Removed,
    /// The lock had already been handed to this waiter with this token (the grant raced the
    /// cancel). The caller either uses the grant or releases it.
    AlreadyGranted(u64),
}

/// Everything FLOCK.STATUS reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockStatus {
    pub locked: bool,
    /// Latest token of the current holding.
    pub token: Option<u64>,
    pub owner: Option<Bytes>,
    /// Milliseconds left on the lease, -2 when free.
    pub ttl_ms: i64,
    pub holds: u32,
    pub waiters: usize,
    /// The name's counter: the highest token issued or advanced to (0 if none).
    pub last_token: u64,
}

/// Counters for INFO's `locks` section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockStats {
    pub names: u64,
    pub locks_held: u64,
    pub waiters: u64,
    pub tokens_issued: u64,
    pub grants: u64,
    pub releases: u64,
    pub expirations: u64,
    pub force_releases: u64,
    pub notowner_rejections: u64,
}

#[derive(Default)]
pub struct LockTable {}

impl LockTable {
    pub fn new() -> Self {
        todo!()
    }

    /// Called with the new earliest lease deadline whenever a grant or renewal schedules a
    /// deadline earlier than every one already scheduled, so the server's expiry task can wake.
    pub fn set_deadline_hook(&self, _hook: Box<dyn Fn(Millis) + Send + Sync>) {
        todo!()
    }

    pub fn acquire(&self, _req: AcquireRequest, _now: Millis, _journal: &dyn Journal) -> AcquireOutcome {
        todo!()
    }

    /// Removes a queued waiter (its wait timed out or its connection closed).
    pub fn cancel_wait(&self, _name: &[u8], _ticket: WaitTicket) -> CancelOutcome {
        todo!()
    }

    pub fn renew(&self, _name: &[u8], _token: u64, _lease_ms: u64, _now: Millis, _journal: &dyn Journal) -> Result<(), LockError> {
        todo!()
    }

    /// Ok(true) when the lock is free now, Ok(false) when a reentrant holding remains.
    pub fn release(&self, _name: &[u8], _token: u64, _now: Millis, _journal: &dyn Journal) -> Result<bool, LockError> {
        todo!()
    }

    pub fn status(&self, _name: &[u8], _now: Millis) -> LockStatus {
        todo!()
    }

    pub fn last_token(&self, _name: &[u8]) -> u64 {
        todo!()
    }

    pub fn ttl(&self, _name: &[u8], _now: Millis) -> i64 {
        todo!()
    }

    pub fn force_release(&self, _name: &[u8], _now: Millis, _journal: &dyn Journal) -> bool {
        todo!()
    }

    pub fn advance(&self, _name: &[u8], _token: u64, _journal: &dyn Journal) -> u64 {
        todo!()
    }

    pub fn next_deadline(&self) -> Option<Millis> {
        todo!()
    }

    /// Expires every lease due at `now` and hands each lock to its first live waiter. Returns
    /// how many leases expired.
    pub fn expire_due(&self, _now: Millis, _journal: &dyn Journal) -> usize {
        todo!()
    }

    pub fn apply_change(&self, _change: &Change) {
        todo!()
    }

    pub fn rearm_after_replay(&self, _now: Millis) {
        todo!()
    }

    pub fn snapshot(&self, _emit: &mut dyn FnMut(Change)) {
        todo!()
    }

    pub fn stats(&self) -> LockStats {
        todo!()
    }
}
