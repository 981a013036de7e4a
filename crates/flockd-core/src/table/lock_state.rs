//! One lock name's state and the rules of the FLOCK.* operations applied to it.
//!
//! A name has zero or more holdings, in grant order, and a FIFO queue of waiters. A grant is
//! admitted when the holding count after it is at most the smallest limit among the holdings
//! and the request (see [`Mode::admits`]), nobody is queued ahead, and no lock-delay is running.
//!
//! Everything here is plain data changed by `&mut self`: the caller applies one op at a time in
//! log order, and every decision depends only on the entry, the op and the op's time.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

use super::{Acquire, LockCounters};
use crate::conditions::{Conditions, Mode};
use crate::{AcquireResult, CancelResult, Event, LockError, MAX_TOKEN, Millis, WaitId};

/// What an operation on an entry needs from the table around it.
pub(super) struct LockCtx<'a> {
    pub name: &'a Bytes,
    /// The op's time.
    pub at: Millis,
    /// The global counter floor.
    pub floor: u64,
    pub counters: &'a mut LockCounters,
    pub events: &'a mut Vec<Event>,
}

impl LockCtx<'_> {
    fn event(&mut self, event: Event) {
        self.events.push(event);
    }
}

const RECENTLY_USED: u64 = 1 << 63;

/// A lock name. Idle names (free, nobody waiting) are most of the table, so all the rest hides
/// behind one optional box: an idle entry is a counter, a deadline mark and a null pointer.
#[derive(Clone, Default)]
pub(super) struct LockState {
    /// Highest token issued or advanced to for this name (the floor aside: see [`Self::counter`]).
    pub last_token: u64,
    /// Bookkeeping for the deadline index, not state: the earliest deadline (ms) the index is
    /// known to hold an item of this name for, 0 if none, so renewal spam does not grow the
    /// index. The top bit marks the entry as used since the last idle-name pass.
    scheduled: u64,
    /// Shared, not boxed: a snapshot's copy of a stripe (see `crate::stripes`) then shares
    /// the held part of each entry instead of copying its holdings and waiters, and a write
    /// copies only the entries it changes.
    pub active: Option<Arc<Active>>,
}

/// The part of an entry that exists only while the lock is held, waited for or delayed.
#[derive(Clone, Default)]
pub(super) struct Active {
    /// In grant order (ascending first tokens).
    pub holdings: Vec<Holding>,
    pub waiters: VecDeque<Waiter>,
    /// Lock-delay: nothing is granted before this time. 0 when none.
    pub delay_until: Millis,
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
    /// The conditions it was granted with; reentrant holds keep them.
    pub conditions: Conditions,
    /// When it was granted (log time); `None` when restored from a snapshot, which does not
    /// keep it. Only the hold-time metrics read it.
    pub granted_at: Option<Millis>,
}

impl Holding {
    /// How long it was held, ended at `at`, if its grant is known.
    pub fn held_ms(&self, at: Millis) -> Option<u64> {
        self.granted_at.map(|start| at.0.saturating_sub(start.0))
    }

    pub fn owns(&self, token: u64) -> bool {
        self.first_token <= token && token <= self.token
    }

    pub fn live_at(&self, at: Millis) -> bool {
        self.deadline > at
    }

    /// When the name may grant again if this holding is lost at its deadline.
    fn delay_end_if_lapsed(&self) -> Millis {
        if self.conditions.lock_delay_ms == 0 {
            Millis(0)
        } else {
            self.deadline.plus(self.conditions.lock_delay_ms)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Waiter {
    pub wait: WaitId,
    pub owner: Option<Bytes>,
    pub lease_ms: u64,
    pub conditions: Conditions,
    /// Past this log time the waiter is dropped, never granted (`None`: only a cancel ends it).
    pub deadline: Option<Millis>,
    /// The cluster node whose connection waits (0: none named): see [`crate::Op::DropWaits`].
    pub node: u64,
}

impl Waiter {
    fn lapsed_at(&self, at: Millis) -> bool {
        self.deadline.is_some_and(|deadline| deadline <= at)
    }
}

/// What an acquire would get from an entry now (see [`LockState::readiness`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Readiness {
    Grant,
    Busy,
    Upgrade,
}

/// Where an owner's acquire goes when it already holds the name.
enum Reentry {
    /// A hold of this holding (by index).
    Into(usize),
    /// It holds non-exclusively and asks for exclusive.
    Upgrade,
    /// It needs a holding of its own.
    New,
}

fn same_owner(a: &Option<Bytes>, b: &Option<Bytes>) -> bool {
    // Without OWNER a lock is not reentrant: `None` matches nothing, not even `None`.
    matches!((a, b), (Some(a), Some(b)) if a == b)
}

/// Whether a request of `mode` becomes a hold of `holding` (same owner assumed): any request of
/// an exclusive holder, or one of the holding's own mode.
fn joins(holding: &Holding, mode: Mode) -> bool {
    holding.conditions.mode == Mode::Exclusive || holding.conditions.mode == mode
}

impl LockState {
    pub fn new(floor: u64) -> Self {
        LockState {
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
        Arc::make_mut(self.active.get_or_insert_with(Default::default))
    }

    /// The held part to change, if there is one (copied first if a snapshot shares it).
    pub fn active_if_any_mut(&mut self) -> Option<&mut Active> {
        self.active.as_mut().map(Arc::make_mut)
    }

    /// Every holding, in grant order (lapsed ones whose expiry is not applied yet included).
    pub fn holdings(&self) -> &[Holding] {
        self.active.as_ref().map_or(&[], |a| &a.holdings)
    }

    fn holdings_mut(&mut self) -> &mut [Holding] {
        self.active_if_any_mut()
            .map_or(&mut [], |a| &mut a.holdings)
    }

    /// The holding a token belongs to, by index.
    fn holding_of(&self, token: u64) -> Option<usize> {
        self.holdings().iter().position(|h| h.owns(token))
    }

    /// The holdings still live at `now`, in grant order.
    pub fn live_holdings(&self, now: Millis) -> impl Iterator<Item = &Holding> {
        self.holdings().iter().filter(move |h| h.live_at(now))
    }

    /// The most recently granted holding live at `now` (the one FLOCK.STATUS describes).
    pub fn latest_live(&self, now: Millis) -> Option<&Holding> {
        self.live_holdings(now).max_by_key(|h| h.token)
    }

    /// Whether `token` belongs to a holding live at `now`.
    pub fn is_held_by(&self, token: u64, now: Millis) -> bool {
        self.live_holdings(now).any(|h| h.owns(token))
    }

    /// Milliseconds of lock-delay left at `now`, counting the delay of a holding that has lapsed
    /// but whose expiry is not applied yet (it will be, with that delay).
    pub fn delay_left(&self, now: Millis) -> u64 {
        let Some(active) = self.active.as_ref() else {
            return 0;
        };
        let lapsed = active
            .holdings
            .iter()
            .filter(|h| !h.live_at(now))
            .map(Holding::delay_end_if_lapsed);
        let end = lapsed.fold(active.delay_until, Millis::max);
        now.until(end)
    }

    pub fn delay_until(&self) -> Millis {
        self.active.as_ref().map_or(Millis(0), |a| a.delay_until)
    }

    pub fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.active.iter().flat_map(|a| a.waiters.iter())
    }

    pub fn waiter_count(&self) -> usize {
        self.active.as_ref().map_or(0, |a| a.waiters.len())
    }

    /// Waiters whose wait is not over at `at` (a read reports these: one past its deadline is
    /// dropped by the next op on the name).
    pub fn live_waiter_count(&self, at: Millis) -> usize {
        self.waiters().filter(|w| !w.lapsed_at(at)).count()
    }

    /// Ends every wait of `node`'s connections (see [`crate::Op::DropWaits`]); how many.
    pub fn drop_waits_of(&mut self, node: u64, ctx: &mut LockCtx<'_>) -> usize {
        self.settle(ctx);
        let head = self.waiters().next().map(|w| w.wait);
        let dropped = self.drop_waiters(ctx, |w| w.node == node);
        // The head leaving may let the next ones in.
        if dropped > 0 && self.waiters().next().map(|w| w.wait) != head {
            self.handover(ctx);
        }
        dropped
    }

    /// Drops the waiters whose wait is over at the op's time: their node may be gone, and the
    /// log never grants past a wait's deadline.
    fn drop_lapsed_waiters(&mut self, ctx: &mut LockCtx<'_>) {
        let at = ctx.at;
        if self.waiters().any(|w| w.lapsed_at(at)) {
            self.drop_waiters(ctx, |w| w.lapsed_at(at));
        }
    }

    /// Takes the waiters `gone` picks out of the queue, each with its `WaitEnded` event (the
    /// parked connection, if any, learns its wait ended); how many.
    fn drop_waiters(&mut self, ctx: &mut LockCtx<'_>, gone: impl Fn(&Waiter) -> bool) -> usize {
        let Some(active) = self.active_if_any_mut() else {
            return 0;
        };
        let before = active.waiters.len();
        let (name, events) = (&ctx.name, &mut *ctx.events);
        active.waiters.retain(|w| {
            if gone(w) {
                events.push(Event::WaitEnded {
                    name: Bytes::clone(name),
                    wait: w.wait,
                });
                return false;
            }
            true
        });
        let dropped = before - active.waiters.len();
        ctx.counters.waiters -= dropped as u64;
        dropped
    }

    /// Adds a holding after the others (a restore gives them in grant order), or replaces the
    /// one with the same first token (a first-format file records each reentrant grant).
    pub fn push_holding(&mut self, holding: Holding, counters: &mut LockCounters) {
        self.last_token = self.last_token.max(holding.token);
        let holdings = &mut self.active_mut().holdings;
        if let Some(same) = holdings
            .iter_mut()
            .find(|h| h.first_token == holding.first_token)
        {
            *same = holding;
            return;
        }
        if holdings.is_empty() {
            counters.locks_held += 1;
        }
        // Most names have one holding: a first push would reserve room for four (over 400
        // bytes per held lock).
        if holdings.len() == holdings.capacity() {
            holdings.reserve_exact(if holdings.is_empty() {
                1
            } else {
                holdings.len()
            });
        }
        holdings.push(holding);
    }

    pub fn push_waiter(&mut self, waiter: Waiter, counters: &mut LockCounters) {
        self.active_mut().waiters.push_back(waiter);
        counters.waiters += 1;
    }

    pub fn set_delay_until(&mut self, until: Millis) {
        let active = self.active_mut();
        active.delay_until = active.delay_until.max(until);
    }

    fn remove_holding(&mut self, index: usize, counters: &mut LockCounters) -> Holding {
        let holdings = &mut self.active_mut().holdings;
        let holding = holdings.remove(index);
        if holdings.is_empty() {
            counters.locks_held -= 1;
        }
        holding
    }

    /// Whether a new holding of `mode` is admitted next to the current ones: the count after
    /// the grant is at most every limit involved.
    fn fits(&self, mode: Mode) -> bool {
        let holdings = self.holdings();
        let after = holdings.len() as u64 + 1;
        let limit = holdings
            .iter()
            .map(|h| h.conditions.mode.admits())
            .fold(mode.admits(), u32::min);
        after <= u64::from(limit)
    }

    fn delayed(&self, at: Millis) -> bool {
        self.delay_until() > at
    }

    /// Brings the entry up to the op's time: expires every holding whose lease ran out (in grant
    /// order), ends a lock-delay that is over, and hands the lock to the waiters that fit now.
    /// Every op on an entry starts with it.
    pub fn settle(&mut self, ctx: &mut LockCtx<'_>) {
        let mut index = 0;
        while index < self.holdings().len() {
            if self.holdings()[index].live_at(ctx.at) {
                index += 1;
            } else {
                self.expire_at(index, ctx);
            }
        }
        self.end_delay_if_over(ctx.at);
        self.drop_lapsed_waiters(ctx);
        self.handover(ctx);
    }

    /// Expires holding `index` (its lease ran out), starting its lock-delay.
    fn expire_at(&mut self, index: usize, ctx: &mut LockCtx<'_>) {
        let holding = self.remove_holding(index, ctx.counters);
        ctx.counters.expirations += 1;
        ctx.event(Event::Expired {
            name: ctx.name.clone(),
            token: holding.token,
            held_ms: holding.held_ms(ctx.at),
        });
        let delay_end = holding.delay_end_if_lapsed();
        if delay_end > ctx.at {
            self.set_delay_until(delay_end);
        }
    }

    fn end_delay_if_over(&mut self, at: Millis) {
        // Looked at first: every op on the name comes here, and a mutable borrow would copy a
        // held part a snapshot shares even when nothing changes.
        let over = self
            .active
            .as_ref()
            .is_some_and(|a| a.delay_until.0 != 0 && a.delay_until <= at);
        if over && let Some(active) = self.active_if_any_mut() {
            active.delay_until = Millis(0);
        }
    }

    /// FLOCK.ACQUIRE. Due leases expire first (and the lock is handed over). Then: an owner's
    /// request joins its own holding (never queued) or is refused as an upgrade; a request that
    /// is admitted with nobody queued and no lock-delay is granted; otherwise `Busy`, or
    /// `Queued` if `wait`.
    pub fn acquire(&mut self, request: Acquire<'_>, ctx: &mut LockCtx<'_>) -> AcquireResult {
        let result = self.try_acquire(request, ctx);
        if matches!(result, AcquireResult::Busy) {
            ctx.counters.busy += 1;
        }
        result
    }

    fn try_acquire(&mut self, request: Acquire<'_>, ctx: &mut LockCtx<'_>) -> AcquireResult {
        let Acquire {
            wait_id,
            owner,
            lease_ms,
            wait,
            conditions,
        } = request;
        self.settle(ctx);

        match self.reentry(owner, conditions.mode) {
            Reentry::Into(index) => {
                return match self.grant_reentrant(index, lease_ms, None, ctx) {
                    Some(token) => AcquireResult::Granted(token),
                    None => AcquireResult::Busy,
                };
            }
            Reentry::Upgrade => return AcquireResult::CannotUpgrade,
            Reentry::New => {}
        }

        if self.waiter_count() == 0 && !self.delayed(ctx.at) && self.fits(conditions.mode) {
            return match self.grant_new(owner.clone(), lease_ms, conditions, None, ctx) {
                Some(token) => AcquireResult::Granted(token),
                None => AcquireResult::Busy,
            };
        }

        if !wait.queues() {
            return AcquireResult::Busy;
        }
        let waiter = Waiter {
            wait: wait_id,
            owner: owner.clone(),
            lease_ms,
            conditions,
            deadline: wait.deadline(ctx.at),
            node: match wait {
                crate::Wait::For { node, .. } => node,
                crate::Wait::No | crate::Wait::UntilCancelled => 0,
            },
        };
        self.push_waiter(waiter, ctx.counters);
        AcquireResult::Queued(wait_id)
    }

    fn reentry(&self, owner: &Option<Bytes>, mode: Mode) -> Reentry {
        let mut upgrade = false;
        for (index, holding) in self.holdings().iter().enumerate() {
            if !same_owner(&holding.owner, owner) {
                continue;
            }
            if joins(holding, mode) {
                return Reentry::Into(index);
            }
            upgrade |= mode == Mode::Exclusive;
        }
        if upgrade {
            Reentry::Upgrade
        } else {
            Reentry::New
        }
    }

    /// What an acquire by `owner` of `mode` would get now, changing nothing: the rules of
    /// [`Self::acquire`] on an entry settled at `at`. FLOCK.ACQUIREALL asks every name before
    /// it takes any.
    pub fn readiness(
        &self,
        owner: &Option<Bytes>,
        mode: Mode,
        at: Millis,
        floor: u64,
    ) -> Readiness {
        if self.counter(floor) >= MAX_TOKEN {
            return Readiness::Busy;
        }
        match self.reentry(owner, mode) {
            Reentry::Into(index) if self.holdings()[index].holds < u32::MAX => Readiness::Grant,
            Reentry::Into(_) => Readiness::Busy,
            Reentry::Upgrade => Readiness::Upgrade,
            Reentry::New
                if self.live_waiter_count(at) == 0 && !self.delayed(at) && self.fits(mode) =>
            {
                Readiness::Grant
            }
            Reentry::New => Readiness::Busy,
        }
    }

    /// Grants what [`Self::readiness`] found grantable, as a hold of the owner's holding or a new
    /// one, and records `wait` with it so a cancel racing the grant finds the token. The
    /// `Granted` event names no wait: a multi-name waiter is told of all its names at once.
    pub fn grant_now(
        &mut self,
        owner: &Option<Bytes>,
        lease_ms: u64,
        conditions: Conditions,
        wait: Option<WaitId>,
        ctx: &mut LockCtx<'_>,
    ) -> Option<u64> {
        let (index, token) = match self.reentry(owner, conditions.mode) {
            Reentry::Into(index) => (index, self.grant_reentrant(index, lease_ms, None, ctx)?),
            Reentry::New => {
                let token = self.grant_new(owner.clone(), lease_ms, conditions, None, ctx)?;
                (self.holdings().len() - 1, token)
            }
            Reentry::Upgrade => return None,
        };
        if let Some(wait) = wait {
            self.holdings_mut()[index].grants.push((wait, token));
        }
        Some(token)
    }

    /// Where the record of the grant that went to `wait` is: (holding index, record index).
    fn find_grant(&self, wait: WaitId) -> Option<(usize, usize)> {
        self.holdings().iter().enumerate().find_map(|(index, h)| {
            h.grants
                .iter()
                .position(|&(w, _)| w == wait)
                .map(|grant| (index, grant))
        })
    }

    /// The token granted to `wait`, while that holding is current.
    pub fn grant_of(&self, wait: WaitId) -> Option<u64> {
        let (index, grant) = self.find_grant(wait)?;
        Some(self.holdings()[index].grants[grant].1)
    }

    /// Takes the record of the grant that went to `wait`: (holding index, token).
    pub fn take_grant(&mut self, wait: WaitId) -> Option<(usize, u64)> {
        let (index, grant) = self.find_grant(wait)?;
        let (_, token) = self.holdings_mut()[index].grants.swap_remove(grant);
        Some((index, token))
    }

    /// Starts a new holding after the others. `None` if the counter is exhausted.
    fn grant_new(
        &mut self,
        owner: Option<Bytes>,
        lease_ms: u64,
        conditions: Conditions,
        wait: Option<WaitId>,
        ctx: &mut LockCtx<'_>,
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
            conditions,
            granted_at: Some(ctx.at),
        };
        self.push_holding(holding, ctx.counters);
        ctx.event(Event::Granted {
            name: ctx.name.clone(),
            token,
            wait,
        });
        Some(token)
    }

    /// Adds a hold to holding `index` with a new token and a fresh lease. `None` if the counter
    /// is exhausted or the hold count would overflow.
    fn grant_reentrant(
        &mut self,
        index: usize,
        lease_ms: u64,
        wait: Option<WaitId>,
        ctx: &mut LockCtx<'_>,
    ) -> Option<u64> {
        if self.holdings().get(index)?.holds == u32::MAX {
            return None;
        }
        let token = self.issue(ctx.floor)?;
        ctx.counters.tokens_issued += 1;
        ctx.counters.grants += 1;
        let at = ctx.at;
        let holding = self.holdings_mut().get_mut(index)?;
        holding.holds += 1;
        holding.token = token;
        holding.lease_ms = lease_ms;
        holding.deadline = at.plus(lease_ms);
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

    /// Serves the queue strictly in order: while the head is admitted (and no lock-delay runs),
    /// it is granted, and at once every later waiter of the same owner that joins its holding.
    /// So consecutive readers at the head are granted together, and a writer behind a reader
    /// stops the readers behind it.
    fn handover(&mut self, ctx: &mut LockCtx<'_>) {
        if self.waiter_count() == 0 || self.delayed(ctx.at) {
            return;
        }
        loop {
            let Some(head) = self.active.as_ref().and_then(|a| a.waiters.front()) else {
                return;
            };
            if !self.fits(head.conditions.mode) {
                return;
            }
            let Some(waiter) = self.active_if_any_mut().and_then(|a| a.waiters.pop_front()) else {
                return;
            };
            ctx.counters.waiters -= 1;
            let granted = self.grant_new(
                waiter.owner.clone(),
                waiter.lease_ms,
                waiter.conditions,
                Some(waiter.wait),
                ctx,
            );
            if granted.is_none() {
                // Counter exhausted: nobody can be granted; the waiters wait out their deadlines.
                self.active_mut().waiters.push_front(waiter);
                ctx.counters.waiters += 1;
                return;
            }
            if waiter.owner.is_some() && !self.grant_followers(&waiter.owner, ctx) {
                return;
            }
        }
    }

    /// Grants the newest holding's owner's later waiters that join it, in queue order. False if
    /// the counter ran out.
    fn grant_followers(&mut self, owner: &Option<Bytes>, ctx: &mut LockCtx<'_>) -> bool {
        let newest = self.holdings().len() - 1;
        let mut index = 0;
        while let Some(next) = self.active.as_ref().and_then(|a| a.waiters.get(index)) {
            if !same_owner(&next.owner, owner)
                || !joins(&self.holdings()[newest], next.conditions.mode)
            {
                index += 1;
                continue;
            }
            let (lease_ms, wait) = (next.lease_ms, next.wait);
            if self
                .grant_reentrant(newest, lease_ms, Some(wait), ctx)
                .is_none()
            {
                return false;
            }
            if let Some(active) = self.active_if_any_mut() {
                active.waiters.remove(index);
            }
            ctx.counters.waiters -= 1;
        }
        true
    }

    fn check_owner(&self, token: u64, ctx: &mut LockCtx<'_>) -> Result<usize, LockError> {
        self.holding_of(token).ok_or_else(|| {
            ctx.counters.notowner_rejections += 1;
            LockError::NotOwner {
                name: ctx.name.clone(),
                token,
            }
        })
    }

    pub fn renew(
        &mut self,
        token: u64,
        lease_ms: u64,
        ctx: &mut LockCtx<'_>,
    ) -> Result<(), LockError> {
        self.settle(ctx);
        let index = self.check_owner(token, ctx)?;
        let at = ctx.at;
        let holding = &mut self.holdings_mut()[index];
        holding.lease_ms = lease_ms;
        holding.deadline = at.plus(lease_ms);
        let token = holding.token;
        ctx.counters.renewals += 1;
        ctx.event(Event::Renewed {
            name: ctx.name.clone(),
            token,
        });
        Ok(())
    }

    /// True when the holding `token` belongs to is gone (other holdings do not matter).
    pub fn release(&mut self, token: u64, ctx: &mut LockCtx<'_>) -> Result<bool, LockError> {
        self.settle(ctx);
        let index = self.check_owner(token, ctx)?;
        Ok(self.release_one_hold(index, ctx))
    }

    /// Removes one hold of holding `index`; true if the holding is gone now.
    pub fn release_one_hold(&mut self, index: usize, ctx: &mut LockCtx<'_>) -> bool {
        ctx.counters.releases += 1;
        let holding = &mut self.holdings_mut()[index];
        holding.holds = holding.holds.saturating_sub(1);
        let (holds_left, latest) = (holding.holds, holding.token);
        let free = holds_left == 0;
        let held_ms = if free {
            self.remove_holding(index, ctx.counters).held_ms(ctx.at)
        } else {
            None
        };
        ctx.event(Event::Released {
            name: ctx.name.clone(),
            token: latest,
            free,
            held_ms,
        });
        if free {
            self.handover(ctx);
        }
        free
    }

    /// Removes every holding (starting any lock-delay they carry); how many it removed.
    pub fn force_release(&mut self, ctx: &mut LockCtx<'_>) -> usize {
        self.settle(ctx);
        let holdings = match self.active_if_any_mut() {
            Some(active) => std::mem::take(&mut active.holdings),
            None => return 0,
        };
        if !holdings.is_empty() {
            ctx.counters.locks_held -= 1;
        }
        for holding in &holdings {
            ctx.counters.force_releases += 1;
            ctx.event(Event::ForceReleased {
                name: ctx.name.clone(),
                token: holding.token,
                held_ms: holding.held_ms(ctx.at),
            });
            if holding.conditions.lock_delay_ms > 0 {
                self.set_delay_until(ctx.at.plus(holding.conditions.lock_delay_ms));
            }
        }
        self.handover(ctx);
        holdings.len()
    }

    /// Releases every holding whose session matches (`None`: every session holding), each at
    /// once and whole, without lock-delay; how many.
    pub fn end_sessions(&mut self, session: Option<u64>, ctx: &mut LockCtx<'_>) -> usize {
        self.settle(ctx);
        let mut ended = 0;
        let mut index = 0;
        while index < self.holdings().len() {
            let holding_session = self.holdings()[index].conditions.session;
            let matches = match session {
                Some(id) => holding_session == Some(id),
                None => holding_session.is_some(),
            };
            if !matches {
                index += 1;
                continue;
            }
            let holding = self.remove_holding(index, ctx.counters);
            ctx.counters.releases += 1;
            ctx.event(Event::Released {
                name: ctx.name.clone(),
                token: holding.token,
                free: true,
                held_ms: holding.held_ms(ctx.at),
            });
            ended += 1;
        }
        self.handover(ctx);
        ended
    }

    pub fn cancel_wait(
        &mut self,
        wait: WaitId,
        release_if_granted: bool,
        ctx: &mut LockCtx<'_>,
    ) -> CancelResult {
        self.settle(ctx);
        let queued = self.waiters().position(|w| w.wait == wait);
        if let Some(index) = queued
            && let Some(active) = self.active_if_any_mut()
        {
            active.waiters.remove(index);
            ctx.counters.waiters -= 1;
            ctx.event(Event::WaitEnded {
                name: ctx.name.clone(),
                wait,
            });
            // The head leaving may let the next ones in.
            if index == 0 {
                self.handover(ctx);
            }
            return CancelResult::Removed;
        }
        let Some((index, token)) = self.take_grant(wait) else {
            return CancelResult::Removed;
        };
        if release_if_granted {
            self.release_one_hold(index, ctx);
        }
        CancelResult::AlreadyGranted(token)
    }

    /// Expires the holding `first_token` names if its deadline is not after the op's time (a
    /// renewal or a release may have come first), then serves the queue; true if it expired.
    /// First token 0 names no holding: the end of a lock-delay.
    pub fn expire_holding(&mut self, first_token: u64, ctx: &mut LockCtx<'_>) -> bool {
        let due = self
            .holdings()
            .iter()
            .position(|h| h.first_token == first_token && !h.live_at(ctx.at));
        if let Some(index) = due {
            self.expire_at(index, ctx);
        }
        self.end_delay_if_over(ctx.at);
        self.handover(ctx);
        due.is_some()
    }

    /// Every waiter is dropped; a holding whose lease had run out by the op's time expires (it
    /// was not live when the previous run stopped), any other gets the op's time plus its latest
    /// lease plus `extra_ms`. Returns (holdings re-armed, waiters dropped).
    pub fn rearm(&mut self, extra_ms: u64, ctx: &mut LockCtx<'_>) -> (usize, usize) {
        let Some(active) = self.active_if_any_mut() else {
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
        self.settle(ctx);
        let at = ctx.at;
        let holdings = self.holdings_mut();
        for holding in holdings.iter_mut() {
            holding.deadline = at.plus(holding.lease_ms).plus(extra_ms);
            holding.grants.clear();
        }
        (holdings.len(), dropped)
    }

    /// Raises the counter to at least `token` (capped at [`MAX_TOKEN`]); never lowers it.
    pub fn advance(&mut self, token: u64, floor: u64) -> u64 {
        self.last_token = self.counter(floor).max(token.min(MAX_TOKEN));
        self.last_token
    }

    /// The time the index must wake for this name (the earliest lease deadline, or the end of a
    /// lock-delay, named by first token 0), if it is earlier than anything the index is known to
    /// hold for this name. Marks it scheduled: the caller must push it.
    pub fn take_schedule(&mut self) -> Option<(Millis, u64)> {
        let active = self.active.as_ref()?;
        let earliest = active
            .holdings
            .iter()
            .map(|h| (h.deadline, h.first_token))
            .min();
        let delay_end = (active.delay_until.0 != 0).then_some((active.delay_until, 0));
        let (deadline, first_token) = earliest.into_iter().chain(delay_end).min()?;
        // (A deadline of 0 cannot be marked; it is simply pushed each time.)
        let scheduled = self.scheduled_at();
        if scheduled != 0 && scheduled <= deadline.0 {
            return None;
        }
        self.set_scheduled(deadline.0);
        Some((deadline, first_token))
    }

    /// What the index should hand the expiry task for this name at `now`, added to `due`: the
    /// due holdings by first token, or 0 for a lock-delay that is over.
    pub fn due_at(&self, now: Millis, due: &mut Vec<u64>) {
        let before = due.len();
        let lapsed = self.holdings().iter().filter(|h| !h.live_at(now));
        due.extend(lapsed.map(|h| h.first_token));
        let delay_until = self.delay_until();
        if due.len() == before && delay_until.0 != 0 && delay_until <= now {
            due.push(0);
        }
    }

    /// Drops the boxed part once the lock is free with nobody waiting and no lock-delay left at
    /// `at`.
    pub fn tidy(&mut self, at: Millis) {
        if self
            .active
            .as_ref()
            .is_some_and(|a| a.holdings.is_empty() && a.waiters.is_empty() && a.delay_until <= at)
        {
            self.active = None;
        }
    }
}
