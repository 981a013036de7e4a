//! The lock table: per-name token counters, the current holding with its lease, and the FIFO
//! queue of waiters.
//!
//! The rules live in `entry` (one name, under its dashmap guard); `expiry` keeps the lease
//! deadline heap; this module finds entries, runs an operation under the entry's guard,
//! schedules the deadline it leaves behind and wakes the expiry task when needed.

mod entry;
mod expiry;
mod name;
mod stats;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use dashmap::DashMap;
use dashmap::mapref::one::RefMut;
use tokio::sync::oneshot;

use crate::{Change, Journal, LockError, MAX_TOKEN, Millis};
use entry::{Ctx, LockEntry};
use expiry::Deadlines;
use name::Name;
use stats::Counters;

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
    Queued {
        ticket: WaitTicket,
        grant: oneshot::Receiver<u64>,
    },
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

/// All locks. Every method takes the current time from the caller and hands each state change
/// to the journal while the changed name is still locked.
///
/// A name's entry is never forgotten once created (its counter must never go back); an idle
/// name costs its key, a counter and a null pointer.
#[derive(Default)]
pub struct LockTable {
    /// Keyed by [`Name`] rather than `Bytes`: short names need no allocation of their own, and
    /// no shared-buffer header appears once a record clones the name (idle names are most of
    /// the table).
    entries: DashMap<Name, LockEntry, foldhash::fast::RandomState>,
    deadlines: Deadlines,
    counters: Counters,
    /// Every name's counter is at least this (see [`Change::Floor`]).
    floor: AtomicU64,
    next_ticket: AtomicU64,
}

impl LockTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Called with the new earliest lease deadline whenever a grant or renewal schedules a
    /// deadline earlier than every one already scheduled, so the server's expiry task can wake.
    /// The hook is called while no lock of the table is held; it must be cheap (e.g.
    /// `Notify::notify_one`).
    pub fn set_deadline_hook(&self, hook: Box<dyn Fn(Millis) + Send + Sync>) {
        self.deadlines.set_hook(Arc::from(hook));
    }

    fn floor(&self) -> u64 {
        self.floor.load(Relaxed)
    }

    /// The global floor: every name's counter is at least this (raised when idle names are
    /// forgotten, and by [`Self::bump_all`]).
    pub fn token_floor(&self) -> u64 {
        self.floor()
    }

    /// Runs `op` on a locked entry, then schedules the deadline it leaves, shrinks the entry if
    /// idle, unlocks it and only then wakes the expiry task.
    fn run<R>(
        &self,
        mut guard: RefMut<'_, Name, LockEntry>,
        now: Millis,
        journal: &dyn Journal,
        op: impl FnOnce(&mut LockEntry, &Ctx<'_>) -> R,
    ) -> R {
        let name = Bytes::copy_from_slice(guard.key().as_bytes());
        guard.touch();
        let ctx = Ctx {
            name: &name,
            now,
            journal,
            counters: &self.counters,
            floor: self.floor(),
        };
        let result = op(guard.value_mut(), &ctx);
        let wake = self.settle(guard.value_mut(), &name);
        drop(guard);
        if let Some(at) = wake {
            self.deadlines.notify(at);
        }
        result
    }

    /// Pushes the entry's deadline if the heap does not cover it yet, and shrinks it if idle.
    /// Returns the deadline if it is the new earliest one. Called under the entry guard.
    fn settle(&self, entry: &mut LockEntry, name: &Bytes) -> Option<Millis> {
        let push = entry.take_schedule();
        entry.tidy();
        push.filter(|&at| self.deadlines.push(at, name.clone()))
    }

    /// FLOCK.ACQUIRE. A lease that ran out is expired first (and the lock handed over, as the
    /// expiry task would have). Then: a free lock with nobody queued is granted; a holder's own
    /// OWNER gets a reentrant grant (never queued); otherwise `Busy`, or `Queued` if
    /// `req.wait`. Each grant issues the name's counter + 1.
    ///
    /// A name whose counter has reached [`MAX_TOKEN`] can never be granted again (a token may
    /// not exceed it or repeat): such an acquire is `Busy` (or queues and waits out its
    /// deadline). So is a reentrant acquire that would push the hold count past `u32::MAX`.
    pub fn acquire(
        &self,
        req: AcquireRequest,
        now: Millis,
        journal: &dyn Journal,
    ) -> AcquireOutcome {
        let floor = self.floor();
        // One lookup: a short name's key is built without an allocation.
        let guard = self
            .entries
            .entry(Name::from(&req.name[..]))
            .or_insert_with(|| LockEntry::new(floor));
        self.run(guard, now, journal, |entry, ctx| {
            entry.acquire(req, ctx, &self.next_ticket)
        })
    }

    /// Removes a queued waiter (its wait timed out or its connection closed).
    ///
    /// - [`CancelOutcome::Removed`]: the waiter is not queued any more and holds nothing: it
    ///   will never be granted. Reply null (or nothing, if the connection is gone). This is also
    ///   the answer for an unknown name or ticket, and for a waiter that was granted the lock
    ///   but whose holding has already ended (expired, force-released).
    /// - [`CancelOutcome::AlreadyGranted`]`(token)`: the lock was handed to this waiter before
    ///   the cancel (a race the caller cannot avoid) and that holding is still current. A
    ///   caller whose client is still there replies the token as if the grant had won; a
    ///   caller whose connection is gone must `release(name, token, ..)` so that a closed
    ///   connection never keeps a lock. Each ticket reports `AlreadyGranted` at most once.
    ///
    /// Decided entirely under the entry's lock, so there is no window in which the answer could
    /// be wrong; the caller does not need to look at its receiver at all.
    pub fn cancel_wait(&self, name: &[u8], ticket: WaitTicket) -> CancelOutcome {
        let Some(mut guard) = self.entries.get_mut(name) else {
            return CancelOutcome::Removed;
        };
        let outcome = guard.cancel(ticket, &self.counters);
        guard.tidy();
        outcome
    }

    /// Resets the lease of the holding `token` belongs to. Lazily expires a lease that ran out.
    pub fn renew(
        &self,
        name: &[u8],
        token: u64,
        lease_ms: u64,
        now: Millis,
        journal: &dyn Journal,
    ) -> Result<(), LockError> {
        let Some(guard) = self.entries.get_mut(name) else {
            self.counters.notowner_rejections.fetch_add(1, Relaxed);
            return Err(LockError::NotOwner {
                name: Bytes::copy_from_slice(name),
                token,
            });
        };
        self.run(guard, now, journal, |entry, ctx| {
            entry.renew(token, lease_ms, ctx)
        })
    }

    /// Ok(true) when the lock is free now, Ok(false) when a reentrant holding remains.
    pub fn release(
        &self,
        name: &[u8],
        token: u64,
        now: Millis,
        journal: &dyn Journal,
    ) -> Result<bool, LockError> {
        let Some(guard) = self.entries.get_mut(name) else {
            self.counters.notowner_rejections.fetch_add(1, Relaxed);
            return Err(LockError::NotOwner {
                name: Bytes::copy_from_slice(name),
                token,
            });
        };
        self.run(guard, now, journal, |entry, ctx| entry.release(token, ctx))
    }

    /// A read: never journals or changes anything. A lease past its deadline is reported free
    /// even if the expiry task has not processed it yet.
    pub fn status(&self, name: &[u8], now: Millis) -> LockStatus {
        match self.entries.get(name) {
            Some(entry) => entry.status(now, self.floor()),
            None => LockStatus {
                locked: false,
                token: None,
                owner: None,
                ttl_ms: -2,
                holds: 0,
                waiters: 0,
                last_token: self.floor(),
            },
        }
    }

    /// The name's counter: the highest token issued or advanced to, 0 if none.
    pub fn last_token(&self, name: &[u8]) -> u64 {
        let floor = self.floor();
        self.entries
            .get(name)
            .map_or(floor, |entry| entry.counter(floor))
    }

    /// Milliseconds left on the lease, -2 when not held (like PTTL). A read, as [`Self::status`].
    pub fn ttl(&self, name: &[u8], now: Millis) -> i64 {
        self.entries.get(name).map_or(-2, |entry| entry.ttl(now))
    }

    /// Removes the holding, whatever its hold count, and hands the lock to the next waiter. A
    /// lease that had already run out is expired first (and so handed over), as if the expiry
    /// task had been on time.
    pub fn force_release(&self, name: &[u8], now: Millis, journal: &dyn Journal) -> bool {
        let Some(guard) = self.entries.get_mut(name) else {
            return false;
        };
        self.run(guard, now, journal, |entry, ctx| entry.force_release(ctx))
    }

    /// Raises the counter to at least `token` (capped at [`MAX_TOKEN`]); never lowers it.
    /// Returns the counter. Journals only if something changed.
    pub fn advance(&self, name: &[u8], token: u64, journal: &dyn Journal) -> u64 {
        let floor = self.floor();
        let guard = match self.entries.get_mut(name) {
            Some(guard) => guard,
            // Creating an entry only to change nothing would waste memory.
            None if token.min(MAX_TOKEN) <= floor => return floor,
            None => self
                .entries
                .entry(Name::from(name))
                .or_insert_with(|| LockEntry::new(floor)),
        };
        // No lease is touched, so the time is irrelevant.
        self.run(guard, Millis::default(), journal, |entry, ctx| {
            entry.advance(token, ctx)
        })
    }

    /// The earliest scheduled deadline. It may be stale (the lease was renewed or released);
    /// [`Self::expire_due`] at that time is then a cheap no-op that schedules the real one.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.deadlines.next()
    }

    /// Expires every lease due at `now` and hands each lock to its first live waiter. Returns
    /// how many leases expired.
    pub fn expire_due(&self, now: Millis, journal: &dyn Journal) -> usize {
        let mut expired = 0;
        // The heap lock is let go of before the entry is locked: pushes take them the other way.
        while let Some((at, name)) = self.deadlines.pop_due(now) {
            let Some(guard) = self.entries.get_mut(&name[..]) else {
                continue;
            };
            let done = self.run(guard, now, journal, |entry, ctx| {
                entry.heap_popped(at);
                entry.expire_if_due(ctx)
            });
            expired += usize::from(done);
        }
        expired
    }

    /// Replays one record into a table being rebuilt (before [`Self::rearm_after_replay`]):
    /// records are absolute, so replaying one a snapshot already reflects converges. Replayed
    /// holdings have no deadline until re-armed; queued waiters are not touched.
    pub fn apply_change(&self, change: &Change) {
        if let Change::Floor { token } = change {
            self.floor.fetch_max(*token, Relaxed);
            return;
        }
        if let Change::FenceSet { .. } = change {
            return;
        }
        let Some(name) = change.key() else { return };
        let floor = self.floor();
        let mut guard = self
            .entries
            .entry(Name::from(&name[..]))
            .or_insert_with(|| LockEntry::new(floor));
        guard.apply(change, &self.counters);
        guard.tidy();
    }

    /// After replay: every holding gets its latest lease length counted from `now` (a restart
    /// never shortens a lease) and is scheduled.
    pub fn rearm_after_replay(&self, now: Millis) {
        let mut earliest: Option<Millis> = None;
        for mut guard in self.entries.iter_mut() {
            let (name, entry) = guard.pair_mut();
            entry.rearm(now);
            let name = Bytes::copy_from_slice(name.as_bytes());
            if let Some(at) = self.settle(entry, &name) {
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
        }
        if let Some(at) = earliest {
            self.deadlines.notify(at);
        }
    }

    /// Emits records that rebuild every name: a `Floor` first if one is set, then per name a
    /// `Grant` for a holding and an `Advance` for a counter beyond what those imply. Each
    /// entry is read under its lock; `emit` must not call back into the table.
    pub fn snapshot(&self, emit: &mut dyn FnMut(Change)) {
        let floor = self.floor();
        if floor > 0 {
            emit(Change::Floor { token: floor });
        }
        for guard in self.entries.iter() {
            guard
                .value()
                .snapshot(&Bytes::copy_from_slice(guard.key().as_bytes()), floor, emit);
        }
    }

    /// `grants` counts acquires answered with a token and waiters handed the lock;
    /// `tokens_issued` also counts tokens of grants undone because the waiter vanished in the
    /// same instant. `releases` counts every successful FLOCK.RELEASE (partial or to zero) and
    /// such undone grants. `waiters` counts queued waiters, including ones whose connection
    /// closed but which were not cancelled yet.
    pub fn stats(&self) -> LockStats {
        let c = &self.counters;
        LockStats {
            names: self.entries.len() as u64,
            locks_held: c.locks_held.load(Relaxed),
            waiters: c.waiters.load(Relaxed),
            tokens_issued: c.tokens_issued.load(Relaxed),
            grants: c.grants.load(Relaxed),
            releases: c.releases.load(Relaxed),
            expirations: c.expirations.load(Relaxed),
            force_releases: c.force_releases.load(Relaxed),
            notowner_rejections: c.notowner_rejections.load(Relaxed),
        }
    }

    /// Forgets least-recently-used idle names (free, nobody waiting) once more than `max_idle`
    /// are kept, down to 15/16 of `max_idle` so passes are not back to back. Recency is the
    /// CLOCK approximation of LRU: every operation marks its entry, a pass spares (and unmarks)
    /// marked entries and forgets unmarked ones, so a name used since the last pass survives.
    /// Before a name is forgotten the global floor is raised to at least its counter (journaled
    /// as [`Change::Floor`] while its shard is locked, so the record precedes any record of the
    /// name coming back): a forgotten name's next token is still higher than any it had.
    /// Returns how many names were forgotten. O(names) when it runs; meant for a background
    /// task, about once a second. `max_idle == 0` means no bound.
    pub fn reclaim_idle(&self, max_idle: usize, journal: &dyn Journal) -> usize {
        let held = self.counters.locks_held.load(Relaxed) as usize;
        let idle_estimate = self.entries.len().saturating_sub(held);
        if max_idle == 0 || idle_estimate <= max_idle {
            return 0;
        }
        let target = idle_estimate - (max_idle - max_idle / 16);
        let mut forgotten = 0;
        // The first pass may only unmark; the second then finds unmarked names.
        for _pass in 0..2 {
            self.entries.retain(|_, entry| {
                if forgotten >= target || entry.active.is_some() || entry.take_recently_used() {
                    return true;
                }
                let counter = entry.last_token;
                if self.floor.fetch_max(counter, Relaxed) < counter {
                    journal.append(Change::Floor { token: counter });
                }
                forgotten += 1;
                false
            });
            if forgotten >= target {
                break;
            }
        }
        forgotten
    }

    /// Raises every counter, and the floor, by `by` (saturating at [`MAX_TOKEN`]): after
    /// restoring an old AOF, every future token then exceeds those issued since the backup, as
    /// long as no name was granted more than `by` times since. Journals an `Advance` per name
    /// and the new `Floor`. Returns how many names were bumped.
    pub fn bump_all(&self, by: u64, journal: &dyn Journal) -> usize {
        let floor = self.floor();
        let new_floor = floor.saturating_add(by).min(MAX_TOKEN);
        if self.floor.fetch_max(new_floor, Relaxed) < new_floor {
            journal.append(Change::Floor { token: new_floor });
        }
        let mut bumped = 0;
        for mut guard in self.entries.iter_mut() {
            let (name, entry) = guard.pair_mut();
            let token = entry.counter(floor).saturating_add(by).min(MAX_TOKEN);
            if token > entry.last_token.max(new_floor) {
                entry.last_token = token;
                journal.append(Change::Advance {
                    name: Bytes::copy_from_slice(name.as_bytes()),
                    token,
                });
            }
            bumped += 1;
        }
        bumped
    }

    /// Which of `lanes` replay lanes the records of `name` belong to: lanes follow the table's
    /// shards, so replay threads applying different lanes never contend for a shard lock, and
    /// each name's records stay in order within its lane.
    pub fn replay_lane(&self, name: &[u8], lanes: usize) -> usize {
        self.entries.determine_map(name) % lanes.max(1)
    }

    /// How many names the table knows (idle ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Items in the deadline heap, stale ones included (for tests and INFO).
    pub fn scheduled_deadlines(&self) -> usize {
        self.deadlines.len()
    }
}
