//! FLOCK.ACQUIREALL in the core, one rule per test, with op times passed in: all or nothing,
//! waiting that holds nothing and blocks no one, the moment of the grant (a release, an expiry,
//! the end of a lock-delay), wait order among such waiters, cancels racing a grant, re-arms,
//! reentrancy, and snapshots.

use bytes::Bytes;
use flockd_core::{
    AcquireAllResult, AcquireResult, Applied, CancelAllResult, Conditions, Event, HoldingRef,
    Millis, Mode, Op, OpResult, StateMachine, WaitId,
};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn names(list: &[&str]) -> Vec<Bytes> {
    list.iter().map(|n| b(n)).collect()
}

#[derive(Default)]
struct Log {
    sm: StateMachine,
    pos: u64,
}

impl Log {
    fn apply(&mut self, at: u64, op: Op) -> Applied {
        self.pos += 1;
        self.sm.apply(self.pos, Millis(at), &op)
    }

    fn acquire(&mut self, at: u64, name: &str, lease_ms: u64, owner: Option<&str>) -> OpResult {
        self.apply(
            at,
            Op::Acquire {
                name: b(name),
                lease_ms,
                owner: owner.map(b),
                wait: false.into(),
                conditions: Conditions::default(),
            },
        )
        .result
    }

    fn acquire_all(
        &mut self,
        at: u64,
        list: &[&str],
        lease_ms: u64,
        owner: Option<&str>,
        wait: bool,
    ) -> Applied {
        self.apply(
            at,
            Op::AcquireAll {
                names: names(list),
                lease_ms,
                owner: owner.map(b),
                wait,
                conditions: Conditions::default(),
            },
        )
    }

    fn release(&mut self, at: u64, name: &str, token: u64) -> Applied {
        self.apply(
            at,
            Op::Release {
                name: b(name),
                token,
            },
        )
    }

    fn queued(&mut self, at: u64, list: &[&str], lease_ms: u64) -> WaitId {
        match self.acquire_all(at, list, lease_ms, None, true).result {
            OpResult::AcquireAll(AcquireAllResult::Queued(wait)) => wait,
            other => panic!("expected to queue, got {other:?}"),
        }
    }

    fn holders(&self, name: &str, at: u64) -> Vec<u64> {
        match self
            .sm
            .read(&flockd_core::Read::Holders { name: b(name) }, Millis(at))
        {
            OpResult::Holders(h) => h.iter().map(|h| h.token).collect(),
            other => panic!("{other:?}"),
        }
    }
}

/// "b" held (token 1, lease 100 from 1) and a waiter for "a" and "b" (lease 100) queued at 2.
fn waiting_for_b() -> (Log, WaitId) {
    let mut log = Log::default();
    log.acquire(1, "b", 100, None);
    let wait = log.queued(2, &["a", "b"], 100);
    (log, wait)
}

/// As [`waiting_for_b`], and "b" released at 3: the waiter holds "a" with 1 and "b" with 2.
fn granted_at_3() -> (Log, WaitId) {
    let (mut log, wait) = waiting_for_b();
    log.release(3, "b", 1);
    (log, wait)
}

fn all_granted(events: &[Event]) -> Option<(WaitId, Vec<u64>)> {
    events.iter().find_map(|e| match e {
        Event::AllGranted { wait, tokens } => Some((*wait, tokens.clone())),
        _ => None,
    })
}

#[test]
fn free_names_are_granted_together_with_a_token_each_in_the_order_given() {
    let mut log = Log::default();
    log.acquire(1, "b", 100, None);
    log.release(2, "b", 1);
    let applied = log.acquire_all(3, &["a", "b", "c"], 100, None, false);
    assert_eq!(
        applied.result,
        OpResult::AcquireAll(AcquireAllResult::Granted(vec![1, 2, 1]))
    );
    let granted: Vec<(Bytes, u64)> = applied
        .events
        .iter()
        .map(|e| match e {
            Event::Granted {
                name,
                token,
                wait: None,
            } => (name.clone(), *token),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(granted, vec![(b("a"), 1), (b("b"), 2), (b("c"), 1)]);
    assert_eq!(log.sm.status(b"b", Millis(3)).holdings, 1);
    assert_eq!(log.sm.ttl(b"c", Millis(3)), 100);
}

#[test]
fn one_busy_name_grants_nothing_and_changes_nothing() {
    let mut log = Log::default();
    log.acquire(1, "b", 100, None);
    // The digest counts the log position too: one op later, the same state is one more.
    let digest = log.sm.digest();
    let applied = log.acquire_all(2, &["a", "b"], 100, None, false);
    assert_eq!(applied.result, OpResult::AcquireAll(AcquireAllResult::Busy));
    assert_eq!(applied.events, vec![]);
    assert_eq!(log.sm.digest(), digest.wrapping_add(1));
    assert_eq!(log.sm.last_token(b"a"), 0);
}

#[test]
fn a_waiter_holds_nothing_and_blocks_no_one_until_every_name_is_free() {
    let mut log = Log::default();
    log.acquire(1, "b", 100, None);
    let wait = log.queued(2, &["a", "b"], 50);
    // Queued on no name: "a" is granted to others, and "b"'s queue is empty.
    assert_eq!(log.sm.status(b"b", Millis(2)).waiters, 0);
    assert_eq!(
        log.acquire(3, "a", 10, None),
        OpResult::Acquire(AcquireResult::Granted(1))
    );
    // "b" frees while "a" is held: still waiting.
    let applied = log.release(4, "b", 1);
    assert_eq!(all_granted(&applied.events), None);
    // "a" frees: both at once.
    let applied = log.release(5, "a", 1);
    assert_eq!(all_granted(&applied.events), Some((wait, vec![2, 2])));
    assert_eq!(log.holders("a", 5), vec![2]);
    assert_eq!(log.holders("b", 5), vec![2]);
    assert_eq!(log.sm.ttl(b"a", Millis(5)), 50);
    assert_eq!(log.sm.lock_stats().waiters, 0);
}

#[test]
fn an_expiry_or_the_end_of_a_lock_delay_is_the_moment_of_the_grant() {
    let mut log = Log::default();
    log.apply(
        0,
        Op::Acquire {
            name: b("a"),
            lease_ms: 10,
            owner: None,
            wait: false.into(),
            conditions: Conditions {
                lock_delay_ms: 20,
                ..Conditions::default()
            },
        },
    );
    let wait = log.queued(1, &["a", "b"], 100);
    // The lease ends at 10, the lock-delay at 30.
    let expired = log.apply(
        10,
        Op::Expire {
            leases: vec![HoldingRef {
                name: b("a"),
                first_token: 1,
            }],
        },
    );
    assert_eq!(all_granted(&expired.events), None);
    assert_eq!(log.sm.status(b"a", Millis(10)).delay_ms, 20);
    let delay_end = log.apply(
        30,
        Op::Expire {
            leases: vec![HoldingRef {
                name: b("a"),
                first_token: 0,
            }],
        },
    );
    assert_eq!(all_granted(&delay_end.events), Some((wait, vec![2, 1])));
}

#[test]
fn a_single_name_queue_comes_before_a_waiter_of_several() {
    let mut log = Log::default();
    log.acquire(1, "a", 100, None);
    let multi = log.queued(2, &["a", "b"], 100);
    let single = log.apply(
        3,
        Op::Acquire {
            name: b("a"),
            lease_ms: 100,
            owner: None,
            wait: true.into(),
            conditions: Conditions::default(),
        },
    );
    let OpResult::Acquire(AcquireResult::Queued(single)) = single.result else {
        panic!("{:?}", single.result);
    };
    // "a" goes to its own queue's head; the waiter of several gets it when that one is done.
    let applied = log.release(4, "a", 1);
    assert!(applied.events.contains(&Event::Granted {
        name: b("a"),
        token: 2,
        wait: Some(single),
    }));
    assert_eq!(all_granted(&applied.events), None);
    let applied = log.release(5, "a", 2);
    assert_eq!(all_granted(&applied.events), Some((multi, vec![3, 1])));
}

#[test]
fn waiters_of_several_names_are_served_in_wait_order() {
    let mut log = Log::default();
    log.acquire(1, "b", 100, None);
    let first = log.queued(2, &["a", "b"], 100);
    let second = log.queued(3, &["b", "c"], 100);
    let applied = log.release(4, "b", 1);
    assert_eq!(all_granted(&applied.events), Some((first, vec![1, 2])));
    let applied = log.release(5, "b", 2);
    assert_eq!(all_granted(&applied.events), Some((second, vec![3, 1])));
}

#[test]
fn a_cancel_that_lost_the_race_reports_every_token_or_releases_them() {
    let (mut log, wait) = granted_at_3();
    let cancel = |release_if_granted| Op::CancelWaitAll {
        names: names(&["a", "b"]),
        wait,
        release_if_granted,
    };
    // A timeout learns the tokens; the holdings stay.
    let timed_out = log.apply(4, cancel(false));
    assert_eq!(
        timed_out.result,
        OpResult::CancelWaitAll(CancelAllResult::AlreadyGranted(vec![1, 2]))
    );
    assert_eq!(log.holders("a", 4), vec![1]);

    // A closed connection gives both back.
    let (mut log, wait) = granted_at_3();
    let closed = log.apply(
        4,
        Op::CancelWaitAll {
            names: names(&["a", "b"]),
            wait,
            release_if_granted: true,
        },
    );
    assert_eq!(
        closed.result,
        OpResult::CancelWaitAll(CancelAllResult::AlreadyGranted(vec![1, 2]))
    );
    assert_eq!(log.holders("a", 4), Vec::<u64>::new());
    assert_eq!(log.holders("b", 4), Vec::<u64>::new());
}

#[test]
fn a_grant_whose_lease_ran_out_before_the_cancel_is_all_given_back() {
    let (mut log, wait) = granted_at_3();
    // "a" is renewed, "b" is not: at 150 "b" has lapsed.
    log.apply(
        50,
        Op::Renew {
            name: b("a"),
            token: 1,
            lease_ms: 1000,
        },
    );
    let applied = log.apply(
        150,
        Op::CancelWaitAll {
            names: names(&["a", "b"]),
            wait,
            release_if_granted: false,
        },
    );
    assert_eq!(
        applied.result,
        OpResult::CancelWaitAll(CancelAllResult::Removed)
    );
    assert_eq!(log.holders("a", 150), Vec::<u64>::new());
}

#[test]
fn a_cancel_of_a_waiting_one_removes_it() {
    let (mut log, wait) = waiting_for_b();
    let applied = log.apply(
        3,
        Op::CancelWaitAll {
            names: names(&["a", "b"]),
            wait,
            release_if_granted: false,
        },
    );
    assert_eq!(
        applied.result,
        OpResult::CancelWaitAll(CancelAllResult::Removed)
    );
    assert_eq!(
        applied.events,
        vec![Event::WaitEnded { name: b("a"), wait }]
    );
    assert_eq!(log.sm.lock_stats().waiters, 0);
    let applied = log.release(4, "b", 1);
    assert_eq!(all_granted(&applied.events), None);
}

#[test]
fn a_rearm_drops_every_waiter_of_several_names() {
    let (mut log, wait) = waiting_for_b();
    let applied = log.apply(3, Op::Rearm { extra_ms: 0 });
    assert_eq!(
        applied.result,
        OpResult::Rearm {
            holdings: 1,
            waiters: 1
        }
    );
    assert!(
        applied
            .events
            .contains(&Event::WaitEnded { name: b("a"), wait })
    );
    let applied = log.release(4, "b", 1);
    assert_eq!(all_granted(&applied.events), None);
}

#[test]
fn an_owner_reenters_what_it_holds_and_cannot_upgrade_a_shared_hold() {
    let mut log = Log::default();
    log.acquire(1, "a", 100, Some("me"));
    let applied = log.acquire_all(2, &["a", "b"], 100, Some("me"), false);
    assert_eq!(
        applied.result,
        OpResult::AcquireAll(AcquireAllResult::Granted(vec![2, 1]))
    );
    assert_eq!(log.sm.status(b"a", Millis(2)).holds, 2);

    log.apply(
        3,
        Op::Acquire {
            name: b("s"),
            lease_ms: 100,
            owner: Some(b("me")),
            wait: false.into(),
            conditions: Conditions {
                mode: Mode::Shared,
                ..Conditions::default()
            },
        },
    );
    let applied = log.acquire_all(4, &["c", "s"], 100, Some("me"), true);
    assert_eq!(
        applied.result,
        OpResult::AcquireAll(AcquireAllResult::CannotUpgrade)
    );
    assert_eq!(log.sm.last_token(b"c"), 0);
}

#[test]
fn a_name_given_twice_is_refused_by_the_core_too() {
    let mut log = Log::default();
    let applied = log.acquire_all(1, &["a", "a"], 100, None, true);
    assert_eq!(applied.result, OpResult::AcquireAll(AcquireAllResult::Busy));
    assert_eq!(log.sm.last_token(b"a"), 0);
}

#[test]
fn a_waiter_survives_a_snapshot_and_is_granted_after_the_restore() {
    let (mut log, wait) = waiting_for_b();
    let snapshot = log.sm.snapshot();
    let mut restored = StateMachine::new();
    restored.restore_begin(snapshot.position(), snapshot.at());
    snapshot.emit(&mut |item| restored.restore(&item));
    restored.restore_end();
    assert_eq!(restored.digest(), log.sm.digest());
    assert_eq!(restored.lock_stats().waiters, 1);
    let op = Op::Release {
        name: b("b"),
        token: 1,
    };
    let mut original = log.sm.apply(10, Millis(3), &op);
    let again = restored.apply(10, Millis(3), &op);
    // A snapshot does not keep when a holding was granted: the restored machine cannot say
    // how long b was held, and nothing else may differ.
    if let Some(Event::Released { held_ms, .. }) = original.events.first_mut() {
        assert_eq!(*held_ms, Some(2));
        *held_ms = None;
    }
    assert_eq!(again, original);
    assert_eq!(all_granted(&again.events), Some((wait, vec![1, 2])));
    assert_eq!(restored.digest(), log.sm.digest());
}
