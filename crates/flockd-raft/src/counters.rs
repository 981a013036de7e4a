//! What a node counts for the metrics port beyond the view ROLE and INFO show: leader changes
//! it saw, commands it forwarded to the leader, how long proposals took from the client's
//! command to their commit, and how long the Raft log's synced writes waited for their fsync.
//! Relaxed atomics, bumped once per proposal, leader change or synced write.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use flockd_histogram::{Counts, Histogram};

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

/// The Raft log's fsync waits, kept by the log store and read by the metrics port.
pub fn log_fsync_histogram() -> Histogram {
    Histogram::of_seconds(LOG_FSYNC_SECONDS_BOUNDS)
}

pub struct RaftCounters {
    leader_changes: AtomicU64,
    forwarded_commands: AtomicU64,
    proposals: Histogram,
}

impl Default for RaftCounters {
    fn default() -> Self {
        RaftCounters {
            leader_changes: AtomicU64::new(0),
            forwarded_commands: AtomicU64::new(0),
            proposals: Histogram::of_seconds(PROPOSAL_SECONDS_BOUNDS),
        }
    }
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct RaftStats {
    pub leader_changes: u64,
    pub forwarded_commands: u64,
    /// Over [`PROPOSAL_SECONDS_BOUNDS`]: from the client's command to its commit.
    pub proposals: Counts,
    /// Over [`LOG_FSYNC_SECONDS_BOUNDS`]: from a synced write's queueing (a vote, an append) to
    /// its fsync's completion.
    pub log_fsyncs: Counts,
}

impl RaftCounters {
    pub fn leader_changed(&self) {
        self.leader_changes.fetch_add(1, Relaxed);
    }

    pub fn forwarded(&self, commands: usize) {
        self.forwarded_commands.fetch_add(commands as u64, Relaxed);
    }

    pub fn proposal_committed(&self, took: Duration) {
        self.proposals.observe_duration(took);
    }

    /// The counters, with the log store's fsync waits (kept by the store, which outlives no
    /// node but is opened before it).
    pub fn read(&self, log_fsyncs: &Histogram) -> RaftStats {
        RaftStats {
            leader_changes: self.leader_changes.load(Relaxed),
            forwarded_commands: self.forwarded_commands.load(Relaxed),
            proposals: self.proposals.read(),
            log_fsyncs: log_fsyncs.read(),
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
        let read = counters.read(&log_fsync_histogram());
        assert_eq!(read.proposals.counts[0], 1);
        assert_eq!(read.proposals.counts[2], 1);
        assert_eq!(read.proposals.counts[PROPOSAL_SECONDS_BOUNDS.len()], 1);
        assert_eq!(read.proposals.count(), 3);
        assert!((read.proposals.sum - 9.0023).abs() < 1e-9);
        assert_eq!(read.log_fsyncs.count(), 0);
    }

    #[test]
    fn an_fsync_wait_lands_in_its_bucket() {
        let fsyncs = log_fsync_histogram();
        fsyncs.observe_duration(Duration::from_micros(40));
        fsyncs.observe_duration(Duration::from_millis(3));
        let read = fsyncs.read();
        assert_eq!(read.counts[0], 1);
        assert_eq!(read.counts[6], 1);
        assert!((read.sum - 0.00304).abs() < 1e-9);
    }
}
