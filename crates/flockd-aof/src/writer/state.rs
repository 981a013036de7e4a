//! The writer thread's state: what the flush job (`flush.rs`) and the rewrite job
//! (`rewrite.rs`) both work on, so neither needs the other's file to name it.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;
use std::time::Instant;

use flockd_core::OpResult;
use flockd_log::Entry;

use super::shared::{QueuedProposal, WriterShared};

/// The writer thread's state: it alone touches the file.
pub(super) struct Writer {
    pub(super) sh: Arc<WriterShared>,
    pub(super) file: File,
    /// Bytes of the file known to be good (written completely).
    pub(super) file_len: u64,
    /// The zeros written ahead of the records (see `ahead.rs`).
    pub(super) ahead: flockd_log::written_ahead::WrittenAhead,
    pub(super) size_at_last_rewrite: u64,
    /// Position of the last entry taken from the queue.
    pub(super) last_taken: u64,
    /// Written since the last sync.
    pub(super) unsynced: bool,
    pub(super) unsynced_records: u64,
    pub(super) last_fsync: Instant,
    pub(super) failed: bool,
    pub(super) last_retry: Instant,
    pub(super) rewrite: Option<RewriteRun>,
    /// Encoding buffer, reused.
    pub(super) buf: Vec<u8>,
    /// Swapped with the queue's vector so neither reallocates per batch.
    pub(super) spare: Vec<QueuedProposal>,
    /// An entry applied without being logged yet (see [`Aof::prepend_applied`]), encoded: it
    /// goes out in front of the next batch.
    pub(super) unlogged: Vec<u8>,
    /// The entries of a batch being applied, and their results (reused).
    pub(super) entries: Vec<Entry>,
    pub(super) results: Vec<Vec<OpResult>>,
}

/// The writer's side of a running rewrite.
pub(super) struct RewriteRun {
    /// Records above this sequence number go to the tail.
    pub(super) tail: Vec<u8>,
    /// The last sequence number in the tail (or the start, while it is empty).
    pub(super) tail_last: u64,
    pub(super) started: Instant,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) handle: Option<JoinHandle<()>>,
}
