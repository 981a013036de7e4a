//! The writer against real files, driving a real state machine: proposals are answered with
//! their ops' results once durable and applied; group commit (concurrent proposers share
//! fsyncs); the three fsync policies; shutdown; background and automatic rewrites overlapping
//! proposals, which keep every counter and fence and converge to the live machine's digest; and
//! replay of a rewritten file skipping the tail entries its snapshot already reflects.

mod common;

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{
    FileRecord, Host, Rng, Sim, TempDir, fence, file_entries, load_machine, machine_of, opts,
    read_file, runtime, try_load,
};
use flockd_aof::record::{HEADER, Version};
use flockd_aof::{Aof, AofError, AofOptions, FsyncPolicy, ProposeError};
use flockd_core::{AcquireResult, Millis, Op, OpResult, StateMachine};

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn open_creates_the_file_with_a_header() {
    let dir = TempDir::new("open");
    let path = dir.join("a.aof");
    fs::write(dir.join("a.aof.rewrite.tmp"), b"stale").expect("write");
    let aof = Host::new().open(AofOptions::new(&path)).expect("open");
    assert_eq!(fs::read(&path).expect("read"), HEADER);
    assert_eq!(&HEADER, b"FLOCKAO2");
    assert!(
        !dir.join("a.aof.rewrite.tmp").exists(),
        "stale rewrite file removed"
    );
    assert_eq!(aof.stats().file_size, 8);
    assert_eq!(aof.appended_position(), 0);
    aof.check_writable().expect("writable");
    drop(aof);

    // Reopening appends after what is there, continuing the loaded positions.
    let host = Host::new();
    let aof = host.open(AofOptions::new(&path)).expect("reopen");
    let rt = runtime();
    let r = rt
        .block_on(aof.propose(Millis(5), vec![fence("k", 5)]))
        .expect("answered");
    assert_eq!(r, Ok(vec![OpResult::FenceSet(true)]));
    aof.shutdown();
    drop(aof);
    let loaded = load_machine(&path);
    assert_eq!(loaded.fence_token(b"k"), 5);
    assert_eq!(loaded.digest(), host.digest());

    let host = Host::with(loaded, Duration::ZERO);
    let aof = host.open(AofOptions::new(&path)).expect("reopen");
    let r = rt
        .block_on(aof.propose(Millis(6), vec![fence("k", 6)]))
        .expect("answered");
    assert_eq!(r, Ok(vec![OpResult::FenceSet(true)]));
    assert_eq!(aof.appended_position(), 2);
    aof.shutdown();
    let positions: Vec<u64> = file_entries(&path).iter().map(|e| e.position).collect();
    assert_eq!(positions, vec![1, 2]);
    assert_eq!(load_machine(&path).digest(), host.digest());

    for content in [&b"not an aof at all"[..], b"FLOC", b"FLOCKAO9"] {
        fs::write(&path, content).expect("write");
        assert!(matches!(
            Host::new().open(AofOptions::new(&path)),
            Err(AofError::File(flockd_aof::FileError::Corrupt {
                offset: 0,
                ..
            }))
        ));
        assert_eq!(fs::read(&path).expect("read"), content, "left untouched");
    }
}

#[test]
fn proposals_are_answered_with_their_results_once_applied() {
    let dir = TempDir::new("results");
    let path = dir.join("a.aof");
    let host = Host::new();
    let aof = host.open(AofOptions::new(&path)).expect("open");
    let rt = runtime();
    let name = Bytes::from_static(b"lock");
    let acquire = |owner: &'static [u8]| Op::Acquire {
        conditions: Default::default(),
        name: name.clone(),
        lease_ms: 10_000,
        owner: Some(Bytes::from_static(owner)),
        wait: false.into(),
    };
    // One entry of three ops (a transaction): results in op order.
    let r = rt
        .block_on(aof.propose(
            Millis(100),
            vec![acquire(b"a"), acquire(b"a"), acquire(b"b")],
        ))
        .expect("answered");
    assert_eq!(
        r,
        Ok(vec![
            OpResult::Acquire(AcquireResult::Granted(1)),
            OpResult::Acquire(AcquireResult::Granted(2)),
            OpResult::Acquire(AcquireResult::Busy),
        ])
    );
    // Time never goes back: an entry proposed with an earlier time takes the last one.
    let r = rt
        .block_on(aof.propose(
            Millis(50),
            vec![Op::Release {
                name: name.clone(),
                token: 2,
            }],
        ))
        .expect("answered");
    assert_eq!(r, Ok(vec![OpResult::Release(Ok(false))]));
    let entries = file_entries(&path);
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.position, e.at))
            .collect::<Vec<_>>(),
        vec![(1, Millis(100)), (2, Millis(100))]
    );
    {
        let m = host.machine.lock();
        let st = m.status(b"lock", Millis(200));
        assert_eq!((st.locked, st.token, st.holds), (true, Some(2), 1));
        assert_eq!(m.position(), 2);
    }
    aof.shutdown();
    assert_eq!(load_machine(&path).digest(), host.digest());
}

#[test]
fn group_commit_from_many_threads() {
    let dir = TempDir::new("group");
    let path = dir.join("a.aof");
    let host = Host::new();
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::Always))
        .expect("open");
    const THREADS: u64 = 8;
    const PER: u64 = 500;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let aof = aof.clone();
            thread::spawn(move || {
                (0..PER)
                    .map(|i| aof.propose(Millis(i), vec![fence(&format!("t{t}"), i)]))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let receivers: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("proposer"))
        .collect();
    let position = aof.appended_position();
    assert_eq!(position, THREADS * PER);
    runtime()
        .block_on(aof.wait_durable(position))
        .expect("durable");
    for rx in receivers {
        assert_eq!(
            rx.blocking_recv().expect("answered"),
            Ok(vec![OpResult::FenceSet(true)]),
            "each thread's tokens rise"
        );
    }
    let st = aof.stats();
    assert_eq!(st.records_written, THREADS * PER);
    assert_eq!(st.durable_position, position);
    assert!(st.fsyncs < st.records_written, "{st:?}");
    assert!(st.acks_per_fsync > 1.0, "{st:?}");
    assert_eq!(st.fsyncs, st.batches, "always: one fsync per batch");

    // Everything is there, in position order, each thread's entries in its order.
    let entries = file_entries(&path);
    assert_eq!(entries.len() as u64, THREADS * PER);
    let mut next = vec![0u64; THREADS as usize];
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.position, i as u64 + 1);
        let [Op::FenceSet { key, token, .. }] = &e.ops[..] else {
            panic!("{e:?}")
        };
        let t: usize = std::str::from_utf8(&key[1..])
            .expect("utf8")
            .parse()
            .expect("num");
        assert_eq!(*token, next[t]);
        next[t] += 1;
    }
    let live = host.machine.lock();
    for t in 0..THREADS {
        assert_eq!(live.fence_token(format!("t{t}").as_bytes()), PER - 1);
    }
    assert_eq!(load_machine(&path).digest(), live.digest());
}

#[test]
fn concurrent_waiters_share_fsyncs() {
    let dir = TempDir::new("waiters");
    let path = dir.join("a.aof");
    let host = Host::new();
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::Always))
        .expect("open");
    let rt = runtime();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..32u64 {
            let aof = aof.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..20 {
                    let r = aof
                        .propose(Millis(i), vec![fence(&format!("t{t}"), i)])
                        .await
                        .expect("answered");
                    assert_eq!(r, Ok(vec![OpResult::FenceSet(true)]));
                    aof.wait_durable(aof.appended_position())
                        .await
                        .expect("durable");
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
    });
    let st = aof.stats();
    assert_eq!(st.records_written, 640);
    assert!(st.fsyncs < 640, "{st:?}");
    assert_eq!(file_entries(&path).len(), 640);
    assert_eq!(load_machine(&path).digest(), host.digest());
}

#[test]
fn everysec_syncs_within_about_a_second() {
    let dir = TempDir::new("everysec");
    let path = dir.join("a.aof");
    let host = Host::new();
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::EverySec))
        .expect("open");
    assert_eq!(aof.stats().fsync_policy, FsyncPolicy::EverySec);
    let receivers: Vec<_> = (0..50)
        .map(|i| aof.propose(Millis(i), vec![fence("e", i)]))
        .collect();
    // Nobody pushed: waiting for durability writes the queue.
    runtime().block_on(aof.wait_durable(50)).expect("written");
    for rx in receivers {
        assert!(rx.blocking_recv().expect("answered").is_ok());
    }
    assert_eq!(file_entries(&path).len(), 50, "written before the sync");
    assert_eq!(
        host.machine.lock().fence_token(b"e"),
        49,
        "applied once written"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while aof.stats().fsyncs == 0 {
        assert!(Instant::now() < deadline, "no fsync");
        thread::sleep(Duration::from_millis(50));
    }
    let st = aof.stats();
    assert_eq!(st.acks_per_fsync, 50.0, "{st:?}");
    assert!(st.last_fsync_unix_ms.is_some());

    // A proposal nobody pushes (nor waits for) still reaches the file: the writer polls.
    let rx = aof.propose(Millis(60), vec![fence("e", 60)]);
    assert_eq!(
        rx.blocking_recv().expect("answered"),
        Ok(vec![OpResult::FenceSet(true)])
    );
    assert_eq!(file_entries(&path).len(), 51);
}

#[test]
fn no_policy_syncs_only_at_shutdown() {
    let dir = TempDir::new("no");
    let path = dir.join("a.aof");
    let host = Host::new();
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::No))
        .expect("open");
    for i in 0..30 {
        let rx = aof.propose(Millis(i), vec![fence("n", i)]);
        // The proposer writes the queue itself: written (and applied) before this returns,
        // unless the writer thread held the file and writes it instead.
        aof.write_now();
        assert!(rx.blocking_recv().expect("answered").is_ok());
    }
    runtime().block_on(aof.wait_durable(30)).expect("written");
    assert_eq!(file_entries(&path).len(), 30);
    assert_eq!(aof.stats().fsyncs, 0);
    aof.shutdown();
    assert_eq!(aof.stats().fsyncs, 1);
    assert_eq!(file_entries(&path).len(), 30);
    assert_eq!(load_machine(&path).digest(), host.digest());
}

#[test]
fn shutdown_flushes_and_refuses_later_work() {
    let dir = TempDir::new("shutdown");
    let path = dir.join("a.aof");
    let host = Host::new();
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::No))
        .expect("open");
    // Queued, never pushed: shutdown writes them.
    let receivers: Vec<_> = (0..100)
        .map(|i| aof.propose(Millis(i), vec![fence("s", i)]))
        .collect();
    aof.shutdown();
    aof.shutdown(); // idempotent
    for rx in receivers {
        assert!(rx.blocking_recv().expect("answered").is_ok());
    }
    assert_eq!(file_entries(&path).len(), 100);
    let rx = aof.propose(Millis(100), vec![fence("s", 100)]);
    assert_eq!(
        rx.blocking_recv().expect("answered"),
        Err(ProposeError::Stopped)
    );
    assert_eq!(aof.appended_position(), 100, "dropped after shutdown");
    assert_eq!(host.machine.lock().fence_token(b"s"), 99, "not applied");
    let rt = runtime();
    rt.block_on(aof.wait_durable(100))
        .expect("written before shutdown");
    assert!(matches!(
        rt.block_on(aof.wait_durable(101)),
        Err(AofError::ShuttingDown)
    ));
    assert!(matches!(aof.check_writable(), Err(ProposeError::Stopped)));
    assert!(matches!(aof.rewrite(), Err(AofError::ShuttingDown)));
    assert_eq!(load_machine(&path).digest(), host.digest());
    drop(aof);

    // Dropping the last reference shuts down too.
    let host = Host::with(load_machine(&path), Duration::ZERO);
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::No))
        .expect("open");
    let rx = aof.propose(Millis(200), vec![fence("s", 100)]);
    drop(aof);
    assert!(rx.blocking_recv().expect("answered").is_ok());
    assert_eq!(file_entries(&path).len(), 101);
    let loaded = load_machine(&path);
    assert_eq!(loaded.fence_token(b"s"), 100);
    assert_eq!(loaded.digest(), host.digest());
}

/// Runs `sim` steps from `threads` threads until `until` holds, then waits for durability.
/// Each thread waits for one of its answers every few steps, as clients wait for replies.
fn drive(
    sim: &Arc<Sim>,
    aof: &Arc<Aof>,
    threads: u64,
    until: impl Fn(&Aof) -> bool + Send + Sync + 'static,
) {
    let until = Arc::new(until);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (sim, aof, until) = (sim.clone(), aof.clone(), until.clone());
            thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 + t * 7919 + aof.appended_position());
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut n = 0u64;
                while !until(&aof) {
                    assert!(Instant::now() < deadline, "condition never met");
                    let rx = sim.step(&mut rng, &aof);
                    n += 1;
                    if n.is_multiple_of(16) {
                        assert!(rx.blocking_recv().expect("answered").is_ok());
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("driver");
    }
    runtime()
        .block_on(aof.wait_durable(aof.appended_position()))
        .expect("durable");
}

/// Compares what a loaded file and the live machine say about every name and key the
/// simulation uses, then their digests.
fn assert_same_state(loaded: &StateMachine, live: &StateMachine) {
    let now = Millis(live.time().0 + 1);
    for i in 0..6 {
        let name = format!("lock-{i}");
        let name = name.as_bytes();
        assert_eq!(loaded.last_token(name), live.last_token(name), "counter");
        assert_eq!(loaded.status(name, now), live.status(name, now), "status");
    }
    for i in 0..4 {
        let key = format!("fence-{i}");
        let key = key.as_bytes();
        assert_eq!(
            loaded.fence_token(key),
            live.fence_token(key),
            "fence token"
        );
        assert_eq!(
            loaded.fence_value(key),
            live.fence_value(key),
            "fence value"
        );
    }
    assert_eq!(loaded.token_floor(), live.token_floor());
    assert_eq!(loaded.position(), live.position());
    assert_eq!(loaded.digest(), live.digest(), "digest");
}

#[test]
fn rewrite_overlapping_proposals_keeps_every_change() {
    let dir = TempDir::new("rewrite");
    let path = dir.join("a.aof");
    let host = Host::with(StateMachine::new(), Duration::from_millis(100));
    let sim = Sim::new(host.clone());
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::Always))
        .expect("open");
    let mut rng = Rng(42);
    for _ in 0..2000 {
        drop(sim.step(&mut rng, &aof));
    }
    runtime()
        .block_on(aof.wait_durable(aof.appended_position()))
        .expect("durable");
    let before = aof.stats().file_size;

    let at_start = aof.appended_position();
    aof.rewrite().expect("rewrite starts");
    assert!(matches!(aof.rewrite(), Err(AofError::RewriteInProgress)));
    assert!(aof.stats().rewrite_in_progress);
    // Proposals go on (and are not blocked) while the slow snapshot is taken and written.
    drive(&sim, &aof, 4, |aof| aof.stats().rewrites >= 1);
    assert!(
        aof.appended_position() > at_start + 10,
        "proposals were made during the rewrite"
    );
    drive(&sim, &aof, 2, {
        let start = aof.appended_position();
        move |aof| aof.appended_position() > start + 200
    });
    let st = aof.stats();
    assert!(
        !st.rewrite_in_progress && st.rewrites == 1 && st.last_rewrite_ok,
        "{st:?}"
    );
    assert!(st.last_rewrite_duration.is_some());
    assert!(!dir.join("a.aof.rewrite.tmp").exists());
    aof.shutdown();

    let (version, records) = read_file(&path);
    assert_eq!(version, Version::V2);
    assert!(matches!(records[0], FileRecord::SnapshotBegin { .. }));
    let history = host.history.lock().clone();
    let fences = records
        .iter()
        .filter(|r| matches!(r, FileRecord::Item(i) if i.starts_with("Fence")))
        .count();
    assert_eq!(fences, 4, "one snapshot item per fence key");
    assert!(
        records.len() < history.len(),
        "compacted: {} records for {} entries",
        records.len(),
        history.len()
    );
    let full = common::encode_file(&history).0.len() as u64;
    let size = fs::metadata(&path).expect("meta").len();
    assert!(
        size < full,
        "rewritten {size} bytes, full history {full} (before the rewrite: {before})"
    );
    let live = host.machine.lock();
    assert_same_state(&load_machine(&path), &live);
    assert_eq!(
        machine_of(&history).digest(),
        live.digest(),
        "the history applied again gives the live state: apply is deterministic"
    );
}

#[test]
fn replay_of_a_rewritten_file_skips_the_entries_its_snapshot_reflects() {
    let dir = TempDir::new("rewrite-tail");
    let path = dir.join("a.aof");
    // Slow snapshots: entries keep being applied between the rewrite's start and the snapshot,
    // so the tail holds entries at or below the snapshot's position.
    let host = Host::with(StateMachine::new(), Duration::from_millis(150));
    let sim = Sim::new(host.clone());
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::Always))
        .expect("open");
    let mut rng = Rng(7);
    for _ in 0..300 {
        drop(sim.step(&mut rng, &aof));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let proposer = {
        let (sim, aof, stop) = (sim.clone(), aof.clone(), stop.clone());
        thread::spawn(move || {
            let mut rng = Rng(99);
            while !stop.load(Ordering::Relaxed) {
                let rx = sim.step(&mut rng, &aof);
                assert!(rx.blocking_recv().expect("answered").is_ok());
            }
        })
    };
    wait_until("proposals", || aof.appended_position() > 400);
    aof.rewrite().expect("rewrite starts");
    wait_until("the rewrite", || aof.stats().rewrites >= 1);
    let after = aof.appended_position();
    wait_until("proposals after the rewrite", || {
        aof.appended_position() > after + 50
    });
    stop.store(true, Ordering::Relaxed);
    proposer.join().expect("proposer");
    runtime()
        .block_on(aof.wait_durable(aof.appended_position()))
        .expect("durable");
    aof.shutdown();

    let (_, records) = read_file(&path);
    let FileRecord::SnapshotBegin { position: p, .. } = records[0] else {
        panic!("starts with a snapshot: {:?}", records[0])
    };
    assert_eq!(p, host.last_snapshot_position.load(Ordering::SeqCst));
    let tail: Vec<u64> = file_entries(&path).iter().map(|e| e.position).collect();
    assert!(
        tail.iter().any(|&t| t <= p),
        "the tail repeats entries at or below the snapshot's position {p}: {:?}",
        &tail[..tail.len().min(10)]
    );
    assert!(tail.iter().any(|&t| t > p));
    assert!(tail.windows(2).all(|w| w[0] < w[1]), "tail in log order");

    let (loaded, report) = try_load(&path).expect("load");
    assert_eq!(report.records, records.len() as u64);
    assert_eq!(report.truncated_at, None);
    let live = host.machine.lock();
    assert_same_state(&loaded, &live);
}

#[test]
fn automatic_rewrite_when_the_file_grows() {
    let dir = TempDir::new("auto");
    let path = dir.join("a.aof");
    let host = Host::new();
    let sim = Sim::new(host.clone());
    let o = AofOptions {
        rewrite_min_size: 16 * 1024,
        rewrite_percentage: 100,
        ..opts(path.clone(), FsyncPolicy::No)
    };
    let aof = host.open(o).expect("open");
    drive(&sim, &aof, 2, |aof| aof.stats().rewrites >= 2);
    let st = aof.stats();
    aof.shutdown();
    // Compacted: the file holds a snapshot of six locks' state and the entries since the last
    // rewrite began. How many that is depends on how fast the rewrite ran against the writers
    // (a run on a loaded machine kept more than half of everything written), so the check is
    // only that the entries from before the first rewrite are gone.
    let kept = file_entries(&path).len() as u64;
    assert!(kept < st.records_written, "{kept} entries kept: {st:?}");
    assert_same_state(&load_machine(&path), &host.machine.lock());

    // Percentage 0 disables it.
    let path2 = dir.join("b.aof");
    let host = Host::new();
    let sim = Sim::new(host.clone());
    let o = AofOptions {
        rewrite_min_size: 1024,
        rewrite_percentage: 0,
        ..opts(path2.clone(), FsyncPolicy::No)
    };
    let aof = host.open(o).expect("open");
    let mut rng = Rng(7);
    for _ in 0..500 {
        drop(sim.step(&mut rng, &aof));
    }
    runtime()
        .block_on(aof.wait_durable(aof.appended_position()))
        .expect("durable");
    assert!(aof.stats().file_size > 2048);
    assert_eq!(aof.stats().rewrites, 0);
}

#[test]
fn rewrite_of_an_empty_state_and_reload() {
    let dir = TempDir::new("rewrite-empty");
    let path = dir.join("a.aof");
    let host = Host::new();
    let aof = host.open(AofOptions::new(&path)).expect("open");
    aof.rewrite().expect("rewrite");
    wait_until("the rewrite", || aof.stats().rewrites > 0);
    let r = runtime()
        .block_on(aof.propose(Millis(3), vec![fence("k", 1)]))
        .expect("answered");
    assert!(r.is_ok());
    aof.shutdown();
    // The empty machine's snapshot is its start alone: position 0, no items.
    let (_, records) = read_file(&path);
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(
        records[0],
        FileRecord::SnapshotBegin {
            position: 0,
            at: Millis(0)
        }
    );
    assert!(matches!(&records[1], FileRecord::Entry(e) if e.position == 1));
    let loaded = load_machine(&path);
    assert_eq!(loaded.fence_token(b"k"), 1);
    assert_eq!(loaded.digest(), host.digest());
}

#[test]
fn an_entry_applied_at_start_is_logged_in_front_of_the_next_batch() {
    let dir = TempDir::new("prepend");
    let path = dir.join("a.aof");
    let rt = runtime();
    // A first run leaves a held lock behind.
    let host = Host::new();
    let aof = host.open(AofOptions::new(&path)).expect("open");
    let acquire = Op::Acquire {
        conditions: Default::default(),
        name: Bytes::from_static(b"held"),
        lease_ms: 10_000,
        owner: None,
        wait: false.into(),
    };
    let r = rt
        .block_on(aof.propose(Millis(100), vec![acquire]))
        .expect("answered");
    assert_eq!(r, Ok(vec![OpResult::Acquire(AcquireResult::Granted(1))]));
    aof.shutdown();
    drop(aof);

    // The next start re-arms the lease: applied at once, logged with the next entry written.
    let rearm = |position| flockd_log::Entry {
        position,
        at: Millis(5_000),
        ops: vec![Op::Rearm { extra_ms: 0 }],
    };
    let start = |host: &Arc<Host>| {
        let aof = host.open(AofOptions::new(&path)).expect("open");
        let position = host.machine.lock().position() + 1;
        let mut results = Vec::new();
        flockd_log::Apply::apply(&**host, &[rearm(position)], true, &mut results);
        assert_eq!(
            results,
            vec![vec![OpResult::Rearm {
                holdings: 1,
                waiters: 0
            }]]
        );
        aof.prepend_applied(rearm(position));
        (aof, position)
    };
    let before = fs::read(&path).expect("read");
    let host = Host::with(load_machine(&path), Duration::ZERO);
    let (aof, position) = start(&host);
    assert_eq!(position, 2);
    assert_eq!(aof.appended_position(), 2);
    rt.block_on(aof.wait_durable(2)).expect("counts as durable");
    assert_eq!(
        host.machine.lock().status(b"held", Millis(5_500)).ttl_ms,
        9_500
    );
    aof.shutdown();
    drop(aof);
    assert_eq!(
        fs::read(&path).expect("read"),
        before,
        "nothing else written: the file is what it was, and the next start re-arms again"
    );

    let host = Host::with(load_machine(&path), Duration::ZERO);
    let (aof, position) = start(&host);
    assert_eq!(position, 2);
    let r = rt
        .block_on(aof.propose(Millis(5_100), vec![fence("k", 1)]))
        .expect("answered");
    assert_eq!(r, Ok(vec![OpResult::FenceSet(true)]));
    assert_eq!(aof.stats().records_written, 2);
    aof.shutdown();
    let entries = file_entries(&path);
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.position, e.ops[0].clone()))
            .collect::<Vec<_>>(),
        vec![
            (
                1,
                Op::Acquire {
                    conditions: Default::default(),
                    name: Bytes::from_static(b"held"),
                    lease_ms: 10_000,
                    owner: None,
                    wait: false.into(),
                }
            ),
            (2, Op::Rearm { extra_ms: 0 }),
            (3, fence("k", 1)),
        ]
    );
    let loaded = load_machine(&path);
    assert_eq!(loaded.digest(), host.digest());
    assert_eq!(loaded.status(b"held", Millis(5_500)).ttl_ms, 9_500);
}
