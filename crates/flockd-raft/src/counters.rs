//! What a node counts for the metrics port beyond the view ROLE and INFO show: leader changes
//! it saw, commands it forwarded to the leader, how long proposals took from the client's
//! command to their commit, and how long the Raft log's synced writes waited for their fsync.
//! Relaxed atomics, bumped once per proposal, leader change or synced write.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of proposal durations, in seconds: a fast local commit (0.5 ms) up to a
/// failover (`cluster-wait-leader-ms` is 3 s by default).
pub const PROPOSAL_SECONDS_BOUNDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Upper bounds of the Raft log's fsync waits, in seconds: as the AOF's (50 µs, a fast NVMe,
/// to 2.5 s, a disk in trouble), so the two Durability panels read alike.
pub const LOG_FSYNC_SECONDS_BOUNDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5,
];

/// A histogram of durations over fixed bounds, lock-free: a count per bucket (the last for
/// everything above the bounds) and the sum in microseconds.
pub struct Durations<const N: usize> {
    bounds: &'static [f64],
    buckets: [AtomicU64; N],
    micros: AtomicU64,
}

impl<const N: usize> Durations<N> {
    /// `bounds` must have `N - 1` entries.
    pub const fn new(bounds: &'static [f64]) -> Self {
        assert!(bounds.len() + 1 == N);
        Durations {
            bounds,
            buckets: [const { AtomicU64::new(0) }; N],
            micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = self
            .bounds
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(self.bounds.len());
        self.buckets[bucket].fetch_add(1, Relaxed);
        self.micros
            .fetch_add(took.as_micros().min(u64::MAX as u128) as u64, Relaxed);
    }

    /// Per-bucket counts (not cumulative) and the sum in seconds.
    pub fn read(&self) -> (Vec<u64>, f64) {
        (
            self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            self.micros.load(Relaxed) as f64 / 1e6,
        )
    }
}

/// The Raft log's fsync waits, shared by the log store's flush callbacks and the metrics port.
pub type LogFsyncDurations = Durations<{ LOG_FSYNC_SECONDS_BOUNDS.len() + 1 }>;

impl Default for LogFsyncDurations {
    fn default() -> Self {
        Durations::new(LOG_FSYNC_SECONDS_BOUNDS)
    }
}

type ProposalDurations = Durations<{ PROPOSAL_SECONDS_BOUNDS.len() + 1 }>;

impl Default for ProposalDurations {
    fn default() -> Self {
        Durations::new(PROPOSAL_SECONDS_BOUNDS)
    }
}

#[derive(Default)]
pub struct RaftCounters {
    leader_changes: AtomicU64,
    forwarded_commands: AtomicU64,
    proposals: ProposalDurations,
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RaftStats {
    pub leader_changes: u64,
    pub forwarded_commands: u64,
    /// Per-bucket counts (not cumulative) over [`PROPOSAL_SECONDS_BOUNDS`] and +Inf.
    pub proposal_counts: Vec<u64>,
    pub proposal_seconds_sum: f64,
    /// Per-bucket counts over [`LOG_FSYNC_SECONDS_BOUNDS`] and +Inf: from a synced write's
    /// queueing (a vote, an append) to its fsync's completion.
    pub log_fsync_counts: Vec<u64>,
    pub log_fsync_seconds_sum: f64,
}

impl RaftCounters {
    pub fn leader_changed(&self) {
        self.leader_changes.fetch_add(1, Relaxed);
    }

    pub fn forwarded(&self, commands: usize) {
        self.forwarded_commands.fetch_add(commands as u64, Relaxed);
    }

    pub fn proposal_committed(&self, took: Duration) {
        self.proposals.observe(took);
    }

    /// The counters, with the log store's fsync waits (kept by the store, which outlives no
    /// node but is opened before it).
    pub fn read(&self, log_fsyncs: &LogFsyncDurations) -> RaftStats {
        let (proposal_counts, proposal_seconds_sum) = self.proposals.read();
        let (log_fsync_counts, log_fsync_seconds_sum) = log_fsyncs.read();
        RaftStats {
            leader_changes: self.leader_changes.load(Relaxed),
            forwarded_commands: self.forwarded_commands.load(Relaxed),
            proposal_counts,
            proposal_seconds_sum,
            log_fsync_counts,
            log_fsync_seconds_sum,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proposal_lands_in_the_first_bucket_that_holds_it() {
        let counters = RaftCounters::default();
        counters.proposal_committed(Duration::from_micros(300));
        counters.proposal_committed(Duration::from_millis(2));
        counters.proposal_committed(Duration::from_secs(9));
        let read = counters.read(&LogFsyncDurations::default());
        assert_eq!(read.proposal_counts[0], 1);
        assert_eq!(read.proposal_counts[2], 1);
        assert_eq!(read.proposal_counts[PROPOSAL_SECONDS_BOUNDS.len()], 1);
        assert_eq!(read.proposal_counts.iter().sum::<u64>(), 3);
        assert!((read.proposal_seconds_sum - 9.0023).abs() < 1e-9);
        assert_eq!(
            read.log_fsync_counts,
            vec![0; LOG_FSYNC_SECONDS_BOUNDS.len() + 1]
        );
    }

    #[test]
    fn an_fsync_wait_lands_in_its_bucket() {
        let fsyncs = LogFsyncDurations::default();
        fsyncs.observe(Duration::from_micros(40));
        fsyncs.observe(Duration::from_millis(3));
        let (counts, sum) = fsyncs.read();
        assert_eq!(counts[0], 1);
        assert_eq!(counts[6], 1);
        assert!((sum - 0.00304).abs() < 1e-9);
    }
}
