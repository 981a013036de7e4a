//! FLOCK.SCAN's walk in the core: every name once in a quiet table, every name that stays
//! through the walk at least once while names come and go and the stripes grow, HELD, and the
//! same cursor going on in a machine rebuilt from a snapshot.

mod common;

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use common::Log;
use flockd_core::{Conditions, Millis, Op, ScanFilter, StateMachine};

fn name(i: usize) -> Bytes {
    Bytes::from(format!("name:{i}"))
}

/// The whole walk, `count` per call, calling `between` after each call; the names it returned
/// with how often, and how many calls it took.
fn walk(
    log: &mut Log,
    count: usize,
    between: impl FnMut(&mut Log, usize),
) -> (HashMap<Bytes, usize>, usize) {
    let scan = |sm: &StateMachine, cursor, count| sm.scan(cursor, count, ScanFilter::All);
    let (seen, cursors) = common::walk_with(log, 0, count, scan, between);
    (seen, cursors.len() + 1)
}

#[test]
fn a_quiet_table_is_walked_once_each_name() {
    let mut log = Log::new();
    assert_eq!(log.sm.scan(0, 10, ScanFilter::All), (0, vec![]));
    for i in 0..5000 {
        log.create(name(i));
    }
    let (seen, calls) = walk(&mut log, 7, |_, _| {});
    assert_eq!(seen.len(), 5000);
    assert!(seen.values().all(|&n| n == 1));
    assert!((5000 / 9..=5000 / 7 + 1).contains(&calls), "{calls} calls");
}

#[test]
fn names_that_stay_are_returned_while_others_come_and_go() {
    let mut log = Log::new();
    // 0..2000 stay the whole walk; 2000..4000 are forgotten during it; new ones come from 4000
    // on, enough to make every stripe grow several times.
    for i in 0..4000 {
        log.create(name(i));
    }
    let mut next_new = 4000;
    let (seen, _) = walk(&mut log, 5, |log, call| {
        if call <= 2000 {
            log.forget(name(2000 + call - 1));
        }
        for _ in 0..10 {
            log.create(name(next_new));
            next_new += 1;
        }
    });
    for i in 0..2000 {
        assert_eq!(seen.get(&name(i)), Some(&1), "name {i}");
    }
    assert!(seen.values().all(|&n| n == 1));
}

#[test]
fn held_returns_only_names_with_a_live_holding() {
    let mut log = Log::new();
    for i in 0..50 {
        log.create(name(i));
    }
    for i in (0..50).step_by(10) {
        log.apply(Op::Acquire {
            name: name(i),
            lease_ms: 100,
            owner: None,
            wait: false.into(),
            conditions: Conditions::default(),
        });
    }
    let mut held = BTreeSet::new();
    let mut cursor = 0;
    loop {
        let (next, names) = log.sm.scan(cursor, 3, ScanFilter::HeldAt(Millis(50)));
        held.extend(names);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let want: BTreeSet<Bytes> = (0..50).step_by(10).map(name).collect();
    assert_eq!(held, want);
    // At 101 the leases are over (their expiry not applied yet): none is held.
    let (_, names) = log.sm.scan(0, 1000, ScanFilter::HeldAt(Millis(101)));
    assert_eq!(names, Vec::<Bytes>::new());
}

#[test]
fn a_cursor_goes_on_in_a_machine_rebuilt_from_a_snapshot() {
    let mut log = Log::new();
    for i in 0..300 {
        log.create(name(i));
    }
    let (cursor, first) = log.sm.scan(0, 100, ScanFilter::All);
    assert_ne!(cursor, 0);
    let snapshot = log.sm.snapshot();
    let mut rebuilt = StateMachine::new();
    rebuilt.restore_begin(snapshot.position(), snapshot.at());
    snapshot.emit(&mut |item| rebuilt.restore(&item));
    rebuilt.restore_end();
    let mut seen: BTreeSet<Bytes> = first.into_iter().collect();
    let mut cursor = cursor;
    while cursor != 0 {
        let (next, names) = rebuilt.scan(cursor, 100, ScanFilter::All);
        for n in names {
            assert!(seen.insert(n), "returned twice");
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 300);
}
