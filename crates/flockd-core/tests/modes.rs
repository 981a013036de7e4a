//! Several holdings per name under random mixes: exclusive, shared and limited requests, waits
//! and cancels, releases, force-releases, expiries, lock-delays, session ends and time steps.
//! After every op the state is read back from a snapshot and checked against the admission
//! rule of the contract (spec/primitives.md):
//! - the live holdings of a name never exceed the smallest limit among them, and an exclusive
//!   holding is alone;
//! - tokens strictly increase per name, whatever the mode;
//! - the queue is settled: unless a lock-delay runs, its head is not admitted (else it would
//!   have been granted), so nobody waits behind a request that fits; and the expiry task's op
//!   leaves no lapsed lease and no ended lock-delay behind;
//! - a new holding granted by an acquire never jumps a queue;
//! - FLOCK.ACQUIREALL grants every name or none, and once the expiry task's op is applied no
//!   such waiter is left waiting while every one of its names is free;
//! - a fresh machine fed the same log reaches the same digest.

use std::collections::BTreeMap;

use bytes::Bytes;
use flockd_core::{
    AcquireAllResult, AcquireResult, Conditions, Event, Millis, Mode, Op, OpResult, SnapshotItem,
    StateMachine, WaitId,
};
use proptest::prelude::*;

const NAMES: [&[u8]; 2] = [b"a", b"b"];
const OWNERS: [Option<&[u8]>; 3] = [None, Some(b"x"), Some(b"y")];

#[derive(Clone, Debug)]
enum Step {
    Acquire {
        name: usize,
        lease: u64,
        owner: usize,
        wait: bool,
        mode: u16,
        session: bool,
        delay: u64,
    },
    Release {
        name: usize,
        pick: usize,
    },
    ForceRelease {
        name: usize,
    },
    Cancel {
        pick: usize,
    },
    AcquireAll {
        reversed: bool,
        lease: u64,
        owner: usize,
        wait: bool,
        session: bool,
    },
    CancelAll {
        pick: usize,
    },
    EndSession,
    Expire,
    Tick {
        ms: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (
            (0..NAMES.len(), 5..120u64, 0..OWNERS.len(), prop::bool::weighted(0.6)),
            (0..5u16, prop::bool::weighted(0.2), prop_oneof![3 => Just(0u64), 1 => 1..50u64]),
        )
            .prop_map(|((name, lease, owner, wait), (mode, session, delay))| Step::Acquire {
                name,
                lease,
                owner,
                wait,
                mode,
                session,
                delay,
            }),
        4 => (0..NAMES.len(), any::<usize>()).prop_map(|(name, pick)| Step::Release { name, pick }),
        1 => (0..NAMES.len()).prop_map(|name| Step::ForceRelease { name }),
        2 => any::<usize>().prop_map(|pick| Step::Cancel { pick }),
        3 => (any::<bool>(), 5..120u64, 0..OWNERS.len(), prop::bool::weighted(0.6), prop::bool::weighted(0.2))
            .prop_map(|(reversed, lease, owner, wait, session)| Step::AcquireAll {
                reversed,
                lease,
                owner,
                wait,
                session,
            }),
        1 => any::<usize>().prop_map(|pick| Step::CancelAll { pick }),
        1 => Just(Step::EndSession),
        2 => Just(Step::Expire),
        3 => (1..40u64).prop_map(|ms| Step::Tick { ms }),
    ]
}

fn mode_of(n: u16) -> Mode {
    match n {
        0 => Mode::Exclusive,
        1 => Mode::Shared,
        n => Mode::Limit(n),
    }
}

#[derive(Default, Debug)]
struct NameState {
    /// (latest token, mode, deadline) of every holding.
    holdings: Vec<(u64, Mode, Millis)>,
    first_tokens: Vec<u64>,
    waiters: Vec<(WaitId, Mode)>,
    delay_until: Millis,
}

fn read_state(sm: &StateMachine) -> BTreeMap<Vec<u8>, NameState> {
    let mut out: BTreeMap<Vec<u8>, NameState> = BTreeMap::new();
    sm.snapshot().emit(&mut |item| match item {
        SnapshotItem::Holding {
            name,
            first_token,
            token,
            deadline,
            conditions,
            ..
        } => {
            let state = out.entry(name.to_vec()).or_default();
            state.holdings.push((token, conditions.mode, deadline));
            state.first_tokens.push(first_token);
        }
        SnapshotItem::Waiter {
            name,
            wait,
            conditions,
            ..
        } => out
            .entry(name.to_vec())
            .or_default()
            .waiters
            .push((wait, conditions.mode)),
        SnapshotItem::Delay { name, until } => {
            out.entry(name.to_vec()).or_default().delay_until = until
        }
        _ => {}
    });
    out
}

/// The names of every FLOCK.ACQUIREALL waiter.
fn multi_waiters(sm: &StateMachine) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    sm.snapshot().emit(&mut |item| {
        if let SnapshotItem::MultiWaiter { names, .. } = item {
            out.push(names.iter().map(|n| n.to_vec()).collect());
        }
    });
    out
}

fn admits(mode: Mode, others: &[(u64, Mode, Millis)]) -> bool {
    let limit = others
        .iter()
        .map(|h| h.1.admits())
        .fold(mode.admits(), u32::min);
    (others.len() as u64) < u64::from(limit)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_admission_rule_fifo_and_tokens_hold(steps in prop::collection::vec(step(), 1..120)) {
        let mut sm = StateMachine::new();
        let mut log: Vec<(u64, Millis, Op)> = Vec::new();
        let mut now = Millis(1);
        let mut queued: Vec<(Bytes, WaitId)> = Vec::new();
        let mut queued_all: Vec<(Vec<Bytes>, WaitId)> = Vec::new();
        let mut last_token: BTreeMap<Bytes, u64> = BTreeMap::new();
        for step in steps {
            let before = read_state(&sm);
            let op = match step {
                Step::Acquire { name, lease, owner, wait, mode, session, delay } => Op::Acquire {
                    name: Bytes::from_static(NAMES[name]),
                    lease_ms: lease,
                    owner: OWNERS[owner].map(Bytes::from_static),
                    wait: wait.into(),
                    conditions: Conditions {
                        mode: mode_of(mode),
                        session: session.then_some(7),
                        lock_delay_ms: delay,
                    },
                },
                Step::Release { name, pick } => {
                    let tokens: Vec<u64> = before
                        .get(NAMES[name])
                        .map(|s| s.holdings.iter().map(|h| h.0).collect())
                        .unwrap_or_default();
                    let token = if tokens.is_empty() { 1 } else { tokens[pick % tokens.len()] };
                    Op::Release { name: Bytes::from_static(NAMES[name]), token }
                }
                Step::ForceRelease { name } => Op::ForceRelease { name: Bytes::from_static(NAMES[name]) },
                Step::Cancel { pick } => {
                    if queued.is_empty() {
                        continue;
                    }
                    let (name, wait) = queued.remove(pick % queued.len());
                    Op::CancelWait { name, wait, release_if_granted: pick % 2 == 0 }
                }
                Step::AcquireAll { reversed, lease, owner, wait, session } => {
                    let mut names: Vec<Bytes> = NAMES.iter().map(|n| Bytes::from_static(n)).collect();
                    if reversed {
                        names.reverse();
                    }
                    Op::AcquireAll {
                        names,
                        lease_ms: lease,
                        owner: OWNERS[owner].map(Bytes::from_static),
                        wait,
                        conditions: Conditions { session: session.then_some(7), ..Conditions::default() },
                    }
                }
                Step::CancelAll { pick } => {
                    if queued_all.is_empty() {
                        continue;
                    }
                    let (names, wait) = queued_all.remove(pick % queued_all.len());
                    Op::CancelWaitAll { names, wait, release_if_granted: pick % 2 == 0 }
                }
                Step::EndSession => Op::EndSession {
                    session: 7,
                    names: NAMES.iter().map(|n| Bytes::from_static(n)).collect(),
                },
                Step::Expire => {
                    let leases = sm.due_leases(now, 16);
                    Op::Expire { leases }
                }
                Step::Tick { ms } => {
                    now = now.plus(ms);
                    continue;
                }
            };
            let position = log.len() as u64 + 1;
            let applied = sm.apply(position, now, &op);
            log.push((position, now, op.clone()));
            if let OpResult::Acquire(AcquireResult::Queued(wait)) = applied.result {
                queued.push((op.key().unwrap().clone(), wait));
            }
            if let (OpResult::AcquireAll(AcquireAllResult::Queued(wait)), Op::AcquireAll { names, .. }) =
                (&applied.result, &op)
            {
                queued_all.push((names.clone(), *wait));
            }
            // All or nothing: every grant that went to no single waiter is the op's own grant
            // (one token, or one per name of FLOCK.ACQUIREALL) or part of a waiting
            // FLOCK.ACQUIREALL's grant of all its names.
            let unqueued_grants = applied
                .events
                .iter()
                .filter(|e| matches!(e, Event::Granted { wait: None, .. }))
                .count();
            let all_granted: usize = applied
                .events
                .iter()
                .map(|e| match e {
                    Event::AllGranted { tokens, .. } => {
                        assert_eq!(tokens.len(), NAMES.len());
                        tokens.len()
                    }
                    _ => 0,
                })
                .sum();
            let own = match &applied.result {
                OpResult::Acquire(AcquireResult::Granted(_)) => 1,
                OpResult::AcquireAll(AcquireAllResult::Granted(tokens)) => {
                    prop_assert_eq!(tokens.len(), NAMES.len());
                    tokens.len()
                }
                _ => 0,
            };
            prop_assert_eq!(unqueued_grants, own + all_granted, "a grant of part of the names");
            for event in &applied.events {
                if let Event::Granted { name, token, wait } = event {
                    let last = last_token.entry(name.clone()).or_insert(0);
                    prop_assert!(*token > *last, "token {token} after {last} on {name:?}");
                    *last = *token;
                    // A new holding from the acquire itself never jumps a queue of the name
                    // (a reentrant hold does not count: it takes no place).
                    if wait.is_none()
                        && let Op::Acquire { name: n, .. } = &op
                    {
                        let after = read_state(&sm);
                        let state = after.get(n.as_ref());
                        let new_holding = state.is_some_and(|s| s.first_tokens.contains(token));
                        let still_queued = state.map_or(0, |s| s.waiters.len());
                        if new_holding {
                            prop_assert_eq!(still_queued, 0, "granted past a queue");
                        }
                    }
                }
            }
            let state_now = read_state(&sm);
            if matches!(op, Op::Expire { .. }) {
                for names in multi_waiters(&sm) {
                    let all_free = names.iter().all(|n| {
                        state_now.get(n.as_slice()).is_none_or(|s| {
                            s.holdings.is_empty() && s.waiters.is_empty() && s.delay_until == Millis(0)
                        })
                    });
                    prop_assert!(!all_free, "an ACQUIREALL of {names:?} waits with every name free");
                }
            }
            for (name, state) in state_now {
                let live: Vec<_> = state.holdings.iter().filter(|h| h.2 > now).copied().collect();
                for (i, h) in live.iter().enumerate() {
                    let mut others = live.clone();
                    others.remove(i);
                    prop_assert!(
                        admits(h.1, &others),
                        "{name:?}: {live:?} breaks the limit of {:?}", h.1
                    );
                }
                // A lock-delay that is over, or a lapsed lease, waits for the expiry task's op;
                // once that op is applied neither is left.
                if matches!(op, Op::Expire { .. }) {
                    prop_assert!(
                        state.delay_until == Millis(0) || state.delay_until > now,
                        "{name:?}: an ended lock-delay outlived the expiry op"
                    );
                    prop_assert!(state.holdings.iter().all(|h| h.2 > now), "{name:?}: lapsed");
                }
                if let Some(&(_, head)) = state.waiters.first()
                    && state.delay_until == Millis(0)
                    && state.holdings.iter().all(|h| h.2 > now)
                {
                    prop_assert!(
                        !admits(head, &state.holdings),
                        "{name:?}: the head {head:?} fits {:?} but waits", state.holdings
                    );
                }
            }
        }
        let mut replayed = StateMachine::new();
        for (position, at, op) in &log {
            replayed.apply(*position, *at, op);
        }
        prop_assert_eq!(replayed.digest(), sm.digest());
    }
}
