//! FLOCK.ACQUIREALL: several names exclusively, all at once or none.
//!
//! A waiter of several names is queued on none of them, so it holds nothing and blocks no one
//! while it waits, and cannot take part in a deadlock. It is granted at the first moment every
//! one of its names would grant it (free, nobody queued, no lock-delay; or reentrant for its
//! owner). That moment can only come when one of its names becomes free, so every op that
//! leaves a watched name free notes it, and the end of the op serves the waiters of the noted
//! names in wait order. A busy name can starve such a waiter; that is the price of holding
//! nothing while waiting.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use super::LockTable;
use super::lock_state::{LockState, Readiness};
use crate::conditions::{Conditions, Mode};
use crate::item::SnapshotItem;
use crate::{AcquireAllResult, CancelAllResult, Event, Millis, WaitId};

/// One FLOCK.ACQUIREALL ... WAIT that is waiting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct MultiWaiter {
    pub names: Vec<Bytes>,
    pub owner: Option<Bytes>,
    pub lease_ms: u64,
    pub conditions: Conditions,
}

/// The waiters of several names, and which names they watch.
#[derive(Clone, Default)]
pub(super) struct MultiWaiters {
    /// In wait order, the order they are served in.
    pub waiting: BTreeMap<WaitId, MultiWaiter>,
    /// The waiters watching each name, ascending (derived from `waiting`).
    by_name: HashMap<Bytes, Vec<WaitId>>,
    /// Watched names that became free during the op being applied; served at its end.
    pub freed: Vec<Bytes>,
}

impl MultiWaiters {
    pub fn watches(&self, name: &[u8]) -> bool {
        !self.by_name.is_empty() && self.by_name.contains_key(name)
    }

    pub fn insert(&mut self, wait: WaitId, waiter: MultiWaiter) {
        for name in &waiter.names {
            let ids = self.by_name.entry(name.clone()).or_default();
            let at = ids.partition_point(|id| *id < wait);
            ids.insert(at, wait);
        }
        self.waiting.insert(wait, waiter);
    }

    pub fn remove(&mut self, wait: WaitId) -> Option<MultiWaiter> {
        let waiter = self.waiting.remove(&wait)?;
        for name in &waiter.names {
            if let Some(ids) = self.by_name.get_mut(name) {
                ids.retain(|id| *id != wait);
                if ids.is_empty() {
                    self.by_name.remove(name);
                }
            }
        }
        Some(waiter)
    }

    fn drain(&mut self) -> Vec<(WaitId, MultiWaiter)> {
        self.by_name.clear();
        self.freed.clear();
        std::mem::take(&mut self.waiting).into_iter().collect()
    }
}

/// Whether `names` can be asked for together: at least one, none twice.
fn distinct(names: &[Bytes]) -> bool {
    let mut sorted: Vec<&Bytes> = names.iter().collect();
    sorted.sort_unstable();
    sorted.dedup();
    !names.is_empty() && sorted.len() == names.len()
}

/// What FLOCK.ACQUIREALL asks for (see [`crate::Op::AcquireAll`]).
pub(crate) struct AcquireAll<'a> {
    pub wait_id: WaitId,
    pub names: &'a [Bytes],
    pub owner: &'a Option<Bytes>,
    pub lease_ms: u64,
    pub wait: bool,
    pub conditions: Conditions,
}

/// What [`LockTable::grant_all`] hands out, and to which wait (none for an acquire answered at
/// once).
struct Grant<'a> {
    names: &'a [Bytes],
    owner: &'a Option<Bytes>,
    lease_ms: u64,
    conditions: Conditions,
    wait: Option<WaitId>,
}

impl LockTable {
    /// What an exclusive acquire by `owner` would get from `name` now (entries settled).
    fn readiness(&self, name: &[u8], owner: &Option<Bytes>, at: Millis) -> Readiness {
        let floor = self.floor;
        match self.entries.get(name) {
            Some(entry) => entry.readiness(owner, Mode::Exclusive, at, floor),
            None => LockState::new(floor).readiness(owner, Mode::Exclusive, at, floor),
        }
    }

    fn settle_names(&mut self, names: &[Bytes], at: Millis, events: &mut Vec<Event>) {
        for name in names {
            self.with_entry(name, at, false, events, |entry, ctx| entry.settle(ctx));
        }
    }

    /// Takes every name; only after [`Self::readiness`] said each would grant.
    fn grant_all(&mut self, grant: Grant<'_>, at: Millis, events: &mut Vec<Event>) -> Vec<u64> {
        let Grant {
            names,
            owner,
            lease_ms,
            conditions,
            wait,
        } = grant;
        names
            .iter()
            .map(|name| {
                self.with_entry(name, at, true, events, |entry, ctx| {
                    entry.grant_now(owner, lease_ms, conditions, wait, ctx)
                })
                .flatten()
                .expect("every name was found grantable at this time")
            })
            .collect()
    }

    /// See [`crate::Op::AcquireAll`].
    pub fn acquire_all(
        &mut self,
        request: AcquireAll<'_>,
        at: Millis,
        events: &mut Vec<Event>,
    ) -> AcquireAllResult {
        let AcquireAll {
            wait_id,
            names,
            owner,
            lease_ms,
            wait,
            conditions,
        } = request;
        let conditions = Conditions {
            mode: Mode::Exclusive,
            lock_delay_ms: 0,
            ..conditions
        };
        if !distinct(names) {
            self.counters.busy += 1;
            return AcquireAllResult::Busy;
        }
        self.settle_names(names, at, events);
        // Names freed by settling go to the waiters that were there first.
        self.serve_multi_waiters(at, events);
        let mut all = true;
        for name in names {
            match self.readiness(name, owner, at) {
                Readiness::Grant => {}
                Readiness::Busy => all = false,
                Readiness::Upgrade => return AcquireAllResult::CannotUpgrade,
            }
        }
        if all {
            let grant = Grant {
                names,
                owner,
                lease_ms,
                conditions,
                wait: None,
            };
            let tokens = self.grant_all(grant, at, events);
            return AcquireAllResult::Granted(tokens);
        }
        if !wait {
            self.counters.busy += 1;
            return AcquireAllResult::Busy;
        }
        let waiter = MultiWaiter {
            names: names.to_vec(),
            owner: owner.clone(),
            lease_ms,
            conditions,
        };
        self.multi.insert(wait_id, waiter);
        self.counters.waiters += 1;
        AcquireAllResult::Queued(wait_id)
    }

    /// Serves the waiters of the names that became free during this op, in wait order (not in
    /// the order the names were freed, so an op's result does not depend on the order of its
    /// leases), until no name is left to look at. Settling a waiter's other names may free more.
    pub fn serve_multi_waiters(&mut self, at: Millis, events: &mut Vec<Event>) {
        while !self.multi.freed.is_empty() {
            let mut candidates: Vec<WaitId> = Vec::new();
            for name in std::mem::take(&mut self.multi.freed) {
                if let Some(ids) = self.multi.by_name.get(&name) {
                    candidates.extend_from_slice(ids);
                }
            }
            candidates.sort_unstable();
            candidates.dedup();
            for id in candidates {
                self.try_grant_waiting(id, at, events);
            }
        }
    }

    fn try_grant_waiting(&mut self, wait: WaitId, at: Millis, events: &mut Vec<Event>) {
        let Some(waiter) = self.multi.waiting.get(&wait) else {
            return;
        };
        let MultiWaiter {
            names,
            owner,
            lease_ms,
            conditions,
        } = waiter.clone();
        self.settle_names(&names, at, events);
        let ready = names
            .iter()
            .all(|name| self.readiness(name, &owner, at) == Readiness::Grant);
        if !ready {
            return;
        }
        self.multi.remove(wait);
        self.counters.waiters -= 1;
        let grant = Grant {
            names: &names,
            owner: &owner,
            lease_ms,
            conditions,
            wait: Some(wait),
        };
        let tokens = self.grant_all(grant, at, events);
        events.push(Event::AllGranted { wait, tokens });
    }

    /// See [`crate::Op::CancelWaitAll`].
    pub fn cancel_wait_all(
        &mut self,
        names: &[Bytes],
        wait: WaitId,
        release_if_granted: bool,
        at: Millis,
        events: &mut Vec<Event>,
    ) -> CancelAllResult {
        if let Some(waiter) = self.multi.remove(wait) {
            self.counters.waiters -= 1;
            events.push(Event::WaitEnded {
                name: waiter.names[0].clone(),
                wait,
            });
            return CancelAllResult::Removed;
        }
        self.settle_names(names, at, events);
        let granted: Option<Vec<u64>> = names
            .iter()
            .map(|name| self.entries.get(name).and_then(|e| e.grant_of(wait)))
            .collect();
        let release = release_if_granted || granted.is_none();
        for name in names {
            self.with_entry(name, at, false, events, |entry, ctx| {
                if let Some((index, _)) = entry.take_grant(wait)
                    && release
                {
                    entry.release_one_hold(index, ctx);
                }
            });
        }
        match granted {
            Some(tokens) if !tokens.is_empty() => CancelAllResult::AlreadyGranted(tokens),
            _ => CancelAllResult::Removed,
        }
    }

    /// A re-arm drops every waiter of several names (their connections are gone, or will ask
    /// again). How many.
    pub(super) fn drop_multi_waiters(&mut self, events: &mut Vec<Event>) -> usize {
        let dropped = self.multi.drain();
        for (wait, waiter) in &dropped {
            events.push(Event::WaitEnded {
                name: waiter.names[0].clone(),
                wait: *wait,
            });
        }
        self.counters.waiters -= dropped.len() as u64;
        dropped.len()
    }

    pub(super) fn snapshot_multi_waiters(&self, emit: &mut dyn FnMut(SnapshotItem<'_>)) {
        for (wait, w) in &self.multi.waiting {
            emit(SnapshotItem::MultiWaiter {
                wait: *wait,
                names: w.names.iter().map(|n| n.as_ref()).collect(),
                owner: w.owner.as_deref(),
                lease_ms: w.lease_ms,
                conditions: w.conditions,
            });
        }
    }

    pub(super) fn restore_multi_waiter(
        &mut self,
        wait: WaitId,
        names: &[&[u8]],
        owner: Option<&[u8]>,
        lease_ms: u64,
        conditions: Conditions,
    ) {
        let names: Vec<Bytes> = names.iter().map(|n| Bytes::copy_from_slice(n)).collect();
        if !distinct(&names) || self.multi.waiting.contains_key(&wait) {
            return;
        }
        let waiter = MultiWaiter {
            names,
            owner: owner.map(Bytes::copy_from_slice),
            lease_ms,
            conditions,
        };
        self.multi.insert(wait, waiter);
        self.counters.waiters += 1;
    }
}
