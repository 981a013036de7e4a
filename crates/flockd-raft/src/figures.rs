//! What a node counts for the metrics port beyond the view ROLE and INFO show: leader changes
//! it saw, commands it forwarded to the leader, and how long proposals took from the client's
//! command to their commit. Relaxed atomics, bumped once per proposal or leader change.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of proposal durations, in seconds: a fast local commit (0.5 ms) up to a
/// failover (`cluster-wait-leader-ms` is 3 s by default).
pub const PROPOSAL_SECONDS_BOUNDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Default)]
pub struct RaftFigures {
    leader_changes: AtomicU64,
    forwarded_commands: AtomicU64,
    /// One count per bucket of [`PROPOSAL_SECONDS_BOUNDS`], the last for everything above.
    proposal_buckets: [AtomicU64; PROPOSAL_SECONDS_BOUNDS.len() + 1],
    proposal_micros: AtomicU64,
}

/// A copy of the figures at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RaftFiguresRead {
    pub leader_changes: u64,
    pub forwarded_commands: u64,
    /// Per-bucket counts (not cumulative) over [`PROPOSAL_SECONDS_BOUNDS`] and +Inf.
    pub proposal_counts: Vec<u64>,
    pub proposal_seconds_sum: f64,
}

impl RaftFigures {
    pub fn leader_changed(&self) {
        self.leader_changes.fetch_add(1, Relaxed);
    }

    pub fn forwarded(&self, commands: usize) {
        self.forwarded_commands.fetch_add(commands as u64, Relaxed);
    }

    pub fn proposal_committed(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = PROPOSAL_SECONDS_BOUNDS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(PROPOSAL_SECONDS_BOUNDS.len());
        self.proposal_buckets[bucket].fetch_add(1, Relaxed);
        self.proposal_micros
            .fetch_add(took.as_micros().min(u64::MAX as u128) as u64, Relaxed);
    }

    pub fn read(&self) -> RaftFiguresRead {
        RaftFiguresRead {
            leader_changes: self.leader_changes.load(Relaxed),
            forwarded_commands: self.forwarded_commands.load(Relaxed),
            proposal_counts: self
                .proposal_buckets
                .iter()
                .map(|b| b.load(Relaxed))
                .collect(),
            proposal_seconds_sum: self.proposal_micros.load(Relaxed) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proposal_lands_in_the_first_bucket_that_holds_it() {
        let figures = RaftFigures::default();
        figures.proposal_committed(Duration::from_micros(300));
        figures.proposal_committed(Duration::from_millis(2));
        figures.proposal_committed(Duration::from_secs(9));
        let read = figures.read();
        assert_eq!(read.proposal_counts[0], 1);
        assert_eq!(read.proposal_counts[2], 1);
        assert_eq!(read.proposal_counts[PROPOSAL_SECONDS_BOUNDS.len()], 1);
        assert_eq!(read.proposal_counts.iter().sum::<u64>(), 3);
        assert!((read.proposal_seconds_sum - 9.0023).abs() < 1e-9);
    }
}
