//! SCAN and TYPE in the core: one walk over lock names and then fence keys, each name once (a
//! name that is both comes with the fence keys), the TYPE filter, names coming and going
//! meanwhile, and a cursor in the fence keys going on in a machine rebuilt from a snapshot.

mod common;

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use common::Log;
use flockd_core::keyspace::FENCE_SPACE;
use flockd_core::{KeyType, StateMachine};

fn name(i: usize) -> Bytes {
    Bytes::from(format!("key:{i}"))
}

impl Log {
    /// Lock names 0..locks_end, fence keys fences_start..fences_end.
    fn with(locks_end: usize, fences: std::ops::Range<usize>) -> Log {
        let mut log = Log::new();
        for i in 0..locks_end {
            log.create(name(i));
        }
        for i in fences {
            log.fence(name(i));
        }
        log
    }
}

fn names(range: std::ops::Range<usize>) -> BTreeSet<Bytes> {
    range.map(name).collect()
}

/// The whole walk from `cursor`, `count` per call, calling `between` after each call: the keys
/// with how often each came back, and the cursors given.
fn walk(
    log: &mut Log,
    cursor: u64,
    count: usize,
    only: Option<KeyType>,
    between: impl FnMut(&mut Log, usize),
) -> (HashMap<Bytes, usize>, Vec<u64>) {
    let scan = |sm: &StateMachine, cursor, count| sm.scan_keys(cursor, count, only);
    common::walk_with(log, cursor, count, scan, between)
}

fn once_each(seen: HashMap<Bytes, usize>) -> BTreeSet<Bytes> {
    for (key, times) in &seen {
        assert_eq!(*times, 1, "{key:?} came back {times} times");
    }
    seen.into_keys().collect()
}

#[test]
fn a_quiet_walk_lists_every_key_once_whatever_the_count() {
    // 0..200 lock names, 100..300 fence keys: 100..200 are both.
    let mut log = Log::with(200, 100..300);
    assert_eq!(
        Log::new().sm.scan_keys(0, 10, None),
        (0, vec![]),
        "an empty machine"
    );
    for count in [1, 7, 150, 200, 1000] {
        let (seen, cursors) = walk(&mut log, 0, count, None, |_, _| {});
        assert_eq!(once_each(seen), names(0..300), "COUNT {count}");
        // Lock names first, then fence keys: once in the fence keys, the cursors stay there.
        if let Some(first) = cursors.iter().position(|c| *c >= FENCE_SPACE) {
            assert!(cursors[first..].iter().all(|c| *c >= FENCE_SPACE));
        }
    }
    // COUNT 1000 looks at all 400 entries (100 names twice) in one call.
    assert_eq!(log.sm.scan_keys(0, 1000, None).0, 0);
}

#[test]
fn type_says_fence_for_a_name_that_is_both_and_the_filter_agrees() {
    let mut log = Log::with(200, 100..300);
    assert_eq!(log.sm.key_type(&name(5)), Some(KeyType::Flock));
    assert_eq!(log.sm.key_type(&name(150)), Some(KeyType::Fence));
    assert_eq!(log.sm.key_type(&name(250)), Some(KeyType::Fence));
    assert_eq!(log.sm.key_type(&name(300)), None);
    for count in [1, 10, 1000] {
        let (seen, _) = walk(&mut log, 0, count, Some(KeyType::Flock), |_, _| {});
        assert_eq!(once_each(seen), names(0..100));
        let (seen, cursors) = walk(&mut log, 0, count, Some(KeyType::Fence), |_, _| {});
        assert_eq!(once_each(seen), names(100..300));
        assert!(cursors.iter().all(|c| *c >= FENCE_SPACE), "{cursors:?}");
    }
    // A cursor in the fence keys has no lock name left to give.
    let (in_fences, _) = log.sm.scan_keys(0, 250, None);
    assert!(in_fences > FENCE_SPACE, "{in_fences}");
    assert_eq!(
        log.sm.scan_keys(in_fences, 1000, Some(KeyType::Flock)),
        (0, vec![])
    );
}

#[test]
fn keys_that_stay_come_back_once_while_others_come_and_go() {
    // Lock names 0..300 (200..300 forgotten during the walk), fence keys 300..600 (stay);
    // 1000.. come during the walk, lock names and fence keys alike.
    let mut log = Log::with(300, 300..600);
    let mut next_new = 1000;
    let mut next_gone = 200;
    let (seen, _) = walk(&mut log, 0, 3, None, |log, _| {
        for _ in 0..4 {
            log.create(name(next_new));
            log.fence(name(next_new + 1));
            next_new += 2;
        }
        if next_gone < 300 {
            log.forget(name(next_gone));
            next_gone += 1;
        }
    });
    for key in names(0..200).into_iter().chain(names(300..600)) {
        assert_eq!(seen.get(&key), Some(&1), "{key:?}");
    }
    assert!(seen.values().all(|n| *n == 1), "a key came back twice");
}

#[test]
fn a_fence_cursor_goes_on_in_a_machine_rebuilt_from_a_snapshot() {
    let log = Log::with(50, 0..300);
    let (mut cursor, first) = log.sm.scan_keys(FENCE_SPACE, 100, None);
    assert!(cursor > FENCE_SPACE, "{cursor}");
    let snapshot = log.sm.snapshot();
    let mut rebuilt = StateMachine::new();
    rebuilt.restore_begin(snapshot.position(), snapshot.at());
    snapshot.emit(&mut |item| rebuilt.restore(&item));
    rebuilt.restore_end();
    let mut seen: BTreeSet<Bytes> = first.into_iter().collect();
    while cursor != 0 {
        let (next, keys) = rebuilt.scan_keys(cursor, 100, None);
        for k in keys {
            assert!(seen.insert(k), "returned twice");
        }
        cursor = next;
    }
    assert_eq!(seen, names(0..300));
    // Every lock name is a fence key too, so none is of type flock.
    assert_eq!(
        rebuilt.scan_keys(0, 1000, Some(KeyType::Flock)),
        (0, vec![])
    );
    assert_eq!(rebuilt.key_type(&name(7)), Some(KeyType::Fence));
}
