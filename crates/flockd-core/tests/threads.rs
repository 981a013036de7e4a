//! Many threads hammering a few names while another runs the expiry loop and the deadline hook
//! calls back into the table: no deadlock, no token issued twice, and the journal replays to the
//! live state.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use bytes::Bytes;
use flockd_core::{
    AcquireOutcome, AcquireRequest, Change, LockTable, MemoryJournal, Millis, State,
};

#[test]
fn concurrent_clients_and_expiry_stay_consistent() {
    let table = Arc::new(LockTable::new());
    let journal = Arc::new(MemoryJournal::default());
    let clock = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let hook_table = Arc::downgrade(&table);
    table.set_deadline_hook(Box::new(move |_| {
        // Calling back into the table from the hook must not deadlock.
        if let Some(table) = hook_table.upgrade() {
            let _ = table.next_deadline();
        }
    }));

    let expirer = {
        let (table, journal, clock, stop) =
            (table.clone(), journal.clone(), clock.clone(), stop.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let now = clock.fetch_add(1, Ordering::Relaxed);
                table.expire_due(Millis(now), &*journal);
                thread::yield_now();
            }
        })
    };

    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let (table, journal, clock) = (table.clone(), journal.clone(), clock.clone());
            thread::spawn(move || {
                let mut got = Vec::new();
                for i in 0..2000u64 {
                    let name = Bytes::from(format!("n{}", i % 3));
                    let now = Millis(clock.load(Ordering::Relaxed));
                    let req = AcquireRequest {
                        name: name.clone(),
                        lease_ms: 1 + (i % 5),
                        owner: Some(Bytes::from(format!("w{}", w % 2))),
                        wait: i % 4 == 0,
                    };
                    match table.acquire(req, now, &*journal) {
                        AcquireOutcome::Granted(token) => {
                            got.push((name.clone(), token));
                            if i % 2 == 0 {
                                let _ = table.renew(&name, token, 3, now, &*journal);
                            }
                            let _ = table.release(&name, token, now, &*journal);
                        }
                        AcquireOutcome::Busy => {}
                        AcquireOutcome::Queued { ticket, mut grant } => {
                            if let Ok(token) = grant.try_recv() {
                                got.push((name.clone(), token));
                            } else if let flockd_core::CancelOutcome::AlreadyGranted(token) =
                                table.cancel_wait(&name, ticket)
                            {
                                got.push((name.clone(), token));
                                let _ = table.release(&name, token, now, &*journal);
                            } else if let Ok(token) = grant.try_recv() {
                                // Granted, then the holding ended before the cancel.
                                got.push((name.clone(), token));
                            }
                        }
                    }
                    if i % 97 == 0 {
                        table.force_release(&name, now, &*journal);
                    }
                }
                got
            })
        })
        .collect();

    let mut seen = HashSet::new();
    for worker in workers {
        for (name, token) in worker.join().expect("worker") {
            assert!(seen.insert((name, token)), "token issued twice");
        }
    }
    stop.store(true, Ordering::Relaxed);
    expirer.join().expect("expirer");

    let records = journal.changes.lock().clone();
    let mut last: BTreeMap<Bytes, u64> = BTreeMap::new();
    for change in &records {
        if let Change::Grant { name, token, .. } = change {
            let previous = last.insert(name.clone(), *token).unwrap_or(0);
            assert!(
                *token > previous,
                "journal order: token {token} after {previous}"
            );
        }
    }
    let replayed = State::default();
    for change in &records {
        replayed.apply_change(change);
    }
    let snapshot = |table: &LockTable| {
        let mut changes = Vec::new();
        table.snapshot(&mut |c| changes.push(c));
        changes.sort_by_key(|c| (c.key().cloned(), matches!(c, Change::Advance { .. })));
        changes
    };
    assert_eq!(snapshot(&replayed.locks), snapshot(&table));
}
