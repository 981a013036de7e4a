//! What one scrape reports, as plain numbers: the daemon fills a [`MetricsSnapshot`] from the
//! counters it keeps anyway (relaxed atomics on the command path), so a scrape costs the
//! command path nothing and this crate needs none of the daemon's types.

/// A histogram as Prometheus wants it: per-bucket counts (not cumulative) under increasing
/// upper bounds, the last bound `f64::MAX` (+Inf), plus the sum of observed values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramData {
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
}

impl HistogramData {
    /// From per-bucket counts over `bounds` (increasing, finite): `counts` has one more entry
    /// than `bounds`, the last one for everything above (+Inf).
    pub fn from_counts(bounds: &[f64], counts: &[u64], sum: f64) -> HistogramData {
        debug_assert_eq!(counts.len(), bounds.len() + 1);
        let mut buckets: Vec<(f64, u64)> =
            bounds.iter().copied().zip(counts.iter().copied()).collect();
        buckets.push((f64::MAX, counts.get(bounds.len()).copied().unwrap_or(0)));
        HistogramData { buckets, sum }
    }

    /// From a histogram's counts.
    pub fn from_histogram(counts: &flockd_histogram::Counts) -> HistogramData {
        HistogramData::from_counts(counts.bounds, &counts.counts, counts.sum)
    }

    /// An empty histogram over `bounds` (increasing, finite); +Inf is added.
    pub fn with_bounds(bounds: &[f64]) -> HistogramData {
        let mut buckets: Vec<(f64, u64)> = bounds.iter().map(|&b| (b, 0)).collect();
        buckets.push((f64::MAX, 0));
        HistogramData { buckets, sum: 0.0 }
    }

    /// Counts one observation of `value`.
    pub fn observe(&mut self, value: f64) {
        let i = self
            .buckets
            .iter()
            .position(|(bound, _)| value <= *bound)
            .unwrap_or(self.buckets.len() - 1);
        self.buckets[i].1 += 1;
        self.sum += value;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|(_, n)| n).sum()
    }
}

/// One command's metrics (`command` is its lower-case name, as in COMMAND and INFO).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommandMetrics {
    pub command: String,
    pub calls: u64,
    pub duration: HistogramData,
}

/// One command's error replies by error code (the reply's first word: `ERR`, `NOTOWNER`,
/// `MISCONF`, ...), zeros included: a counter's first increase is lost to `rate()` unless
/// the series was there before it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommandErrors {
    pub command: String,
    pub errors: Vec<(String, u64)>,
}

/// Everything `/metrics` shows. Names in comments are the exported ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// flockd_build_info{version}
    pub version: String,
    /// flockd_connected_clients, flockd_blocked_clients
    pub connected_clients: u64,
    pub blocked_clients: u64,
    /// flockd_commands_total{command}, flockd_command_duration_seconds{command}: the
    /// commands called at least once
    pub commands: Vec<CommandMetrics>,
    /// flockd_command_errors_total{command,error}: every command, every error kind
    pub command_errors: Vec<CommandErrors>,
    /// flockd_lock_names, flockd_locks_held, flockd_lock_waiters
    pub lock_names: u64,
    pub locks_held: u64,
    pub lock_waiters: u64,
    /// flockd_lock_grants_total{mode}: (mode, grants)
    pub lock_grants: Vec<(String, u64)>,
    /// flockd_lock_renewals_total, flockd_lock_releases_total, flockd_lock_expirations_total,
    /// flockd_lock_force_releases_total, flockd_lock_busy_total
    pub lock_renewals: u64,
    pub lock_releases: u64,
    pub lock_expirations: u64,
    pub lock_force_releases: u64,
    pub lock_busy: u64,
    /// flockd_lock_wait_seconds{result}: (result, histogram)
    pub lock_wait: Vec<(String, HistogramData)>,
    /// flockd_lock_hold_seconds{ended}: (how it ended, histogram)
    pub lock_hold: Vec<(String, HistogramData)>,
    /// flockd_fence_writes_total{result="accepted"|"refused"}
    pub fence_writes_accepted: u64,
    pub fence_writes_refused: u64,
    /// flockd_token_floor
    pub token_floor: u64,
    /// flockd_aof_fsync_duration_seconds, flockd_aof_records_per_fsync
    pub aof_fsync_duration: HistogramData,
    pub aof_records_per_fsync: HistogramData,
    /// flockd_aof_size_bytes, flockd_aof_rewrites_total, flockd_aof_write_errors_total
    pub aof_size_bytes: u64,
    pub aof_rewrites: u64,
    pub aof_write_errors: u64,
    /// flockd_memory_used_bytes (what the allocator handed out, INFO's used_memory),
    /// flockd_memory_rss_bytes (resident set, used_memory_rss)
    pub memory_used_bytes: u64,
    pub memory_rss_bytes: u64,
    /// The flockd_raft_* series: only a cluster node has them (the first group's, on a
    /// multi-group node).
    pub raft: Option<RaftMetrics>,
    /// The flockd_raft_group_* series, one per Raft group (label `group`, from 1): a cluster
    /// node has one group or several (`cluster-groups`).
    pub raft_groups: Vec<RaftGroupMetrics>,
}

/// One Raft group as this node sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RaftGroupMetrics {
    /// The group's number, from 1.
    pub group: u16,
    /// flockd_raft_group_leader: the node id leading it (0: none known)
    pub leader: u64,
    /// flockd_raft_group_is_leader, flockd_raft_group_term, flockd_raft_group_commit_index,
    /// flockd_raft_group_applied_index
    pub is_leader: bool,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
}

/// A cluster node's Raft metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RaftMetrics {
    /// flockd_raft_term, flockd_raft_is_leader, flockd_raft_commit_index,
    /// flockd_raft_applied_index
    pub term: u64,
    pub is_leader: bool,
    pub commit_index: u64,
    pub applied_index: u64,
    /// flockd_raft_leader_changes_total: new leaders this node heard of
    pub leader_changes: u64,
    /// flockd_raft_forwarded_commands_total: commands sent on to the leader
    pub forwarded_commands: u64,
    /// flockd_raft_proposal_duration_seconds: from a command's proposal to its commit
    pub proposal_duration: HistogramData,
    /// flockd_raft_log_fsync_duration_seconds: from a synced write of the Raft log (a vote,
    /// an append) being queued to its fsync's completion
    pub log_fsync_duration: HistogramData,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let mut h = HistogramData::with_bounds(&[0.001, 0.01, 0.1]);
        for v in [0.0005, 0.001, 0.002, 0.5, 7.0] {
            h.observe(v);
        }
        assert_eq!(
            h.buckets,
            vec![(0.001, 2), (0.01, 1), (0.1, 0), (f64::MAX, 2)]
        );
        assert_eq!(h.count(), 5);
        assert!((h.sum - 7.5035).abs() < 1e-9);
    }
}
