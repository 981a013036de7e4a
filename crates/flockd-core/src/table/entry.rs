//! One lock name's state and the rules of the FLOCK.* operations applied to it.
//!
//! Everything here is plain data changed by `&mut self`: the caller applies one op at a time in
//! log order, and every decision depends only on the entry, the op and the op's time.

use std::collections::VecDeque;

use bytes::Bytes;

use super::{Acquire, Counters};
use crate::{AcquireResult, CancelResult, Event, LockError, MAX_TOKEN, Millis, WaitId};

/// What an operation on an entry needs from the table around it.
pub(super) struct EntryCtx<'a> {
    pub name: &'a Bytes,
    /// The op's time.
    pub at: Millis,
    /// The global counter floor.
    pub floor: u64,
    pub counters: &'a mut Counters,
    pub events: &'a mut Vec<Event>,
}

impl EntryCtx<'_> {
    fn event(&mut self, event: Event) {
        self.events.push(event);
    }
}

const RECENTLY_USED: u64 = 1 << 63;

/// A lock name. Idle names (free, nobody waiting) are most of the table, so all the rest hides
/// behind one optional box: an idle entry is a counter, a deadline mark and a null pointer.
#[derive(Clone, Default)]
pub(super) struct LockEntry {
    /// Highest token issued or advanced to for this name (the floor aside: see [`Self::counter`]).
    pub last_token: u64,
    /// Bookkeeping for the deadline index, not state: the earliest deadline (ms) the index is
    /// known to hold an item of this name for, 0 if none, so renewal spam does not grow the
    /// index. The top bit marks the entry as used since the last idle-name pass.
    scheduled: u64,
    pub active: Option<Box<Active>>,
}

/// The part of an entry that exists only while the lock is held or waited for.
#[derive(Clone, Default)]
pub(super) struct Active {
    pub holding: Option<Holding>,
    pub waiters: VecDeque<Waiter>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Holding {
    pub owner: Option<Bytes>,
    /// The holding's id: tokens `first_token..=token` belong to it.
    pub first_token: u64,
    /// The latest token issued to this holding.
    pub token: u64,
    pub holds: u32,
    /// Latest lease length, from the last acquire or renew: what a re-arm gives.
    pub lease_ms: u64,
    pub deadline: Millis,
    /// (wait, token) of the waiters handed this holding, so that a cancel racing the grant
    /// learns the token. Gone with the holding: a waiter whose holding ended holds nothing.
    pub grants: Vec<(WaitId, u64)>,
}

impl Holding {
    fn owns(&self, token: u64) -> bool {
        self.first_token <= token && token <= self.token
    }

    pub fn live_at(&self, at: Millis) -> bool {
        self.deadline > at
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Waiter {
    pub wait: WaitId,
    pub owner: Option<Bytes>,
    pub lease_ms: u64,
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

    pub fn scheduled_at(&self) -> u64 {
        self.scheduled & !RECENTLY_USED
    }

    pub fn set_scheduled(&mut self, at: u64) {
        self.scheduled = (self.scheduled & RECENTLY_USED) | (at & !RECENTLY_USED);
    }

    /// Marks the entry as used since the last idle-name pass.
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

    pub fn is_idle(&self) -> bool {
        self.active.is_none()
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

    pub fn holding(&self) -> Option<&Holding> {
        self.active.as_ref().and_then(|a| a.holding.as_ref())
    }

    fn holding_mut(&mut self) -> Option<&mut Holding> {
        self.active.as_mut().and_then(|a| a.holding.as_mut())
    }

    pub fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.active.iter().flat_map(|a| a.waiters.iter())
    }

    pub fn waiter_count(&self) -> usize {
        self.active.as_ref().map_or(0, |a| a.waiters.len())
    }

    pub fn set_holding(&mut self, holding: Holding, counters: &mut Counters) {
        self.last_token = self.last_token.max(holding.token);
        if self.active_mut().holding.replace(holding).is_none() {
            counters.locks_held += 1;
        }
    }

    pub fn push_waiter(&mut self, waiter: Waiter, counters: &mut Counters) {
        self.active_mut().waiters.push_back(waiter);
        counters.waiters += 1;
    }

    fn take_holding(&mut self, counters: &mut Counters) -> Option<Holding> {
        let taken = self.active.as_mut().and_then(|a| a.holding.take());
        if taken.is_some() {
            counters.locks_held -= 1;
        }
        taken
    }

    /// Expires the holding if its lease ran out at the op's time, then hands the lock over.
    /// True if it expired.
    pub fn expire_if_due(&mut self, ctx: &mut EntryCtx<'_>) -> bool {
        let due = self.holding().is_some_and(|h| !h.live_at(ctx.at));
        if due {
            self.expire(ctx);
        }
        due
    }

    fn expire(&mut self, ctx: &mut EntryCtx<'_>) {
        if let Some(holding) = self.take_holding(ctx.counters) {
            ctx.counters.expirations += 1;
            ctx.event(Event::Expired {
                name: ctx.name.clone(),
                token: holding.token,
            });
            self.handover(ctx);
        }
    }

    /// FLOCK.ACQUIRE. A lease that ran out is expired first (and the lock handed over). Then: a
    /// holder's own OWNER gets a reentrant grant (never queued); a free lock with nobody queued
    /// is granted; otherwise `Busy`, or `Queued` if `wait`.
    pub fn acquire(&mut self, request: Acquire<'_>, ctx: &mut EntryCtx<'_>) -> AcquireResult {
        let result = self.try_acquire(request, ctx);
        if matches!(result, AcquireResult::Busy) {
            ctx.counters.busy += 1;
        }
        result
    }

    fn try_acquire(&mut self, request: Acquire<'_>, ctx: &mut EntryCtx<'_>) -> AcquireResult {
        let Acquire {
            wait_id,
            owner,
            lease_ms,
            wait,
        } = request;
        self.expire_if_due(ctx);
        // A free lock with queued waiters only exists when the counter ran out, but if it ever
        // does, the queue goes first.
        if self.holding().is_none() && self.waiter_count() > 0 {
            self.handover(ctx);
        }

        if let Some(holding) = self.holding()
            && same_owner(&holding.owner, owner)
        {
            return match self.grant_reentrant(lease_ms, None, ctx) {
                Some(token) => AcquireResult::Granted(token),
                None => AcquireResult::Busy,
            };
        }

        if self.holding().is_none() && self.waiter_count() == 0 {
            return match self.grant_new(owner.clone(), lease_ms, None, ctx) {
                Some(token) => AcquireResult::Granted(token),
                None => AcquireResult::Busy,
            };
        }

        if !wait {
            return AcquireResult::Busy;
        }
        let waiter = Waiter {
            wait: wait_id,
            owner: owner.clone(),
            lease_ms,
        };
        self.push_waiter(waiter, ctx.counters);
        AcquireResult::Queued(wait_id)
    }

    /// Starts a new holding on a free lock. `None` if the counter is exhausted.
    fn grant_new(
        &mut self,
        owner: Option<Bytes>,
        lease_ms: u64,
        wait: Option<WaitId>,
        ctx: &mut EntryCtx<'_>,
    ) -> Option<u64> {
        let token = self.issue(ctx.floor)?;
        ctx.counters.tokens_issued += 1;
        ctx.counters.grants += 1;
        let holding = Holding {
            owner,
            first_token: token,
            token,
            holds: 1,
            lease_ms,
            deadline: ctx.at.plus(lease_ms),
            grants: wait.map(|w| (w, token)).into_iter().collect(),
        };
        self.set_holding(holding, ctx.counters);
        ctx.event(Event::Granted {
            name: ctx.name.clone(),
            token,
            wait,
        });
        Some(token)
    }

    /// Adds a hold to the current holding with a new token and a fresh lease. `None` if there is
    /// no holding, the counter is exhausted or the hold count would overflow.
    fn grant_reentrant(
        &mut self,
        lease_ms: u64,
        wait: Option<WaitId>,
        ctx: &mut EntryCtx<'_>,
    ) -> Option<u64> {
        if self.holding()?.holds == u32::MAX {
            return None;
        }
        let token = self.issue(ctx.floor)?;
        ctx.counters.tokens_issued += 1;
        ctx.counters.grants += 1;
        let holding = self.holding_mut()?;
        holding.holds += 1;
        holding.token = token;
        holding.lease_ms = lease_ms;
        holding.deadline = ctx.at.plus(lease_ms);
        if let Some(w) = wait {
            holding.grants.push((w, token));
        }
        ctx.event(Event::Granted {
            name: ctx.name.clone(),
            token,
            wait,
        });
        Some(token)
    }

    /// Hands a free lock to the first waiter, then at once to every later waiter with the same
    /// owner (reentrantly, in queue order).
    fn handover(&mut self, ctx: &mut EntryCtx<'_>) {
        if self.holding().is_some() {
            return;
        }
        let Some(waiter) = self.active.as_mut().and_then(|a| a.waiters.pop_front()) else {
            return;
        };
        ctx.counters.waiters -= 1;
        if self
            .grant_new(
                waiter.owner.clone(),
                waiter.lease_ms,
                Some(waiter.wait),
                ctx,
            )
            .is_none()
        {
            // Counter exhausted: nobody can be granted; the waiters wait out their deadlines.
            self.active_mut().waiters.push_front(waiter);
            ctx.counters.waiters += 1;
            return;
        }
        let Some(owner) = waiter.owner else { return };
        let mut index = 0;
        while let Some(next) = self.active.as_ref().and_then(|a| a.waiters.get(index)) {
            if next.owner.as_ref() != Some(&owner) {
                index += 1;
                continue;
            }
            let (lease_ms, wait) = (next.lease_ms, next.wait);
            if self.grant_reentrant(lease_ms, Some(wait), ctx).is_none() {
                return;
            }
            if let Some(active) = self.active.as_mut() {
                active.waiters.remove(index);
            }
            ctx.counters.waiters -= 1;
        }
    }

    fn check_owner(&self, token: u64, ctx: &mut EntryCtx<'_>) -> Result<(), LockError> {
        if self.holding().is_some_and(|h| h.owns(token)) {
            Ok(())
        } else {
            ctx.counters.notowner_rejections += 1;
            Err(LockError::NotOwner {
                name: ctx.name.clone(),
                token,
            })
        }
    }

    pub fn renew(
        &mut self,
        token: u64,
        lease_ms: u64,
        ctx: &mut EntryCtx<'_>,
    ) -> Result<(), LockError> {
        self.expire_if_due(ctx);
        self.check_owner(token, ctx)?;
        let at = ctx.at;
        if let Some(holding) = self.holding_mut() {
            holding.lease_ms = lease_ms;
            holding.deadline = at.plus(lease_ms);
            let token = holding.token;
            ctx.counters.renewals += 1;
            ctx.event(Event::Renewed {
                name: ctx.name.clone(),
                token,
            });
        }
        Ok(())
    }

    pub fn release(&mut self, token: u64, ctx: &mut EntryCtx<'_>) -> Result<bool, LockError> {
        self.expire_if_due(ctx);
        self.check_owner(token, ctx)?;
        Ok(self.release_one_hold(ctx))
    }

    /// Removes one hold of the current holding; true if the lock is free now.
    fn release_one_hold(&mut self, ctx: &mut EntryCtx<'_>) -> bool {
        ctx.counters.releases += 1;
        let Some(holding) = self.holding_mut() else {
            return true;
        };
        holding.holds = holding.holds.saturating_sub(1);
        let (holds_left, latest) = (holding.holds, holding.token);
        let free = holds_left == 0;
        if free {
            self.take_holding(ctx.counters);
        }
        ctx.event(Event::Released {
            name: ctx.name.clone(),
            token: latest,
            free,
        });
        if free {
            self.handover(ctx);
        }
        free
    }

    pub fn force_release(&mut self, ctx: &mut EntryCtx<'_>) -> bool {
        self.expire_if_due(ctx);
        let Some(holding) = self.take_holding(ctx.counters) else {
            return false;
        };
        ctx.counters.force_releases += 1;
        ctx.event(Event::ForceReleased {
            name: ctx.name.clone(),
            token: holding.token,
        });
        self.handover(ctx);
        true
    }

    pub fn cancel_wait(
        &mut self,
        wait: WaitId,
        release_if_granted: bool,
        ctx: &mut EntryCtx<'_>,
    ) -> CancelResult {
        self.expire_if_due(ctx);
        if let Some(active) = self.active.as_mut()
            && let Some(index) = active.waiters.iter().position(|w| w.wait == wait)
        {
            active.waiters.remove(index);
            ctx.counters.waiters -= 1;
            ctx.event(Event::WaitEnded {
                name: ctx.name.clone(),
                wait,
            });
            return CancelResult::Removed;
        }
        let Some(holding) = self.holding_mut() else {
            return CancelResult::Removed;
        };
        let Some(index) = holding.grants.iter().position(|&(w, _)| w == wait) else {
            return CancelResult::Removed;
        };
        let (_, token) = holding.grants.swap_remove(index);
        if release_if_granted {
            self.release_one_hold(ctx);
        }
        CancelResult::AlreadyGranted(token)
    }

    /// Expires the holding `first_token` names if its deadline is not after the op's time.
    pub fn expire_holding(&mut self, first_token: u64, ctx: &mut EntryCtx<'_>) -> bool {
        let due = self
            .holding()
            .is_some_and(|h| h.first_token == first_token && !h.live_at(ctx.at));
        if due {
            self.expire(ctx);
        }
        due
    }

    /// Every waiter is dropped; a holding whose lease had run out by the op's time expires (it
    /// was not live when the previous run stopped), any other gets the op's time plus its latest
    /// lease plus `extra_ms`. Returns (holdings re-armed, waiters dropped).
    pub fn rearm(&mut self, extra_ms: u64, ctx: &mut EntryCtx<'_>) -> (usize, usize) {
        let Some(active) = self.active.as_mut() else {
            return (0, 0);
        };
        let dropped = active.waiters.len();
        for waiter in active.waiters.drain(..) {
            ctx.events.push(Event::WaitEnded {
                name: ctx.name.clone(),
                wait: waiter.wait,
            });
        }
        ctx.counters.waiters -= dropped as u64;
        if self.expire_if_due(ctx) {
            return (0, dropped);
        }
        let Some(holding) = self.holding_mut() else {
            return (0, dropped);
        };
        holding.deadline = ctx.at.plus(holding.lease_ms).plus(extra_ms);
        holding.grants.clear();
        (1, dropped)
    }

    /// Raises the counter to at least `token` (capped at [`MAX_TOKEN`]); never lowers it.
    pub fn advance(&mut self, token: u64, floor: u64) -> u64 {
        self.last_token = self.counter(floor).max(token.min(MAX_TOKEN));
        self.last_token
    }

    /// The deadline to push onto the index, if the holding's deadline is earlier than anything
    /// the index is known to hold for this name. Marks it scheduled: the caller must push it.
    pub fn take_schedule(&mut self) -> Option<(Millis, u64)> {
        let holding = self.holding()?;
        let (deadline, first_token) = (holding.deadline, holding.first_token);
        // (A deadline of 0 cannot be marked; it is simply pushed each time.)
        let scheduled = self.scheduled_at();
        if scheduled != 0 && scheduled <= deadline.0 {
            return None;
        }
        self.set_scheduled(deadline.0);
        Some((deadline, first_token))
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
}
