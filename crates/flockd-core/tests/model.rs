//! Property tests: random operation sequences run against the real table and a small, obviously
//! sequential reference model; every reply, every token handed to a waiter and every status must
//! agree. On top of that: tokens strictly increase per name and never repeat, a new holding is
//! only ever granted on a free lock, and replaying the journal (whole, or a snapshot plus the
//! records from any earlier point) rebuilds the live state.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use flockd_core::{
    AcquireOutcome, AcquireRequest, CancelOutcome, Change, LockError, LockStatus, LockTable,
    MemoryJournal, Millis, State, WaitTicket,
};
use proptest::prelude::*;
use proptest::sample::Index;
use tokio::sync::oneshot;

const NAMES: [&[u8]; 2] = [b"a", b"b"];
const OWNERS: [Option<&[u8]>; 3] = [None, Some(b"x"), Some(b"y")];

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        name: usize,
        lease: u64,
        owner: usize,
        wait: bool,
    },
    Renew {
        name: usize,
        token: Index,
        lease: u64,
    },
    Release {
        name: usize,
        token: Index,
    },
    ForceRelease {
        name: usize,
    },
    Advance {
        name: usize,
        offset: i64,
    },
    Cancel {
        waiter: Index,
    },
    Disconnect {
        waiter: Index,
    },
    Tick {
        dt: u64,
        expire: bool,
    },
    /// Remember a snapshot and a journal position at or before it (see the replay check).
    Snapshot {
        tail_from: Index,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let name = 0..NAMES.len();
    prop_oneof![
        4 => (name.clone(), 1..60u64, 0..OWNERS.len(), any::<bool>())
            .prop_map(|(name, lease, owner, wait)| Op::Acquire { name, lease, owner, wait }),
        2 => (name.clone(), any::<Index>(), 1..60u64).prop_map(|(name, token, lease)| Op::Renew { name, token, lease }),
        3 => (name.clone(), any::<Index>()).prop_map(|(name, token)| Op::Release { name, token }),
        1 => name.clone().prop_map(|name| Op::ForceRelease { name }),
        1 => (name, -3..8i64).prop_map(|(name, offset)| Op::Advance { name, offset }),
        1 => any::<Index>().prop_map(|waiter| Op::Cancel { waiter }),
        1 => any::<Index>().prop_map(|waiter| Op::Disconnect { waiter }),
        3 => (0..40u64, any::<bool>()).prop_map(|(dt, expire)| Op::Tick { dt, expire }),
        1 => any::<Index>().prop_map(|tail_from| Op::Snapshot { tail_from }),
    ]
}

// ---------------------------------------------------------------- the reference model

#[derive(Clone, Debug)]
struct MHolding {
    owner: Option<usize>,
    first: u64,
    latest: u64,
    holds: u32,
    lease: u64,
    deadline: u64,
    /// (waiter id, token) granted through the queue and not yet reported to a cancel.
    tickets: Vec<(usize, u64)>,
}

#[derive(Clone, Debug)]
struct MWaiter {
    id: usize,
    owner: Option<usize>,
    lease: u64,
    closed: bool,
}

#[derive(Default, Debug)]
struct MLock {
    counter: u64,
    holding: Option<MHolding>,
    queue: Vec<MWaiter>,
}

#[derive(Default)]
struct Model {
    locks: [MLock; 2],
    /// Waiter id -> token the model handed it.
    handed: BTreeMap<usize, u64>,
}

fn same(a: Option<usize>, b: Option<usize>) -> bool {
    // Owner index 0 is "no OWNER", which matches nothing.
    matches!((a, b), (Some(a), Some(b)) if a == b && OWNERS[a].is_some())
}

impl MLock {
    fn expire_if_due(&mut self, now: u64, handed: &mut BTreeMap<usize, u64>) -> bool {
        if self.holding.as_ref().is_some_and(|h| h.deadline <= now) {
            self.holding = None;
            self.handover(now, handed);
            return true;
        }
        false
    }

    fn handover(&mut self, now: u64, handed: &mut BTreeMap<usize, u64>) {
        if self.holding.is_some() {
            return;
        }
        while !self.queue.is_empty() {
            let w = self.queue.remove(0);
            if w.closed {
                continue;
            }
            self.counter += 1;
            let token = self.counter;
            handed.insert(w.id, token);
            self.holding = Some(MHolding {
                owner: w.owner,
                first: token,
                latest: token,
                holds: 1,
                lease: w.lease,
                deadline: now + w.lease,
                tickets: vec![(w.id, token)],
            });
            let mut i = 0;
            while i < self.queue.len() {
                let q = &self.queue[i];
                if !q.closed && same(q.owner, w.owner) {
                    let q = self.queue.remove(i);
                    self.counter += 1;
                    let token = self.counter;
                    handed.insert(q.id, token);
                    let h = self.holding.as_mut().unwrap();
                    h.holds += 1;
                    h.latest = token;
                    h.lease = q.lease;
                    h.deadline = now + q.lease;
                    h.tickets.push((q.id, token));
                } else {
                    i += 1;
                }
            }
            return;
        }
    }

    fn owns(&self, token: u64) -> bool {
        self.holding
            .as_ref()
            .is_some_and(|h| h.first <= token && token <= h.latest)
    }

    fn status(&self, now: u64) -> LockStatus {
        let h = self.holding.as_ref().filter(|h| h.deadline > now);
        LockStatus {
            locked: h.is_some(),
            token: h.map(|h| h.latest),
            owner: h
                .and_then(|h| h.owner)
                .and_then(|o| OWNERS[o])
                .map(Bytes::from_static),
            ttl_ms: h.map_or(-2, |h| (h.deadline - now) as i64),
            holds: h.map_or(0, |h| h.holds),
            waiters: self.queue.iter().filter(|w| !w.closed).count(),
            last_token: self.counter,
        }
    }
}

// ---------------------------------------------------------------- the harness

/// One queued acquire, as the server's connection task would hold it.
struct Wait {
    name: usize,
    ticket: WaitTicket,
    /// `None` once the token arrived, the connection closed or the wait was cancelled.
    rx: Option<oneshot::Receiver<u64>>,
}

struct Run {
    table: LockTable,
    journal: MemoryJournal,
    model: Model,
    now: u64,
    waits: Vec<Wait>,
    /// Every token issued per name, in order of observation (replies and waiter grants).
    issued: [Vec<u64>; 2],
    seen: [HashSet<u64>; 2],
    snapshots: Vec<(Vec<Change>, usize)>,
}

fn owner_bytes(owner: usize) -> Option<Bytes> {
    OWNERS[owner].map(Bytes::from_static)
}

impl Run {
    fn new() -> Self {
        Run {
            table: LockTable::new(),
            journal: MemoryJournal::default(),
            model: Model::default(),
            now: 0,
            waits: Vec::new(),
            issued: Default::default(),
            seen: Default::default(),
            snapshots: Vec::new(),
        }
    }

    fn observe(&mut self, name: usize, token: u64) -> Result<(), TestCaseError> {
        prop_assert!(
            self.seen[name].insert(token),
            "token {} of {} issued twice",
            token,
            name
        );
        self.issued[name].push(token);
        Ok(())
    }

    fn token_candidates(&self, name: usize) -> Vec<u64> {
        let mut tokens = self.issued[name].clone();
        tokens.push(0);
        tokens.push(self.model.locks[name].counter + 1);
        tokens
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = Millis(self.now);
        let j = &self.journal;
        match *op {
            Op::Acquire {
                name,
                lease,
                owner,
                wait,
            } => {
                let req = AcquireRequest {
                    name: Bytes::from_static(NAMES[name]),
                    lease_ms: lease,
                    owner: owner_bytes(owner),
                    wait,
                };
                let got = self.table.acquire(req, now, j);
                let m = &mut self.model.locks[name];
                m.expire_if_due(self.now, &mut self.model.handed);
                if m.holding.is_none() && !m.queue.is_empty() {
                    m.handover(self.now, &mut self.model.handed);
                }
                let owner = Some(owner);
                let live_waiters = m.queue.iter().any(|w| !w.closed);
                if let Some(h) = m.holding.as_mut().filter(|h| same(h.owner, owner)) {
                    m.counter += 1;
                    h.holds += 1;
                    h.latest = m.counter;
                    h.lease = lease;
                    h.deadline = self.now + lease;
                    let want = m.counter;
                    prop_assert!(
                        matches!(got, AcquireOutcome::Granted(t) if t == want),
                        "reentrant: {:?} != {}",
                        got,
                        want
                    );
                    self.observe(name, want)?;
                } else if m.holding.is_none() && !live_waiters {
                    m.counter += 1;
                    let token = m.counter;
                    m.holding = Some(MHolding {
                        owner,
                        first: token,
                        latest: token,
                        holds: 1,
                        lease,
                        deadline: self.now + lease,
                        tickets: Vec::new(),
                    });
                    prop_assert!(
                        matches!(got, AcquireOutcome::Granted(t) if t == token),
                        "grant: {:?} != {}",
                        got,
                        token
                    );
                    self.observe(name, token)?;
                } else if wait {
                    let AcquireOutcome::Queued { ticket, grant } = got else {
                        return Err(TestCaseError::fail(format!(
                            "expected to queue, got {got:?}"
                        )));
                    };
                    let id = self.waits.len();
                    m.queue.push(MWaiter {
                        id,
                        owner,
                        lease,
                        closed: false,
                    });
                    self.waits.push(Wait {
                        name,
                        ticket,
                        rx: Some(grant),
                    });
                } else {
                    prop_assert!(
                        matches!(got, AcquireOutcome::Busy),
                        "expected busy, got {:?}",
                        got
                    );
                }
            }
            Op::Renew {
                name,
                ref token,
                lease,
            } => {
                let candidates = self.token_candidates(name);
                let token = *token.get(&candidates);
                let got = self.table.renew(NAMES[name], token, lease, now, j);
                let m = &mut self.model.locks[name];
                m.expire_if_due(self.now, &mut self.model.handed);
                if m.owns(token) {
                    let h = m.holding.as_mut().unwrap();
                    h.lease = lease;
                    h.deadline = self.now + lease;
                    prop_assert_eq!(got, Ok(()));
                } else {
                    prop_assert_eq!(
                        got,
                        Err(LockError::NotOwner {
                            name: Bytes::from_static(NAMES[name]),
                            token
                        })
                    );
                }
            }
            Op::Release { name, ref token } => {
                let candidates = self.token_candidates(name);
                let token = *token.get(&candidates);
                let got = self.table.release(NAMES[name], token, now, j);
                let m = &mut self.model.locks[name];
                m.expire_if_due(self.now, &mut self.model.handed);
                if m.owns(token) {
                    let h = m.holding.as_mut().unwrap();
                    h.holds -= 1;
                    let free = h.holds == 0;
                    if free {
                        m.holding = None;
                        m.handover(self.now, &mut self.model.handed);
                    }
                    prop_assert_eq!(got, Ok(free));
                } else {
                    prop_assert_eq!(
                        got,
                        Err(LockError::NotOwner {
                            name: Bytes::from_static(NAMES[name]),
                            token
                        })
                    );
                }
            }
            Op::ForceRelease { name } => {
                let got = self.table.force_release(NAMES[name], now, j);
                let m = &mut self.model.locks[name];
                m.expire_if_due(self.now, &mut self.model.handed);
                let had = m.holding.take().is_some();
                m.handover(self.now, &mut self.model.handed);
                prop_assert_eq!(got, had);
            }
            Op::Advance { name, offset } => {
                let m = &mut self.model.locks[name];
                let token = m.counter.saturating_add_signed(offset).max(1);
                let got = self.table.advance(NAMES[name], token, j);
                m.counter = m.counter.max(token);
                prop_assert_eq!(got, m.counter);
            }
            Op::Cancel { ref waiter } => {
                if self.waits.is_empty() {
                    return Ok(());
                }
                let id = waiter.index(self.waits.len());
                let Wait { name, ticket, .. } = self.waits[id];
                let got = self.table.cancel_wait(NAMES[name], ticket);
                let m = &mut self.model.locks[name];
                let want = if let Some(i) = m.queue.iter().position(|w| w.id == id) {
                    m.queue.remove(i);
                    CancelOutcome::Removed
                } else if let Some(i) = m
                    .holding
                    .as_ref()
                    .and_then(|h| h.tickets.iter().position(|&(t, _)| t == id))
                {
                    let (_, token) = m.holding.as_mut().unwrap().tickets.remove(i);
                    CancelOutcome::AlreadyGranted(token)
                } else {
                    CancelOutcome::Removed
                };
                prop_assert_eq!(got, want);
                // The waiter's task is over: its receiver goes with it (after a last look). It
                // stays pickable so that a repeated cancel is checked too.
                self.collect_grants()?;
                self.waits[id].rx = None;
            }
            Op::Disconnect { ref waiter } => {
                if self.waits.is_empty() {
                    return Ok(());
                }
                let id = waiter.index(self.waits.len());
                self.collect_grants()?;
                // The connection closes without a cancel: the waiter must be skipped.
                if let Wait { name, rx, .. } = &mut self.waits[id]
                    && rx.take().is_some()
                    && let Some(w) = self.model.locks[*name]
                        .queue
                        .iter_mut()
                        .find(|w| w.id == id)
                {
                    w.closed = true;
                }
            }
            Op::Tick { dt, expire } => {
                self.now += dt;
                if expire {
                    let got = self.table.expire_due(Millis(self.now), j);
                    let mut want = 0;
                    for m in &mut self.model.locks {
                        want += usize::from(m.expire_if_due(self.now, &mut self.model.handed));
                    }
                    prop_assert_eq!(got, want);
                    // Nothing due is left behind.
                    prop_assert!(self.table.next_deadline().is_none_or(|d| d.0 > self.now));
                }
            }
            Op::Snapshot { ref tail_from } => {
                let mut snapshot = Vec::new();
                self.table.snapshot(&mut |c| snapshot.push(c));
                let len = self.journal.changes.lock().len();
                let from = tail_from.index(len + 1);
                self.snapshots.push((snapshot, from));
            }
        }
        self.collect_grants()?;
        self.check_status()
    }

    /// Takes every token delivered to a waiter and checks it is the one the model handed it.
    fn collect_grants(&mut self) -> Result<(), TestCaseError> {
        for id in 0..self.waits.len() {
            let Wait {
                name, rx: rx_slot, ..
            } = &mut self.waits[id];
            let Some(rx) = rx_slot else { continue };
            let name = *name;
            match rx.try_recv() {
                Ok(token) => {
                    prop_assert_eq!(
                        self.model.handed.get(&id),
                        Some(&token),
                        "waiter {} got {}",
                        id,
                        token
                    );
                    // Still cancellable: a cancel racing this grant must report it.
                    *rx_slot = None;
                    self.observe(name, token)?;
                }
                Err(_) => prop_assert!(
                    !self.model.handed.contains_key(&id),
                    "waiter {} was not handed its token",
                    id
                ),
            }
        }
        Ok(())
    }

    fn check_status(&self) -> Result<(), TestCaseError> {
        let now = Millis(self.now);
        for (i, name) in NAMES.iter().enumerate() {
            let m = &self.model.locks[i];
            prop_assert_eq!(self.table.status(name, now), m.status(self.now));
            prop_assert_eq!(self.table.ttl(name, now), m.status(self.now).ttl_ms);
            prop_assert_eq!(self.table.last_token(name), m.counter);
        }
        let held = self
            .model
            .locks
            .iter()
            .filter(|m| m.holding.is_some())
            .count() as u64;
        prop_assert_eq!(self.table.stats().locks_held, held);
        let queued = self
            .model
            .locks
            .iter()
            .map(|m| m.queue.len() as u64)
            .sum::<u64>();
        prop_assert_eq!(self.table.stats().waiters, queued);
        Ok(())
    }
}

fn sorted_snapshot(state: &State) -> Vec<Change> {
    let mut changes = Vec::new();
    state.snapshot(&mut |c| changes.push(c));
    changes.sort_by_key(|c| (c.key().cloned(), matches!(c, Change::Advance { .. })));
    changes
}

fn check_replay(run: Run) -> Result<(), TestCaseError> {
    let records = run.journal.changes.lock().clone();

    // Tokens strictly increase per name, in journal order.
    let mut last: BTreeMap<Bytes, u64> = BTreeMap::new();
    for change in &records {
        if let Change::Grant { name, token, .. } = change {
            let previous = last.insert(name.clone(), *token).unwrap_or(0);
            prop_assert!(
                *token > previous,
                "token {} after {} for {:?}",
                token,
                previous,
                name
            );
        }
    }

    let live = State {
        locks: run.table,
        fences: Default::default(),
    };
    let want = sorted_snapshot(&live);

    // The whole journal, checking that a new holding is only granted on a free lock.
    let replayed = State::default();
    for change in &records {
        if let Change::Grant {
            name,
            token,
            first_token,
            ..
        } = change
            && token == first_token
        {
            prop_assert!(
                !replayed.locks.status(name, Millis(0)).locked,
                "second holding of {:?}",
                name
            );
        }
        replayed.apply_change(change);
    }
    prop_assert_eq!(&sorted_snapshot(&replayed), &want);
    for name in NAMES {
        prop_assert_eq!(replayed.locks.last_token(name), live.locks.last_token(name));
    }

    // Every snapshot plus the records from any point at or before it.
    for (snapshot, from) in &run.snapshots {
        let rebuilt = State::default();
        for change in snapshot.iter().chain(&records[*from..]) {
            rebuilt.apply_change(change);
        }
        prop_assert_eq!(&sorted_snapshot(&rebuilt), &want);
        for name in NAMES {
            prop_assert_eq!(rebuilt.locks.last_token(name), live.locks.last_token(name));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn table_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        let mut run = Run::new();
        for op in &ops {
            run.step(op)?;
        }
        check_replay(run)?;
    }
}
