//! Replay, check and fix against real files of both formats (version 2 log entries and
//! snapshots, version 1 changes): torn tails at every offset (cut off with a warning naming the
//! file and the offset), flipped bits in the middle (refused, naming the offset) and at the end,
//! torn and foreign headers, zero-filled and garbage tails, large records, and a snapshot
//! followed by a tail that repeats entries the snapshot already reflects (skipped).

mod common;

use std::fs;
use std::path::Path;

use bytes::Bytes;
use common::{
    FileRecord, LogEntry, Rng, TempDir, apply_entry, capture_logs, encode_file, encode_snapshot,
    encode_v1_file, load_machine, machine_of, read_file, sample_entries, sample_v1_changes,
    try_load, v1_machine,
};
use flockd_aof::record::{HEADER, Version};
use flockd_aof::{FileError, check, fix};
use flockd_core::{Millis, Op, StateMachine};

/// A file of `n` records of one format, with what loading each prefix of it must give.
struct Sample {
    version: Version,
    bytes: Vec<u8>,
    /// Each record's start offset.
    offsets: Vec<u64>,
    /// The records, as read back.
    records: Vec<FileRecord>,
    /// `digests[k]`: the digest of a machine that loaded the first `k` records.
    digests: Vec<u64>,
}

fn sample(version: Version, n: usize) -> Sample {
    match version {
        Version::V2 => {
            let entries = sample_entries(n);
            let (bytes, offsets) = encode_file(&entries);
            Sample {
                version,
                bytes,
                offsets,
                digests: (0..=n)
                    .map(|k| machine_of(&entries[..k]).digest())
                    .collect(),
                records: entries.into_iter().map(FileRecord::Entry).collect(),
            }
        }
        Version::V1 => {
            let changes = sample_v1_changes(n);
            let (bytes, offsets) = encode_v1_file(&changes);
            Sample {
                version,
                bytes,
                offsets,
                digests: (0..=n)
                    .map(|k| v1_machine(&changes[..k]).digest())
                    .collect(),
                records: changes.into_iter().map(FileRecord::V1).collect(),
            }
        }
    }
}

const VERSIONS: [Version; 2] = [Version::V2, Version::V1];

/// Checks the file now holds exactly the first `k` records of `s`.
fn assert_file_holds(path: &Path, s: &Sample, k: usize, what: &str) {
    let (version, records) = read_file(path);
    assert_eq!(version, s.version, "{what}");
    assert_eq!(records, s.records[..k], "{what}");
}

#[test]
fn missing_file_is_empty() {
    let dir = TempDir::new("missing");
    let (m, r) = try_load(&dir.join("nope.aof")).expect("load");
    assert_eq!(m.digest(), StateMachine::new().digest());
    assert_eq!(
        (r.records, r.bytes, r.truncated_at, r.version),
        (0, 0, None, None)
    );
    assert!(!dir.join("nope.aof").exists(), "load creates nothing");
    assert!(matches!(
        check(&dir.join("nope.aof")),
        Err(FileError::Io { .. })
    ));
}

#[test]
fn clean_file_replays_everything() {
    for version in VERSIONS {
        let dir = TempDir::new("clean");
        let path = dir.join("a.aof");
        let s = sample(version, 40);
        fs::write(&path, &s.bytes).expect("write");
        let (m, r) = try_load(&path).expect("load");
        assert_eq!(m.digest(), s.digests[40], "{version:?}");
        assert_eq!(
            (r.records, r.bytes, r.truncated_at, r.version),
            (40, s.bytes.len() as u64, None, Some(version))
        );
        let c = check(&path).expect("check");
        assert_eq!(
            (c.records, c.valid_len, c.file_len, c.problem, c.tail_only),
            (40, s.bytes.len() as u64, s.bytes.len() as u64, None, false)
        );
        assert_eq!(fs::read(&path).expect("read"), s.bytes, "left as it was");
    }
}

#[test]
fn replayed_state_is_the_state_the_entries_made() {
    let dir = TempDir::new("state");
    let path = dir.join("a.aof");
    let entries = sample_entries(36);
    let (bytes, _) = encode_file(&entries);
    fs::write(&path, &bytes).expect("write");
    let m = load_machine(&path);
    let live = machine_of(&entries);
    assert_eq!(m.position(), 36);
    assert_eq!(m.time(), entries[35].at);
    for i in 0..6 {
        let name = format!("lock-{i}");
        assert_eq!(
            m.last_token(name.as_bytes()),
            live.last_token(name.as_bytes())
        );
        assert_eq!(
            m.status(name.as_bytes(), Millis(4000)),
            live.status(name.as_bytes(), Millis(4000))
        );
        assert_eq!(
            m.fence_value(name.as_bytes()),
            live.fence_value(name.as_bytes())
        );
    }
    assert_eq!(m.fence_token(b"tx-fence"), 35);
    assert_eq!(m.token_floor(), live.token_floor());
    assert!(
        m.token_floor() > 0,
        "the bumps and forgets raised the floor"
    );
    assert_eq!(m.lock_stats().locks_held, live.lock_stats().locks_held);
    assert_eq!(m.digest(), live.digest());
}

#[test]
fn torn_tail_at_every_offset_of_the_last_records() {
    for version in VERSIONS {
        let dir = TempDir::new("torn");
        let path = dir.join("a.aof");
        let s = sample(version, 12);
        let ends: Vec<u64> = s
            .offsets
            .iter()
            .skip(1)
            .copied()
            .chain([s.bytes.len() as u64])
            .collect();
        for cut in s.offsets[s.offsets.len() - 4]..=s.bytes.len() as u64 {
            let what = format!("{version:?} cut {cut}");
            fs::write(&path, &s.bytes[..cut as usize]).expect("write");
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            let boundary = if whole == 0 {
                s.offsets[0]
            } else {
                ends[whole - 1]
            };
            let torn = cut != boundary;
            let c = check(&path).expect("check");
            assert_eq!(c.tail_only, torn, "{what}");
            let (loaded, lines) = capture_logs(|| try_load(&path));
            let (m, r) = loaded.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(m.digest(), s.digests[whole], "{what}");
            assert_eq!(r.records, whole as u64, "{what}");
            assert_eq!(r.truncated_at, torn.then_some(boundary), "{what}");
            assert_eq!(r.bytes, boundary, "{what}");
            assert_eq!(
                fs::metadata(&path).expect("meta").len(),
                boundary,
                "file cut back: {what}"
            );
            assert_file_holds(&path, &s, whole, &what);
            let warnings: Vec<&String> = lines.iter().filter(|l| l.starts_with("WARN")).collect();
            if torn {
                assert_eq!(warnings.len(), 1, "{what}: {lines:?} {c:?}");
                let w = warnings[0];
                assert!(
                    w.contains(&format!("file={}", path.display()))
                        && w.contains(&format!("offset={boundary}"))
                        && w.contains(&format!("byte offset {boundary} of {}", path.display())),
                    "{what}: the warning names the file and the offset: {w}"
                );
            } else {
                assert!(warnings.is_empty(), "{what}: {lines:?}");
            }
        }
    }
}

#[test]
fn torn_header_empties_the_file() {
    let dir = TempDir::new("torn-header");
    let path = dir.join("a.aof");
    for cut in 1..8 {
        fs::write(&path, &HEADER[..cut]).expect("write");
        let (m, r) = try_load(&path).expect("load");
        assert_eq!(m.digest(), StateMachine::new().digest());
        assert_eq!((r.truncated_at, r.version), (Some(0), None));
        assert_eq!(fs::metadata(&path).expect("meta").len(), 0);
    }
    fs::write(&path, b"").expect("write");
    assert_eq!(try_load(&path).expect("load").1.truncated_at, None);
    // A bare header is an empty file of its version.
    for header in [&HEADER[..], b"FLOCKAO1"] {
        fs::write(&path, header).expect("write");
        let (_, r) = try_load(&path).expect("load");
        assert_eq!((r.records, r.bytes, r.truncated_at), (0, 8, None));
        assert_eq!(r.version, Version::of_header(header));
    }
}

#[test]
fn foreign_or_unknown_version_file_is_refused() {
    let dir = TempDir::new("foreign");
    let path = dir.join("a.aof");
    for content in [
        &b"*2\r\n$3\r\nSET\r\n"[..],
        b"XY",
        b"FLOCKAO9 and more",
        b"FLOCKAO3",
        b"FLOCKAO0\0\0\0\0",
    ] {
        fs::write(&path, content).expect("write");
        match try_load(&path) {
            Err(FileError::Corrupt { offset: 0, .. }) => {}
            other => panic!("{content:?}: {:?}", other.map(|(_, r)| r)),
        }
        assert!(fix(&path).is_err());
        assert_eq!(fs::read(&path).expect("read"), content, "left untouched");
    }
}

#[test]
fn flipped_bit_in_the_middle_is_refused_naming_the_offset() {
    for version in VERSIONS {
        let dir = TempDir::new("middle");
        let path = dir.join("a.aof");
        let s = sample(version, 10);
        for k in [0, 3, 8] {
            let start = s.offsets[k] as usize;
            let end = s.offsets[k + 1] as usize;
            // Every bit of the frame header, every third of the payload.
            for bit in (0..(end - start) * 8).filter(|b| *b < 64 || b % 3 == 0) {
                let what = format!("{version:?} record {k} bit {bit}");
                let mut b = s.bytes.clone();
                b[start + bit / 8] ^= 1 << (bit % 8);
                fs::write(&path, &b).expect("write");
                match try_load(&path) {
                    Err(e @ FileError::Corrupt { .. }) => {
                        let FileError::Corrupt { offset, .. } = &e else {
                            unreachable!()
                        };
                        assert_eq!(*offset, s.offsets[k], "{what}");
                        let msg = e.to_string();
                        assert!(
                            msg.starts_with(&format!(
                                "Bad record in {} at byte offset {}: ",
                                path.display(),
                                s.offsets[k]
                            )),
                            "{msg}"
                        );
                    }
                    other => panic!("{what}: {:?}", other.map(|(_, r)| r)),
                }
                assert_eq!(
                    fs::read(&path).expect("read"),
                    b,
                    "load must not cut a damaged middle: {what}"
                );
                let c = check(&path).expect("check");
                assert!(
                    !c.tail_only && c.problem.as_ref().map(|p| p.0) == Some(s.offsets[k]),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn flipped_bit_in_the_last_record_is_cut() {
    for version in VERSIONS {
        let dir = TempDir::new("last");
        let path = dir.join("a.aof");
        let s = sample(version, 9);
        let start = *s.offsets.last().expect("records") as usize;
        // Every bit of the frame header, every third of the payload (each case syncs a
        // truncation).
        for bit in (0..(s.bytes.len() - start) * 8).filter(|b| *b < 64 || b % 3 == 0) {
            let what = format!("{version:?} bit {bit}");
            let mut b = s.bytes.clone();
            b[start + bit / 8] ^= 1 << (bit % 8);
            fs::write(&path, &b).expect("write");
            let (m, r) = try_load(&path).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(m.digest(), s.digests[8], "{what}");
            assert_eq!(r.truncated_at, Some(start as u64), "{what}");
            assert_eq!(fs::metadata(&path).expect("meta").len(), start as u64);
        }
    }
}

#[test]
fn zero_filled_tails_are_cut_as_the_end_and_garbage_tails_as_damage() {
    for version in VERSIONS {
        let dir = TempDir::new("zeros");
        let path = dir.join("a.aof");
        let s = sample(version, 5);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let garbage: Vec<u8> = (0..3000).map(|_| rng.next() as u8).collect();
        // Zeros after the last record are the file's end (space the writer wrote ahead): cut
        // without being called damage. Garbage is a damaged tail.
        for (tail, damaged) in [(vec![0u8; 4096], false), (garbage, true)] {
            let mut b = s.bytes.clone();
            b.extend_from_slice(&tail);
            fs::write(&path, &b).expect("write");
            let (m, r) = try_load(&path).expect("load");
            assert_eq!(m.digest(), s.digests[5]);
            let cut = damaged.then_some(s.bytes.len() as u64);
            assert_eq!(r.truncated_at, cut);
            assert_eq!(r.bytes, s.bytes.len() as u64);
            assert_eq!(fs::read(&path).expect("read"), s.bytes);
        }
    }
}

#[test]
fn large_records_are_found_and_cut() {
    let dir = TempDir::new("large");
    let path = dir.join("a.aof");
    // Over the scanner's 1 MiB window: its checksum is computed in chunks.
    let big = vec![Op::FenceSet {
        lock: None,
        key: Bytes::from_static(b"k"),
        token: 1,
        value: Bytes::from(vec![7u8; 1_500_000]),
    }];
    let small = vec![Op::Advance {
        name: Bytes::from_static(b"n"),
        token: 3,
    }];
    let entries = vec![
        LogEntry {
            position: 1,
            at: Millis(1),
            ops: small.clone(),
        },
        LogEntry {
            position: 2,
            at: Millis(2),
            ops: big,
        },
        LogEntry {
            position: 3,
            at: Millis(3),
            ops: small,
        },
    ];
    let (bytes, offsets) = encode_file(&entries);

    fs::write(&path, &bytes).expect("write");
    let m = load_machine(&path);
    assert_eq!(m.fence_value(b"k").map(|v| v.len()), Some(1_500_000));
    assert_eq!(m.digest(), machine_of(&entries).digest());

    // Damage before the big record: found after it, so refused.
    let mut b = bytes.clone();
    b[offsets[0] as usize + 9] ^= 1;
    fs::write(&path, &b).expect("write");
    assert!(
        matches!(try_load(&path), Err(FileError::Corrupt { offset, .. }) if offset == offsets[0])
    );

    // Damage inside the big record's payload with a record after: refused too.
    let mut b = bytes.clone();
    b[offsets[1] as usize + 1_000_000] ^= 1;
    fs::write(&path, &b).expect("write");
    assert!(
        matches!(try_load(&path), Err(FileError::Corrupt { offset, .. }) if offset == offsets[1])
    );

    // The big record torn: a tail.
    fs::write(&path, &bytes[..offsets[1] as usize + 700_000]).expect("write");
    let (m, r) = try_load(&path).expect("load");
    assert_eq!(m.digest(), machine_of(&entries[..1]).digest());
    assert_eq!(r.truncated_at, Some(offsets[1]));

    // The big record damaged and last: a tail too (found by the chunked checksum).
    let mut b = bytes[..offsets[2] as usize].to_vec();
    b[offsets[1] as usize + 1_200_000] ^= 1;
    fs::write(&path, &b).expect("write");
    let (_, r) = try_load(&path).expect("load");
    assert_eq!(r.truncated_at, Some(offsets[1]));
}

#[test]
fn check_and_fix() {
    for version in VERSIONS {
        let dir = TempDir::new("fix");
        let path = dir.join("a.aof");
        let s = sample(version, 6);
        let (bytes, offsets) = (&s.bytes, &s.offsets);

        // Clean: nothing to do.
        fs::write(&path, bytes).expect("write");
        let r = fix(&path).expect("fix");
        assert_eq!(r.problem, None);
        assert_eq!(&fs::read(&path).expect("read"), bytes);

        // Damaged tail: reported, then cut.
        let cut = bytes.len() - 3;
        fs::write(&path, &bytes[..cut]).expect("write");
        let r = check(&path).expect("check");
        assert!(r.tail_only);
        assert_eq!(
            (r.records, r.valid_len, r.file_len),
            (5, offsets[5], cut as u64)
        );
        let (off, reason) = r.problem.clone().expect("problem");
        assert_eq!(off, offsets[5]);
        assert!(reason.contains("cut short"), "{reason}");
        assert_eq!(
            fs::metadata(&path).expect("meta").len(),
            cut as u64,
            "check changes nothing"
        );
        let r2 = fix(&path).expect("fix");
        assert_eq!(r2, r);
        assert_eq!(fs::metadata(&path).expect("meta").len(), offsets[5]);
        assert_eq!(check(&path).expect("check").problem, None);
        assert_eq!(load_machine(&path).digest(), s.digests[5]);
        assert_file_holds(&path, &s, 5, "after fix");

        // Damaged middle: refused, file untouched.
        let mut b = bytes.clone();
        b[offsets[2] as usize + 8] ^= 0x40;
        fs::write(&path, &b).expect("write");
        let r = check(&path).expect("check");
        assert!(!r.tail_only);
        let reason = r.problem.expect("problem").1;
        assert!(
            reason.contains(&format!(
                "a valid record follows at byte offset {}",
                offsets[3]
            )),
            "{reason}"
        );
        match fix(&path) {
            Err(FileError::Corrupt { offset, reason, .. }) => {
                assert_eq!(offset, offsets[2]);
                assert!(reason.contains("refusing to repair"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(fs::read(&path).expect("read"), b);
    }
}

/// Entries that change the state again each time they apply: replaying one twice shows.
fn not_idempotent(from: u64, to: u64) -> Vec<LogEntry> {
    (from..=to)
        .map(|position| LogEntry {
            position,
            at: Millis(10_000 + position),
            ops: vec![
                Op::BumpAll { by: 1 },
                Op::Acquire {
                    conditions: Default::default(),
                    name: Bytes::from_static(b"reentrant"),
                    lease_ms: 60_000,
                    owner: Some(Bytes::from_static(b"o")),
                    wait: false.into(),
                },
            ],
        })
        .collect()
}

#[test]
fn snapshot_then_tail_skips_entries_the_snapshot_reflects() {
    let dir = TempDir::new("snapshot");
    let path = dir.join("a.aof");
    let mut history = sample_entries(24);
    history.extend(not_idempotent(25, 40));
    let live = machine_of(&history);

    // A snapshot at position 32, then a tail starting at 28: entries 28..=32 are in both (a
    // rewrite's tail may start before its snapshot's position).
    let at_snapshot = machine_of(&history[..32]);
    assert_eq!(at_snapshot.position(), 32);
    let mut bytes = HEADER.to_vec();
    let items = encode_snapshot(&at_snapshot, &mut bytes);
    let tail_start = bytes.len() as u64;
    let mut tail_offsets = Vec::new();
    for e in &history[27..] {
        tail_offsets.push(bytes.len() as u64);
        flockd_aof::record::encode_entry(e.position, e.at, &e.ops, &mut bytes).expect("encode");
    }
    fs::write(&path, &bytes).expect("write");

    let (m, r) = try_load(&path).expect("load");
    assert_eq!(m.digest(), live.digest(), "tail entries 28..=32 skipped");
    assert_eq!(m.position(), 40);
    assert_eq!(m.time(), live.time());
    assert_eq!(
        m.status(b"reentrant", Millis(20_000)),
        live.status(b"reentrant", Millis(20_000))
    );
    assert_eq!(m.status(b"reentrant", Millis(20_000)).holds, 16);
    assert_eq!(m.token_floor(), live.token_floor());
    assert_eq!(r.records, 1 + items as u64 + 13);
    assert_eq!(r.version, Some(Version::V2));

    // Replaying the repeated entries would have given another state.
    let mut naive = machine_of(&history[..32]);
    for e in &history[27..] {
        apply_entry(&mut naive, e.position, e.at, &e.ops);
    }
    assert_ne!(
        naive.digest(),
        live.digest(),
        "the test needs entries that show"
    );

    // A snapshot alone.
    fs::write(&path, &bytes[..tail_start as usize]).expect("write");
    assert_eq!(load_machine(&path).digest(), at_snapshot.digest());

    // A torn tail after a snapshot is cut; damage inside the snapshot is refused.
    fs::write(&path, &bytes[..bytes.len() - 5]).expect("write");
    let (m, r) = try_load(&path).expect("load");
    assert_eq!(r.truncated_at, tail_offsets.last().copied());
    assert_eq!(m.digest(), machine_of(&history[..39]).digest());
    let mut b = bytes.clone();
    b[HEADER.len() + 30] ^= 0x10;
    fs::write(&path, &b).expect("write");
    assert!(matches!(try_load(&path), Err(FileError::Corrupt { .. })));
}

#[test]
fn first_format_records_restore_what_they_describe() {
    let dir = TempDir::new("v1-model");
    let path = dir.join("a.aof");
    let changes = sample_v1_changes(64);
    let (bytes, _) = encode_v1_file(&changes);
    fs::write(&path, &bytes).expect("write");
    let (m, r) = try_load(&path).expect("load");
    assert_eq!(r.version, Some(Version::V1));
    assert_eq!(r.records, 64);
    common::V1Model::from_changes(&changes).assert_matches(&m);
    // A first-format file has no positions: the log starts over at 0.
    assert_eq!(m.position(), 0);
}
