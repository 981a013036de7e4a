//! The state machine: locks and fences, changed only by [`StateMachine::apply`].

use bytes::Bytes;

use crate::fence::FenceRegister;
use crate::item::SnapshotItem;
use crate::keyspace::{FENCE_SPACE, KeyType};
use crate::snapshot::Snapshot;
use crate::table::{Acquire, AcquireAll, LockTable, ScanFilter, V1HoldingChange};
use crate::{
    AcquireResult, Conditions, Event, FenceStats, HoldingRef, LockStats, LockStatus, Millis, Op,
    OpResult, Read, V1Change, WaitId,
};

/// The result of one op and the events it caused, in the order they happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub result: OpResult,
    pub events: Vec<Event>,
}

/// Everything the server keeps: locks and fences, plus the position and time of the last op
/// applied. Reads take `&self`; only `apply` and the restore methods change state.
#[derive(Default)]
pub struct StateMachine {
    locks: LockTable,
    fences: FenceRegister,
    /// Position of the last op applied (or restored from a snapshot).
    position: u64,
    /// The latest op time seen: log time never goes back.
    at: Millis,
}

impl StateMachine {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `op`, at log `position`, taking effect at `at`. Deterministic: the same ops with
    /// the same positions and times give the same state and results on any machine.
    pub fn apply(&mut self, position: u64, at: Millis, op: &Op) -> Applied {
        let mut events = Vec::new();
        let result = self.apply_in_entry(position, 0, at, op, &mut events);
        Applied { result, events }
    }

    /// As [`Self::apply`], for op `index` of a log entry that holds several (a transaction):
    /// its wait id is `(position, index)`. Events are appended to `events`.
    pub fn apply_in_entry(
        &mut self,
        position: u64,
        index: u32,
        at: Millis,
        op: &Op,
        events: &mut Vec<Event>,
    ) -> OpResult {
        self.position = self.position.max(position);
        self.at = self.at.max(at);
        let result = self.apply_op(position, index, at, op, events);
        self.locks.serve_multi_waiters(at, events);
        result
    }

    fn apply_op(
        &mut self,
        position: u64,
        index: u32,
        at: Millis,
        op: &Op,
        events: &mut Vec<Event>,
    ) -> OpResult {
        let locks = &mut self.locks;
        match op {
            Op::Acquire {
                name,
                lease_ms,
                owner,
                wait,
                conditions,
            } => {
                let request = Acquire {
                    wait_id: WaitId { position, index },
                    owner,
                    lease_ms: *lease_ms,
                    wait: *wait,
                    conditions: *conditions,
                };
                OpResult::Acquire(locks.acquire(name, request, at, events))
            }
            Op::AcquireAll {
                names,
                lease_ms,
                owner,
                wait,
                conditions,
            } => {
                let request = AcquireAll {
                    wait_id: WaitId { position, index },
                    names,
                    owner,
                    lease_ms: *lease_ms,
                    wait: *wait,
                    conditions: *conditions,
                };
                OpResult::AcquireAll(locks.acquire_all(request, at, events))
            }
            Op::Renew {
                name,
                token,
                lease_ms,
            } => OpResult::Renew(locks.renew(name, *token, *lease_ms, at, events)),
            Op::Release { name, token } => {
                OpResult::Release(locks.release(name, *token, at, events))
            }
            Op::ForceRelease { name } => {
                OpResult::ForceRelease(locks.force_release(name, at, events))
            }
            Op::Advance { name, token } => OpResult::Advance(locks.advance(name, *token, events)),
            Op::FenceSet {
                key,
                token,
                value,
                lock,
            } => {
                let held = lock
                    .as_ref()
                    .is_none_or(|name| locks.is_held_by(name, *token, at));
                OpResult::FenceSet(held && self.fences.set(key, *token, value))
            }
            Op::EndSession { session, names } => {
                OpResult::EndSession(locks.end_session(*session, names, at, events))
            }
            Op::EndAllSessions => OpResult::EndSession(locks.end_all_sessions(at, events)),
            Op::CancelWait {
                name,
                wait,
                release_if_granted,
            } => OpResult::CancelWait(locks.cancel_wait(
                name,
                *wait,
                *release_if_granted,
                at,
                events,
            )),
            Op::CancelWaitAll {
                names,
                wait,
                release_if_granted,
            } => OpResult::CancelWaitAll(locks.cancel_wait_all(
                names,
                *wait,
                *release_if_granted,
                at,
                events,
            )),
            Op::Expire { leases } => OpResult::Expire(
                leases
                    .iter()
                    .filter(|lease| locks.expire(lease, at, events))
                    .count(),
            ),
            Op::Rearm { extra_ms } => {
                let (holdings, waiters) = locks.rearm(*extra_ms, at, events);
                OpResult::Rearm { holdings, waiters }
            }
            Op::Forget { names } => OpResult::Forget(locks.forget(names)),
            Op::BumpAll { by } => OpResult::BumpAll(locks.bump_all(*by)),
            Op::DropWaits { node } => OpResult::DropWaits(locks.drop_waits(*node, at, events)),
            Op::Read(read) => self.read(read, at),
        }
    }

    /// A read at `now`, as its op would answer inside an entry (see [`Op::Read`]).
    pub fn read(&self, read: &Read, now: Millis) -> OpResult {
        match read {
            Read::Status { name } => OpResult::Status(name.clone(), self.status(name, now)),
            Read::Holders { name } => OpResult::Holders(self.locks.holders(name, now)),
            Read::Token { name } => OpResult::Token(self.last_token(name)),
            Read::Ttl { name } => OpResult::Ttl(self.ttl(name, now)),
            Read::FenceGet { key } => OpResult::FenceValue(self.fence_value(key)),
            Read::FenceToken { key } => OpResult::Token(self.fence_token(key)),
        }
    }

    /// Position of the last op applied (or of the snapshot restored).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The latest op time applied: a proposer's clock must not start below it.
    pub fn time(&self) -> Millis {
        self.at
    }

    // ------------------------------------------------------------------------- reads

    /// A read at `now`: a lease past its deadline is reported free although its expiry has not
    /// been applied yet.
    pub fn status(&self, name: &[u8], now: Millis) -> LockStatus {
        self.locks.status(name, now)
    }

    /// FLOCK.SCAN: up to about `count` names from `cursor` on, and the next cursor (0 at the
    /// end). See `table::scan` for the guarantee.
    pub fn scan(&self, cursor: u64, count: usize, filter: ScanFilter) -> (u64, Vec<Bytes>) {
        self.locks.scan(cursor, count, filter)
    }

    /// TYPE: what `key` is, `None` when it is neither a lock name nor a fence key. A name that
    /// is both is a fence key (see [`crate::keyspace`]).
    pub fn key_type(&self, key: &[u8]) -> Option<KeyType> {
        if self.fences.contains(key) {
            Some(KeyType::Fence)
        } else if self.locks.has_name(key) {
            Some(KeyType::Flock)
        } else {
            None
        }
    }

    /// SCAN: about `count` keys from `cursor` on, the lock names first and then the fence keys
    /// (the cursor's top bit says which: [`FENCE_SPACE`]), only those of type `only` if given,
    /// and the next cursor (0 at the end). A call looks at `count` keys in all (a few more when
    /// keys share a place), so it may cross from the lock names into the fence keys.
    pub fn scan_keys(&self, cursor: u64, count: usize, only: Option<KeyType>) -> (u64, Vec<Bytes>) {
        let mut keys = Vec::new();
        let mut budget = count.max(1);
        let in_locks = cursor < FENCE_SPACE;
        let fence_place = match only {
            // No lock name is in the fence keys' part of the walk.
            Some(KeyType::Flock) if !in_locks => return (0, keys),
            // The lock names' part has no fence key: go straight to the fence keys.
            Some(KeyType::Fence) if in_locks => 0,
            _ if in_locks => {
                let mut looked = 0;
                let next = self.locks.walk_names(cursor, budget, |name| {
                    looked += 1;
                    // A name that is also a fence key comes with the fence keys.
                    if !self.fences.contains(name) {
                        keys.push(Bytes::copy_from_slice(name));
                    }
                });
                match next {
                    Some(place) => return (place, keys),
                    None if only == Some(KeyType::Flock) => return (0, keys),
                    None if looked >= budget => return (FENCE_SPACE, keys),
                    None => {
                        budget -= looked;
                        0
                    }
                }
            }
            _ => cursor & !FENCE_SPACE,
        };
        let next = self.fences.walk(fence_place, budget, |key| {
            keys.push(Bytes::copy_from_slice(key));
        });
        (next.map_or(0, |place| place | FENCE_SPACE), keys)
    }

    /// The name's counter: the highest token issued or advanced to, 0 if none.
    pub fn last_token(&self, name: &[u8]) -> u64 {
        self.locks.last_token(name)
    }

    /// Milliseconds left on the lease at `now`, -2 when not held (like PTTL).
    pub fn ttl(&self, name: &[u8], now: Millis) -> i64 {
        self.locks.ttl(name, now)
    }

    pub fn fence_value(&self, key: &[u8]) -> Option<Bytes> {
        self.fences.get(key)
    }

    /// The highest token the fence key accepted, 0 if none.
    pub fn fence_token(&self, key: &[u8]) -> u64 {
        self.fences.token(key)
    }

    /// Every name's counter is at least this.
    pub fn token_floor(&self) -> u64 {
        self.locks.floor
    }

    pub fn lock_stats(&self) -> LockStats {
        self.locks.stats()
    }

    pub fn fence_stats(&self) -> FenceStats {
        self.fences.stats()
    }

    /// Zeroes the event counts (not the gauges): after a replay, so INFO counts this run.
    pub fn reset_stats(&mut self) {
        let c = &mut self.locks.counters;
        *c = crate::table::LockCounters {
            locks_held: c.locks_held,
            waiters: c.waiters,
            ..Default::default()
        };
        self.fences.reset_stats();
    }

    /// An order-independent digest of the replicated state: equal on every machine that
    /// applied the same log (or a snapshot of it and the rest), whatever its history.
    pub fn digest(&self) -> u64 {
        self.locks
            .digest()
            .wrapping_mul(31)
            .wrapping_add(self.fences.digest())
            .wrapping_mul(31)
            .wrapping_add(self.position)
    }

    // ------------------------------------------------------------------------- timers

    /// The earliest lease deadline in the index (it may be stale).
    pub fn next_deadline(&self) -> Option<Millis> {
        self.locks.next_deadline()
    }

    /// Whether an apply since the last call scheduled a deadline earlier than all others (the
    /// expiry task must wake). Clears the flag.
    pub fn take_deadline_moved_earlier(&mut self) -> bool {
        self.locks.take_deadline_moved_earlier()
    }

    /// The holdings whose leases are due at `now` (at most `limit`), for the expiry task to
    /// propose as one [`Op::Expire`]. Changes only the deadline index, not the state.
    pub fn due_leases(&mut self, now: Millis, limit: usize) -> Vec<HoldingRef> {
        self.locks.due_leases(now, limit)
    }

    /// Hands back holdings from [`StateMachine::due_leases`] whose `Op::Expire` did not apply,
    /// so they are found due again. Changes only the deadline index.
    pub fn reschedule_leases(&mut self, leases: &[HoldingRef]) {
        self.locks.reschedule(leases)
    }

    /// Items in the deadline index, stale ones included.
    pub fn scheduled_deadlines(&self) -> usize {
        self.locks.scheduled_deadlines()
    }

    /// Idle names to forget (at most `limit`) once more than `max_idle` are kept, least recently
    /// used first; propose them as [`Op::Forget`]. Changes only recency marks, not the state.
    pub fn idle_candidates(&mut self, max_idle: usize, limit: usize) -> Vec<Bytes> {
        self.locks.idle_candidates(max_idle, limit)
    }

    /// Whether a re-arm has anything to do (a start proposes one only then).
    pub fn has_holdings_or_waiters(&self) -> bool {
        let stats = self.locks.stats();
        stats.locks_held > 0 || stats.waiters > 0
    }

    /// Whether a start has session holdings of an earlier run to end ([`Op::EndAllSessions`]).
    pub fn has_session_holdings(&self) -> bool {
        self.locks.has_session_holdings()
    }

    // ------------------------------------------------------------------------- snapshots

    /// The state now, detached: costs a copy of the stripe pointers, so it can be taken under
    /// the machine's lock and written out while apply goes on.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            position: self.position,
            at: self.at,
            locks: self.locks.cut(),
            fences: self.fences.cut(),
        }
    }

    /// Starts restoring a snapshot taken at `position` and `at` into an empty machine.
    pub fn restore_begin(&mut self, position: u64, at: Millis) {
        self.position = position;
        self.at = at;
        self.locks.begin_load();
        self.fences.begin_load();
    }

    pub fn restore(&mut self, item: &SnapshotItem<'_>) {
        match item {
            SnapshotItem::Fence { key, token, value } => self.fences.restore(key, *token, value),
            other => self.locks.restore(other),
        }
    }

    /// Replays one record of a first-format file. That format kept no deadlines: its holdings
    /// come back with a deadline at the end of time, and the start that loads such a file
    /// re-arms every lease ([`Op::Rearm`]) before serving.
    pub fn restore_v1(&mut self, change: &V1Change) {
        match change {
            V1Change::Grant {
                name,
                token,
                first_token,
                holds,
                owner,
                lease_ms,
            } => self.locks.restore(&SnapshotItem::Holding {
                name,
                first_token: *first_token,
                token: *token,
                holds: *holds,
                owner: owner.as_deref(),
                lease_ms: *lease_ms,
                deadline: Millis(u64::MAX),
                grants: Vec::new(),
                conditions: Conditions::default(),
            }),
            V1Change::Renew { name, lease_ms } => self
                .locks
                .restore_v1_holding(name, V1HoldingChange::Lease(*lease_ms)),
            V1Change::Release { name, holds_left } => self
                .locks
                .restore_v1_holding(name, V1HoldingChange::HoldsLeft(*holds_left)),
            V1Change::Expire { name } | V1Change::ForceRelease { name } => {
                self.locks.restore_v1_holding(name, V1HoldingChange::Remove)
            }
            V1Change::Advance { name, token } => self.locks.restore(&SnapshotItem::Counter {
                name,
                token: *token,
            }),
            V1Change::FenceSet { key, token, value } => self.fences.restore(key, *token, value),
            V1Change::Floor { token } => self.locks.restore(&SnapshotItem::Floor { token: *token }),
        }
    }

    /// Ends a restore: rebuilds the deadline index from the holdings.
    pub fn restore_end(&mut self) {
        self.locks.end_load();
        self.fences.end_load();
        self.locks.rebuild_deadlines();
    }
}

/// A plain acquire result's token, for tests and callers that only want it.
impl AcquireResult {
    pub fn token(self) -> Option<u64> {
        match self {
            AcquireResult::Granted(token) => Some(token),
            _ => None,
        }
    }
}
