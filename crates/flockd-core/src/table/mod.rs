//! The lock table: per-name token counters, the holdings with their leases, the FIFO queue of
//! waiters, lock-delays, and the index of deadlines the server's expiry task reads.
//!
//! The rules live in `entry` (one name); this module finds entries, runs an op on one, keeps
//! the deadline index and the counters for INFO. Every method that changes state is called by
//! [`crate::StateMachine::apply`] (or by restore), in log order.

mod deadlines;
mod lock_state;
mod multi;
mod scan;
#[cfg(test)]
mod tests;

use bytes::Bytes;

use crate::conditions::{Conditions, Mode};
use crate::item::SnapshotItem;
use crate::stripes::Stripes;
use crate::{Event, HoldingRef, MAX_TOKEN, Millis, WaitId};
use deadlines::Deadlines;
use lock_state::{Holding, LockCtx, LockState, Waiter};
pub(crate) use multi::AcquireAll;
use multi::MultiWaiters;
pub use scan::ScanFilter;
use scan::entry_or_new;

/// What an acquire asks for (see [`crate::Op::Acquire`]).
pub(crate) struct Acquire<'a> {
    /// The wait's id, should it queue.
    pub wait_id: WaitId,
    pub owner: &'a Option<Bytes>,
    pub lease_ms: u64,
    pub wait: crate::Wait,
    pub conditions: Conditions,
}

/// Everything FLOCK.STATUS reports. The first fields describe the most recently granted live
/// holding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockStatus {
    pub locked: bool,
    /// Latest token of that holding.
    pub token: Option<u64>,
    pub owner: Option<Bytes>,
    /// Milliseconds left on the lease, -2 when free.
    pub ttl_ms: i64,
    pub holds: u32,
    pub waiters: usize,
    /// The name's counter: the highest token issued or advanced to (0 if none).
    pub last_token: u64,
    /// Live holdings.
    pub holdings: usize,
    /// How many holdings the lock admits now: 1 when held exclusively, the smallest n among
    /// `LIMIT n` holdings, -1 when only shared holdings, 0 when free.
    pub limit: i64,
    /// Milliseconds of lock-delay left.
    pub delay_ms: u64,
}

/// One live holding, as FLOCK.HOLDERS reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderStatus {
    pub token: u64,
    pub owner: Option<Bytes>,
    pub ttl_ms: i64,
    pub holds: u32,
    pub mode: Mode,
    pub session: bool,
}

/// Counts for INFO's `locks` section.
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
    /// Leases renewed (FLOCK.RENEW that succeeded).
    pub renewals: u64,
    /// Acquires answered at once with nil because the lock was held (not waits that timed out).
    pub busy: u64,
}

/// Two gauges (kept exact by every change) and event counts since the start or the last reset.
/// Not part of the replicated state: a replica that replayed more history counts more.
/// Several groups' tables counted as one (a multi-group cluster node's INFO and metrics).
impl std::ops::AddAssign<&LockStats> for LockStats {
    fn add_assign(&mut self, other: &LockStats) {
        self.names += other.names;
        self.locks_held += other.locks_held;
        self.waiters += other.waiters;
        self.tokens_issued += other.tokens_issued;
        self.grants += other.grants;
        self.releases += other.releases;
        self.expirations += other.expirations;
        self.force_releases += other.force_releases;
        self.notowner_rejections += other.notowner_rejections;
        self.renewals += other.renewals;
        self.busy += other.busy;
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct LockCounters {
    pub locks_held: u64,
    pub waiters: u64,
    pub tokens_issued: u64,
    pub grants: u64,
    pub releases: u64,
    pub expirations: u64,
    pub force_releases: u64,
    pub notowner_rejections: u64,
    pub renewals: u64,
    pub busy: u64,
}

#[derive(Default)]
pub(crate) struct LockTable {
    /// Keyed by name; copy-on-write stripes so a snapshot costs a copy of 256 pointers.
    entries: Stripes<LockState>,
    /// Lease deadlines: (deadline, name, the holding's first token). Items may be stale
    /// (renewed, released, another holding since); whoever pops one checks the entry. Derived
    /// from the entries, so not part of any snapshot.
    deadlines: Deadlines,
    /// FLOCK.ACQUIREALL waiters (state, in snapshots).
    multi: MultiWaiters,
    /// Set when a push made the earliest deadline earlier: the expiry task must wake.
    deadline_moved_earlier: bool,
    pub counters: LockCounters,
    /// Every name's counter is at least this (raised when idle names are forgotten).
    pub floor: u64,
}

impl LockTable {
    /// Runs `op` on the entry of `name` (created if `create`), then schedules the deadline it
    /// leaves and shrinks the entry if idle. `None` if there is no entry and `create` is false.
    fn with_entry<R>(
        &mut self,
        name: &Bytes,
        at: Millis,
        create: bool,
        events: &mut Vec<Event>,
        op: impl FnOnce(&mut LockState, &mut LockCtx<'_>) -> R,
    ) -> Option<R> {
        let floor = self.floor;
        let entry = if create {
            entry_or_new(&mut self.entries, name, floor)
        } else {
            self.entries.get_mut(name)?
        };
        entry.touch();
        let was_idle = entry.is_idle();
        let mut ctx = LockCtx {
            name,
            at,
            floor,
            counters: &mut self.counters,
            events,
        };
        let result = op(entry, &mut ctx);
        let push = entry.take_schedule();
        entry.tidy(at);
        let freed = !was_idle && entry.is_idle();
        if let Some((deadline, first_token)) = push {
            self.push_deadline(deadline, name.clone(), first_token);
        }
        if freed && self.multi.watches(name) {
            self.multi.freed.push(name.clone());
        }
        Some(result)
    }

    fn push_deadline(&mut self, at: Millis, name: Bytes, first_token: u64) {
        let earliest = self.deadlines.earliest().is_none_or(|first| at < first);
        self.deadline_moved_earlier |= earliest;
        self.deadlines.push(at, name, first_token);
    }

    pub fn acquire(
        &mut self,
        name: &Bytes,
        request: Acquire<'_>,
        at: Millis,
        events: &mut Vec<Event>,
    ) -> crate::AcquireResult {
        self.with_entry(name, at, true, events, |entry, ctx| {
            entry.acquire(request, ctx)
        })
        .expect("created")
    }

    fn not_owner(&mut self, name: &Bytes, token: u64) -> crate::LockError {
        self.counters.notowner_rejections += 1;
        crate::LockError::NotOwner {
            name: name.clone(),
            token,
        }
    }

    pub fn renew(
        &mut self,
        name: &Bytes,
        token: u64,
        lease_ms: u64,
        at: Millis,
        events: &mut Vec<Event>,
    ) -> Result<(), crate::LockError> {
        self.with_entry(name, at, false, events, |entry, ctx| {
            entry.renew(token, lease_ms, ctx)
        })
        .unwrap_or_else(|| Err(self.not_owner(name, token)))
    }

    pub fn release(
        &mut self,
        name: &Bytes,
        token: u64,
        at: Millis,
        events: &mut Vec<Event>,
    ) -> Result<bool, crate::LockError> {
        self.with_entry(name, at, false, events, |entry, ctx| {
            entry.release(token, ctx)
        })
        .unwrap_or_else(|| Err(self.not_owner(name, token)))
    }

    pub fn force_release(&mut self, name: &Bytes, at: Millis, events: &mut Vec<Event>) -> usize {
        self.with_entry(name, at, false, events, |entry, ctx| {
            entry.force_release(ctx)
        })
        .unwrap_or(0)
    }

    /// Ends the holdings of connection `session` on `names` (see [`crate::Op::EndSession`]).
    pub fn end_session(
        &mut self,
        session: u64,
        names: &[Bytes],
        at: Millis,
        events: &mut Vec<Event>,
    ) -> usize {
        let mut ended = 0;
        for name in names {
            ended += self
                .with_entry(name, at, false, events, |entry, ctx| {
                    entry.end_sessions(Some(session), ctx)
                })
                .unwrap_or(0);
        }
        ended
    }

    /// Ends every session holding, in name order (see [`crate::Op::EndAllSessions`]).
    pub fn end_all_sessions(&mut self, at: Millis, events: &mut Vec<Event>) -> usize {
        let mut names: Vec<Bytes> = self
            .entries
            .iter()
            .filter(|(_, e)| e.holdings().iter().any(|h| h.conditions.session.is_some()))
            .map(|(name, _)| Bytes::copy_from_slice(name.as_bytes()))
            .collect();
        names.sort_unstable();
        let mut ended = 0;
        for name in names {
            ended += self
                .with_entry(&name, at, false, events, |entry, ctx| {
                    entry.end_sessions(None, ctx)
                })
                .unwrap_or(0);
        }
        ended
    }

    /// Whether any holding is bound to a connection (a start then proposes ending them).
    pub fn has_session_holdings(&self) -> bool {
        self.entries
            .iter()
            .any(|(_, e)| e.holdings().iter().any(|h| h.conditions.session.is_some()))
    }

    pub fn cancel_wait(
        &mut self,
        name: &Bytes,
        wait: WaitId,
        release_if_granted: bool,
        at: Millis,
        events: &mut Vec<Event>,
    ) -> crate::CancelResult {
        self.with_entry(name, at, false, events, |entry, ctx| {
            entry.cancel_wait(wait, release_if_granted, ctx)
        })
        .unwrap_or(crate::CancelResult::Removed)
    }

    /// Raises the counter to at least `token` (capped at [`MAX_TOKEN`]); never lowers it.
    /// Returns the counter.
    pub fn advance(&mut self, name: &Bytes, token: u64, events: &mut Vec<Event>) -> u64 {
        let floor = self.floor;
        // Creating an entry only to change nothing would waste memory.
        let create = token.min(MAX_TOKEN) > floor;
        self.with_entry(name, Millis::default(), create, events, |entry, _| {
            entry.advance(token, floor)
        })
        .unwrap_or(floor)
    }

    pub fn expire(&mut self, lease: &HoldingRef, at: Millis, events: &mut Vec<Event>) -> bool {
        self.with_entry(&lease.name, at, false, events, |entry, ctx| {
            entry.expire_holding(lease.first_token, ctx)
        })
        .unwrap_or(false)
    }

    /// See [`crate::Op::Rearm`].
    pub fn rearm(&mut self, extra_ms: u64, at: Millis, events: &mut Vec<Event>) -> (usize, usize) {
        let mut names: Vec<Bytes> = self
            .entries
            .iter()
            .filter(|(_, e)| !e.is_idle())
            .map(|(name, _)| Bytes::copy_from_slice(name.as_bytes()))
            .collect();
        // In name order, not the table's: the events must come out the same on every machine.
        names.sort_unstable();
        let (mut holdings, mut waiters) = (0, self.drop_multi_waiters(events));
        for name in names {
            if let Some((h, w)) = self.with_entry(&name, at, false, events, |entry, ctx| {
                // A re-arm sets every deadline later, so the index item of the old deadline is
                // stale: let the new one be pushed.
                entry.set_scheduled(0);
                entry.rearm(extra_ms, ctx)
            }) {
                holdings += h;
                waiters += w;
            }
        }
        (holdings, waiters)
    }

    /// See [`crate::Op::DropWaits`]. In name order, as a re-arm: the events come out the same
    /// on every machine.
    pub fn drop_waits(&mut self, node: u64, at: Millis, events: &mut Vec<Event>) -> usize {
        if self.counters.waiters == 0 || node == 0 {
            return 0;
        }
        let mut names: Vec<Bytes> = self
            .entries
            .iter()
            .filter(|(_, e)| e.waiter_count() > 0)
            .map(|(name, _)| Bytes::copy_from_slice(name.as_bytes()))
            .collect();
        names.sort_unstable();
        names
            .iter()
            .filter_map(|name| {
                self.with_entry(name, at, false, events, |entry, ctx| {
                    entry.drop_waits_of(node, ctx)
                })
            })
            .sum()
    }

    /// See [`crate::Op::Forget`].
    pub fn forget(&mut self, names: &[Bytes]) -> usize {
        let mut forgotten = 0;
        let floor = self.floor;
        for name in names {
            // A name whose counter reached the cap is kept: raising the floor to the cap would
            // make every name ungrantable.
            let forgettable = self
                .entries
                .get(name)
                .is_some_and(|e| e.is_idle() && e.last_token < MAX_TOKEN);
            if forgettable && let Some(entry) = self.entries.remove(name) {
                // An entry at or below the floor the op started with is the same as none (a
                // snapshot leaves it out): it is removed, but not counted, so every machine
                // counts alike.
                if entry.last_token > floor {
                    forgotten += 1;
                }
                self.floor = self.floor.max(entry.last_token);
            }
        }
        forgotten
    }

    /// See [`crate::Op::BumpAll`].
    pub fn bump_all(&mut self, by: u64) -> usize {
        let floor = self.floor;
        let new_floor = floor.saturating_add(by).min(MAX_TOKEN);
        let mut bumped = 0;
        for (_, entry) in self.entries.iter_mut() {
            // Entries a snapshot leaves out (idle, at or below the floor) are not counted.
            if !entry.is_idle() || entry.last_token > floor {
                bumped += 1;
            }
            let token = entry.counter(floor).saturating_add(by).min(MAX_TOKEN);
            entry.last_token = entry.last_token.max(token);
        }
        self.floor = new_floor;
        bumped
    }

    // ------------------------------------------------------------------------- reads

    /// A lease past its deadline is reported free although its expiry has not been applied.
    pub fn status(&self, name: &[u8], now: Millis) -> LockStatus {
        let Some(entry) = self.entries.get(name) else {
            return LockStatus {
                locked: false,
                token: None,
                owner: None,
                ttl_ms: -2,
                holds: 0,
                waiters: 0,
                last_token: self.floor,
                holdings: 0,
                limit: 0,
                delay_ms: 0,
            };
        };
        let holding = entry.latest_live(now);
        let mut holdings = 0;
        let mut admits = None::<u32>;
        for h in entry.live_holdings(now) {
            holdings += 1;
            let limit = h.conditions.mode.admits();
            admits = Some(admits.map_or(limit, |a| a.min(limit)));
        }
        LockStatus {
            locked: holding.is_some(),
            token: holding.map(|h| h.token),
            owner: holding.and_then(|h| h.owner.clone()),
            ttl_ms: holding.map_or(-2, |h| ttl_of(h, now)),
            holds: holding.map_or(0, |h| h.holds),
            waiters: entry.live_waiter_count(now),
            last_token: entry.counter(self.floor),
            holdings,
            limit: match admits {
                None => 0,
                Some(u32::MAX) => -1,
                Some(n) => i64::from(n),
            },
            delay_ms: entry.delay_left(now),
        }
    }

    /// The live holdings of `name` at `now`, in grant order.
    pub fn holders(&self, name: &[u8], now: Millis) -> Vec<HolderStatus> {
        let Some(entry) = self.entries.get(name) else {
            return Vec::new();
        };
        entry
            .live_holdings(now)
            .map(|h| HolderStatus {
                token: h.token,
                owner: h.owner.clone(),
                ttl_ms: ttl_of(h, now),
                holds: h.holds,
                mode: h.conditions.mode,
                session: h.conditions.session.is_some(),
            })
            .collect()
    }

    /// Whether `token` belongs to a holding of `name` live at `now`.
    pub fn is_held_by(&self, name: &[u8], token: u64, now: Millis) -> bool {
        self.entries
            .get(name)
            .is_some_and(|e| e.is_held_by(token, now))
    }

    pub fn last_token(&self, name: &[u8]) -> u64 {
        self.entries
            .get(name)
            .map_or(self.floor, |e| e.counter(self.floor))
    }

    pub fn ttl(&self, name: &[u8], now: Millis) -> i64 {
        self.entries
            .get(name)
            .and_then(|e| e.latest_live(now))
            .map_or(-2, |h| ttl_of(h, now))
    }

    pub fn stats(&self) -> LockStats {
        let c = &self.counters;
        LockStats {
            names: self.entries.len() as u64,
            locks_held: c.locks_held,
            waiters: c.waiters,
            tokens_issued: c.tokens_issued,
            grants: c.grants,
            releases: c.releases,
            expirations: c.expirations,
            force_releases: c.force_releases,
            notowner_rejections: c.notowner_rejections,
            renewals: c.renewals,
            busy: c.busy,
        }
    }

    // ------------------------------------------------------------------------- deadline index

    pub fn next_deadline(&self) -> Option<Millis> {
        self.deadlines.earliest()
    }

    pub fn take_deadline_moved_earlier(&mut self) -> bool {
        std::mem::take(&mut self.deadline_moved_earlier)
    }

    /// Pops the index up to `now` and returns the holdings whose leases are due, at most
    /// `limit`. Stale items are dropped, and a holding whose deadline moved later is scheduled
    /// again. Changes only the index (bookkeeping, not state).
    ///
    /// Each due holding is handed out once: the `Op::Expire` applied for it schedules what the
    /// name holds next, and should the op never apply (a failed write) the caller hands the
    /// holdings back to [`LockTable::reschedule`]. (Scheduling every due name again a
    /// millisecond later, in case, cost a second pop and a second lookup per lease.)
    pub fn due_leases(&mut self, now: Millis, limit: usize) -> Vec<HoldingRef> {
        let mut due = Vec::new();
        // One name's due first tokens, the buffer reused from name to name.
        let mut tokens = Vec::new();
        while due.len() < limit {
            let Some((at, name, _)) = self.deadlines.pop_due(now) else {
                break;
            };
            let Some(entry) = self.entries.get_mut(&name) else {
                continue;
            };
            if entry.scheduled_at() == at.0 {
                entry.set_scheduled(0);
            }
            tokens.clear();
            entry.due_at(now, &mut tokens);
            if !tokens.is_empty() {
                if due.is_empty() {
                    // Due leases come in crowds (a burst of grants ends together): one allocation.
                    due.reserve(limit.min(4096));
                }
                // Nothing stays scheduled for the name: the expiry's apply (or a release, a
                // renewal, a grant before it) schedules what the name holds next.
                entry.set_scheduled(0);
                due.extend(tokens.iter().map(|&first_token| HoldingRef {
                    name: name.clone(),
                    first_token,
                }));
            } else if let Some((deadline, first_token)) = entry.take_schedule() {
                self.push_deadline(deadline, name, first_token);
            }
        }
        due
    }

    /// Schedules again the names of holdings [`LockTable::due_leases`] handed out whose
    /// `Op::Expire` was not applied (the log refused it, or its outcome is unknown): each is
    /// found due again at its next look. Names whose state changed meanwhile are scheduled by
    /// what they hold now.
    pub fn reschedule(&mut self, leases: &[HoldingRef]) {
        for lease in leases {
            let Some(entry) = self.entries.get_mut(&lease.name) else {
                continue;
            };
            if let Some((deadline, first_token)) = entry.take_schedule() {
                self.push_deadline(deadline, lease.name.clone(), first_token);
            }
        }
    }

    /// A restore starts: see [`Stripes::begin_load`].
    pub fn begin_load(&mut self) {
        self.entries.begin_load();
    }

    /// A restore ends: see [`Stripes::end_load`].
    pub fn end_load(&mut self) {
        self.entries.end_load();
    }

    /// Puts every holding's deadline into the index (after a restore).
    pub fn rebuild_deadlines(&mut self) {
        self.deadlines.clear();
        for (name, entry) in self.entries.iter_mut() {
            entry.set_scheduled(0);
            if let Some((deadline, first_token)) = entry.take_schedule() {
                let name = Bytes::copy_from_slice(name.as_bytes());
                self.deadlines.push(deadline, name, first_token);
            }
        }
        self.deadline_moved_earlier = true;
    }

    pub fn scheduled_deadlines(&self) -> usize {
        self.deadlines.len()
    }

    // ------------------------------------------------------------------------- idle names

    /// Chooses least-recently-used idle names to forget once more than `max_idle` are kept,
    /// down to 15/16 of `max_idle`. Recency is the CLOCK approximation of LRU: every op marks
    /// its entry; a pass spares (and unmarks) marked entries and picks unmarked ones. Only the
    /// marks change (bookkeeping): forgetting is an op, proposed with the names picked here.
    pub fn idle_candidates(&mut self, max_idle: usize, limit: usize) -> Vec<Bytes> {
        let idle_estimate = self
            .entries
            .len()
            .saturating_sub(self.counters.locks_held as usize);
        if max_idle == 0 || idle_estimate <= max_idle {
            return Vec::new();
        }
        let target = (idle_estimate - (max_idle - max_idle / 16)).min(limit);
        let mut picked = Vec::new();
        let mut chosen = std::collections::HashSet::new();
        // The first pass may only unmark; the second then finds the names it unmarked (it skips
        // those the first pass picked, which are unmarked too).
        for _pass in 0..2 {
            for (name, entry) in self.entries.iter_mut() {
                if picked.len() >= target {
                    return picked;
                }
                if !entry.is_idle() || entry.last_token >= MAX_TOKEN {
                    continue;
                }
                if entry.take_recently_used() || !chosen.insert(name.as_bytes().to_vec()) {
                    continue;
                }
                picked.push(Bytes::copy_from_slice(name.as_bytes()));
            }
        }
        picked
    }

    // ------------------------------------------------------------------------- snapshots

    /// The entries and the floor as they are now (stripe pointers copied), without the index.
    pub fn cut(&self) -> LockTable {
        LockTable {
            entries: self.entries.clone(),
            multi: self.multi.clone(),
            floor: self.floor,
            ..LockTable::default()
        }
    }

    /// Items that rebuild every name: per name a holding (with its grants), its waiters in
    /// order, and its counter when beyond what the holding or the floor implies.
    pub fn snapshot(&self, emit: &mut dyn FnMut(SnapshotItem<'_>)) {
        let floor = self.floor;
        for (name, entry) in self.entries.iter() {
            let name = name.as_bytes();
            let implied = entry
                .holdings()
                .iter()
                .map(|h| h.token)
                .fold(floor, u64::max);
            if entry.last_token > implied {
                emit(SnapshotItem::Counter {
                    name,
                    token: entry.last_token,
                });
            }
            for h in entry.holdings() {
                emit(SnapshotItem::Holding {
                    name,
                    first_token: h.first_token,
                    token: h.token,
                    holds: h.holds,
                    owner: h.owner.as_deref(),
                    lease_ms: h.lease_ms,
                    deadline: h.deadline,
                    grants: h.grants.clone(),
                    conditions: h.conditions,
                });
            }
            for w in entry.waiters() {
                emit(SnapshotItem::Waiter {
                    name,
                    wait: w.wait,
                    owner: w.owner.as_deref(),
                    lease_ms: w.lease_ms,
                    conditions: w.conditions,
                    deadline: w.deadline,
                    node: w.node,
                });
            }
            let delay_until = entry.delay_until();
            if delay_until.0 != 0 {
                emit(SnapshotItem::Delay {
                    name,
                    until: delay_until,
                });
            }
        }
        self.snapshot_multi_waiters(emit);
    }

    /// Restores one lock item of a snapshot (or of a first-format file: see `crate::v1`).
    pub fn restore(&mut self, item: &SnapshotItem<'_>) {
        let floor = self.floor;
        match item {
            SnapshotItem::Counter { name, token } => {
                let entry = entry_or_new(&mut self.entries, name, floor);
                entry.last_token = entry.last_token.max(*token);
            }
            SnapshotItem::Holding {
                name,
                first_token,
                token,
                holds,
                owner,
                lease_ms,
                deadline,
                grants,
                conditions,
            } => {
                let entry = entry_or_new(&mut self.entries, name, floor);
                let holding = Holding {
                    owner: owner.map(Bytes::copy_from_slice),
                    first_token: *first_token,
                    token: *token,
                    holds: *holds,
                    lease_ms: *lease_ms,
                    deadline: *deadline,
                    grants: grants.clone(),
                    conditions: *conditions,
                    granted_at: None,
                };
                entry.push_holding(holding, &mut self.counters);
            }
            SnapshotItem::Waiter {
                name,
                wait,
                owner,
                lease_ms,
                conditions,
                deadline,
                node,
            } => {
                let entry = entry_or_new(&mut self.entries, name, floor);
                let waiter = Waiter {
                    wait: *wait,
                    owner: owner.map(Bytes::copy_from_slice),
                    lease_ms: *lease_ms,
                    conditions: *conditions,
                    deadline: *deadline,
                    node: *node,
                };
                entry.push_waiter(waiter, &mut self.counters);
            }
            SnapshotItem::Delay { name, until } => {
                let entry = entry_or_new(&mut self.entries, name, floor);
                entry.set_delay_until(*until);
            }
            SnapshotItem::MultiWaiter {
                wait,
                names,
                owner,
                lease_ms,
                conditions,
            } => self.restore_multi_waiter(*wait, names, *owner, *lease_ms, *conditions),
            SnapshotItem::Floor { token } => self.floor = self.floor.max(*token),
            SnapshotItem::Fence { .. } => {}
        }
    }

    /// For first-format records: set a holding's holds or lease, or remove it.
    pub fn restore_v1_holding(&mut self, name: &[u8], change: V1HoldingChange) {
        let Some(entry) = self.entries.get_mut(name) else {
            return;
        };
        // The first format had one exclusive holding per name at most.
        let counters = &mut self.counters;
        let Some(active) = entry.active_if_any_mut() else {
            return;
        };
        match change {
            V1HoldingChange::Lease(lease_ms) => {
                if let Some(h) = active.holdings.first_mut() {
                    h.lease_ms = lease_ms;
                }
            }
            V1HoldingChange::HoldsLeft(0) | V1HoldingChange::Remove => {
                if !active.holdings.is_empty() {
                    active.holdings.clear();
                    counters.locks_held -= 1;
                }
            }
            V1HoldingChange::HoldsLeft(n) => {
                if let Some(h) = active.holdings.first_mut() {
                    h.holds = n;
                }
            }
        }
        entry.tidy(Millis(0));
    }

    /// An order-independent digest of the lock state (the floor, every counter above it, every
    /// holding and queue): equal on two machines that applied the same log, however their
    /// tables iterate.
    pub fn digest(&self) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let seed = foldhash::fast::FixedState::with_seed(0x6469_6765_7374);
        let mut sum = seed.hash_one(("floor", self.floor));
        for (name, entry) in self.entries.iter() {
            let counter = entry.counter(self.floor);
            if entry.is_idle() && counter <= self.floor {
                continue; // the same as no entry at all
            }
            let mut h = seed.build_hasher();
            name.as_bytes().hash(&mut h);
            counter.hash(&mut h);
            for holding in entry.holdings() {
                holding.owner.hash(&mut h);
                holding.first_token.hash(&mut h);
                holding.token.hash(&mut h);
                holding.holds.hash(&mut h);
                holding.lease_ms.hash(&mut h);
                holding.deadline.hash(&mut h);
                holding.grants.hash(&mut h);
                holding.conditions.hash(&mut h);
            }
            for w in entry.waiters() {
                w.wait.hash(&mut h);
                w.owner.hash(&mut h);
                w.lease_ms.hash(&mut h);
                w.conditions.hash(&mut h);
            }
            entry.delay_until().hash(&mut h);
            sum = sum.wrapping_add(h.finish());
        }
        for (wait, w) in &self.multi.waiting {
            sum = sum.wrapping_add(seed.hash_one((
                "multi",
                wait,
                &w.names,
                &w.owner,
                w.lease_ms,
                w.conditions,
            )));
        }
        sum
    }
}

/// What a first-format record does to an existing holding.
pub(crate) enum V1HoldingChange {
    Lease(u64),
    HoldsLeft(u32),
    Remove,
}

fn ttl_of(holding: &Holding, now: Millis) -> i64 {
    i64::try_from(now.until(holding.deadline)).unwrap_or(i64::MAX)
}
