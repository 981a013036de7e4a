//! What reading one peer frame may allocate: a frame's length prefix is the peer's word, so a
//! header that declares the largest frame and then sends little must cost memory in proportion
//! to the bytes that came, not to the number it declared (found by the `peer_frames` fuzz
//! target). Its own test binary, because it counts every allocation of the process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use flockd_raft::identity::Identity;
use flockd_raft::network::{MAX_FRAME, Request, decode_request, frame, read_frame};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The count is the whole process's: the tests of this file take turns, so one test's
/// allocations never show in another's peak.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Bytes allocated above what was live before, at the peak of `f`.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[test]
fn a_frame_that_declares_the_largest_length_allocates_what_arrived_not_what_it_declared() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let mut input = Vec::new();
    input.extend_from_slice(&(MAX_FRAME as u32).to_be_bytes());
    input.extend_from_slice(&7u64.to_be_bytes());
    input.extend_from_slice(&[0x5a; 100]);
    let (result, peak) = peak_during(|| rt.block_on(read_frame(&mut &input[..])));
    let err = result.expect_err("the body ends 100 bytes in");
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    assert!(
        peak < 1 << 20,
        "{peak} bytes allocated for a frame of which 112 bytes arrived (it declared {MAX_FRAME})"
    );
}

#[test]
fn frames_still_read_whole_and_in_pieces() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let hello = Request::Hello(Identity {
        node: 3,
        dir: 0xfeed,
    });
    let mut bytes = frame(41, &hello).unwrap();
    // A large body, as a snapshot chunk brings, read through a pipe in small writes.
    let chunk = Request::SnapshotChunk {
        transfer: 1,
        offset: 0,
        data: (0..3_000_000u32).map(|i| i as u8).collect(),
    };
    bytes.extend(frame(42, &chunk).unwrap());
    rt.block_on(async {
        use tokio::io::AsyncWriteExt;
        let (mut tx, mut rx) = tokio::io::duplex(4096);
        let writer = tokio::spawn(async move {
            for piece in bytes.chunks(1000) {
                tx.write_all(piece).await.unwrap();
            }
        });
        let (id, body) = read_frame(&mut rx).await.unwrap().unwrap();
        assert_eq!(id, 41);
        assert!(matches!(
            decode_request(&body).unwrap(),
            Request::Hello(Identity {
                node: 3,
                dir: 0xfeed
            })
        ));
        let (id, body) = read_frame(&mut rx).await.unwrap().unwrap();
        assert_eq!(id, 42);
        match decode_request(&body).unwrap() {
            Request::SnapshotChunk { data, .. } => {
                assert_eq!(data.len(), 3_000_000);
                assert!(data.iter().enumerate().all(|(i, b)| *b == i as u8));
            }
            other => panic!("{other:?}"),
        }
        writer.await.unwrap();
        assert!(read_frame(&mut rx).await.unwrap().is_none());
    });
}
