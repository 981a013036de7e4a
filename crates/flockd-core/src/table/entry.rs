//! One lock name's state and the rules of the FLOCK.* commands applied to it.
//!
//! Everything here runs under the name's dashmap guard, so one entry's changes (and the journal
//! records they produce) are totally ordered. The table around it only finds entries, keeps the
//! deadline heap and calls the deadline hook.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::stats::Counters;
use super::{AcquireOutcome, AcquireRequest, CancelOutcome, LockStatus, WaitTicket};
use crate::{Change, Journal, LockError, MAX_TOKEN, Millis};

/// What an operation on an entry needs from the table around it.
pub(super) struct Ctx<'a> {
    pub name: &'a Bytes,
    pub now: Millis,
    pub journal: &'a dyn Journal,
    pub counters: &'a Counters,
    /// The global counter floor (see [`Change::Floor`]).
    pub floor: u64,
}

const RECENTLY_USED: u64 = 1 << 63;

/// A lock name. Idle names (free, nobody waiting) are most of the table, so all the rest hides
/// behind one optional box: an idle entry is a counter, a deadline (with a recency mark) and a
/// null pointer (24 bytes).
#[derive(Default)]
pub(super) struct LockEntry {
    /// Highest token issued or advanced to for this name (the floor aside: see [`Self::counter`]).
    pub last_token: u64,
    /// The earliest deadline (ms) the table's heap is known to hold an item of this name for, 0
    /// if none. A grant or renewal whose deadline is not earlier needs no push: when that item
    /// pops, the real deadline is pushed again. So neither renewal spam nor acquire/release
    /// churn grows the heap beyond about one item per name. Kept outside the box because the
    /// heap item outlives an idle spell.
    /// The top bit is not part of the deadline (ms on a monotonic clock never get near 2^63):
    /// it marks the entry as used since the last reclamation pass (see [`Self::touch`]).
    scheduled: u64,
    pub active: Option<Box<Active>>,
}

/// The part of an entry that exists only while the lock is held or waited for.
#[derive(Default)]
pub(super) struct Active {
    pub holding: Option<Holding>,
    pub waiters: VecDeque<Waiter>,
}

pub(super) struct Holding {
    pub owner: Option<Bytes>,
    pub first_token: u64,
    /// The latest token issued to this holding.
    pub token: u64,
    pub holds: u32,
    /// Latest lease length, from the last acquire or renew: what a restart re-arms.
    pub lease_ms: u64,
    /// `None` only for a holding rebuilt by replay, until `rearm_after_replay`.
    pub deadline: Option<Millis>,
    /// (ticket id, token) of waiters handed this holding, so that a cancel racing the grant can
    /// learn the token. Dropped with the holding: a waiter whose holding is gone holds nothing.
    pub tickets: Vec<(u64, u64)>,
}

impl Holding {
    /// Tokens `first_token..=token` all belong to this holding (reentrant grants extend it).
    fn owns(&self, token: u64) -> bool {
        self.first_token <= token && token <= self.token
    }

    fn live_at(&self, now: Millis) -> bool {
        self.deadline.is_none_or(|d| d > now)
    }
}

pub(super) struct Waiter {
    pub id: u64,
    pub owner: Option<Bytes>,
    pub lease_ms: u64,
    pub tx: oneshot::Sender<u64>,
}

impl Waiter {
    /// A waiter whose receiver is gone (connection closed, wait abandoned) must never be granted.
    fn is_live(&self) -> bool {
        !self.tx.is_closed()
    }
}

fn same_owner(a: &Option<Bytes>, b: &Option<Bytes>) -> bool {
    // Without OWNER a lock is not reentrant: `None` matches nothing, not even `None`.
    matches!((a, b), (Some(a), Some(b)) if a == b)
}

impl LockEntry {
    pub fn new(floor: u64) -> Self {
        LockEntry {
            last_token: floor,
            scheduled: 0,
            active: None,
        }
    }

    fn scheduled_at(&self) -> u64 {
        self.scheduled & !RECENTLY_USED
    }

    fn set_scheduled(&mut self, at: u64) {
        self.scheduled = (self.scheduled & RECENTLY_USED) | (at & !RECENTLY_USED);
    }

    /// Marks the entry as used since the last reclamation pass.
    pub fn touch(&mut self) {
        self.scheduled |= RECENTLY_USED;
    }

    /// Second chance: whether the entry was used since the last pass, unmarking it.
    pub fn take_recently_used(&mut self) -> bool {
        let used = self.scheduled & RECENTLY_USED != 0;
        self.scheduled &= !RECENTLY_USED;
        used
    }

    /// The name's effective counter: its own, raised to the global floor.
    pub fn counter(&self, floor: u64) -> u64 {
        self.last_token.max(floor)
    }

    /// The next token, or `None` once the counter has reached [`MAX_TOKEN`]: a token must fit a
    /// signed 64-bit integer and must never repeat, so an exhausted name can never be granted.
    fn issue(&mut self, floor: u64) -> Option<u64> {
        let current = self.counter(floor);
        if current >= MAX_TOKEN {
            return None;
        }
        self.last_token = current + 1;
        Some(current + 1)
    }

    fn active_mut(&mut self) -> &mut Active {
        self.active.get_or_insert_with(Box::default)
    }

    fn holding(&self) -> Option<&Holding> {
        self.active.as_ref().and_then(|a| a.holding.as_ref())
    }

    fn holding_mut(&mut self) -> Option<&mut Holding> {
        self.active.as_mut().and_then(|a| a.holding.as_mut())
    }

    fn set_holding(&mut self, holding: Holding, counters: &Counters) {
        if self.active_mut().holding.replace(holding).is_none() {
            counters.locks_held.fetch_add(1, Relaxed);
        }
    }

    fn take_holding(&mut self, counters: &Counters) -> Option<Holding> {
        let taken = self.active.as_mut().and_then(|a| a.holding.take());
        if taken.is_some() {
            counters.locks_held.fetch_sub(1, Relaxed);
        }
        taken
    }

    fn has_live_waiters(&self) -> bool {
        self.active
            .as_ref()
            .is_some_and(|a| a.waiters.iter().any(Waiter::is_live))
    }

    /// Expires the holding if its lease ran out at `now`, then hands the lock over. True if it
    /// expired.
    pub fn expire_if_due(&mut self, ctx: &Ctx<'_>) -> bool {
        let due = self.holding().is_some_and(|h| !h.live_at(ctx.now));
        if due {
            self.take_holding(ctx.counters);
            ctx.journal.append(Change::Expire {
                name: ctx.name.clone(),
            });
            ctx.counters.expirations.fetch_add(1, Relaxed);
            self.handover(ctx);
        }
        due
    }

    pub fn acquire(
        &mut self,
        req: AcquireRequest,
        ctx: &Ctx<'_>,
        tickets: &AtomicU64,
    ) -> AcquireOutcome {
        self.expire_if_due(ctx);
        // A free lock with queued waiters only exists when the counter ran out, but if it ever
        // does, the queue goes first.
        if self.holding().is_none() && self.active.as_ref().is_some_and(|a| !a.waiters.is_empty()) {
            self.handover(ctx);
        }

        if let Some(holding) = self.holding()
            && same_owner(&holding.owner, &req.owner)
        {
            return match self.grant_reentrant(req.lease_ms, ctx) {
                Some(token) => {
                    ctx.counters.grants.fetch_add(1, Relaxed);
                    AcquireOutcome::Granted(token)
                }
                None => AcquireOutcome::Busy,
            };
        }

        if self.holding().is_none() && !self.has_live_waiters() {
            return match self.grant_new(req.owner, req.lease_ms, ctx) {
                Some(token) => {
                    ctx.counters.grants.fetch_add(1, Relaxed);
                    AcquireOutcome::Granted(token)
                }
                None => AcquireOutcome::Busy,
            };
        }

        if !req.wait {
            return AcquireOutcome::Busy;
        }
        let id = tickets.fetch_add(1, Relaxed).wrapping_add(1);
        let (tx, rx) = oneshot::channel();
        self.active_mut().waiters.push_back(Waiter {
            id,
            owner: req.owner,
            lease_ms: req.lease_ms,
            tx,
        });
        ctx.counters.waiters.fetch_add(1, Relaxed);
        AcquireOutcome::Queued {
            ticket: WaitTicket { id },
            grant: rx,
        }
    }

    /// Starts a new holding on a free lock. `None` if the counter is exhausted.
    fn grant_new(&mut self, owner: Option<Bytes>, lease_ms: u64, ctx: &Ctx<'_>) -> Option<u64> {
        let token = self.issue(ctx.floor)?;
        ctx.counters.tokens_issued.fetch_add(1, Relaxed);
        ctx.journal.append(Change::Grant {
            name: ctx.name.clone(),
            token,
            first_token: token,
            holds: 1,
            owner: owner.clone(),
            lease_ms,
        });
        let holding = Holding {
            owner,
            first_token: token,
            token,
            holds: 1,
            lease_ms,
            deadline: Some(ctx.now.plus(lease_ms)),
            tickets: Vec::new(),
        };
        self.set_holding(holding, ctx.counters);
        Some(token)
    }

    /// Adds a hold to the current holding with a new token and a fresh lease. `None` if there is
    /// no holding, the counter is exhausted or the hold count would overflow.
    fn grant_reentrant(&mut self, lease_ms: u64, ctx: &Ctx<'_>) -> Option<u64> {
        if self.holding()?.holds == u32::MAX {
            return None;
        }
        let token = self.issue(ctx.floor)?;
        ctx.counters.tokens_issued.fetch_add(1, Relaxed);
        let holding = self.holding_mut()?;
        holding.holds += 1;
        holding.token = token;
        holding.lease_ms = lease_ms;
        holding.deadline = Some(ctx.now.plus(lease_ms));
        ctx.journal.append(Change::Grant {
            name: ctx.name.clone(),
            token,
            first_token: holding.first_token,
            holds: holding.holds,
            owner: holding.owner.clone(),
            lease_ms,
        });
        Some(token)
    }

    /// Hands a free lock to the first live waiter, then at once to every later live waiter with
    /// the same owner (reentrantly, in queue order). Waiters whose receiver is gone are dropped.
    fn handover(&mut self, ctx: &Ctx<'_>) {
        if self.holding().is_some() {
            return;
        }
        loop {
            let Some(active) = self.active.as_mut() else {
                return;
            };
            let Some(waiter) = active.waiters.pop_front() else {
                return;
            };
            ctx.counters.waiters.fetch_sub(1, Relaxed);
            if !waiter.is_live() {
                continue;
            }
            let Some(token) = self.grant_new(waiter.owner.clone(), waiter.lease_ms, ctx) else {
                // Counter exhausted: nobody can be granted; the waiters wait out their deadlines.
                self.active_mut().waiters.push_front(waiter);
                ctx.counters.waiters.fetch_add(1, Relaxed);
                return;
            };
            if waiter.tx.send(token).is_err() {
                // The receiver went away between the check and the send: undo the grant.
                self.take_holding(ctx.counters);
                ctx.journal.append(Change::Release {
                    name: ctx.name.clone(),
                    holds_left: 0,
                });
                ctx.counters.releases.fetch_add(1, Relaxed);
                continue;
            }
            ctx.counters.grants.fetch_add(1, Relaxed);
            if let Some(holding) = self.holding_mut() {
                holding.tickets.push((waiter.id, token));
            }
            self.grant_same_owner_waiters(ctx);
            return;
        }
    }

    fn grant_same_owner_waiters(&mut self, ctx: &Ctx<'_>) {
        let Some(owner) = self.holding().and_then(|h| h.owner.clone()) else {
            return;
        };
        let mut index = 0;
        loop {
            let Some(active) = self.active.as_mut() else {
                return;
            };
            let Some(waiter) = active.waiters.get(index) else {
                return;
            };
            let wanted = waiter.is_live() && waiter.owner.as_ref() == Some(&owner);
            if !wanted {
                index += 1;
                continue;
            }
            let lease_ms = waiter.lease_ms;
            let Some(token) = self.grant_reentrant(lease_ms, ctx) else {
                return;
            };
            let Some(waiter) = self.active.as_mut().and_then(|a| a.waiters.remove(index)) else {
                return;
            };
            ctx.counters.waiters.fetch_sub(1, Relaxed);
            if waiter.tx.send(token).is_err() {
                // Receiver gone in a race: take the hold back (the holding itself stays).
                if let Some(holding) = self.holding_mut() {
                    holding.holds = holding.holds.saturating_sub(1);
                    let holds_left = holding.holds;
                    ctx.journal.append(Change::Release {
                        name: ctx.name.clone(),
                        holds_left,
                    });
                }
                ctx.counters.releases.fetch_add(1, Relaxed);
                continue;
            }
            ctx.counters.grants.fetch_add(1, Relaxed);
            if let Some(holding) = self.holding_mut() {
                holding.tickets.push((waiter.id, token));
            }
        }
    }

    fn check_owner(&self, token: u64, ctx: &Ctx<'_>) -> Result<(), LockError> {
        if self.holding().is_some_and(|h| h.owns(token)) {
            Ok(())
        } else {
            ctx.counters.notowner_rejections.fetch_add(1, Relaxed);
            Err(LockError::NotOwner {
                name: ctx.name.clone(),
                token,
            })
        }
    }

    pub fn renew(&mut self, token: u64, lease_ms: u64, ctx: &Ctx<'_>) -> Result<(), LockError> {
        self.expire_if_due(ctx);
        self.check_owner(token, ctx)?;
        if let Some(holding) = self.holding_mut() {
            holding.lease_ms = lease_ms;
            holding.deadline = Some(ctx.now.plus(lease_ms));
            ctx.journal.append(Change::Renew {
                name: ctx.name.clone(),
                lease_ms,
            });
        }
        Ok(())
    }

    pub fn release(&mut self, token: u64, ctx: &Ctx<'_>) -> Result<bool, LockError> {
        self.expire_if_due(ctx);
        self.check_owner(token, ctx)?;
        ctx.counters.releases.fetch_add(1, Relaxed);
        let holds_left = match self.holding_mut() {
            Some(holding) => {
                holding.holds = holding.holds.saturating_sub(1);
                holding.holds
            }
            None => 0,
        };
        if holds_left > 0 {
            ctx.journal.append(Change::Release {
                name: ctx.name.clone(),
                holds_left,
            });
            return Ok(false);
        }
        self.take_holding(ctx.counters);
        ctx.journal.append(Change::Release {
            name: ctx.name.clone(),
            holds_left: 0,
        });
        self.handover(ctx);
        Ok(true)
    }

    pub fn force_release(&mut self, ctx: &Ctx<'_>) -> bool {
        self.expire_if_due(ctx);
        if self.take_holding(ctx.counters).is_none() {
            return false;
        }
        ctx.journal.append(Change::ForceRelease {
            name: ctx.name.clone(),
        });
        ctx.counters.force_releases.fetch_add(1, Relaxed);
        self.handover(ctx);
        true
    }

    /// See [`super::LockTable::cancel_wait`].
    pub fn cancel(&mut self, ticket: WaitTicket, counters: &Counters) -> CancelOutcome {
        let Some(active) = self.active.as_mut() else {
            return CancelOutcome::Removed;
        };
        if let Some(index) = active.waiters.iter().position(|w| w.id == ticket.id) {
            active.waiters.remove(index);
            counters.waiters.fetch_sub(1, Relaxed);
            return CancelOutcome::Removed;
        }
        if let Some(holding) = active.holding.as_mut()
            && let Some(index) = holding.tickets.iter().position(|&(id, _)| id == ticket.id)
        {
            let (_, token) = holding.tickets.swap_remove(index);
            return CancelOutcome::AlreadyGranted(token);
        }
        CancelOutcome::Removed
    }

    pub fn advance(&mut self, token: u64, ctx: &Ctx<'_>) -> u64 {
        let token = token.min(MAX_TOKEN);
        if token > self.counter(ctx.floor) {
            self.last_token = token;
            ctx.journal.append(Change::Advance {
                name: ctx.name.clone(),
                token,
            });
        }
        self.counter(ctx.floor)
    }

    /// A read: a lease past its deadline is reported free although the expiry has not run yet.
    pub fn status(&self, now: Millis, floor: u64) -> LockStatus {
        let holding = self.holding().filter(|h| h.live_at(now));
        let waiters = self
            .active
            .as_ref()
            .map_or(0, |a| a.waiters.iter().filter(|w| w.is_live()).count());
        LockStatus {
            locked: holding.is_some(),
            token: holding.map(|h| h.token),
            owner: holding.and_then(|h| h.owner.clone()),
            ttl_ms: holding.map_or(-2, |h| ttl_of(h, now)),
            holds: holding.map_or(0, |h| h.holds),
            waiters,
            last_token: self.counter(floor),
        }
    }

    pub fn ttl(&self, now: Millis) -> i64 {
        self.holding()
            .filter(|h| h.live_at(now))
            .map_or(-2, |h| ttl_of(h, now))
    }

    /// Replays one record (see [`crate::Change`]): no journal, no clock, no handover.
    pub fn apply(&mut self, change: &Change, counters: &Counters) {
        match change {
            Change::Grant {
                token,
                first_token,
                holds,
                owner,
                lease_ms,
                ..
            } => {
                self.last_token = self.last_token.max(*token);
                let holding = Holding {
                    owner: owner.clone(),
                    first_token: *first_token,
                    token: *token,
                    holds: *holds,
                    lease_ms: *lease_ms,
                    deadline: None,
                    tickets: Vec::new(),
                };
                self.set_holding(holding, counters);
            }
            Change::Renew { lease_ms, .. } => {
                if let Some(holding) = self.holding_mut() {
                    holding.lease_ms = *lease_ms;
                }
            }
            Change::Release { holds_left, .. } => {
                if *holds_left == 0 {
                    self.take_holding(counters);
                } else if let Some(holding) = self.holding_mut() {
                    holding.holds = *holds_left;
                }
            }
            Change::Expire { .. } | Change::ForceRelease { .. } => {
                self.take_holding(counters);
            }
            Change::Advance { token, .. } => self.last_token = self.last_token.max(*token),
            Change::FenceSet { .. } | Change::Floor { .. } => {}
        }
    }

    /// After replay: every holding gets a full lease from `now` (a restart never shortens one).
    pub fn rearm(&mut self, now: Millis) {
        if let Some(holding) = self.holding_mut() {
            holding.deadline = Some(now.plus(holding.lease_ms));
        }
    }

    /// Called when the heap popped an item of this name at `at`: that item is no longer there.
    pub fn heap_popped(&mut self, at: Millis) {
        if self.scheduled_at() == at.0 {
            self.set_scheduled(0);
        }
    }

    /// The deadline to push onto the heap, if the holding's deadline is earlier than anything
    /// the heap is known to hold for this name. Marks it scheduled: the caller must push it.
    pub fn take_schedule(&mut self) -> Option<Millis> {
        let deadline = self.holding()?.deadline?;
        // (A deadline of 0 cannot be marked; it is simply pushed each time.)
        let scheduled = self.scheduled_at();
        if scheduled != 0 && scheduled <= deadline.0 {
            return None;
        }
        self.set_scheduled(deadline.0);
        Some(deadline)
    }

    /// Drops the boxed part once the lock is free with nobody waiting.
    pub fn tidy(&mut self) {
        if self
            .active
            .as_ref()
            .is_some_and(|a| a.holding.is_none() && a.waiters.is_empty())
        {
            self.active = None;
        }
    }

    /// Records that rebuild this entry: the holding, and the counter if it is beyond what the
    /// holding (or the floor) implies.
    pub fn snapshot(&self, name: &Bytes, floor: u64, emit: &mut dyn FnMut(Change)) {
        let implied = match self.holding() {
            Some(h) => {
                emit(Change::Grant {
                    name: name.clone(),
                    token: h.token,
                    first_token: h.first_token,
                    holds: h.holds,
                    owner: h.owner.clone(),
                    lease_ms: h.lease_ms,
                });
                h.token.max(floor)
            }
            None => floor,
        };
        if self.last_token > implied {
            emit(Change::Advance {
                name: name.clone(),
                token: self.last_token,
            });
        }
    }
}

fn ttl_of(holding: &Holding, now: Millis) -> i64 {
    let left = match holding.deadline {
        Some(deadline) => now.until(deadline),
        // Replayed but not yet re-armed: it will get its full lease.
        None => holding.lease_ms,
    };
    i64::try_from(left).unwrap_or(i64::MAX)
}
