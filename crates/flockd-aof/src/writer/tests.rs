//! Write failures, through the test hook only unit tests reach: a failed write answers its
//! batch with `WriteFailed` and applies nothing (on the writer thread and on a proposer's
//! thread), proposals made while failed are refused, and a rewrite from the applier's state
//! recovers (the failed proposals are not in the new file); a failure during a running
//! rewrite is recovered by it; failed at shutdown writes the state; the futures are Send.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::load;
use crate::record::{Payload, Record, Version, decode_record};
use bytes::Bytes;
use flockd_core::OpResult;
use flockd_core::{Snapshot, StateMachine};

/// The state machine as the log's applier.
struct Host {
    machine: Mutex<StateMachine>,
    /// Sleep before taking a snapshot, to keep a rewrite running for a while.
    snapshot_delay: Duration,
}

impl Host {
    fn new(snapshot_delay: Duration) -> Arc<Host> {
        Arc::new(Host {
            machine: Mutex::new(StateMachine::new()),
            snapshot_delay,
        })
    }
}

impl Apply for Host {
    fn apply(&self, entries: &[Entry], _proposed_here: bool, results: &mut Vec<Vec<OpResult>>) {
        let mut m = self.machine.lock();
        let mut events = Vec::new();
        for e in entries {
            let r = e
                .ops
                .iter()
                .enumerate()
                .map(|(i, op)| m.apply_in_entry(e.position, i as u32, e.at, op, &mut events))
                .collect();
            results.push(r);
        }
    }

    fn snapshot(&self) -> Snapshot {
        thread::sleep(self.snapshot_delay);
        self.machine.lock().snapshot()
    }

    fn replace(&self, machine: StateMachine) {
        *self.machine.lock() = machine;
    }

    fn time(&self) -> Millis {
        self.machine.lock().time()
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flockd-aof-unit-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("temp dir");
    d
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn fence(key: &str, token: u64) -> Op {
    Op::FenceSet {
        lock: None,
        key: Bytes::copy_from_slice(key.as_bytes()),
        token,
        value: Bytes::from(format!("value-{token}")),
    }
}

fn open(path: &Path, fsync: FsyncPolicy, host: &Arc<Host>) -> Arc<Aof> {
    let opts = AofOptions {
        fsync,
        ..AofOptions::new(path)
    };
    let (position, at) = {
        let m = host.machine.lock();
        (m.position(), m.time())
    };
    Aof::open(opts, host.clone(), position, at).expect("open")
}

/// Proposes `ops` and waits for the answer (pushing the write under `everysec`/`no`).
fn commit(rt: &tokio::runtime::Runtime, aof: &Aof, at: u64, ops: Vec<Op>) -> ProposalResult {
    let rx = aof.propose(Millis(at), ops);
    aof.write_now();
    rt.block_on(rx).expect("answered")
}

fn loaded(path: &Path) -> StateMachine {
    let mut m = StateMachine::new();
    load(path, &mut m).expect("load");
    m
}

/// The file's records: `Some(position)` for a snapshot start, entry positions as `Ok`.
fn layout(path: &Path) -> (Option<u64>, Vec<u64>) {
    let bytes = fs::read(path).expect("read");
    assert_eq!(bytes[..8], HEADER);
    let (mut snapshot, mut entries) = (None, Vec::new());
    let mut rest = &bytes[8..];
    // Zeros after the last record are the file's end (space written ahead).
    while !rest.is_empty() && rest.iter().any(|&b| b != 0) {
        let (p, n) = decode_record(Version::V2, rest).expect("valid record");
        match p {
            Payload::V2(Record::SnapshotBegin { position, .. }) => snapshot = Some(position),
            Payload::V2(Record::Entry { position, .. }) => entries.push(position),
            _ => {}
        }
        rest = &rest[n..];
    }
    (snapshot, entries)
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn assert_write_failed(r: &ProposalResult) {
    match r {
        Err(ProposeError::WriteFailed(m)) => assert!(m.contains("No space left"), "{m}"),
        other => panic!("expected WriteFailed, got {other:?}"),
    }
}

#[test]
fn a_failed_write_refuses_applies_nothing_and_recovers_by_rewrite() {
    let dir = temp_dir("fail");
    let path = dir.join("a.aof");
    let host = Host::new(Duration::ZERO);
    let aof = open(&path, FsyncPolicy::Always, &host);
    let rt = rt();
    assert_eq!(
        commit(&rt, &aof, 10, vec![fence("a", 1)]),
        Ok(vec![OpResult::FenceSet(true)])
    );

    aof.inject_write_failures(1);
    let failed = commit(
        &rt,
        &aof,
        20,
        vec![
            fence("b", 2),
            Op::Advance {
                name: Bytes::from_static(b"n"),
                token: 5,
            },
        ],
    );
    assert_write_failed(&failed);
    let failed_position = aof.appended_position();
    assert_eq!(failed_position, 2);
    let err = rt
        .block_on(aof.wait_durable(failed_position))
        .expect_err("the write failed");
    assert!(
        matches!(err, AofError::WriteFailed(ref m) if m.contains("No space left")),
        "{err}"
    );
    assert!(matches!(
        aof.check_writable(),
        Err(ProposeError::WriteFailed(ref m)) if m.contains("No space left")
    ));
    let st = aof.stats();
    assert!(st.write_failed, "{st:?}");
    assert!(
        st.last_error
            .as_deref()
            .is_some_and(|e| e.contains("No space left")),
        "{st:?}"
    );
    // Nothing of the failed entry was applied.
    {
        let m = host.machine.lock();
        assert_eq!(m.fence_token(b"a"), 1);
        assert_eq!(m.fence_token(b"b"), 0);
        assert_eq!(m.last_token(b"n"), 0);
        assert_eq!(m.position(), 1);
    }
    // The file was cut back to its good part: exactly the applied state.
    let disk = loaded(&path);
    assert_eq!(disk.digest(), host.machine.lock().digest());
    assert_eq!(layout(&path), (None, vec![1]));

    // A proposal made while failed is refused, and not applied either.
    let refused = commit(&rt, &aof, 30, vec![fence("c", 3)]);
    assert!(
        matches!(refused, Err(ProposeError::WriteFailed(_))),
        "{refused:?}"
    );
    assert!(
        rt.block_on(aof.wait_durable(aof.appended_position()))
            .is_err()
    );
    assert_eq!(host.machine.lock().fence_token(b"c"), 0);

    // A rewrite from the applier's state recovers (retried every second).
    wait_until("recovery", || aof.check_writable().is_ok());
    let st = aof.stats();
    assert!(st.rewrites >= 1 && !st.write_failed, "{st:?}");
    assert!(!dir.join("a.aof.rewrite.tmp").exists());
    assert_eq!(
        layout(&path),
        (Some(1), vec![]),
        "a new file: a snapshot of the state, without the failed proposals"
    );

    assert_eq!(
        commit(&rt, &aof, 40, vec![fence("d", 4)]),
        Ok(vec![OpResult::FenceSet(true)])
    );
    let last = aof.appended_position();
    assert_eq!(last, 4, "positions go on after the refused ones");
    rt.block_on(aof.wait_durable(last)).expect("durable");
    aof.shutdown();

    let disk = loaded(&path);
    let live = host.machine.lock();
    assert_eq!(disk.digest(), live.digest());
    assert_eq!((disk.fence_token(b"a"), disk.fence_token(b"d")), (1, 4));
    assert_eq!(
        (
            disk.fence_token(b"b"),
            disk.last_token(b"n"),
            disk.fence_token(b"c")
        ),
        (0, 0, 0),
        "the failed and the refused proposals are not on disk"
    );
    assert_eq!(layout(&path), (Some(1), vec![4]));
    drop(live);
    drop(aof);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_write_on_the_proposers_thread() {
    let dir = temp_dir("fail-no");
    let path = dir.join("a.aof");
    let host = Host::new(Duration::ZERO);
    let aof = open(&path, FsyncPolicy::No, &host);
    let rt = rt();
    assert_eq!(
        commit(&rt, &aof, 10, vec![fence("a", 1)]),
        Ok(vec![OpResult::FenceSet(true)])
    );
    aof.inject_write_failures(1);
    assert_write_failed(&commit(&rt, &aof, 20, vec![fence("b", 2)]));
    assert!(aof.check_writable().is_err());
    assert_eq!(host.machine.lock().fence_token(b"b"), 0);
    assert!(matches!(
        commit(&rt, &aof, 25, vec![fence("c", 3)]),
        Err(ProposeError::WriteFailed(_))
    ));
    wait_until("recovery", || aof.check_writable().is_ok());
    assert_eq!(
        commit(&rt, &aof, 30, vec![fence("d", 4)]),
        Ok(vec![OpResult::FenceSet(true)])
    );
    aof.shutdown();
    let disk = loaded(&path);
    assert_eq!(disk.digest(), host.machine.lock().digest());
    assert_eq!((disk.fence_token(b"b"), disk.fence_token(b"c")), (0, 0));
    assert_eq!(disk.fence_token(b"d"), 4);
    drop(aof);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_failure_during_a_rewrite_is_recovered_by_it() {
    let dir = temp_dir("fail-rewrite");
    let path = dir.join("a.aof");
    let host = Host::new(Duration::from_millis(300));
    let aof = open(&path, FsyncPolicy::Always, &host);
    let rt = rt();
    assert!(commit(&rt, &aof, 10, vec![fence("a", 1)]).is_ok());
    aof.rewrite().expect("rewrite starts");
    // Into the old file and the rewrite's tail.
    assert!(commit(&rt, &aof, 20, vec![fence("b", 2)]).is_ok());
    aof.inject_write_failures(1);
    assert_write_failed(&commit(&rt, &aof, 30, vec![fence("c", 3)]));
    wait_until("the rewrite", || aof.stats().rewrites >= 1);
    aof.check_writable().expect("recovered by the rewrite");
    assert!(commit(&rt, &aof, 40, vec![fence("d", 4)]).is_ok());
    aof.shutdown();
    let disk = loaded(&path);
    assert_eq!(disk.digest(), host.machine.lock().digest());
    assert_eq!(
        [b"a", b"b", b"c", b"d"].map(|k| disk.fence_token(k)),
        [1, 2, 0, 4]
    );
    drop(aof);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn failed_at_shutdown_writes_the_state() {
    let dir = temp_dir("failstop");
    let path = dir.join("a.aof");
    let host = Host::new(Duration::ZERO);
    let aof = open(&path, FsyncPolicy::Always, &host);
    let rt = rt();
    assert!(commit(&rt, &aof, 10, vec![fence("a", 7)]).is_ok());
    aof.inject_write_failures(1);
    assert_write_failed(&commit(&rt, &aof, 20, vec![fence("b", 8)]));
    assert!(rt.block_on(aof.wait_durable(2)).is_err());
    aof.shutdown();
    // The last rewrite at shutdown wrote the whole state: a snapshot, nothing failed.
    assert_eq!(layout(&path), (Some(1), vec![]));
    let disk = loaded(&path);
    assert_eq!(disk.digest(), host.machine.lock().digest());
    assert_eq!((disk.fence_token(b"a"), disk.fence_token(b"b")), (7, 0));
    let st = aof.stats();
    assert!(st.rewrites >= 1 && !st.write_failed, "{st:?}");
    assert!(!dir.join("a.aof.rewrite.tmp").exists());
    drop(aof);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_policy_changes_at_run_time() {
    let dir = temp_dir("policy");
    let path = dir.join("a.aof");
    let host = Host::new(Duration::ZERO);
    let aof = open(&path, FsyncPolicy::No, &host);
    let rt = rt();
    assert!(commit(&rt, &aof, 10, vec![fence("a", 1)]).is_ok());
    let st = aof.stats();
    assert_eq!((st.fsync_policy, st.fsyncs), (FsyncPolicy::No, 0));
    // To `always`: what `no` wrote is synced before the switch returns ...
    aof.set_fsync_policy(FsyncPolicy::Always);
    let st = aof.stats();
    assert_eq!((st.fsync_policy, st.fsyncs), (FsyncPolicy::Always, 1));
    // ... and each later batch is synced before it is answered, by the writer thread
    // (the proposal is not pushed: `write_now` does nothing under `always`).
    let rx = aof.propose(Millis(20), vec![fence("a", 2)]);
    assert!(rt.block_on(rx).expect("answered").is_ok());
    assert_eq!(aof.stats().fsyncs, 2);
    // Back to `no`: the proposer writes, nothing syncs; a record nobody pushes is still
    // written by the writer thread's poll.
    aof.set_fsync_policy(FsyncPolicy::No);
    assert!(commit(&rt, &aof, 30, vec![fence("a", 3)]).is_ok());
    let rx = aof.propose(Millis(40), vec![fence("a", 4)]);
    assert!(rt.block_on(rx).expect("answered").is_ok());
    let st = aof.stats();
    assert_eq!(
        (st.fsync_policy, st.fsyncs, st.durable_position),
        (FsyncPolicy::No, 2, 4)
    );
    // Switching to the policy in force changes nothing.
    aof.set_fsync_policy(FsyncPolicy::No);
    aof.set_auto_rewrite(0, 0);
    aof.shutdown();
    assert_eq!(loaded(&path).fence_token(b"a"), 4);
    drop(aof);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Aof>();
    let dir = temp_dir("send");
    let host = Host::new(Duration::ZERO);
    let aof = open(&dir.join("a.aof"), FsyncPolicy::Always, &host);
    let fut = aof.wait_durable(0);
    assert_send(&fut);
    drop(fut);
    let rx = aof.propose(Millis(1), vec![fence("a", 1)]);
    assert_send(&rx);
    drop(rx);
    drop(aof);
    let _ = fs::remove_dir_all(&dir);
}

/// The file's length on disk.
fn disk_len(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").len()
}

#[test]
fn zeros_are_written_ahead_under_always_and_cut_at_the_start_and_at_shutdown() {
    let dir = temp_dir("ahead");
    let path = dir.join("a.aof");
    let host = Host::new(Duration::ZERO);
    let aof = open(&path, FsyncPolicy::Always, &host);
    let rt = rt();
    for token in 1..=20 {
        assert!(commit(&rt, &aof, token * 10, vec![fence("a", token)]).is_ok());
    }
    // The records end where the stats say; zeros follow, a step ahead.
    let records = aof.stats().file_size;
    let bytes = fs::read(&path).expect("read");
    let zeros = bytes.len() as u64 - records;
    // The first batch wrote a step of zeros past itself; the others wrote over them.
    assert!(
        zeros > flockd_log::written_ahead::WRITE_AHEAD / 2
            && zeros <= flockd_log::written_ahead::WRITE_AHEAD,
        "{zeros} bytes after the records"
    );
    assert!(bytes[records as usize..].iter().all(|&b| b == 0));

    // What a crash leaves: `check` reports the zeros apart, and the start cuts them off
    // without calling them damage.
    let crashed = dir.join("crashed.aof");
    fs::copy(&path, &crashed).expect("copy");
    let report = crate::check(&crashed).expect("check");
    assert_eq!(report.problem, None, "{report:?}");
    assert_eq!(
        (report.valid_len, report.zeros_after, report.records),
        (records, zeros, 20)
    );
    let mut machine = StateMachine::new();
    let replayed = load(&crashed, &mut machine).expect("load");
    assert_eq!((replayed.truncated_at, replayed.bytes), (None, records));
    assert_eq!(machine.fence_token(b"a"), 20);
    assert_eq!(disk_len(&crashed), records);

    // Zeros after the last record and then anything else are damage, as before.
    let damaged = dir.join("damaged.aof");
    let mut with_junk = bytes.clone();
    with_junk.extend_from_slice(b"junk");
    fs::write(&damaged, &with_junk).expect("write");
    let report = crate::check(&damaged).expect("check");
    assert_eq!(report.zeros_after, 0);
    assert!(
        report.tail_only && report.problem.as_ref().is_some_and(|p| p.0 == records),
        "{report:?}"
    );

    // A clean shutdown leaves the file ending at its last record.
    aof.shutdown();
    assert_eq!(disk_len(&path), records);
    assert_eq!(loaded(&path).fence_token(b"a"), 20);
    drop(aof);

    // Under `everysec` nothing is written ahead.
    let other = dir.join("everysec.aof");
    let host = Host::new(Duration::ZERO);
    let aof = open(&other, FsyncPolicy::EverySec, &host);
    assert!(commit(&rt, &aof, 10, vec![fence("b", 1)]).is_ok());
    assert_eq!(disk_len(&other), aof.stats().file_size);
    aof.shutdown();
    drop(aof);
    let _ = fs::remove_dir_all(&dir);
}
