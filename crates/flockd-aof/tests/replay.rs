//! Replay, check and fix against real files: torn tails at every offset, flipped bits in the
//! middle and at the end, torn and foreign headers, zero-filled and garbage tails, large records.

mod common;

use std::fs;

use bytes::Bytes;
use common::{Rng, TempDir, encode_file, replay, sample_changes};
use flockd_aof::{AofError, check, fix, load};
use flockd_core::Change;

fn load_all(path: &std::path::Path) -> Result<(Vec<Change>, flockd_aof::ReplayReport), AofError> {
    let mut got = Vec::new();
    let r = load(path, &mut |c| got.push(c))?;
    Ok((got, r))
}

#[test]
fn missing_file_is_empty() {
    let dir = TempDir::new("missing");
    let (got, r) = load_all(&dir.join("nope.aof")).expect("load");
    assert!(got.is_empty());
    assert_eq!((r.records, r.bytes, r.truncated_at), (0, 0, None));
    assert!(matches!(
        check(&dir.join("nope.aof")),
        Err(AofError::Io { .. })
    ));
}

#[test]
fn clean_file_replays_everything() {
    let dir = TempDir::new("clean");
    let path = dir.join("a.aof");
    let changes = sample_changes(40);
    let (bytes, _) = encode_file(&changes);
    fs::write(&path, &bytes).expect("write");
    let (got, r) = load_all(&path).expect("load");
    assert_eq!(got, changes);
    assert_eq!(
        (r.records, r.bytes, r.truncated_at),
        (40, bytes.len() as u64, None)
    );
    let c = check(&path).expect("check");
    assert_eq!(
        (c.records, c.valid_len, c.file_len, c.problem, c.tail_only),
        (40, bytes.len() as u64, bytes.len() as u64, None, false)
    );
}

#[test]
fn torn_tail_at_every_offset_of_the_last_records() {
    let dir = TempDir::new("torn");
    let path = dir.join("a.aof");
    let changes = sample_changes(12);
    let (bytes, offsets) = encode_file(&changes);
    let ends: Vec<u64> = offsets
        .iter()
        .skip(1)
        .copied()
        .chain([bytes.len() as u64])
        .collect();
    for cut in offsets[offsets.len() - 4]..=bytes.len() as u64 {
        fs::write(&path, &bytes[..cut as usize]).expect("write");
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        let boundary = if whole == 0 {
            offsets[0]
        } else {
            ends[whole - 1]
        };
        let c = check(&path).expect("check");
        assert_eq!(c.tail_only, cut != boundary, "cut {cut}");
        let (got, r) = load_all(&path).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert_eq!(got, changes[..whole], "cut {cut}");
        assert_eq!(
            r.truncated_at,
            (cut != boundary).then_some(boundary),
            "cut {cut}"
        );
        assert_eq!(r.bytes, boundary);
        assert_eq!(
            fs::metadata(&path).expect("meta").len(),
            boundary,
            "file cut back at {cut}"
        );
    }
}

#[test]
fn torn_header_empties_the_file() {
    let dir = TempDir::new("torn-header");
    let path = dir.join("a.aof");
    for cut in 1..8 {
        fs::write(&path, &b"FLOCKAO1"[..cut]).expect("write");
        let (got, r) = load_all(&path).expect("load");
        assert!(got.is_empty());
        assert_eq!(r.truncated_at, Some(0));
        assert_eq!(fs::metadata(&path).expect("meta").len(), 0);
    }
    fs::write(&path, b"").expect("write");
    assert_eq!(load_all(&path).expect("load").1.truncated_at, None);
}

#[test]
fn foreign_or_unknown_version_file_is_refused() {
    let dir = TempDir::new("foreign");
    let path = dir.join("a.aof");
    for content in [&b"*2\r\n$3\r\nSET\r\n"[..], b"XY", b"FLOCKAO9 and more"] {
        fs::write(&path, content).expect("write");
        match load_all(&path) {
            Err(AofError::Corrupt { offset: 0, .. }) => {}
            other => panic!("{content:?}: {other:?}"),
        }
        assert!(fix(&path).is_err());
        assert_eq!(fs::read(&path).expect("read"), content, "left untouched");
    }
}

#[test]
fn flipped_bit_in_the_middle_is_refused_naming_the_offset() {
    let dir = TempDir::new("middle");
    let path = dir.join("a.aof");
    let changes = sample_changes(10);
    let (bytes, offsets) = encode_file(&changes);
    for k in [0, 4, 8] {
        let start = offsets[k] as usize;
        let end = offsets[k + 1] as usize;
        // Every bit of the frame header, every third of the payload.
        for bit in (0..(end - start) * 8).filter(|b| *b < 64 || b % 3 == 0) {
            let mut b = bytes.clone();
            b[start + bit / 8] ^= 1 << (bit % 8);
            fs::write(&path, &b).expect("write");
            match load_all(&path) {
                Err(e @ AofError::Corrupt { .. }) => {
                    let AofError::Corrupt { offset, .. } = &e else {
                        unreachable!()
                    };
                    assert_eq!(*offset, offsets[k], "record {k} bit {bit}");
                    let msg = e.to_string();
                    assert!(
                        msg.starts_with(&format!(
                            "Bad record in {} at byte offset {}: ",
                            path.display(),
                            offsets[k]
                        )),
                        "{msg}"
                    );
                }
                other => panic!("record {k} bit {bit}: {other:?}"),
            }
            assert_eq!(
                fs::read(&path).expect("read"),
                b,
                "load must not cut a damaged middle"
            );
            let c = check(&path).expect("check");
            assert!(!c.tail_only && c.problem.as_ref().map(|p| p.0) == Some(offsets[k]));
        }
    }
}

#[test]
fn flipped_bit_in_the_last_record_is_cut() {
    let dir = TempDir::new("last");
    let path = dir.join("a.aof");
    let changes = sample_changes(9);
    let (bytes, offsets) = encode_file(&changes);
    let start = *offsets.last().expect("records") as usize;
    // Every bit of the frame header, every third of the payload (each case syncs a truncation).
    for bit in (0..(bytes.len() - start) * 8).filter(|b| *b < 64 || b % 3 == 0) {
        let mut b = bytes.clone();
        b[start + bit / 8] ^= 1 << (bit % 8);
        fs::write(&path, &b).expect("write");
        let (got, r) = load_all(&path).unwrap_or_else(|e| panic!("bit {bit}: {e}"));
        assert_eq!(got, changes[..8], "bit {bit}");
        assert_eq!(r.truncated_at, Some(start as u64));
        assert_eq!(fs::metadata(&path).expect("meta").len(), start as u64);
    }
}

#[test]
fn zero_filled_and_garbage_tails_are_cut() {
    let dir = TempDir::new("zeros");
    let path = dir.join("a.aof");
    let changes = sample_changes(5);
    let (bytes, _) = encode_file(&changes);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let garbage: Vec<u8> = (0..3000).map(|_| rng.next() as u8).collect();
    for tail in [vec![0u8; 4096], garbage] {
        let mut b = bytes.clone();
        b.extend_from_slice(&tail);
        fs::write(&path, &b).expect("write");
        let (got, r) = load_all(&path).expect("load");
        assert_eq!(got, changes);
        assert_eq!(r.truncated_at, Some(bytes.len() as u64));
        assert_eq!(fs::read(&path).expect("read"), bytes);
    }
}

#[test]
fn large_records_are_found_and_cut() {
    let dir = TempDir::new("large");
    let path = dir.join("a.aof");
    // Over the scanner's 1 MiB window: its checksum is computed in chunks.
    let big = Change::FenceSet {
        key: Bytes::from_static(b"k"),
        token: 1,
        value: Bytes::from(vec![7u8; 1_500_000]),
    };
    let small = Change::Floor { token: 3 };
    let changes = vec![small.clone(), big, small];
    let (bytes, offsets) = encode_file(&changes);

    // Damage before the big record: found after it, so refused.
    let mut b = bytes.clone();
    b[offsets[0] as usize + 9] ^= 1;
    fs::write(&path, &b).expect("write");
    assert!(
        matches!(load_all(&path), Err(AofError::Corrupt { offset, .. }) if offset == offsets[0])
    );

    // Damage inside the big record's payload with a record after: refused too.
    let mut b = bytes.clone();
    b[offsets[1] as usize + 1_000_000] ^= 1;
    fs::write(&path, &b).expect("write");
    assert!(
        matches!(load_all(&path), Err(AofError::Corrupt { offset, .. }) if offset == offsets[1])
    );

    // The big record torn: a tail.
    fs::write(&path, &bytes[..offsets[1] as usize + 700_000]).expect("write");
    let (got, r) = load_all(&path).expect("load");
    assert_eq!(got, changes[..1]);
    assert_eq!(r.truncated_at, Some(offsets[1]));
}

#[test]
fn check_and_fix() {
    let dir = TempDir::new("fix");
    let path = dir.join("a.aof");
    let changes = sample_changes(6);
    let (bytes, offsets) = encode_file(&changes);

    // Clean: nothing to do.
    fs::write(&path, &bytes).expect("write");
    let r = fix(&path).expect("fix");
    assert_eq!(r.problem, None);
    assert_eq!(fs::read(&path).expect("read"), bytes);

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
    assert_eq!(replay(&path), changes[..5]);

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
        Err(AofError::Corrupt { offset, reason, .. }) => {
            assert_eq!(offset, offsets[2]);
            assert!(reason.contains("refusing to repair"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read(&path).expect("read"), b);
}
