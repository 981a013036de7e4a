//! Files of the first format (`FLOCKAO1`, one applied change per record): they load into the
//! state their records describe, the committed fixture written by the last release of that
//! format loads with the answers it gave, and `Aof::open` upgrades such a file to format 2 (same
//! digest after a reload) before appending, after which new proposals replay too.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::{
    FileRecord, Host, TempDir, V1Model, encode_v1_file, fence, holdings_of, load_machine, opts,
    read_file, runtime, try_load,
};
use flockd_aof::record::{HEADER, HEADER_V1, Version};
use flockd_aof::{AofOptions, FsyncPolicy};
use flockd_core::{AcquireResult, Millis, Op, OpResult, StateMachine, V1Change};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/v1.aof");

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// What an old server journaled for a short session.
fn session() -> Vec<V1Change> {
    vec![
        V1Change::Advance {
            name: b("idle"),
            token: 40,
        },
        V1Change::Floor { token: 10 },
        V1Change::Grant {
            name: b("held"),
            token: 11,
            first_token: 11,
            holds: 1,
            owner: Some(b("w1")),
            lease_ms: 60_000,
        },
        V1Change::Grant {
            name: b("held"),
            token: 12,
            first_token: 11,
            holds: 2,
            owner: Some(b("w1")),
            lease_ms: 60_000,
        },
        V1Change::Renew {
            name: b("held"),
            lease_ms: 90_000,
        },
        V1Change::Grant {
            name: b("partly"),
            token: 11,
            first_token: 11,
            holds: 2,
            owner: Some(b("me")),
            lease_ms: 5_000,
        },
        V1Change::Release {
            name: b("partly"),
            holds_left: 1,
        },
        V1Change::Grant {
            name: b("released"),
            token: 11,
            first_token: 11,
            holds: 1,
            owner: None,
            lease_ms: 1_000,
        },
        V1Change::Release {
            name: b("released"),
            holds_left: 0,
        },
        V1Change::Grant {
            name: b("expired"),
            token: 11,
            first_token: 11,
            holds: 1,
            owner: None,
            lease_ms: 200,
        },
        V1Change::Expire { name: b("expired") },
        V1Change::Grant {
            name: b("forced"),
            token: 11,
            first_token: 11,
            holds: 1,
            owner: None,
            lease_ms: 200,
        },
        V1Change::ForceRelease { name: b("forced") },
        V1Change::FenceSet {
            key: b("fence:a"),
            token: 2,
            value: b("first"),
        },
        V1Change::FenceSet {
            key: b("fence:a"),
            token: 7,
            value: b("second"),
        },
        V1Change::FenceSet {
            key: b("fence:b"),
            token: 1,
            value: Bytes::from_static(b"binary\x00value"),
        },
    ]
}

fn write_v1(path: &Path, changes: &[V1Change]) -> Vec<u8> {
    let (bytes, _) = encode_v1_file(changes);
    fs::write(path, &bytes).expect("write");
    bytes
}

/// The fixture, copied (load may cut a file; the committed one must stay as it is).
fn fixture_copy(dir: &TempDir) -> PathBuf {
    let path = dir.join("v1.aof");
    fs::copy(FIXTURE, &path).expect("copy the fixture");
    path
}

#[test]
fn a_first_format_file_loads_into_the_state_it_describes() {
    let dir = TempDir::new("v1-load");
    let path = dir.join("a.aof");
    let changes = session();
    write_v1(&path, &changes);
    let (m, r) = try_load(&path).expect("load");
    assert_eq!(r.version, Some(Version::V1));
    assert_eq!((r.records, r.truncated_at), (changes.len() as u64, None));
    V1Model::from_changes(&changes).assert_matches(&m);

    // The same answers, one by one.
    assert_eq!(m.token_floor(), 10);
    assert_eq!(m.last_token(b"idle"), 40);
    assert_eq!(m.last_token(b"never-seen"), 10, "the floor");
    assert_eq!(m.last_token(b"held"), 12);
    assert_eq!(m.last_token(b"released"), 11);
    assert_eq!(m.last_token(b"expired"), 11);
    assert_eq!(m.fence_token(b"fence:a"), 7);
    assert_eq!(m.fence_value(b"fence:a"), Some(b("second")));
    assert_eq!(
        m.fence_value(b"fence:b"),
        Some(Bytes::from_static(b"binary\x00value"))
    );
    let holdings = holdings_of(&m);
    assert_eq!(
        holdings.keys().cloned().collect::<Vec<_>>(),
        vec![b("held"), b("partly")]
    );
    let held = &holdings[&b("held")];
    assert_eq!(
        (held.first_token, held.token, held.holds, held.lease_ms),
        (11, 12, 2, 90_000)
    );
    assert_eq!(held.owner, Some(b("w1")));
    assert_eq!(holdings[&b("partly")].holds, 1);
    assert_eq!(m.position(), 0, "a first-format file has no log positions");

    // Holdings come back without deadlines; the re-arm a start proposes gives them one.
    let mut m = m;
    let r = common::apply_entry(&mut m, 1, Millis(1_000), &[Op::Rearm { extra_ms: 0 }]);
    assert_eq!(
        r,
        vec![OpResult::Rearm {
            holdings: 2,
            waiters: 0
        }]
    );
    let st = m.status(b"held", Millis(1_000));
    assert_eq!(
        (st.locked, st.token, st.holds, st.owner, st.ttl_ms),
        (true, Some(12), 2, Some(b("w1")), 90_000)
    );
}

#[test]
fn open_upgrades_a_first_format_file_and_appends_after() {
    let dir = TempDir::new("v1-upgrade");
    let path = dir.join("a.aof");
    let changes = session();
    let old = write_v1(&path, &changes);
    assert_eq!(old[..8], HEADER_V1);
    let loaded = load_machine(&path);
    let digest = loaded.digest();
    let host = Host::with(loaded, Duration::ZERO);
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::Always))
        .expect("open upgrades");

    // Upgraded before anything was appended: a snapshot of the loaded state in format 2.
    let bytes = fs::read(&path).expect("read");
    assert_eq!(bytes[..8], HEADER);
    assert!(!dir.join("a.aof.rewrite.tmp").exists());
    let (version, records) = read_file(&path);
    assert_eq!(version, Version::V2);
    assert_eq!(
        records[0],
        FileRecord::SnapshotBegin {
            position: 0,
            at: Millis(0)
        }
    );
    assert!(
        records[1..]
            .iter()
            .all(|r| matches!(r, FileRecord::Item(_)))
    );
    let (again, r) = try_load(&path).expect("load the upgraded file");
    assert_eq!(r.version, Some(Version::V2));
    assert_eq!(again.digest(), digest, "the same state");
    V1Model::from_changes(&changes).assert_matches(&again);
    assert_eq!(aof.stats().file_size, bytes.len() as u64);

    // Proposals after the upgrade: the start's re-arm, a reentrant acquire, a fence.
    let rt = runtime();
    let r = rt
        .block_on(aof.propose(Millis(5_000), vec![Op::Rearm { extra_ms: 0 }]))
        .expect("answered");
    assert_eq!(
        r,
        Ok(vec![OpResult::Rearm {
            holdings: 2,
            waiters: 0
        }])
    );
    let r = rt
        .block_on(aof.propose(
            Millis(5_001),
            vec![
                Op::Acquire {
                    conditions: Default::default(),
                    name: b("held"),
                    lease_ms: 30_000,
                    owner: Some(b("w1")),
                    wait: false.into(),
                },
                Op::Acquire {
                    conditions: Default::default(),
                    name: b("fresh"),
                    lease_ms: 30_000,
                    owner: None,
                    wait: false.into(),
                },
                fence("fence:a", 8),
            ],
        ))
        .expect("answered");
    assert_eq!(
        r,
        Ok(vec![
            OpResult::Acquire(AcquireResult::Granted(13)),
            OpResult::Acquire(AcquireResult::Granted(11)),
            OpResult::FenceSet(true),
        ]),
        "tokens continue from the first-format counters and floor"
    );
    aof.shutdown();
    drop(aof);

    let (m, r) = try_load(&path).expect("load");
    assert_eq!(r.version, Some(Version::V2));
    assert_eq!(m.digest(), host.digest());
    let st = m.status(b"held", Millis(6_000));
    assert_eq!((st.token, st.holds), (Some(13), 3));
    assert_eq!(m.fence_token(b"fence:a"), 8);
    assert_eq!(m.position(), 2);

    // A second start finds format 2: nothing to upgrade, it appends.
    let len = fs::metadata(&path).expect("meta").len();
    let host = Host::with(m, Duration::ZERO);
    let aof = host.open(AofOptions::new(&path)).expect("reopen");
    assert_eq!(aof.stats().file_size, len);
    let r = rt
        .block_on(aof.propose(Millis(7_000), vec![fence("fence:b", 2)]))
        .expect("answered");
    assert!(r.is_ok());
    aof.shutdown();
    let m = load_machine(&path);
    assert_eq!(m.digest(), host.digest());
    assert_eq!(m.position(), 3);
}

#[test]
fn the_fixture_of_the_previous_release_loads() {
    let dir = TempDir::new("fixture");
    let path = fixture_copy(&dir);
    let original = fs::read(&path).expect("read");
    assert_eq!(original[..8], HEADER_V1);
    let (m, r) = try_load(&path).expect("load");
    assert_eq!(r.version, Some(Version::V1));
    assert_eq!(r.truncated_at, None, "a clean file");
    assert_eq!(r.bytes, original.len() as u64);
    assert_eq!(
        fs::read(&path).expect("read"),
        original,
        "load changed nothing"
    );

    assert_eq!(m.fence_token(b"fence:a"), 7);
    assert_eq!(m.fence_value(b"fence:a"), Some(b("second")));
    assert_eq!(
        m.fence_value(b"fence:b").map(|v| v.to_vec()),
        Some(b"binary\\x00value".to_vec()),
        "redis-cli sent the escape as typed"
    );
    assert_eq!(m.last_token(b"advanced"), 500);
    assert_eq!(m.token_floor(), 112);
    assert_eq!(m.last_token(b"idle:1"), 112, "forgotten: the floor");
    let holdings = holdings_of(&m);
    let held = &holdings[&b("held")];
    assert_eq!(
        (held.token, held.holds, held.owner.as_deref()),
        (112, 2, Some(&b"w1"[..]))
    );
    assert!(!holdings.contains_key(&b("forced")));
    assert!(!holdings.contains_key(&b("expired")));
    assert_eq!(holdings[&b("partly")].holds, 1);

    // After the start's re-arm, FLOCK.STATUS answers as the old server did.
    let mut live = m;
    common::apply_entry(&mut live, 1, Millis(1_000), &[Op::Rearm { extra_ms: 0 }]);
    let st = live.status(b"held", Millis(1_000));
    assert_eq!(
        (st.locked, st.token, st.holds, st.owner),
        (true, Some(112), 2, Some(b("w1")))
    );
}

#[test]
fn the_fixture_upgrades_and_replays_after_new_proposals() {
    let dir = TempDir::new("fixture-upgrade");
    let path = fixture_copy(&dir);
    let loaded = load_machine(&path);
    let digest = loaded.digest();
    let host = Host::with(loaded, Duration::ZERO);
    let aof = host
        .open(opts(path.clone(), FsyncPolicy::Always))
        .expect("open upgrades");
    assert_eq!(fs::read(&path).expect("read")[..8], HEADER);
    assert_eq!(load_machine(&path).digest(), digest);

    let rt = runtime();
    let r = rt
        .block_on(aof.propose(
            Millis(10),
            vec![
                Op::Rearm { extra_ms: 0 },
                Op::Advance {
                    name: b("advanced"),
                    token: 600,
                },
                Op::Acquire {
                    conditions: Default::default(),
                    name: b("new"),
                    lease_ms: 10_000,
                    owner: None,
                    wait: false.into(),
                },
            ],
        ))
        .expect("answered")
        .expect("committed");
    assert_eq!(r[1], OpResult::Advance(600));
    assert_eq!(
        r[2],
        OpResult::Acquire(AcquireResult::Granted(113)),
        "above the floor"
    );
    aof.shutdown();
    let m = load_machine(&path);
    assert_eq!(m.digest(), host.digest());
    assert_eq!(m.last_token(b"advanced"), 600);
    assert_eq!(m.fence_value(b"fence:a"), Some(b("second")));
    let st = m.status(b"held", Millis(10));
    assert_eq!((st.locked, st.token, st.holds), (true, Some(112), 2));
    assert_ne!(
        StateMachine::new().digest(),
        m.digest(),
        "not an empty state"
    );
}
