//! Operations: what a log carries into the state machine, and what applying one gives back.
//!
//! One variant per state-changing command, plus the system operations that keep time-driven
//! and housekeeping changes in the log too (expiring leases, cancelling a wait, re-arming
//! leases after a start or a leader change, forgetting idle names, bumping every counter).
//! An op says what was asked, not what happened: applying it decides, from the state and the
//! op's time alone.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::LockError;
use crate::conditions::Conditions;
use crate::table::HolderStatus;

/// Identifies one queued waiter: the log position of the op that queued it and the op's index
/// within its entry (a transaction puts several ops in one entry). Unique for the whole life of
/// a log, on every machine that applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WaitId {
    pub position: u64,
    pub index: u32,
}

/// How long an acquire may queue behind a held lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Wait {
    /// Not at all: a held lock is busy at once.
    #[default]
    No,
    /// Until the proposer cancels it ([`Op::CancelWait`]), as entries of earlier releases
    /// queued: the log itself never ends such a wait (a start or a leader change does).
    UntilCancelled,
    /// At most `ms` of log time from the op's time. Past that the waiter is dropped by the log
    /// itself, never granted, whether or not the node holding its connection is there to
    /// cancel it (it may have died). The proposer still cancels at its own deadline. `node`:
    /// the cluster node whose connection waits (0 on a single node), so that
    /// [`Op::DropWaits`] ends its waits once that node is gone.
    For { ms: u64, node: u64 },
}

/// `true`: queue until cancelled, `false`: do not queue (a wait without a deadline in the log).
impl From<bool> for Wait {
    fn from(queue: bool) -> Wait {
        if queue {
            Wait::UntilCancelled
        } else {
            Wait::No
        }
    }
}

impl Wait {
    /// Whether a held lock queues the acquire.
    pub fn queues(self) -> bool {
        !matches!(self, Wait::No)
    }

    /// The log time past which the wait is over, for an op stamped `at`.
    pub fn deadline(self, at: crate::Millis) -> Option<crate::Millis> {
        match self {
            Wait::For { ms, .. } => Some(at.plus(ms)),
            Wait::No | Wait::UntilCancelled => None,
        }
    }
}

/// Identifies one holding of a lock: its name and the first token it was granted. Every later
/// token of a reentrant holding is higher, so `first_token` stays the holding's id while
/// `token` grows.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HoldingRef {
    pub name: Bytes,
    pub first_token: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// FLOCK.ACQUIRE. `wait`: whether and how long to queue when the lock is held (the
    /// proposer proposes [`Op::CancelWait`] when it gives up; a [`Wait::For`] also ends in
    /// the log at its deadline, or with its node).
    Acquire {
        name: Bytes,
        lease_ms: u64,
        owner: Option<Bytes>,
        wait: Wait,
        conditions: Conditions,
    },
    /// FLOCK.ACQUIREALL: every name exclusively, all at once or none. `wait`: wait, holding
    /// nothing and queued on no name, until every name would grant at the same moment. Only
    /// the session of `conditions` is used (the holdings are exclusive, without lock-delay).
    AcquireAll {
        names: Vec<Bytes>,
        lease_ms: u64,
        owner: Option<Bytes>,
        wait: bool,
        conditions: Conditions,
    },
    /// FLOCK.RENEW: reset the lease of the holding `token` belongs to.
    Renew {
        name: Bytes,
        token: u64,
        lease_ms: u64,
    },
    /// FLOCK.RELEASE: remove one hold of the holding `token` belongs to.
    Release { name: Bytes, token: u64 },
    /// FLOCK.FORCERELEASE: remove every holding, whatever its holds.
    ForceRelease { name: Bytes },
    /// Connection `session` closed: its `SESSION` holdings on `names` (the names it acquired
    /// with SESSION, as the connection kept them) end now.
    EndSession { session: u64, names: Vec<Bytes> },
    /// A start: no connection of an earlier run is left, so every `SESSION` holding ends.
    EndAllSessions,
    /// FLOCK.ADVANCE: the name's counter becomes at least `token`.
    Advance { name: Bytes, token: u64 },
    /// FENCE.SET: store `value` if `token` is not below the key's highest accepted token and,
    /// with `lock`, belongs to a live holding of that lock.
    FenceSet {
        key: Bytes,
        token: u64,
        value: Bytes,
        lock: Option<Bytes>,
    },
    /// A waiter gave up: its wait timed out (`release_if_granted: false`, the client is told
    /// the token if the grant won the race) or its connection closed (`true`: a grant that won
    /// the race is released, so a closed connection never keeps a lock).
    CancelWait {
        name: Bytes,
        wait: WaitId,
        release_if_granted: bool,
    },
    /// A FLOCK.ACQUIREALL waiter gave up, as [`Op::CancelWait`]; a grant that won the race is
    /// reported (or released) on all its names.
    CancelWaitAll {
        names: Vec<Bytes>,
        wait: WaitId,
        release_if_granted: bool,
    },
    /// The expiry task found these leases due at the op's time. Each one expires only if that
    /// holding is still there and its deadline is not after the op's time (a renewal or a
    /// release may have come first).
    Expire { leases: Vec<HoldingRef> },
    /// After a start or a leader change: every holding's deadline becomes the op's time plus its
    /// latest lease length plus `extra_ms`, and every queued waiter is dropped (the connections
    /// that waited are gone, or will queue again).
    Rearm { extra_ms: u64 },
    /// Forget these names if they are still idle (free, nobody waiting), raising the global
    /// floor to their counters first, so their next tokens are still higher.
    Forget { names: Vec<Bytes> },
    /// Raise every counter, and the floor, by `by` (after restoring an old file).
    BumpAll { by: u64 },
    /// Cluster node `node` is gone (it does not answer the leader, or it started again): every
    /// wait its connections queued ([`Wait::For`] with its id) ends now, never granted. A grant
    /// one of them already got stays: its lease runs out unless renewed.
    DropWaits { node: u64 },
    /// A read (FLOCK.STATUS, FLOCK.TOKEN, FLOCK.TTL, FENCE.GET, FENCE.TOKEN) inside a
    /// transaction: it changes nothing, and its result is the state at that point of the entry.
    /// Outside transactions reads do not go through the log.
    Read(Read),
}

/// What a read asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Read {
    Status { name: Bytes },
    Holders { name: Bytes },
    Token { name: Bytes },
    Ttl { name: Bytes },
    FenceGet { key: Bytes },
    FenceToken { key: Bytes },
}

impl Read {
    /// The lock name or fence key read.
    pub fn key(&self) -> &Bytes {
        match self {
            Read::Status { name }
            | Read::Holders { name }
            | Read::Token { name }
            | Read::Ttl { name } => name,
            Read::FenceGet { key } | Read::FenceToken { key } => key,
        }
    }
}

impl Op {
    /// An acquire queued again after its wait was dropped (a leader change re-armed the
    /// leases) asks for what is left of its wait, `left_ms`, not for its whole wait again.
    pub fn shorten_wait(&mut self, left_ms: u64) {
        if let Op::Acquire {
            wait: Wait::For { ms, .. },
            ..
        } = self
        {
            *ms = left_ms.max(1);
        }
    }

    /// A cluster node proposing this op names itself as the node whose connection waits.
    pub fn set_waiting_node(&mut self, waiting_node: u64) {
        if let Op::Acquire {
            wait: Wait::For { node, .. },
            ..
        } = self
        {
            *node = waiting_node;
        }
    }

    /// Every lock name and fence key the op touches, for routing it to the group that serves
    /// them. Ops about no name (re-arming, sessions ending everywhere) visit none.
    pub fn each_key(&self, mut visit: impl FnMut(&Bytes)) {
        match self {
            Op::AcquireAll { names, .. }
            | Op::CancelWaitAll { names, .. }
            | Op::Forget { names }
            | Op::EndSession { names, .. } => names.iter().for_each(visit),
            Op::Expire { leases } => leases.iter().for_each(|lease| visit(&lease.name)),
            Op::FenceSet { key, lock, .. } => {
                visit(key);
                if let Some(lock) = lock {
                    visit(lock);
                }
            }
            op => {
                if let Some(key) = op.key() {
                    visit(key);
                }
            }
        }
    }

    /// The lock name or fence key the op is about, if it is about one.
    pub fn key(&self) -> Option<&Bytes> {
        match self {
            Op::Acquire { name, .. }
            | Op::Renew { name, .. }
            | Op::Release { name, .. }
            | Op::ForceRelease { name }
            | Op::Advance { name, .. }
            | Op::CancelWait { name, .. } => Some(name),
            Op::FenceSet { key, .. } => Some(key),
            Op::Read(read) => Some(read.key()),
            Op::AcquireAll { names, .. } | Op::CancelWaitAll { names, .. } => names.first(),
            Op::Expire { .. }
            | Op::Rearm { .. }
            | Op::Forget { .. }
            | Op::BumpAll { .. }
            | Op::DropWaits { .. }
            | Op::EndSession { .. }
            | Op::EndAllSessions => None,
        }
    }
}

/// What FLOCK.ACQUIRE got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireResult {
    /// Granted now (first or reentrant acquire): the token.
    Granted(u64),
    /// Held by someone else and the request did not ask to wait (or the counter is exhausted).
    Busy,
    /// Queued. An [`crate::Event::Granted`] with this wait id hands it the lock later.
    Queued(WaitId),
    /// The owner holds the name shared (or as a permit) and asked for it exclusively: waiting
    /// would wait for itself.
    CannotUpgrade,
}

/// What FLOCK.ACQUIREALL got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireAllResult {
    /// Every name granted: the tokens, in the order of the names.
    Granted(Vec<u64>),
    /// Some name would not grant now, and the request did not ask to wait.
    Busy,
    /// Waiting. An [`crate::Event::AllGranted`] with this wait id hands it the names later.
    Queued(WaitId),
    /// The owner holds one of the names shared (or as a permit).
    CannotUpgrade,
}

/// What cancelling a FLOCK.ACQUIREALL wait found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelAllResult {
    /// Not waiting any more, or gone now: it holds nothing.
    Removed,
    /// Granted before the cancel, and every one of those holdings still current: the tokens in
    /// the order of the names (released now with `release_if_granted`). If any had ended, the
    /// others are released and the result is `Removed`: all or nothing.
    AlreadyGranted(Vec<u64>),
}

/// What cancelling a wait found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelResult {
    /// The waiter was not queued any more, or is gone now: it holds nothing.
    Removed,
    /// The lock had been handed to this waiter with this token before the cancel, and that
    /// holding is still current. With `release_if_granted` it has been released now.
    AlreadyGranted(u64),
}

/// The result of applying one op, one variant per op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    Acquire(AcquireResult),
    AcquireAll(AcquireAllResult),
    Renew(Result<(), LockError>),
    /// `Ok(true)`: the lock is free now; `Ok(false)`: a reentrant hold remains.
    Release(Result<bool, LockError>),
    /// How many holdings were removed.
    ForceRelease(usize),
    /// How many session holdings ended.
    EndSession(usize),
    /// The name's counter after the op.
    Advance(u64),
    /// Whether the value was stored.
    FenceSet(bool),
    CancelWait(CancelResult),
    CancelWaitAll(CancelAllResult),
    /// How many leases expired.
    Expire(usize),
    /// How many holdings were re-armed and how many waiters dropped.
    Rearm {
        holdings: usize,
        waiters: usize,
    },
    /// How many names were forgotten.
    Forget(usize),
    /// How many names were bumped.
    BumpAll(usize),
    /// How many waits ended.
    DropWaits(usize),
    /// FLOCK.STATUS of the name.
    Status(Bytes, crate::LockStatus),
    /// FLOCK.HOLDERS: the live holdings in grant order.
    Holders(Vec<HolderStatus>),
    /// FLOCK.TOKEN and FENCE.TOKEN.
    Token(u64),
    Ttl(i64),
    FenceValue(Option<Bytes>),
}
