//! Checks with a counting allocator that the parser never allocates what a client merely
//! declares: a huge argument count or bulk length costs no more memory than a small one.
//! (Its own test binary, so the global allocator sees only this test.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::BytesMut;
use flockd_proto::{Limits, RequestParser};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn declared_counts_and_lengths_are_not_allocated() {
    let unlimited = Limits {
        max_bulk_len: usize::MAX,
        max_args: usize::MAX,
        max_inline_len: 64 * 1024,
    };
    let inputs: [&[u8]; 3] = [
        b"*2000000000\r\n$3\r\nSET\r\n$5\r\nab",
        b"*1\r\n$999999999999\r\nsome bytes",
        b"*9223372036854775807\r\n$9223372036854775807\r\n",
    ];
    for input in inputs {
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(input);
        LARGEST.store(0, Ordering::Relaxed);
        let mut parser = RequestParser::new();
        assert_eq!(parser.parse(&mut buf, &unlimited), Ok(None));
        let largest = LARGEST.load(Ordering::Relaxed);
        // At most the 1024-entry argument vector (32 KiB of `Bytes` handles).
        assert!(
            largest <= 1024 * std::mem::size_of::<bytes::Bytes>(),
            "allocated {largest} bytes for {:?}",
            String::from_utf8_lossy(input)
        );
    }
}
