//! Forgetting idle names (and bumping every counter) must never let a token go back: property
//! tests over random operations with a tiny idle-name bound, checked against the highest token
//! each name ever showed, and against a replay of the journal.

use std::collections::HashMap;

use bytes::Bytes;
use flockd_core::journal::MemoryJournal;
use flockd_core::{AcquireOutcome, AcquireRequest, Millis, State};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Acquire(u8),
    Release(u8),
    Advance(u8, u64),
    Reclaim(usize),
    Bump(u64),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6).prop_map(Op::Acquire),
        3 => (0u8..6).prop_map(Op::Release),
        1 => (0u8..6, 1u64..50).prop_map(|(n, t)| Op::Advance(n, t)),
        2 => (0usize..4).prop_map(Op::Reclaim),
        1 => (1u64..5).prop_map(Op::Bump),
        1 => (1u64..500).prop_map(Op::Tick),
    ]
}

fn name(n: u8) -> Bytes {
    Bytes::from(format!("lock-{n}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn tokens_never_go_back_when_names_are_forgotten(ops in prop::collection::vec(op(), 1..120)) {
        let state = State::default();
        let journal = MemoryJournal::default();
        let mut now = Millis(0);
        // Highest token each name ever showed (granted, or reported as its counter).
        let mut seen: HashMap<u8, u64> = HashMap::new();
        let mut held: HashMap<u8, u64> = HashMap::new();
        for op in &ops {
            match *op {
                Op::Acquire(n) => {
                    let req = AcquireRequest { name: name(n), lease_ms: 1000, owner: None, wait: false };
                    if let AcquireOutcome::Granted(token) = state.locks.acquire(req, now, &journal) {
                        let before = seen.get(&n).copied().unwrap_or(0);
                        prop_assert!(token > before, "name {n}: token {token} after {before}");
                        seen.insert(n, token);
                        held.insert(n, token);
                    }
                }
                Op::Release(n) => {
                    if let Some(token) = held.remove(&n) {
                        let _ = state.locks.release(&name(n), token, now, &journal);
                    }
                }
                Op::Advance(n, t) => {
                    state.locks.advance(&name(n), t, &journal);
                }
                Op::Reclaim(max) => {
                    state.locks.reclaim_idle(max, &journal);
                }
                Op::Bump(by) => {
                    state.locks.bump_all(by, &journal);
                }
                Op::Tick(ms) => {
                    now = now.plus(ms);
                    state.locks.expire_due(now, &journal);
                    held.retain(|n, _| state.locks.status(&name(*n), now).locked);
                }
            }
            for n in 0u8..6 {
                let counter = state.locks.last_token(&name(n));
                let before = seen.get(&n).copied().unwrap_or(0);
                prop_assert!(counter >= before, "name {n}: counter {counter} below {before}");
                seen.insert(n, counter);
            }
        }
        // The journal replays to counters at least as high as the live ones (equal but for
        // names the live table forgot, which the replay may still know).
        let replayed = State::default();
        for change in journal.changes.lock().iter() {
            replayed.apply_change(change);
        }
        for n in 0u8..6 {
            prop_assert!(replayed.locks.last_token(&name(n)) >= state.locks.last_token(&name(n)));
        }
    }
}

#[test]
fn reclaim_forgets_idle_names_down_to_the_bound_and_raises_the_floor() {
    let state = State::default();
    let journal = MemoryJournal::default();
    for i in 0..1000u32 {
        let req = AcquireRequest {
            name: Bytes::from(format!("n{i}")),
            lease_ms: 10,
            owner: None,
            wait: false,
        };
        let AcquireOutcome::Granted(token) = state.locks.acquire(req, Millis(0), &journal) else {
            panic!()
        };
        state
            .locks
            .release(format!("n{i}").as_bytes(), token, Millis(0), &journal)
            .unwrap();
    }
    // One lock stays held: reclamation never touches it.
    let req = AcquireRequest {
        name: Bytes::from_static(b"held"),
        lease_ms: 60_000,
        owner: None,
        wait: false,
    };
    assert!(matches!(
        state.locks.acquire(req, Millis(0), &journal),
        AcquireOutcome::Granted(1)
    ));
    let forgotten = state.locks.reclaim_idle(100, &journal);
    assert!(forgotten >= 900, "forgot {forgotten}");
    assert!(state.locks.len() <= 101, "{} names left", state.locks.len());
    assert!(state.locks.status(b"held", Millis(1)).locked);
    // Every name, forgotten or not, would now get a token above the 1 it had.
    for i in 0..1000u32 {
        assert!(state.locks.last_token(format!("n{i}").as_bytes()) >= 1);
    }
    assert!(
        journal
            .changes
            .lock()
            .iter()
            .any(|c| matches!(c, flockd_core::Change::Floor { token: 1 }))
    );
    // Under the bound nothing happens.
    assert_eq!(state.locks.reclaim_idle(1_000_000, &journal), 0);
}

#[test]
fn bump_raises_every_counter_and_unknown_names() {
    let state = State::default();
    let journal = MemoryJournal::default();
    state.locks.advance(b"a", 10, &journal);
    state.locks.advance(b"b", 3, &journal);
    assert_eq!(state.locks.bump_all(100, &journal), 2);
    assert_eq!(state.locks.last_token(b"a"), 110);
    assert_eq!(state.locks.last_token(b"b"), 103);
    assert_eq!(state.locks.last_token(b"never-seen"), 100);
    let replayed = State::default();
    for change in journal.changes.lock().iter() {
        replayed.apply_change(change);
    }
    assert_eq!(replayed.locks.last_token(b"a"), 110);
    assert_eq!(replayed.locks.last_token(b"b"), 103);
    assert_eq!(replayed.locks.last_token(b"never-seen"), 100);
}

#[test]
fn names_used_since_the_last_pass_are_spared() {
    let state = State::default();
    let journal = MemoryJournal::default();
    let name = |i: u32| format!("n{i}").into_bytes();
    for i in 0..200u32 {
        state.locks.advance(&name(i), 5, &journal);
    }
    // Over the bound: everything was used, so one pass unmarks and the next forgets some.
    assert!(state.locks.reclaim_idle(190, &journal) > 0);
    let survivors: Vec<u32> = (0..200)
        .filter(|&i| state.locks.status(&name(i), Millis(0)).last_token == 5)
        .collect();
    assert_eq!(state.locks.token_floor(), 5);
    // 50 survivors are used again, with counters far above everything else.
    for &i in &survivors[..50] {
        state.locks.advance(&name(i), 1000 + u64::from(i), &journal);
    }
    assert!(state.locks.reclaim_idle(100, &journal) > 0);
    // Had any of them been forgotten, the floor would have risen to its counter.
    assert_eq!(
        state.locks.token_floor(),
        5,
        "a recently used name was forgotten"
    );
    for &i in &survivors[..50] {
        assert_eq!(state.locks.last_token(&name(i)), 1000 + u64::from(i));
    }
}
