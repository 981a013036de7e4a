//! The writer against real files: group commit, the three fsync policies, shutdown, background
//! and automatic rewrites overlapping appends (checked against a model of the state).

mod common;

use std::fs;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Model, Rng, Sim, TempDir, replay, runtime};
use flockd_aof::record::HEADER;
use flockd_aof::{Aof, AofError, AofOptions, FsyncPolicy, SnapshotSource};
use flockd_core::{Change, Journal};

fn opts(path: std::path::PathBuf, fsync: FsyncPolicy) -> AofOptions {
    AofOptions {
        fsync,
        ..AofOptions::new(path)
    }
}

fn empty_source() -> Arc<dyn SnapshotSource> {
    Arc::new(Sim::new(Duration::ZERO))
}

fn fence(thread: u64, i: u64) -> Change {
    Change::FenceSet {
        key: Bytes::from(format!("t{thread}")),
        token: i,
        value: Bytes::from_static(b"v"),
    }
}

#[test]
fn open_creates_the_file_with_a_header() {
    let dir = TempDir::new("open");
    let path = dir.join("a.aof");
    fs::write(dir.join("a.aof.rewrite.tmp"), b"stale").expect("write");
    let aof = Aof::open(AofOptions::new(&path), empty_source()).expect("open");
    assert_eq!(fs::read(&path).expect("read"), HEADER);
    assert!(
        !dir.join("a.aof.rewrite.tmp").exists(),
        "stale rewrite file removed"
    );
    assert_eq!(aof.stats().file_size, 8);
    aof.check_writable().expect("writable");
    drop(aof);

    // Reopening appends after what is there.
    let aof = Aof::open(AofOptions::new(&path), empty_source()).expect("reopen");
    aof.append(Change::Floor { token: 5 });
    aof.shutdown();
    assert_eq!(replay(&path), vec![Change::Floor { token: 5 }]);

    fs::write(&path, b"not an aof at all").expect("write");
    assert!(matches!(
        Aof::open(AofOptions::new(&path), empty_source()),
        Err(AofError::Corrupt { offset: 0, .. })
    ));
}

#[test]
fn group_commit_from_many_threads() {
    let dir = TempDir::new("group");
    let path = dir.join("a.aof");
    let aof = Aof::open(opts(path.clone(), FsyncPolicy::Always), empty_source()).expect("open");
    const THREADS: u64 = 8;
    const PER: u64 = 500;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let aof = aof.clone();
            thread::spawn(move || {
                for i in 0..PER {
                    aof.append(fence(t, i));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("appender");
    }
    let seq = aof.appended_seq();
    assert_eq!(seq, THREADS * PER);
    runtime().block_on(aof.wait_durable(seq)).expect("durable");
    let st = aof.stats();
    assert_eq!(st.records_written, THREADS * PER);
    assert_eq!(st.durable_seq, seq);
    assert!(st.fsyncs < st.records_written, "{st:?}");
    assert!(st.acks_per_fsync > 1.0, "{st:?}");
    assert_eq!(st.fsyncs, st.batches, "always: one fsync per batch");

    // Everything is there, each thread's records in its order.
    let got = replay(&path);
    assert_eq!(got.len() as u64, THREADS * PER);
    let mut next = vec![0u64; THREADS as usize];
    for c in got {
        let Change::FenceSet { key, token, .. } = c else {
            panic!("{c:?}")
        };
        let t: usize = std::str::from_utf8(&key[1..])
            .expect("utf8")
            .parse()
            .expect("num");
        assert_eq!(token, next[t]);
        next[t] += 1;
    }
}

#[test]
fn concurrent_waiters_share_fsyncs() {
    let dir = TempDir::new("waiters");
    let path = dir.join("a.aof");
    let aof = Aof::open(opts(path.clone(), FsyncPolicy::Always), empty_source()).expect("open");
    let rt = runtime();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..32u64 {
            let aof = aof.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..20 {
                    aof.append(fence(t, i));
                    aof.wait_durable(aof.appended_seq()).await.expect("durable");
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
    assert_eq!(replay(&path).len(), 640);
}

#[test]
fn everysec_syncs_within_about_a_second() {
    let dir = TempDir::new("everysec");
    let path = dir.join("a.aof");
    let aof = Aof::open(opts(path.clone(), FsyncPolicy::EverySec), empty_source()).expect("open");
    assert_eq!(aof.stats().fsync_policy, FsyncPolicy::EverySec);
    for i in 0..50 {
        aof.append(fence(0, i));
    }
    runtime().block_on(aof.wait_durable(50)).expect("written");
    assert_eq!(replay(&path).len(), 50, "written before the sync");
    let deadline = Instant::now() + Duration::from_secs(10);
    while aof.stats().fsyncs == 0 {
        assert!(Instant::now() < deadline, "no fsync");
        thread::sleep(Duration::from_millis(50));
    }
    let st = aof.stats();
    assert_eq!(st.acks_per_fsync, 50.0, "{st:?}");
    assert!(st.last_fsync_unix_ms.is_some());
}

#[test]
fn no_policy_syncs_only_at_shutdown() {
    let dir = TempDir::new("no");
    let path = dir.join("a.aof");
    let aof = Aof::open(opts(path.clone(), FsyncPolicy::No), empty_source()).expect("open");
    for i in 0..30 {
        aof.append(fence(1, i));
    }
    runtime().block_on(aof.wait_durable(30)).expect("written");
    assert_eq!(aof.stats().fsyncs, 0);
    aof.shutdown();
    assert_eq!(aof.stats().fsyncs, 1);
    assert_eq!(replay(&path).len(), 30);
}

#[test]
fn shutdown_flushes_and_refuses_later_work() {
    let dir = TempDir::new("shutdown");
    let path = dir.join("a.aof");
    let aof = Aof::open(opts(path.clone(), FsyncPolicy::No), empty_source()).expect("open");
    for i in 0..100 {
        aof.append(fence(2, i));
    }
    aof.shutdown();
    aof.shutdown(); // idempotent
    assert_eq!(replay(&path).len(), 100);
    aof.append(fence(2, 100));
    assert_eq!(aof.appended_seq(), 100, "dropped after shutdown");
    let rt = runtime();
    rt.block_on(aof.wait_durable(100))
        .expect("written before shutdown");
    assert!(matches!(
        rt.block_on(aof.wait_durable(101)),
        Err(AofError::ShuttingDown)
    ));
    assert!(matches!(aof.check_writable(), Err(AofError::ShuttingDown)));
    assert!(matches!(aof.rewrite(), Err(AofError::ShuttingDown)));

    // Dropping the last reference shuts down too.
    let aof = Aof::open(opts(path.clone(), FsyncPolicy::No), empty_source()).expect("open");
    aof.append(fence(2, 100));
    drop(aof);
    assert_eq!(replay(&path).len(), 101);
}

/// Runs `sim` steps from `threads` threads until `until` holds, then waits for durability.
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
                let mut rng = Rng(0x1234_5678 + t * 7919);
                let deadline = Instant::now() + Duration::from_secs(20);
                let mut n = 0u64;
                while !until(&aof) {
                    assert!(Instant::now() < deadline, "condition never met");
                    sim.step(&mut rng, &aof);
                    n += 1;
                    if n.is_multiple_of(64) {
                        // Pace like real clients, which wait for their replies.
                        thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("driver");
    }
    runtime()
        .block_on(aof.wait_durable(aof.appended_seq()))
        .expect("durable");
}

#[test]
fn rewrite_overlapping_appends_keeps_every_change() {
    let dir = TempDir::new("rewrite");
    let path = dir.join("a.aof");
    let sim = Arc::new(Sim::new(Duration::from_millis(2)));
    let aof = Aof::open(opts(path.clone(), FsyncPolicy::Always), sim.clone()).expect("open");
    let mut rng = Rng(42);
    for _ in 0..2000 {
        sim.step(&mut rng, &aof);
    }
    runtime()
        .block_on(aof.wait_durable(aof.appended_seq()))
        .expect("durable");
    let before = aof.stats().file_size;

    let at_start = aof.appended_seq();
    aof.rewrite().expect("rewrite starts");
    assert!(matches!(aof.rewrite(), Err(AofError::RewriteInProgress)));
    assert!(aof.stats().rewrite_in_progress);
    // Appends go on (and are not blocked) while the slow snapshot is written.
    drive(&sim, &aof, 4, |aof| aof.stats().rewrites >= 1);
    assert!(
        aof.appended_seq() > at_start + 10,
        "records were appended during the rewrite"
    );
    drive(&sim, &aof, 2, {
        let start = aof.appended_seq();
        move |aof| aof.appended_seq() > start + 200
    });
    let st = aof.stats();
    assert!(
        !st.rewrite_in_progress && st.rewrites == 1 && st.last_rewrite_ok,
        "{st:?}"
    );
    assert!(st.last_rewrite_duration.is_some());
    assert!(!dir.join("a.aof.rewrite.tmp").exists());
    aof.shutdown();

    let rewritten = replay(&path);
    let history = sim.history.lock().clone();
    assert!(
        rewritten.len() < history.len(),
        "compacted: {} of {}",
        rewritten.len(),
        history.len()
    );
    let full = common::encode_file(&history).0.len() as u64;
    let size = fs::metadata(&path).expect("meta").len();
    assert!(
        size < full,
        "rewritten {size} bytes, full history {full} (before the rewrite: {before})"
    );
    let live = sim.model.lock().clone();
    assert_eq!(
        Model::from_changes(&rewritten),
        live,
        "rewritten file == live state"
    );
    assert_eq!(
        Model::from_changes(&history),
        live,
        "original history == live state"
    );
}

#[test]
fn automatic_rewrite_when_the_file_grows() {
    let dir = TempDir::new("auto");
    let path = dir.join("a.aof");
    let sim = Arc::new(Sim::new(Duration::ZERO));
    let o = AofOptions {
        rewrite_min_size: 16 * 1024,
        rewrite_percentage: 100,
        ..opts(path.clone(), FsyncPolicy::No)
    };
    let aof = Aof::open(o, sim.clone()).expect("open");
    drive(&sim, &aof, 2, |aof| aof.stats().rewrites >= 2);
    let st = aof.stats();
    assert!(st.size_at_last_rewrite < 16 * 1024, "{st:?}");
    aof.shutdown();
    assert_eq!(Model::from_changes(&replay(&path)), *sim.model.lock());

    // Percentage 0 disables it.
    let path2 = dir.join("b.aof");
    let o = AofOptions {
        rewrite_min_size: 1024,
        rewrite_percentage: 0,
        ..opts(path2.clone(), FsyncPolicy::No)
    };
    let aof = Aof::open(o, sim.clone()).expect("open");
    let mut rng = Rng(7);
    for _ in 0..500 {
        sim.step(&mut rng, &aof);
    }
    runtime()
        .block_on(aof.wait_durable(aof.appended_seq()))
        .expect("durable");
    assert_eq!(aof.stats().rewrites, 0);
}

#[test]
fn rewrite_of_an_empty_state_and_reload() {
    let dir = TempDir::new("rewrite-empty");
    let path = dir.join("a.aof");
    let aof = Aof::open(AofOptions::new(&path), empty_source()).expect("open");
    aof.rewrite().expect("rewrite");
    let deadline = Instant::now() + Duration::from_secs(10);
    while aof.stats().rewrites == 0 {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(10));
    }
    aof.append(Change::Floor { token: 1 });
    aof.shutdown();
    // The empty Sim's snapshot is a single Floor{0}.
    assert_eq!(
        replay(&path),
        vec![Change::Floor { token: 0 }, Change::Floor { token: 1 }]
    );
}
