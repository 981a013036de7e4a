//! Unit tests of the lock table's rules, one rule per test, time passed in (no sleeping).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::*;
use crate::journal::MemoryJournal;
use crate::{MAX_TOKEN, NullJournal, State};

const N: &[u8] = b"lock";

fn req(lease_ms: u64, owner: Option<&'static str>, wait: bool) -> AcquireRequest {
    AcquireRequest {
        name: Bytes::from_static(N),
        lease_ms,
        owner: owner.map(|o| Bytes::from_static(o.as_bytes())),
        wait,
    }
}

fn t(ms: u64) -> Millis {
    Millis(ms)
}

fn granted(outcome: AcquireOutcome) -> u64 {
    match outcome {
        AcquireOutcome::Granted(token) => token,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn queued(outcome: AcquireOutcome) -> (WaitTicket, oneshot::Receiver<u64>) {
    match outcome {
        AcquireOutcome::Queued { ticket, grant } => (ticket, grant),
        other => panic!("expected to queue, got {other:?}"),
    }
}

fn records(journal: &MemoryJournal) -> Vec<Change> {
    std::mem::take(&mut *journal.changes.lock())
}

fn name() -> Bytes {
    Bytes::from_static(N)
}

#[test]
fn first_grant_is_token_one_and_tokens_keep_increasing() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    assert_eq!(table.last_token(N), 0);
    assert_eq!(granted(table.acquire(req(100, None, false), t(0), &j)), 1);
    assert_eq!(
        records(&j),
        vec![Change::Grant {
            name: name(),
            token: 1,
            first_token: 1,
            holds: 1,
            owner: None,
            lease_ms: 100
        }]
    );
    assert_eq!(table.release(N, 1, t(1), &j), Ok(true));
    assert_eq!(
        records(&j),
        vec![Change::Release {
            name: name(),
            holds_left: 0
        }]
    );
    assert_eq!(granted(table.acquire(req(100, None, false), t(2), &j)), 2);
    assert_eq!(table.last_token(N), 2);
}

#[test]
fn held_lock_without_wait_is_busy_and_journals_nothing() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    granted(table.acquire(req(100, None, false), t(0), &j));
    records(&j);
    assert!(matches!(
        table.acquire(req(100, None, false), t(1), &j),
        AcquireOutcome::Busy
    ));
    assert!(records(&j).is_empty());
}

#[test]
fn no_owner_is_not_reentrant() {
    let table = LockTable::new();
    let j = NullJournal;
    granted(table.acquire(req(100, None, false), t(0), &j));
    assert!(matches!(
        table.acquire(req(100, None, false), t(1), &j),
        AcquireOutcome::Busy
    ));
}

#[test]
fn same_owner_is_reentrant_with_new_token_and_fresh_lease() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    assert_eq!(
        granted(table.acquire(req(100, Some("a"), false), t(0), &j)),
        1
    );
    assert_eq!(
        granted(table.acquire(req(500, Some("a"), true), t(50), &j)),
        2
    );
    let owner = Some(Bytes::from_static(b"a"));
    assert_eq!(
        records(&j)[1],
        Change::Grant {
            name: name(),
            token: 2,
            first_token: 1,
            holds: 2,
            owner: owner.clone(),
            lease_ms: 500
        }
    );
    let status = table.status(N, t(50));
    assert_eq!(
        status,
        LockStatus {
            locked: true,
            token: Some(2),
            owner,
            ttl_ms: 500,
            holds: 2,
            waiters: 0,
            last_token: 2
        }
    );
    // Another owner is busy.
    assert!(matches!(
        table.acquire(req(100, Some("b"), false), t(60), &j),
        AcquireOutcome::Busy
    ));
}

#[test]
fn reentrant_never_queues_behind_waiters() {
    let table = LockTable::new();
    let j = NullJournal;
    granted(table.acquire(req(100, Some("a"), false), t(0), &j));
    let (_ticket, _rx) = queued(table.acquire(req(100, Some("b"), true), t(1), &j));
    assert_eq!(
        granted(table.acquire(req(100, Some("a"), true), t(2), &j)),
        2
    );
}

#[test]
fn any_token_of_the_holding_renews_and_releases_any_hold() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    granted(table.acquire(req(100, Some("a"), false), t(0), &j));
    granted(table.acquire(req(100, Some("a"), false), t(0), &j));
    granted(table.acquire(req(100, Some("a"), false), t(0), &j));
    records(&j);
    assert_eq!(table.renew(N, 1, 1000, t(10), &j), Ok(()));
    assert_eq!(
        records(&j),
        vec![Change::Renew {
            name: name(),
            lease_ms: 1000
        }]
    );
    assert_eq!(table.ttl(N, t(10)), 1000);
    assert_eq!(table.release(N, 3, t(11), &j), Ok(false));
    assert_eq!(table.release(N, 1, t(12), &j), Ok(false));
    assert_eq!(
        records(&j),
        vec![
            Change::Release {
                name: name(),
                holds_left: 2
            },
            Change::Release {
                name: name(),
                holds_left: 1
            }
        ]
    );
    assert_eq!(table.status(N, t(12)).holds, 1);
    assert_eq!(table.release(N, 2, t(13), &j), Ok(true));
    assert!(!table.status(N, t(13)).locked);
}

#[test]
fn wrong_or_stale_tokens_are_notowner_and_change_nothing() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    let old = granted(table.acquire(req(100, None, false), t(0), &j));
    table.release(N, old, t(1), &j).unwrap();
    let new = granted(table.acquire(req(100, None, false), t(2), &j));
    records(&j);
    let notowner = |token| LockError::NotOwner {
        name: name(),
        token,
    };
    assert_eq!(table.release(N, old, t(3), &j), Err(notowner(old)));
    assert_eq!(table.renew(N, old, 50, t(3), &j), Err(notowner(old)));
    assert_eq!(table.release(N, new + 1, t(3), &j), Err(notowner(new + 1)));
    assert_eq!(table.release(N, 0, t(3), &j), Err(notowner(0)));
    assert_eq!(
        table.renew(b"never", 1, 50, t(3), &j),
        Err(LockError::NotOwner {
            name: Bytes::from_static(b"never"),
            token: 1
        })
    );
    assert!(records(&j).is_empty());
    assert_eq!(table.status(N, t(3)).token, Some(new));
    assert_eq!(table.ttl(N, t(3)), 99);
    assert_eq!(table.stats().notowner_rejections, 5);
    assert_eq!(
        LockError::NotOwner {
            name: name(),
            token: 7
        }
        .to_string(),
        "NOTOWNER lock 'lock' is not held by token 7"
    );
}

#[test]
fn expired_lease_reads_as_free_and_is_lazily_expired_on_the_next_change() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    granted(table.acquire(req(100, None, false), t(0), &j));
    records(&j);
    assert_eq!(table.ttl(N, t(99)), 1);
    assert!(table.status(N, t(99)).locked);
    // At the deadline the lease is over; reads report it free without journalling.
    let status = table.status(N, t(100));
    assert_eq!(
        (status.locked, status.ttl_ms, status.holds, status.token),
        (false, -2, 0, None)
    );
    assert_eq!(status.last_token, 1);
    assert_eq!(table.ttl(N, t(100)), -2);
    assert!(records(&j).is_empty());
    // A renew after the deadline is refused and records the expiry.
    assert!(table.renew(N, 1, 100, t(100), &j).is_err());
    assert_eq!(records(&j), vec![Change::Expire { name: name() }]);
    assert_eq!(granted(table.acquire(req(100, None, false), t(101), &j)), 2);
    assert_eq!(table.stats().expirations, 1);
}

#[test]
fn expire_due_expires_proactively_and_hands_over() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    granted(table.acquire(req(100, None, false), t(0), &j));
    let (_ticket, mut rx) = queued(table.acquire(req(300, None, true), t(10), &j));
    records(&j);
    assert_eq!(table.next_deadline(), Some(t(100)));
    assert_eq!(table.expire_due(t(99), &j), 0);
    assert!(rx.try_recv().is_err());
    assert_eq!(table.expire_due(t(100), &j), 1);
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(
        records(&j),
        vec![
            Change::Expire { name: name() },
            Change::Grant {
                name: name(),
                token: 2,
                first_token: 2,
                holds: 1,
                owner: None,
                lease_ms: 300
            }
        ]
    );
    let status = table.status(N, t(100));
    assert_eq!(
        (status.token, status.ttl_ms, status.waiters),
        (Some(2), 300, 0)
    );
    assert_eq!(table.next_deadline(), Some(t(400)));
}

#[test]
fn renew_later_does_not_grow_the_heap_and_expiry_follows_the_real_deadline() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    granted(table.acquire(req(100, None, false), t(0), &j));
    for i in 1..50 {
        table.renew(N, 1, 100, t(i), &j).unwrap();
    }
    assert_eq!(table.scheduled_deadlines(), 1);
    assert_eq!(table.next_deadline(), Some(t(100)));
    // The stale item pops, nothing expires, the real deadline (49 + 100) is scheduled.
    assert_eq!(table.expire_due(t(100), &j), 0);
    assert_eq!(table.next_deadline(), Some(t(149)));
    assert_eq!(table.scheduled_deadlines(), 1);
    assert_eq!(table.expire_due(t(148), &j), 0);
    assert_eq!(table.expire_due(t(149), &j), 1);
    assert_eq!(table.next_deadline(), None);
}

#[test]
fn renew_earlier_reschedules_and_calls_the_hook() {
    let table = LockTable::new();
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let hook_seen = seen.clone();
    table.set_deadline_hook(Box::new(move |at| hook_seen.lock().push(at)));
    let j = NullJournal;
    granted(table.acquire(req(1000, None, false), t(0), &j));
    granted(table.acquire(
        AcquireRequest {
            name: Bytes::from_static(b"other"),
            ..req(2000, None, false)
        },
        t(0),
        &j,
    ));
    table.renew(N, 1, 10, t(5), &j).unwrap();
    assert_eq!(*seen.lock(), vec![t(1000), t(15)]);
    assert_eq!(table.next_deadline(), Some(t(15)));
    assert_eq!(table.expire_due(t(15), &j), 1);
}

#[test]
fn waiters_are_served_fifo_on_release() {
    let table = LockTable::new();
    let j = NullJournal;
    let first = granted(table.acquire(req(100, Some("h"), false), t(0), &j));
    let (_t1, mut rx1) = queued(table.acquire(req(100, Some("x"), true), t(1), &j));
    let (_t2, mut rx2) = queued(table.acquire(req(100, Some("y"), true), t(2), &j));
    assert_eq!(table.status(N, t(2)).waiters, 2);
    assert_eq!(table.release(N, first, t(3), &j), Ok(true));
    assert_eq!(rx1.try_recv(), Ok(2));
    assert!(rx2.try_recv().is_err());
    assert_eq!(table.status(N, t(3)).owner, Some(Bytes::from_static(b"x")));
    assert_eq!(table.release(N, 2, t(4), &j), Ok(true));
    assert_eq!(rx2.try_recv(), Ok(3));
}

#[test]
fn closed_waiters_are_skipped_and_never_granted() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    granted(table.acquire(req(100, None, false), t(0), &j));
    let (_t1, rx1) = queued(table.acquire(req(100, None, true), t(1), &j));
    let (_t2, mut rx2) = queued(table.acquire(req(100, None, true), t(2), &j));
    drop(rx1);
    assert_eq!(
        table.status(N, t(2)).waiters,
        1,
        "status counts live waiters only"
    );
    records(&j);
    assert!(table.force_release(N, t(3), &j));
    assert_eq!(rx2.try_recv(), Ok(2), "the closed waiter got no token");
    assert_eq!(
        records(&j),
        vec![
            Change::ForceRelease { name: name() },
            Change::Grant {
                name: name(),
                token: 2,
                first_token: 2,
                holds: 1,
                owner: None,
                lease_ms: 100
            }
        ]
    );
    assert_eq!(table.stats().force_releases, 1);
}

#[test]
fn all_waiters_closed_leaves_the_lock_free_and_the_entry_idle() {
    let table = LockTable::new();
    let j = NullJournal;
    granted(table.acquire(req(100, None, false), t(0), &j));
    let (_t1, rx1) = queued(table.acquire(req(100, None, true), t(1), &j));
    drop(rx1);
    assert_eq!(table.release(N, 1, t(2), &j), Ok(true));
    assert!(!table.status(N, t(2)).locked);
    assert!(
        table.entries.get(N).is_some_and(|e| e.active.is_none()),
        "idle entry shrank"
    );
    assert_eq!(table.stats().waiters, 0);
    assert_eq!(table.stats().locks_held, 0);
}

#[test]
fn waiters_with_the_new_holders_owner_are_granted_at_once() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    let h = granted(table.acquire(req(100, Some("h"), false), t(0), &j));
    let (_a1, mut rx_a1) = queued(table.acquire(req(100, Some("a"), true), t(1), &j));
    let (_b, mut rx_b) = queued(table.acquire(req(100, Some("b"), true), t(2), &j));
    let (_a2, mut rx_a2) = queued(table.acquire(req(700, Some("a"), true), t(3), &j));
    let (_n, mut rx_n) = queued(table.acquire(req(100, None, true), t(4), &j));
    records(&j);
    table.release(N, h, t(10), &j).unwrap();
    assert_eq!(rx_a1.try_recv(), Ok(2));
    assert_eq!(rx_a2.try_recv(), Ok(3));
    assert!(rx_b.try_recv().is_err());
    assert!(rx_n.try_recv().is_err());
    let owner = Some(Bytes::from_static(b"a"));
    assert_eq!(
        records(&j),
        vec![
            Change::Release {
                name: name(),
                holds_left: 0
            },
            Change::Grant {
                name: name(),
                token: 2,
                first_token: 2,
                holds: 1,
                owner: owner.clone(),
                lease_ms: 100
            },
            Change::Grant {
                name: name(),
                token: 3,
                first_token: 2,
                holds: 2,
                owner: owner.clone(),
                lease_ms: 700
            },
        ]
    );
    let status = table.status(N, t(10));
    assert_eq!((status.holds, status.ttl_ms, status.waiters), (2, 700, 2));
    // Two releases free it; b comes next, then the ownerless waiter.
    assert_eq!(table.release(N, 2, t(11), &j), Ok(false));
    assert_eq!(table.release(N, 3, t(12), &j), Ok(true));
    assert_eq!(rx_b.try_recv(), Ok(4));
}

#[test]
fn cancel_removes_a_queued_waiter() {
    let table = LockTable::new();
    let j = NullJournal;
    granted(table.acquire(req(100, None, false), t(0), &j));
    let (ticket, mut rx) = queued(table.acquire(req(100, None, true), t(1), &j));
    assert_eq!(table.cancel_wait(N, ticket), CancelOutcome::Removed);
    assert_eq!(table.status(N, t(1)).waiters, 0);
    table.release(N, 1, t(2), &j).unwrap();
    assert!(
        rx.try_recv().is_err(),
        "a cancelled waiter is never granted"
    );
    assert_eq!(table.cancel_wait(N, ticket), CancelOutcome::Removed);
    assert_eq!(
        table.cancel_wait(b"unknown", ticket),
        CancelOutcome::Removed
    );
    assert!(table.entries.get(N).is_some_and(|e| e.active.is_none()));
}

#[test]
fn cancel_after_a_racing_grant_reports_the_token_once() {
    let table = LockTable::new();
    let j = NullJournal;
    granted(table.acquire(req(100, None, false), t(0), &j));
    let (ticket, rx) = queued(table.acquire(req(100, None, true), t(1), &j));
    table.release(N, 1, t(2), &j).unwrap();
    // The grant won; the waiter's task timed out anyway and dropped its receiver.
    drop(rx);
    assert_eq!(
        table.cancel_wait(N, ticket),
        CancelOutcome::AlreadyGranted(2)
    );
    assert_eq!(table.cancel_wait(N, ticket), CancelOutcome::Removed);
    // The caller releases what it cannot use.
    assert_eq!(table.release(N, 2, t(3), &j), Ok(true));
}

#[test]
fn cancel_after_the_granted_holding_ended_is_removed() {
    let table = LockTable::new();
    let j = NullJournal;
    granted(table.acquire(req(100, None, false), t(0), &j));
    let (ticket, _rx) = queued(table.acquire(req(50, None, true), t(1), &j));
    table.release(N, 1, t(2), &j).unwrap();
    assert_eq!(table.expire_due(t(52), &j), 1);
    assert_eq!(table.cancel_wait(N, ticket), CancelOutcome::Removed);
}

#[test]
fn force_release_removes_every_hold() {
    let table = LockTable::new();
    let j = NullJournal;
    granted(table.acquire(req(100, Some("a"), false), t(0), &j));
    granted(table.acquire(req(100, Some("a"), false), t(0), &j));
    assert!(table.force_release(N, t(1), &j));
    assert!(!table.force_release(N, t(1), &j));
    assert!(!table.force_release(b"never", t(1), &j));
    assert_eq!(
        table.release(N, 2, t(2), &j),
        Err(LockError::NotOwner {
            name: name(),
            token: 2
        })
    );
    assert_eq!(granted(table.acquire(req(100, None, false), t(3), &j)), 3);
}

#[test]
fn force_release_of_an_expired_lease_expires_it_first() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    granted(table.acquire(req(10, None, false), t(0), &j));
    records(&j);
    assert!(!table.force_release(N, t(10), &j));
    assert_eq!(records(&j), vec![Change::Expire { name: name() }]);
}

#[test]
fn advance_raises_never_lowers_and_journals_only_changes() {
    let table = LockTable::new();
    let j = MemoryJournal::default();
    assert_eq!(table.advance(N, 0, &j), 0);
    assert_eq!(table.len(), 0, "a no-op advance creates no entry");
    assert_eq!(table.advance(N, 100, &j), 100);
    assert_eq!(table.advance(N, 50, &j), 100);
    assert_eq!(
        records(&j),
        vec![Change::Advance {
            name: name(),
            token: 100
        }]
    );
    assert_eq!(
        granted(table.acquire(req(10, Some("a"), false), t(0), &j)),
        101
    );
    assert_eq!(table.advance(N, 200, &j), 200);
    // The holding keeps its tokens; the next reentrant token is above the advance.
    assert_eq!(
        granted(table.acquire(req(10, Some("a"), false), t(0), &j)),
        201
    );
    assert_eq!(table.release(N, 101, t(1), &j), Ok(false));
    assert_eq!(table.advance(N, u64::MAX, &j), MAX_TOKEN);
}

#[test]
fn an_exhausted_counter_is_busy_and_never_wraps() {
    let table = LockTable::new();
    let j = NullJournal;
    table.advance(N, MAX_TOKEN - 1, &j);
    assert_eq!(
        granted(table.acquire(req(10, Some("a"), false), t(0), &j)),
        MAX_TOKEN
    );
    assert!(matches!(
        table.acquire(req(10, Some("a"), false), t(0), &j),
        AcquireOutcome::Busy
    ));
    let (ticket, mut rx) = queued(table.acquire(req(10, None, true), t(0), &j));
    assert_eq!(table.release(N, MAX_TOKEN, t(1), &j), Ok(true));
    assert!(rx.try_recv().is_err());
    assert!(!table.status(N, t(1)).locked);
    assert!(matches!(
        table.acquire(req(10, None, false), t(1), &j),
        AcquireOutcome::Busy
    ));
    assert_eq!(table.cancel_wait(N, ticket), CancelOutcome::Removed);
    assert!(matches!(
        table.acquire(req(10, None, false), t(1), &j),
        AcquireOutcome::Busy
    ));
    assert_eq!(table.last_token(N), MAX_TOKEN);
}

#[test]
fn replay_restores_holdings_and_counters_and_rearm_gives_full_leases() {
    let live = LockTable::new();
    let j = MemoryJournal::default();
    granted(live.acquire(req(100, Some("a"), false), t(0), &j));
    granted(live.acquire(req(300, Some("a"), false), t(10), &j));
    live.renew(N, 1, 400, t(20), &j).unwrap();
    live.release(N, 2, t(30), &j).unwrap();
    live.advance(b"idle", 42, &j);
    granted(live.acquire(
        AcquireRequest {
            name: Bytes::from_static(b"gone"),
            ..req(5, None, false)
        },
        t(0),
        &j,
    ));
    live.expire_due(t(5), &j);

    let state = State::default();
    for change in records(&j) {
        state.apply_change(&change);
    }
    let status = state.locks.status(N, t(1000));
    assert_eq!(status.token, Some(2));
    assert_eq!(status.holds, 1);
    assert_eq!(status.owner, Some(Bytes::from_static(b"a")));
    assert_eq!(state.locks.last_token(b"idle"), 42);
    assert!(!state.locks.status(b"gone", t(0)).locked);
    assert_eq!(state.locks.last_token(b"gone"), 1);
    assert_eq!(state.locks.next_deadline(), None);

    let woke = Arc::new(AtomicU64::new(0));
    let hook_woke = woke.clone();
    state
        .locks
        .set_deadline_hook(Box::new(move |at| hook_woke.store(at.0, Ordering::SeqCst)));
    state.locks.rearm_after_replay(t(5000));
    assert_eq!(state.locks.ttl(N, t(5000)), 400);
    assert_eq!(woke.load(Ordering::SeqCst), 5400);
    assert_eq!(state.locks.expire_due(t(5400), &j), 1);
    assert_eq!(state.locks.stats().locks_held, 0);
}

#[test]
fn snapshot_rebuilds_the_same_state() {
    let live = LockTable::new();
    let j = NullJournal;
    granted(live.acquire(req(100, Some("a"), false), t(0), &j));
    granted(live.acquire(req(200, Some("a"), false), t(0), &j));
    live.advance(N, 10, &j);
    live.advance(b"idle", 7, &j);
    let mut changes = Vec::new();
    live.snapshot(&mut |c| changes.push(c));
    changes.sort_by(|a, b| a.key().cmp(&b.key()));
    let owner = Some(Bytes::from_static(b"a"));
    assert_eq!(
        changes,
        vec![
            Change::Advance {
                name: Bytes::from_static(b"idle"),
                token: 7
            },
            Change::Grant {
                name: name(),
                token: 2,
                first_token: 1,
                holds: 2,
                owner,
                lease_ms: 200
            },
            Change::Advance {
                name: name(),
                token: 10
            },
        ]
    );
    let rebuilt = LockTable::new();
    for change in &changes {
        rebuilt.apply_change(change);
    }
    assert_eq!(
        rebuilt.status(N, t(0)),
        LockStatus {
            ttl_ms: 200,
            ..live.status(N, t(0))
        }
    );
    assert_eq!(rebuilt.last_token(b"idle"), 7);
}

#[test]
fn floor_raises_every_counter() {
    let table = LockTable::new();
    let j = NullJournal;
    table.advance(b"high", 500, &j);
    table.apply_change(&Change::Floor { token: 100 });
    table.apply_change(&Change::Floor { token: 50 });
    assert_eq!(table.last_token(b"new"), 100);
    assert_eq!(table.last_token(b"high"), 500);
    assert_eq!(table.status(b"new", t(0)).last_token, 100);
    assert_eq!(granted(table.acquire(req(10, None, false), t(0), &j)), 101);
    assert_eq!(table.advance(b"x", 90, &j), 100);
    let mut changes = Vec::new();
    table.snapshot(&mut |c| changes.push(c));
    assert_eq!(changes[0], Change::Floor { token: 100 });
    assert!(changes.contains(&Change::Advance {
        name: Bytes::from_static(b"high"),
        token: 500
    }));
}

#[test]
fn stats_track_gauges_and_events() {
    let table = LockTable::new();
    let j = NullJournal;
    granted(table.acquire(req(100, Some("a"), false), t(0), &j));
    granted(table.acquire(req(100, Some("a"), false), t(0), &j));
    let (_ticket, _rx) = queued(table.acquire(req(100, None, true), t(0), &j));
    table.release(N, 1, t(1), &j).unwrap();
    let stats = table.stats();
    assert_eq!(
        stats,
        LockStats {
            names: 1,
            locks_held: 1,
            waiters: 1,
            tokens_issued: 2,
            grants: 2,
            releases: 1,
            expirations: 0,
            force_releases: 0,
            notowner_rejections: 0
        }
    );
    table.release(N, 1, t(1), &j).unwrap();
    let stats = table.stats();
    assert_eq!(
        (
            stats.locks_held,
            stats.waiters,
            stats.grants,
            stats.releases
        ),
        (1, 0, 3, 2)
    );
}

#[test]
fn acquire_release_churn_does_not_grow_the_heap() {
    let table = LockTable::new();
    let j = NullJournal;
    for i in 0..100 {
        let token = granted(table.acquire(req(1000, None, false), t(i), &j));
        table.release(N, token, t(i), &j).unwrap();
    }
    assert_eq!(table.scheduled_deadlines(), 1);
    // The stale item pops and leaves nothing behind.
    assert_eq!(table.expire_due(t(1000), &j), 0);
    assert_eq!(table.scheduled_deadlines(), 0);
    assert_eq!(std::mem::size_of::<LockEntry>(), 24);
}
