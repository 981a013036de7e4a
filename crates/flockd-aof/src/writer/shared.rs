//! What the handle ([`super::Aof`]) and the writer thread share: the queue of proposals, the
//! progress proposers wait on, the counters INFO reads, and the settings that change at run time.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flockd_core::Millis;
use flockd_log::{Apply, Entry, SnapshotFile};
use parking_lot::{Condvar, Mutex};
use tokio::sync::{oneshot, watch};

use crate::FsyncPolicy;
use crate::error::AofError;
use crate::histogram::{FSYNC_SECONDS_BOUNDS, RECORDS_PER_FSYNC_BOUNDS};
use flockd_histogram::Histogram;
use flockd_log::ProposalResult;
/// A queued proposal.
pub(super) struct QueuedProposal {
    pub(super) entry: Entry,
    pub(super) reply: oneshot::Sender<ProposalResult>,
}

/// How long the failed writer waits between recovery attempts, and the `everysec` interval.
pub(super) const SECOND: Duration = Duration::from_secs(1);

pub(super) struct WriterShared {
    pub(super) path: PathBuf,
    pub(super) tmp_path: PathBuf,
    /// The fsync policy (an [`FsyncPolicy`] as `policy_to_u8` spells it): read on every
    /// proposal, changed at run time by [`Aof::set_fsync_policy`].
    pub(super) policy: AtomicU8,
    /// Automatic rewrites (changed at run time by [`Aof::set_auto_rewrite`]).
    pub(super) rewrite_min_size: AtomicU64,
    pub(super) rewrite_percentage: AtomicU64,
    pub(super) applier: Arc<dyn Apply>,
    pub(super) queue: Mutex<Queue>,
    /// Wakes the writer: a change was queued, a rewrite requested or finished, or stop.
    pub(super) wake: Condvar,
    pub(super) appended: AtomicU64,
    pub(super) progress: watch::Sender<Progress>,
    pub(super) rewrite_in_progress: AtomicBool,
    /// The failed state's message, for `check_writable`.
    pub(super) failed: Mutex<Option<String>>,
    pub(super) stopped: AtomicBool,
    pub(super) counters: Mutex<WriterCounters>,
    /// Test hook: the next this-many batch writes fail as if the disk had.
    #[cfg(test)]
    pub(super) inject_write_failures: std::sync::atomic::AtomicU32,
}

#[derive(Default)]
pub(super) struct Queue {
    pub(super) proposals: Vec<QueuedProposal>,
    /// Log position of the last proposal queued (positions continue the loaded file's).
    pub(super) last_position: u64,
    /// Time of the last proposal queued: log time never goes back.
    pub(super) last_at: Millis,
    pub(super) stop: bool,
    pub(super) rewrite_requested: bool,
    pub(super) rewrite_done: Option<Result<SnapshotFile, String>>,
}

/// What waiters watch.
#[derive(Clone, Debug, Default)]
pub(super) struct Progress {
    /// Every entry up to here is decided, and durable unless it is in `failed`.
    pub(super) durable: u64,
    /// Ranges (first, last) of positions whose batches failed or were refused: never applied,
    /// never durable. Contiguous ranges are merged, so this stays about one range per failure.
    pub(super) failed: Vec<(u64, u64)>,
    pub(super) error: Option<Arc<str>>,
    /// The writer has stopped: nothing above `durable` will become durable.
    pub(super) closed: bool,
}

impl Progress {
    pub(super) fn failed(&self, position: u64) -> bool {
        self.failed
            .iter()
            .any(|&(first, last)| first <= position && position <= last)
    }

    pub(super) fn decided(&self, position: u64) -> bool {
        position <= self.durable || self.failed(position) || self.closed
    }

    pub(super) fn outcome(&self, position: u64) -> Result<(), AofError> {
        if self.failed(position) {
            Err(AofError::WriteFailed(
                self.error.as_deref().unwrap_or("write failed").to_owned(),
            ))
        } else if position <= self.durable {
            Ok(())
        } else {
            Err(AofError::ShuttingDown)
        }
    }
}

pub(super) struct WriterCounters {
    pub(super) write_errors: u64,
    pub(super) fsync_seconds: Histogram,
    pub(super) records_per_fsync: Histogram,
    pub(super) file_size: u64,
    pub(super) size_at_last_rewrite: u64,
    pub(super) rewrites: u64,
    pub(super) failed_rewrites: u64,
    pub(super) last_rewrite_duration: Option<Duration>,
    pub(super) last_rewrite_failed: bool,
    pub(super) last_fsync_unix_ms: Option<u64>,
    pub(super) records_written: u64,
    pub(super) batches: u64,
    pub(super) fsyncs: u64,
    pub(super) records_synced: u64,
    pub(super) last_error: Option<String>,
}

impl Default for WriterCounters {
    fn default() -> Self {
        WriterCounters {
            write_errors: 0,
            fsync_seconds: Histogram::of_seconds(FSYNC_SECONDS_BOUNDS),
            records_per_fsync: Histogram::of_values(RECORDS_PER_FSYNC_BOUNDS),
            file_size: 0,
            size_at_last_rewrite: 0,
            rewrites: 0,
            failed_rewrites: 0,
            last_rewrite_duration: None,
            last_rewrite_failed: false,
            last_fsync_unix_ms: None,
            records_written: 0,
            batches: 0,
            fsyncs: 0,
            records_synced: 0,
            last_error: None,
        }
    }
}

pub(super) fn policy_to_u8(policy: FsyncPolicy) -> u8 {
    match policy {
        FsyncPolicy::Always => 0,
        FsyncPolicy::EverySec => 1,
        FsyncPolicy::No => 2,
    }
}

impl WriterShared {
    pub(super) fn policy(&self) -> FsyncPolicy {
        match self.policy.load(Ordering::Acquire) {
            0 => FsyncPolicy::Always,
            1 => FsyncPolicy::EverySec,
            _ => FsyncPolicy::No,
        }
    }
}

pub(super) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
