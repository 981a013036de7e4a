//! Fuzz target for reading whole files: `check`, `fix` and the start-up `load` on a file made
//! of a header (the current one, the first format's, or none) and arbitrary bytes, its frames'
//! checksums optionally fixed up so that records get through to the state machine. Nothing may
//! panic, and the three must agree: a clean file loads whole (zeros after its last record are
//! its end: `load` cuts them, `check` and `fix` report them and leave them); a damaged tail is cut by both
//! `load` and `fix` at the offset `check` names, leaving a prefix of the input that checks
//! clean; a damaged middle is refused by both, the file left as it was. No input may make them
//! allocate more than a small multiple of its size.
#![no_main]

#[path = "alloc_limit.rs"]
mod alloc_limit;
#[path = "seal.rs"]
mod seal;

use std::path::PathBuf;
use std::sync::OnceLock;

use flockd_aof::record::{HEADER, HEADER_V1};
use flockd_aof::{FileError, check, fix, load};
use flockd_core::StateMachine;
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: alloc_limit::Counting = alloc_limit::Counting;

/// The file under test, on tmpfs when there is one (an input is written three times).
fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("flockd-fuzz-aof-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("fuzz dir");
        dir.join("flockd.aof")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let header: &[u8] = match mode % 3 {
        0 => &HEADER,
        1 => &HEADER_V1,
        _ => b"",
    };
    let mut bytes = [header, rest].concat();
    if mode & 4 != 0 {
        seal::seal(&mut bytes, header.len());
    }
    let path = path();
    std::fs::write(path, &bytes).expect("write the input");

    let (report, peak_check) = alloc_limit::peak_during(|| check(path).expect("check"));
    let len = bytes.len() as u64;
    assert_eq!(report.file_len, len);
    assert!(report.valid_len <= len);
    let valid = report.valid_len as usize;
    match &report.problem {
        None => {
            assert_eq!(report.valid_len + report.zeros_after, len, "{report:?}");
            assert!(bytes[valid..].iter().all(|&b| b == 0), "{report:?}");
        }
        Some((offset, reason)) => {
            assert_eq!(*offset, report.valid_len, "{report:?}");
            assert!(!reason.is_empty() && !reason.contains('\n'));
        }
    }

    let mut machine = StateMachine::new();
    let (loaded, peak_load) = alloc_limit::peak_during(|| load(path, &mut machine));
    drop(machine);
    let after_load = std::fs::read(path).expect("read back");
    match (&report.problem, &loaded) {
        (None, Ok(r)) => {
            assert_eq!(
                (r.truncated_at, r.bytes, r.records),
                (None, report.valid_len, report.records)
            );
            assert_eq!(after_load, &bytes[..valid]);
        }
        (Some((offset, _)), Ok(r)) if report.tail_only => {
            assert_eq!(r.truncated_at, Some(*offset));
            assert_eq!(after_load, &bytes[..*offset as usize]);
        }
        (Some((offset, _)), Err(FileError::Corrupt { offset: at, .. })) if !report.tail_only => {
            assert_eq!(at, offset);
            assert_eq!(after_load, bytes);
        }
        (p, l) => panic!(
            "check found {p:?} (tail only: {}), load gave {l:?}",
            report.tail_only
        ),
    }

    std::fs::write(path, &bytes).expect("write the input again");
    let fixed = fix(path);
    let after_fix = std::fs::read(path).expect("read back");
    match (&report.problem, fixed) {
        (None, Ok(r)) => {
            assert_eq!(r, report);
            assert_eq!(after_fix, bytes);
        }
        (Some((offset, _)), Ok(r)) if report.tail_only => {
            assert_eq!(r, report);
            assert_eq!(after_fix, &bytes[..*offset as usize]);
            let again = check(path).expect("check after fix");
            assert!(again.problem.is_none(), "after fix: {again:?}");
        }
        (Some(_), Err(FileError::Corrupt { .. })) if !report.tail_only => {
            assert_eq!(after_fix, bytes, "a refused repair changed the file");
        }
        (p, f) => panic!(
            "check found {p:?} (tail only: {}), fix gave {f:?}",
            report.tail_only
        ),
    }

    let peak = peak_check.max(peak_load);
    assert!(
        peak <= 64 * data.len() + 256 * 1024,
        "{peak} bytes allocated for a {}-byte input",
        data.len()
    );
});
