//! Determinism: the same log gives the same state and the same results on every machine, and a
//! machine rebuilt from a snapshot is as good as the one that applied the whole log.
//!
//! A property test applies random op sequences (every op kind, a few names, owners and fence
//! keys, random time steps, waits and cancels, several ops per log entry) to one machine, takes
//! a snapshot part way, lets that machine go on (so the snapshot must keep the state of its
//! cut), then rebuilds a second machine from the snapshot's items (restored name by name in a
//! shuffled order) and feeds it the rest of the log. Every result and every event after the cut
//! must be equal, and the digests after every entry; at the end every read agrees and both
//! machines' expiry tasks, from their own deadline indexes, expire the same leases. The digest
//! is also checked to tell different states apart, so that its equality means something.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use flockd_core::{
    AcquireAllResult, AcquireResult, Conditions, Event, HoldingRef, MAX_TOKEN, Millis, Mode, Op,
    OpResult, Snapshot, SnapshotItem, StateMachine, WaitId,
};
use proptest::prelude::*;
use proptest::sample::Index;

/// `a` and `n46` fall into one stripe of the table, so same-stripe iteration is exercised.
const NAMES: [&[u8]; 3] = [b"a", b"b", b"n46"];
const OWNERS: [Option<&[u8]>; 3] = [None, Some(b"x"), Some(b"y")];
const KEYS: [&[u8]; 2] = [b"f", b"g"];

/// Known core bugs make two machines differ where they must not (see the ignored tests at the
/// end and the report): while they stand, the property tolerates exactly those differences (the
/// counts that `BumpAll` and `Forget` return, and the order of a `Rearm`'s events) so that it
/// still checks everything else. Set to false once they are fixed.
const TOLERATE_KNOWN_BUGS: bool = false;

#[derive(Clone, Debug)]
enum Gen {
    Acquire {
        name: usize,
        lease: u64,
        owner: usize,
        wait: bool,
        /// 0 exclusive, 1 shared, 2.. `LIMIT n`.
        mode: u16,
        session: Option<u64>,
        lock_delay: u64,
    },
    EndSession {
        session: u64,
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
        to_cap: bool,
    },
    FenceSet {
        key: usize,
        token: u64,
        value: u8,
    },
    CancelWait {
        waiter: Index,
        release_if_granted: bool,
    },
    /// What the expiry task proposes: the first machine's due leases.
    ExpireDue {
        limit: usize,
    },
    /// Any holding reference, most likely stale.
    ExpireAny {
        name: usize,
        token: Index,
    },
    Rearm {
        extra_ms: u64,
    },
    /// What the idle-name pass proposes: the first machine's candidates.
    ForgetIdle {
        max_idle: usize,
    },
    /// Any names, held or not.
    Forget {
        mask: u8,
    },
    BumpAll {
        by: u64,
    },
    AcquireAll {
        /// Which two or three names, in which order.
        names: Vec<usize>,
        lease: u64,
        owner: usize,
        wait: bool,
        session: Option<u64>,
    },
    CancelWaitAll {
        waiter: Index,
        release_if_granted: bool,
    },
}

fn gen_op() -> impl Strategy<Value = Gen> {
    let name = 0..NAMES.len();
    prop_oneof![
        8 => (
            (name.clone(), 1..150u64, 0..OWNERS.len(), prop::bool::weighted(0.6)),
            (0..5u16, prop::option::weighted(0.2, 1..3u64), prop_oneof![3 => Just(0u64), 1 => 1..80u64]),
        )
            .prop_map(|((name, lease, owner, wait), (mode, session, lock_delay))| Gen::Acquire {
                name,
                lease,
                owner,
                wait,
                mode,
                session,
                lock_delay,
            }),
        1 => (1..3u64).prop_map(|session| Gen::EndSession { session }),
        2 => (name.clone(), any::<Index>(), 1..60u64)
            .prop_map(|(name, token, lease)| Gen::Renew { name, token, lease }),
        3 => (name.clone(), any::<Index>()).prop_map(|(name, token)| Gen::Release { name, token }),
        1 => name.clone().prop_map(|name| Gen::ForceRelease { name }),
        1 => (name.clone(), -3..8i64, prop::bool::weighted(0.1))
            .prop_map(|(name, offset, to_cap)| Gen::Advance { name, offset, to_cap }),
        1 => (0..KEYS.len(), 0..6u64, 0..3u8)
            .prop_map(|(key, token, value)| Gen::FenceSet { key, token, value }),
        2 => (any::<Index>(), any::<bool>())
            .prop_map(|(waiter, release_if_granted)| Gen::CancelWait { waiter, release_if_granted }),
        2 => (1..6usize).prop_map(|limit| Gen::ExpireDue { limit }),
        1 => (name.clone(), any::<Index>()).prop_map(|(name, token)| Gen::ExpireAny { name, token }),
        1 => (0..30u64).prop_map(|extra_ms| Gen::Rearm { extra_ms }),
        1 => (0..3usize).prop_map(|max_idle| Gen::ForgetIdle { max_idle }),
        1 => (0..8u8).prop_map(|mask| Gen::Forget { mask }),
        1 => (0..5u64).prop_map(|by| Gen::BumpAll { by }),
        3 => (
            Just((0..NAMES.len()).collect::<Vec<usize>>()).prop_shuffle(),
            2..=NAMES.len(),
            1..150u64,
            0..OWNERS.len(),
            prop::bool::weighted(0.6),
            prop::option::weighted(0.2, 1..3u64),
        )
            .prop_map(|(mut names, count, lease, owner, wait, session)| {
                names.truncate(count);
                Gen::AcquireAll { names, lease, owner, wait, session }
            }),
        1 => (any::<Index>(), any::<bool>())
            .prop_map(|(waiter, release_if_granted)| Gen::CancelWaitAll { waiter, release_if_granted }),
    ]
}

/// One log entry: time goes on by `dt`, the position by `gap`, and the entry holds `ops`.
#[derive(Clone, Debug)]
struct Step {
    dt: u64,
    gap: u64,
    ops: Vec<Gen>,
}

fn step() -> impl Strategy<Value = Step> {
    let dt = prop_oneof![8 => 0..20u64, 1 => 20..300u64];
    let ops = prop_oneof![
        5 => prop::collection::vec(gen_op(), 1..=1),
        1 => prop::collection::vec(gen_op(), 2..=3),
    ];
    (dt, 1..3u64, ops).prop_map(|(dt, gap, ops)| Step { dt, gap, ops })
}

/// A state-changing op applied to one machine only, to see the digests differ.
#[derive(Clone, Debug)]
enum Mutation {
    Advance(usize),
    Fence(usize),
    Queue(usize),
    BumpAll,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0..NAMES.len()).prop_map(Mutation::Advance),
        (0..KEYS.len()).prop_map(Mutation::Fence),
        (0..NAMES.len()).prop_map(Mutation::Queue),
        Just(Mutation::BumpAll),
    ]
}

fn bytes(s: &'static [u8]) -> Bytes {
    Bytes::from_static(s)
}

/// One op of the log with what it gave on the first machine.
struct Applied1 {
    index: u32,
    op: Op,
    result: OpResult,
    events: Vec<Event>,
}

struct Entry {
    position: u64,
    at: Millis,
    ops: Vec<Applied1>,
    /// The first machine's digest after the entry.
    digest: u64,
}

/// What the op generator draws tokens and waits from: everything the first machine showed.
#[derive(Default)]
struct Seen {
    tokens: [Vec<u64>; 3],
    waits: Vec<(usize, WaitId)>,
    waits_all: Vec<(Vec<usize>, WaitId)>,
}

impl Seen {
    fn token(&self, sm: &StateMachine, name: usize, pick: &Index) -> u64 {
        let mut tokens = self.tokens[name].clone();
        tokens.push(0);
        tokens.push(sm.last_token(NAMES[name]).saturating_add(1));
        *pick.get(&tokens)
    }

    fn observe(&mut self, op: &Op, result: &OpResult, events: &[Event]) {
        for event in events {
            if let Event::Granted { name, token, .. } = event {
                let i = NAMES.iter().position(|n| n == name).unwrap();
                self.tokens[i].push(*token);
            }
        }
        if let (Op::Acquire { name, .. }, OpResult::Acquire(AcquireResult::Queued(wait))) =
            (op, result)
        {
            let i = NAMES.iter().position(|n| n == name).unwrap();
            self.waits.push((i, *wait));
        }
        if let (
            Op::AcquireAll { names, .. },
            OpResult::AcquireAll(AcquireAllResult::Queued(wait)),
        ) = (op, result)
        {
            let names = names
                .iter()
                .map(|name| NAMES.iter().position(|n| n == name).unwrap())
                .collect();
            self.waits_all.push((names, *wait));
        }
    }
}

/// The op `g` stands for, given what the first machine showed so far. `None` when there is
/// nothing to draw from (no wait queued yet).
fn concretize(g: &Gen, sm: &mut StateMachine, seen: &Seen, now: Millis) -> Option<Op> {
    let name = |i: usize| bytes(NAMES[i]);
    Some(match *g {
        Gen::Acquire {
            name: n,
            lease,
            owner,
            wait,
            mode,
            session,
            lock_delay,
        } => Op::Acquire {
            conditions: Conditions {
                mode: match mode {
                    0 => Mode::Exclusive,
                    1 => Mode::Shared,
                    n => Mode::Limit(n),
                },
                session,
                lock_delay_ms: lock_delay,
            },
            name: name(n),
            lease_ms: lease,
            owner: OWNERS[owner].map(bytes),
            wait: wait.into(),
        },
        Gen::Renew {
            name: n,
            ref token,
            lease,
        } => Op::Renew {
            name: name(n),
            token: seen.token(sm, n, token),
            lease_ms: lease,
        },
        Gen::Release { name: n, ref token } => Op::Release {
            name: name(n),
            token: seen.token(sm, n, token),
        },
        Gen::ForceRelease { name: n } => Op::ForceRelease { name: name(n) },
        Gen::EndSession { session } => Op::EndSession {
            session,
            names: NAMES.iter().map(|n| bytes(n)).collect(),
        },
        Gen::Advance {
            name: n,
            offset,
            to_cap,
        } => {
            let token = if to_cap {
                MAX_TOKEN - offset.unsigned_abs() % 3
            } else {
                sm.last_token(NAMES[n]).saturating_add_signed(offset).max(1)
            };
            Op::Advance {
                name: name(n),
                token,
            }
        }
        Gen::FenceSet { key, token, value } => Op::FenceSet {
            lock: None,
            key: bytes(KEYS[key]),
            token,
            value: Bytes::from(vec![b'v', value]),
        },
        Gen::CancelWait {
            ref waiter,
            release_if_granted,
        } => {
            if seen.waits.is_empty() {
                return None;
            }
            let (n, wait) = seen.waits[waiter.index(seen.waits.len())];
            Op::CancelWait {
                name: name(n),
                wait,
                release_if_granted,
            }
        }
        Gen::ExpireDue { limit } => Op::Expire {
            leases: sm.due_leases(now, limit),
        },
        Gen::ExpireAny { name: n, ref token } => Op::Expire {
            leases: vec![HoldingRef {
                name: name(n),
                first_token: seen.token(sm, n, token),
            }],
        },
        Gen::Rearm { extra_ms } => Op::Rearm { extra_ms },
        Gen::ForgetIdle { max_idle } => Op::Forget {
            names: sm.idle_candidates(max_idle, 8),
        },
        Gen::Forget { mask } => Op::Forget {
            names: (0..NAMES.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(name)
                .collect(),
        },
        Gen::BumpAll { by } => Op::BumpAll { by },
        Gen::AcquireAll {
            ref names,
            lease,
            owner,
            wait,
            session,
        } => Op::AcquireAll {
            names: names.iter().map(|&n| name(n)).collect(),
            lease_ms: lease,
            owner: OWNERS[owner].map(bytes),
            wait,
            conditions: Conditions {
                session,
                ..Conditions::default()
            },
        },
        Gen::CancelWaitAll {
            ref waiter,
            release_if_granted,
        } => {
            if seen.waits_all.is_empty() {
                return None;
            }
            let (names, wait) = &seen.waits_all[waiter.index(seen.waits_all.len())];
            Op::CancelWaitAll {
                names: names.iter().map(|&n| name(n)).collect(),
                wait: *wait,
                release_if_granted,
            }
        }
    })
}

/// What two machines must agree on for one op; see [`TOLERATE_KNOWN_BUGS`].
fn comparable(op: &Op, result: &OpResult, events: &[Event]) -> (OpResult, Vec<Event>) {
    let mut result = result.clone();
    let mut events = events.to_vec();
    // A snapshot does not keep when a holding was granted (hold times are metrics, not
    // state): a rebuilt machine cannot say how long a restored holding was held.
    for event in &mut events {
        event.forget_hold_time();
    }
    if TOLERATE_KNOWN_BUGS {
        match &mut result {
            OpResult::BumpAll(n) | OpResult::Forget(n) => *n = 0,
            _ => {}
        }
        if matches!(op, Op::Rearm { .. }) {
            events.sort_by_key(|e| format!("{e:?}"));
        }
    }
    (result, events)
}

/// A snapshot item, owned, so that a snapshot's items can be reordered before a restore.
#[derive(Clone, Debug)]
enum Item {
    Floor(u64),
    Counter(Vec<u8>, u64),
    Holding {
        name: Vec<u8>,
        first_token: u64,
        token: u64,
        holds: u32,
        owner: Option<Vec<u8>>,
        lease_ms: u64,
        deadline: Millis,
        grants: Vec<(WaitId, u64)>,
        conditions: Conditions,
    },
    Waiter {
        name: Vec<u8>,
        wait: WaitId,
        owner: Option<Vec<u8>>,
        lease_ms: u64,
        conditions: Conditions,
        deadline: Option<Millis>,
        node: u64,
    },
    Delay(Vec<u8>, Millis),
    Fence(Vec<u8>, u64, Vec<u8>),
    MultiWaiter {
        wait: WaitId,
        names: Vec<Vec<u8>>,
        owner: Option<Vec<u8>>,
        lease_ms: u64,
        conditions: Conditions,
    },
}

impl Item {
    fn of(item: SnapshotItem<'_>) -> Item {
        match item {
            SnapshotItem::Floor { token } => Item::Floor(token),
            SnapshotItem::Counter { name, token } => Item::Counter(name.to_vec(), token),
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
            } => Item::Holding {
                name: name.to_vec(),
                first_token,
                token,
                holds,
                owner: owner.map(<[u8]>::to_vec),
                lease_ms,
                deadline,
                grants,
                conditions,
            },
            SnapshotItem::Waiter {
                name,
                wait,
                owner,
                lease_ms,
                conditions,
                deadline,
                node,
            } => Item::Waiter {
                name: name.to_vec(),
                wait,
                owner: owner.map(<[u8]>::to_vec),
                lease_ms,
                conditions,
                deadline,
                node,
            },
            SnapshotItem::Fence { key, token, value } => {
                Item::Fence(key.to_vec(), token, value.to_vec())
            }
            SnapshotItem::Delay { name, until } => Item::Delay(name.to_vec(), until),
            SnapshotItem::MultiWaiter {
                wait,
                names,
                owner,
                lease_ms,
                conditions,
            } => Item::MultiWaiter {
                wait,
                names: names.iter().map(|n| n.to_vec()).collect(),
                owner: owner.map(<[u8]>::to_vec),
                lease_ms,
                conditions,
            },
        }
    }

    fn restore_into(&self, sm: &mut StateMachine) {
        let item = match self {
            Item::Floor(token) => SnapshotItem::Floor { token: *token },
            Item::Counter(name, token) => SnapshotItem::Counter {
                name,
                token: *token,
            },
            Item::Holding {
                name,
                first_token,
                token,
                holds,
                owner,
                lease_ms,
                deadline,
                grants,
                conditions,
            } => SnapshotItem::Holding {
                conditions: *conditions,
                name,
                first_token: *first_token,
                token: *token,
                holds: *holds,
                owner: owner.as_deref(),
                lease_ms: *lease_ms,
                deadline: *deadline,
                grants: grants.clone(),
            },
            Item::Waiter {
                name,
                wait,
                owner,
                lease_ms,
                conditions,
                deadline,
                node,
            } => SnapshotItem::Waiter {
                conditions: *conditions,
                name,
                wait: *wait,
                owner: owner.as_deref(),
                lease_ms: *lease_ms,
                deadline: *deadline,
                node: *node,
            },
            Item::Delay(name, until) => SnapshotItem::Delay {
                name,
                until: *until,
            },
            Item::Fence(key, token, value) => SnapshotItem::Fence {
                key,
                token: *token,
                value,
            },
            Item::MultiWaiter {
                wait,
                names,
                owner,
                lease_ms,
                conditions,
            } => SnapshotItem::MultiWaiter {
                wait: *wait,
                names: names.iter().map(Vec::as_slice).collect(),
                owner: owner.as_deref(),
                lease_ms: *lease_ms,
                conditions: *conditions,
            },
        };
        sm.restore(&item);
    }

    /// What the item is about: a name (fence keys apart), or nothing for the floor.
    fn key(&self) -> (u8, &[u8]) {
        match self {
            Item::Floor(_) => (0, b""),
            Item::Counter(name, _)
            | Item::Holding { name, .. }
            | Item::Waiter { name, .. }
            | Item::Delay(name, _) => (1, name),
            Item::Fence(key, _, _) => (2, key),
            Item::MultiWaiter { .. } => (3, b""),
        }
    }
}

fn items(snapshot: &Snapshot) -> Vec<Item> {
    let mut out = Vec::new();
    snapshot.emit(&mut |item| out.push(Item::of(item)));
    out
}

fn restore(position: u64, at: Millis, items: &[Item]) -> StateMachine {
    let mut sm = StateMachine::new();
    sm.restore_begin(position, at);
    for item in items {
        item.restore_into(&mut sm);
    }
    sm.restore_end();
    sm
}

/// Rebuilds a machine from `snapshot`, restoring names in an order that `seed` shuffles (each
/// name's items keep their order: its waiters come in queue order).
fn rebuild(snapshot: &Snapshot, seed: u64) -> StateMachine {
    let mut items = items(snapshot);
    items.sort_by_cached_key(|item| {
        let mut h = DefaultHasher::new();
        (seed, item.key()).hash(&mut h);
        h.finish()
    });
    restore(snapshot.position(), snapshot.at(), &items)
}

/// Runs the expiry task of `sm` at `now` until nothing is due, as one op per look. One look
/// takes everything due: a FLOCK.ACQUIREALL waiter is granted when the last of its names
/// frees, so expiring in batches that differ between the two indexes could grant different
/// waiters (in a real log the batches are the log's).
fn expire_everything(sm: &mut StateMachine, position: u64, now: Millis) {
    for _ in 0..1000 {
        let leases = sm.due_leases(now, 10_000);
        if leases.is_empty() {
            return;
        }
        sm.apply(position, now, &Op::Expire { leases });
    }
    panic!("the expiry task never caught up");
}

fn check_same_reads(a: &StateMachine, b: &StateMachine, now: Millis) -> Result<(), TestCaseError> {
    prop_assert_eq!(b.digest(), a.digest());
    for name in NAMES {
        prop_assert_eq!(b.status(name, now), a.status(name, now));
        prop_assert_eq!(b.ttl(name, now), a.ttl(name, now));
        prop_assert_eq!(b.last_token(name), a.last_token(name));
    }
    for key in KEYS {
        prop_assert_eq!(b.fence_value(key), a.fence_value(key));
        prop_assert_eq!(b.fence_token(key), a.fence_token(key));
    }
    prop_assert_eq!(b.token_floor(), a.token_floor());
    prop_assert_eq!((b.position(), b.time()), (a.position(), a.time()));
    let (sa, sb) = (a.lock_stats(), b.lock_stats());
    prop_assert_eq!((sb.locks_held, sb.waiters), (sa.locks_held, sa.waiters));
    prop_assert_eq!(b.fence_stats().keys, a.fence_stats().keys);
    prop_assert_eq!(b.has_holdings_or_waiters(), a.has_holdings_or_waiters());
    Ok(())
}

/// Applies `mutation` to `sm` at its own position and time (so only the state differs).
/// `None` if it does not apply; else whether it surely changed the state (an acquire at the
/// counter's cap is busy, though it may have expired a lapsed lease).
fn mutate(sm: &mut StateMachine, mutation: &Mutation) -> Option<bool> {
    let (position, at) = (sm.position(), sm.time());
    let op = match *mutation {
        Mutation::Advance(n) => {
            let last = sm.last_token(NAMES[n]);
            if last == MAX_TOKEN {
                return None;
            }
            Op::Advance {
                name: bytes(NAMES[n]),
                token: last + 1,
            }
        }
        Mutation::Fence(k) => Op::FenceSet {
            lock: None,
            key: bytes(KEYS[k]),
            token: sm.fence_token(KEYS[k]) + 1,
            value: bytes(b"mutated"),
        },
        Mutation::Queue(n) => Op::Acquire {
            conditions: Default::default(),
            name: bytes(NAMES[n]),
            lease_ms: 10,
            owner: Some(bytes(b"mutant")),
            wait: true.into(),
        },
        Mutation::BumpAll => {
            if sm.token_floor() == MAX_TOKEN {
                return None;
            }
            Op::BumpAll { by: 1 }
        }
    };
    // An op index no entry of the log uses, so that a queued wait id is new.
    let result = sm.apply_in_entry(position, 1000, at, &op, &mut Vec::new());
    Some(!matches!(result, OpResult::Acquire(AcquireResult::Busy)))
}

fn run(steps: &[Step], cut: &Index, seed: u64, mutation: &Mutation) -> Result<(), TestCaseError> {
    let cut = cut.index(steps.len() + 1);
    let mut a = StateMachine::new();
    let mut seen = Seen::default();
    let mut log: Vec<Entry> = Vec::new();
    let (mut position, mut now) = (0u64, Millis(0));
    let mut snapshot = None;
    for (i, step) in steps.iter().enumerate() {
        if i == cut {
            snapshot = Some((a.snapshot(), a.digest(), log.len()));
        }
        now = now.plus(step.dt);
        position += step.gap;
        let mut entry = Entry {
            position,
            at: now,
            ops: Vec::new(),
            digest: 0,
        };
        let mut events = Vec::new();
        for g in &step.ops {
            let Some(op) = concretize(g, &mut a, &seen, now) else {
                continue;
            };
            let index = entry.ops.len() as u32;
            let from = events.len();
            let result = a.apply_in_entry(position, index, now, &op, &mut events);
            seen.observe(&op, &result, &events[from..]);
            entry.ops.push(Applied1 {
                index,
                op,
                result,
                events: events[from..].to_vec(),
            });
        }
        entry.digest = a.digest();
        log.push(entry);
    }
    let (snapshot, cut_digest, covered) =
        snapshot.unwrap_or_else(|| (a.snapshot(), a.digest(), log.len()));

    // The rebuilt machine is where the first one was at the cut...
    let mut b = rebuild(&snapshot, seed);
    prop_assert_eq!(b.digest(), cut_digest, "digest right after the restore");
    prop_assert_eq!(
        (b.position(), b.time()),
        (snapshot.position(), snapshot.at())
    );
    // ...and goes on exactly as the first one did.
    for entry in &log[covered..] {
        let mut events = Vec::new();
        for applied in &entry.ops {
            let from = events.len();
            let result = b.apply_in_entry(
                entry.position,
                applied.index,
                entry.at,
                &applied.op,
                &mut events,
            );
            prop_assert_eq!(
                comparable(&applied.op, &result, &events[from..]),
                comparable(&applied.op, &applied.result, &applied.events),
                "op {:?} at {}",
                &applied.op,
                entry.position
            );
        }
        prop_assert_eq!(
            b.digest(),
            entry.digest,
            "digest after the entry at {}",
            entry.position
        );
    }
    check_same_reads(&a, &b, now)?;

    // The digest tells different states apart.
    if let Some(changed) = mutate(&mut b, mutation) {
        if changed {
            prop_assert_ne!(b.digest(), a.digest(), "{:?} went unseen", mutation);
        }
        prop_assert_eq!(mutate(&mut a, mutation), Some(changed));
        check_same_reads(&a, &b, now)?;
    }

    // Each machine's deadline index knows every lease: expiring everything due far ahead,
    // each from its own index, leaves the same state.
    let later = now.plus(10_000);
    expire_everything(&mut a, position, later);
    expire_everything(&mut b, position, later);
    check_same_reads(&a, &b, later)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_rebuilt_machine_goes_on_exactly_like_the_original(
        steps in prop::collection::vec(step(), 1..60),
        cut in any::<Index>(),
        seed in any::<u64>(),
        mutation in mutation(),
    ) {
        run(&steps, &cut, seed, &mutation)?;
    }
}

#[test]
fn the_same_log_gives_the_same_digest_on_two_fresh_machines() {
    let ops = [
        Op::Acquire {
            conditions: Default::default(),
            name: bytes(b"a"),
            lease_ms: 100,
            owner: Some(bytes(b"x")),
            wait: false.into(),
        },
        Op::Acquire {
            conditions: Default::default(),
            name: bytes(b"a"),
            lease_ms: 100,
            owner: None,
            wait: true.into(),
        },
        Op::Advance {
            name: bytes(b"b"),
            token: 9,
        },
        Op::FenceSet {
            lock: None,
            key: bytes(b"f"),
            token: 2,
            value: bytes(b"v"),
        },
        Op::Forget {
            names: vec![bytes(b"b")],
        },
    ];
    let run = || {
        let mut sm = StateMachine::new();
        let results: Vec<_> = ops
            .iter()
            .enumerate()
            .map(|(i, op)| sm.apply(i as u64 + 1, Millis(i as u64), op))
            .collect();
        (sm.digest(), results)
    };
    assert_eq!(run(), run());
}

/// Every part of the replicated state is in the digest: one field changed, one digest changed.
#[test]
fn the_digest_sees_every_part_of_the_state() {
    let w1 = WaitId {
        position: 7,
        index: 0,
    };
    let w2 = WaitId {
        position: 8,
        index: 1,
    };
    let holding =
        |first_token, token, holds, owner: &[u8], lease_ms, deadline, grants| Item::Holding {
            conditions: Default::default(),
            name: b"a".to_vec(),
            first_token,
            token,
            holds,
            owner: Some(owner.to_vec()),
            lease_ms,
            deadline: Millis(deadline),
            grants,
        };
    let waiter = |wait, owner: Option<&[u8]>, lease_ms| Item::Waiter {
        conditions: Default::default(),
        name: b"a".to_vec(),
        wait,
        owner: owner.map(<[u8]>::to_vec),
        lease_ms,
        deadline: None,
        node: 0,
    };
    let base = vec![
        Item::Floor(3),
        Item::Counter(b"idle".to_vec(), 9),
        Item::Counter(b"a".to_vec(), 20),
        holding(10, 12, 2, b"x", 100, 500, vec![(w1, 11)]),
        waiter(w1, Some(b"y"), 50),
        waiter(w2, None, 60),
        Item::Fence(b"f".to_vec(), 4, b"v".to_vec()),
    ];
    let digest = |items: &[Item], position| restore(position, Millis(0), items).digest();
    let want = digest(&base, 10);
    assert_eq!(digest(&base, 10), want, "restoring is deterministic");
    let changed = |i: usize, item: Item| {
        let mut items = base.clone();
        items[i] = item;
        items
    };
    let variants = vec![
        ("floor", changed(0, Item::Floor(4))),
        (
            "idle counter",
            changed(1, Item::Counter(b"idle".to_vec(), 8)),
        ),
        ("held counter", changed(2, Item::Counter(b"a".to_vec(), 21))),
        (
            "first token",
            changed(3, holding(11, 12, 2, b"x", 100, 500, vec![(w1, 11)])),
        ),
        (
            "token",
            changed(3, holding(10, 13, 2, b"x", 100, 500, vec![(w1, 11)])),
        ),
        (
            "holds",
            changed(3, holding(10, 12, 1, b"x", 100, 500, vec![(w1, 11)])),
        ),
        (
            "owner",
            changed(3, holding(10, 12, 2, b"z", 100, 500, vec![(w1, 11)])),
        ),
        (
            "lease",
            changed(3, holding(10, 12, 2, b"x", 101, 500, vec![(w1, 11)])),
        ),
        (
            "deadline",
            changed(3, holding(10, 12, 2, b"x", 100, 501, vec![(w1, 11)])),
        ),
        (
            "grants",
            changed(3, holding(10, 12, 2, b"x", 100, 500, vec![])),
        ),
        (
            "wait id",
            changed(
                4,
                waiter(
                    WaitId {
                        position: 7,
                        index: 2,
                    },
                    Some(b"y"),
                    50,
                ),
            ),
        ),
        ("waiter owner", changed(4, waiter(w1, None, 50))),
        ("waiter lease", changed(4, waiter(w1, Some(b"y"), 51))),
        (
            "fence token",
            changed(6, Item::Fence(b"f".to_vec(), 5, b"v".to_vec())),
        ),
        (
            "fence value",
            changed(6, Item::Fence(b"f".to_vec(), 4, b"w".to_vec())),
        ),
        ("queue order", {
            let mut items = base.clone();
            items.swap(4, 5);
            items
        }),
        ("one name less", base[1..].to_vec()),
    ];
    for (what, items) in &variants {
        assert_ne!(digest(items, 10), want, "{what} is not in the digest");
    }
    assert_ne!(digest(&base, 11), want, "the position is not in the digest");
}

/// Core bug: an idle name whose counter is not above the floor is not in a snapshot (it is the
/// same as no entry), but the machine that kept it counts it in `BumpAll`'s and `Forget`'s
/// results, so the same op gives different results on the original and on the rebuilt machine.
#[test]
fn bump_all_and_forget_count_the_same_after_a_restore() {
    let mut a = StateMachine::new();
    let advance = |name: &'static [u8], token| Op::Advance {
        name: bytes(name),
        token,
    };
    a.apply(1, Millis(0), &advance(b"x", 1));
    a.apply(2, Millis(0), &advance(b"y", 5));
    // Forgetting y raises the floor to 5: x, idle at 1, now reads as 5, like a name never seen.
    a.apply(
        3,
        Millis(0),
        &Op::Forget {
            names: vec![bytes(b"y")],
        },
    );
    let mut b = rebuild(&a.snapshot(), 0);
    assert_eq!(b.digest(), a.digest());
    let bump = Op::BumpAll { by: 1 };
    assert_eq!(b.apply(4, Millis(0), &bump), a.apply(4, Millis(0), &bump));
    let forget = Op::Forget {
        names: vec![bytes(b"x")],
    };
    assert_eq!(
        b.apply(5, Millis(0), &forget),
        a.apply(5, Millis(0), &forget)
    );
}
