//! Fuzz target for the Raft log's start-up read of its segments (`log_store::load::load`): a
//! segment made of the header (or not) and arbitrary bytes, its frames' checksums optionally
//! fixed up so that records get through to the decoder and the in-memory log. Nothing may
//! panic; a load that succeeds leaves the file a prefix of the input (what it cut was at the
//! end, after the last record it read) and loads again to the same log without cutting more;
//! a refused load leaves the file as it was. No input may make it allocate more than a small
//! multiple of its size.
#![no_main]

#[path = "alloc_limit.rs"]
mod alloc_limit;
#[path = "seal.rs"]
mod seal;

use std::path::PathBuf;
use std::sync::OnceLock;

use flockd_raft::log_store::load::load;
use flockd_raft::log_store::record::{SEGMENT_HEADER, segment_path};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: alloc_limit::Counting = alloc_limit::Counting;

/// The log's directory, on tmpfs when there is one.
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("flockd-fuzz-raft-segment-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("fuzz dir");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let header: &[u8] = if mode & 1 == 0 { &SEGMENT_HEADER } else { b"" };
    let mut bytes = [header, rest].concat();
    if mode & 2 != 0 {
        seal::seal(&mut bytes, header.len());
    }
    let dir = dir();
    let path = segment_path(dir, 1);
    std::fs::write(&path, &bytes).expect("write the input");

    let (loaded, peak) = alloc_limit::peak_during(|| load(dir));
    let after = std::fs::read(&path).expect("read back");
    match loaded {
        Ok(first) => {
            assert!(bytes.starts_with(&after), "what load left is a prefix of the input");
            let end = first.end as usize;
            assert!(end <= after.len());
            assert!(after[end..].iter().all(|&b| b == 0), "only zeros after the records");
            assert_eq!(first.cut as usize, bytes.len() - after.len());
            let again = load(dir).expect("a loaded log loads again");
            assert_eq!(again.cut, 0);
            assert_eq!(again.end, first.end);
            assert_eq!(again.mem.entries.len(), first.mem.entries.len());
            assert_eq!(again.mem.vote, first.mem.vote);
            assert_eq!(again.mem.purged, first.mem.purged);
            for (a, b) in again.mem.entries.iter().zip(&first.mem.entries) {
                assert_eq!(a.log_id, b.log_id);
                assert_eq!(a.payload, b.payload);
            }
            let entries = &first.mem.entries;
            for (a, b) in entries.iter().zip(entries.iter().skip(1)) {
                assert_eq!(b.log_id.index, a.log_id.index + 1, "consecutive entries");
            }
        }
        Err(_) => assert_eq!(after, bytes, "a refused log is left as it was"),
    }
    assert!(
        peak <= 64 * data.len() + 256 * 1024,
        "{peak} bytes allocated for a {}-byte input",
        data.len()
    );
});
