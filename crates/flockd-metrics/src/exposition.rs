//! The `/metrics` body: a [`MetricsSnapshot`] written in the OpenMetrics text format by
//! prometheus-client's encoder. Names follow the operations contract: prefix `flockd_`, base
//! units, counters ending in `_total` (the encoder adds the suffix to a counter's name).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::snapshot::{HistogramData, MetricsSnapshot};

/// Where the metrics come from, asked once per scrape.
pub trait MetricsSource: Send + Sync + 'static {
    fn snapshot(&self) -> MetricsSnapshot;
    /// `Ok` when the server can serve (the AOF is loaded, and later: a leader is known), or
    /// why not (the `/readyz` body).
    fn ready(&self) -> Result<(), String>;
}

/// A registry whose one collector asks `source` at every scrape.
pub fn registry(source: Arc<dyn MetricsSource>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(source)));
    registry
}

/// The exposition text of `registry`.
pub fn render(registry: &Registry) -> String {
    let mut body = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail; an encoder error would be a bug in a collector.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, registry) {
        tracing::error!("metrics encoding failed: {e}");
    }
    body
}

struct SnapshotCollector(Arc<dyn MetricsSource>);

impl std::fmt::Debug for SnapshotCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotCollector")
    }
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    ConstCounter::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    ConstGauge::new(v as i64).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn histogram(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    h: &HistogramData,
) -> std::fmt::Result {
    enc.encode_descriptor(name, help, None, MetricType::Histogram)?
        .encode_histogram::<NoLabelSet>(h.sum, h.count(), &h.buckets, None)
}

/// A histogram family with one label.
fn histograms(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    series: &[(String, HistogramData)],
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (value, h) in series {
        let labels = [(label, value.as_str())];
        family
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(h.sum, h.count(), &h.buckets, None)?;
    }
    Ok(())
}

/// One figure of a group, for a `group`-labelled family.
type GroupValue = fn(&crate::RaftGroupMetrics) -> u64;

/// A gauge family with one label.
fn gauges(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    series: &[(String, u64)],
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (value, v) in series {
        let labels = [(label, value.as_str())];
        ConstGauge::new(*v as i64).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A counter family with one label.
fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    series: &[(&str, u64)],
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, v) in series {
        let labels = [(label, *value)];
        ConstCounter::new(*v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let s = self.0.snapshot();
        let e = &mut enc;
        {
            // A gauge of 1, as Prometheus's own `prometheus_build_info`: the OpenMetrics `info`
            // type is one that promtool and text-format 0.0.4 parsers refuse.
            let mut build = e.encode_descriptor(
                "flockd_build_info",
                "flockd's version (always 1)",
                None,
                MetricType::Gauge,
            )?;
            let labels = [("version", s.version.as_str())];
            ConstGauge::new(1i64).encode(build.encode_family(&labels)?)?;
        }
        gauge(
            e,
            "flockd_connected_clients",
            "Client connections open",
            s.connected_clients,
        )?;
        gauge(
            e,
            "flockd_blocked_clients",
            "Clients blocked in FLOCK.ACQUIRE ... WAIT",
            s.blocked_clients,
        )?;
        {
            let mut family = e.encode_descriptor(
                "flockd_commands",
                "Commands run, by command",
                None,
                MetricType::Counter,
            )?;
            for c in &s.commands {
                let labels = [("command", c.command.as_str())];
                ConstCounter::new(c.calls).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = e.encode_descriptor(
                "flockd_command_errors",
                "Error replies, by command and error code",
                None,
                MetricType::Counter,
            )?;
            for c in &s.command_errors {
                for (code, n) in &c.errors {
                    let labels = [("command", c.command.as_str()), ("error", code.as_str())];
                    ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        {
            let mut family = e.encode_descriptor(
                "flockd_command_duration_seconds",
                "Time from a command's parse to its reply (a change's includes its fsync)",
                None,
                MetricType::Histogram,
            )?;
            for c in &s.commands {
                let labels = [("command", c.command.as_str())];
                let h = &c.duration;
                family
                    .encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(h.sum, h.count(), &h.buckets, None)?;
            }
        }
        gauge(
            e,
            "flockd_lock_names",
            "Lock names kept (held or not)",
            s.lock_names,
        )?;
        gauge(e, "flockd_locks_held", "Locks held now", s.locks_held)?;
        gauge(
            e,
            "flockd_lock_waiters",
            "Waiters queued on held locks",
            s.lock_waiters,
        )?;
        let grants: Vec<(&str, u64)> = s
            .lock_grants
            .iter()
            .map(|(mode, n)| (mode.as_str(), *n))
            .collect();
        counters(
            e,
            "flockd_lock_grants",
            "Locks granted, by mode",
            "mode",
            &grants,
        )?;
        counter(e, "flockd_lock_renewals", "Leases renewed", s.lock_renewals)?;
        counter(
            e,
            "flockd_lock_releases",
            "Holds released by their holder",
            s.lock_releases,
        )?;
        counter(
            e,
            "flockd_lock_expirations",
            "Leases that ran out",
            s.lock_expirations,
        )?;
        counter(
            e,
            "flockd_lock_force_releases",
            "Locks taken away with FLOCK.FORCERELEASE",
            s.lock_force_releases,
        )?;
        counter(
            e,
            "flockd_lock_busy",
            "Acquires answered nil: the lock was held (after any WAIT)",
            s.lock_busy,
        )?;
        histograms(
            e,
            "flockd_lock_wait_seconds",
            "From a FLOCK.ACQUIRE ... WAIT to its grant or timeout",
            "result",
            &s.lock_wait,
        )?;
        histograms(
            e,
            "flockd_lock_hold_seconds",
            "From a grant to the end of the hold: release, expiry or force-release",
            "ended",
            &s.lock_hold,
        )?;
        counters(
            e,
            "flockd_fence_writes",
            "FENCE.SET calls, by result",
            "result",
            &[
                ("accepted", s.fence_writes_accepted),
                ("refused", s.fence_writes_refused),
            ],
        )?;
        gauge(
            e,
            "flockd_token_floor",
            "Every lock's next token is above this (forgotten names, --bump-tokens)",
            s.token_floor,
        )?;
        histogram(
            e,
            "flockd_aof_fsync_duration_seconds",
            "Time of each fsync of the append-only file",
            &s.aof_fsync_duration,
        )?;
        histogram(
            e,
            "flockd_aof_records_per_fsync",
            "Records made durable by each fsync (group commit)",
            &s.aof_records_per_fsync,
        )?;
        gauge(
            e,
            "flockd_aof_size_bytes",
            "Length of the append-only file",
            s.aof_size_bytes,
        )?;
        counter(
            e,
            "flockd_aof_rewrites",
            "AOF rewrites completed",
            s.aof_rewrites,
        )?;
        counter(
            e,
            "flockd_aof_write_errors",
            "Failed writes or fsyncs of the append-only file",
            s.aof_write_errors,
        )?;
        gauge(
            e,
            "flockd_memory_used_bytes",
            "Memory the allocator handed out (INFO's used_memory)",
            s.memory_used_bytes,
        )?;
        gauge(
            e,
            "flockd_memory_rss_bytes",
            "Resident set size of the process (INFO's used_memory_rss)",
            s.memory_rss_bytes,
        )?;
        if let Some(raft) = &s.raft {
            gauge(
                e,
                "flockd_raft_term",
                "The Raft term this node is in",
                raft.term,
            )?;
            gauge(
                e,
                "flockd_raft_is_leader",
                "1 while this node leads",
                u64::from(raft.is_leader),
            )?;
            gauge(
                e,
                "flockd_raft_commit_index",
                "Last log index this node knows committed",
                raft.commit_index,
            )?;
            gauge(
                e,
                "flockd_raft_applied_index",
                "Last log index applied to this node's lock table",
                raft.applied_index,
            )?;
            counter(
                e,
                "flockd_raft_leader_changes",
                "New leaders this node heard of",
                raft.leader_changes,
            )?;
            counter(
                e,
                "flockd_raft_forwarded_commands",
                "Commands this node sent on to the leader",
                raft.forwarded_commands,
            )?;
            histogram(
                e,
                "flockd_raft_proposal_duration_seconds",
                "From a change's proposal on this node to its commit (forwarding included)",
                &raft.proposal_duration,
            )?;
            histogram(
                e,
                "flockd_raft_log_fsync_duration_seconds",
                "From a synced write of the Raft log (a vote, an append) being queued to its \
                 fsync's completion; one fsync may serve several",
                &raft.log_fsync_duration,
            )?;
        }
        if !s.raft_groups.is_empty() {
            let per_group = |value: GroupValue| -> Vec<(String, u64)> {
                s.raft_groups
                    .iter()
                    .map(|g| (g.group.to_string(), value(g)))
                    .collect()
            };
            let families: [(&str, &str, GroupValue); 6] = [
                (
                    "flockd_raft_group_leader",
                    "The node id leading the group (0: none known)",
                    |g| g.leader,
                ),
                (
                    "flockd_raft_group_is_leader",
                    "1 while this node leads the group",
                    |g| u64::from(g.is_leader),
                ),
                ("flockd_raft_group_term", "The group's Raft term", |g| {
                    g.term
                }),
                (
                    "flockd_raft_group_commit_index",
                    "Last log index of the group this node knows committed",
                    |g| g.commit_index,
                ),
                (
                    "flockd_raft_group_applied_index",
                    "Last log index of the group applied here",
                    |g| g.applied_index,
                ),
                (
                    "flockd_raft_group_lag",
                    "Entries of the group committed but not applied here yet",
                    |g| g.commit_index.saturating_sub(g.applied_index),
                ),
            ];
            for (name, help, value) in families {
                gauges(e, name, help, "group", &per_group(value))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{CommandErrors, CommandMetrics};

    struct Fixed(MetricsSnapshot);

    impl MetricsSource for Fixed {
        fn snapshot(&self) -> MetricsSnapshot {
            self.0.clone()
        }
        fn ready(&self) -> Result<(), String> {
            Ok(())
        }
    }

    #[test]
    fn the_contract_names_are_exported() {
        let mut duration = HistogramData::with_bounds(&[0.001, 0.01]);
        duration.observe(0.002);
        let snapshot = MetricsSnapshot {
            version: "0.1.0".into(),
            connected_clients: 3,
            commands: vec![CommandMetrics {
                command: "flock.acquire".into(),
                calls: 7,
                duration,
            }],
            command_errors: vec![CommandErrors {
                command: "flock.acquire".into(),
                errors: vec![("ERR".into(), 2), ("NOTOWNER".into(), 0)],
            }],
            lock_grants: vec![("exclusive".into(), 5)],
            lock_wait: vec![("granted".into(), HistogramData::with_bounds(&[1.0]))],
            aof_fsync_duration: HistogramData::with_bounds(&[0.001]),
            aof_records_per_fsync: HistogramData::with_bounds(&[1.0]),
            ..MetricsSnapshot::default()
        };
        let text = render(&registry(Arc::new(Fixed(snapshot))));
        for line in [
            "# TYPE flockd_build_info gauge",
            "flockd_build_info{version=\"0.1.0\"} 1",
            "flockd_connected_clients 3",
            "flockd_commands_total{command=\"flock.acquire\"} 7",
            "flockd_command_errors_total{command=\"flock.acquire\",error=\"ERR\"} 2",
            "flockd_command_errors_total{command=\"flock.acquire\",error=\"NOTOWNER\"} 0",
            "flockd_command_duration_seconds_bucket{le=\"0.01\",command=\"flock.acquire\"} 1",
            "flockd_command_duration_seconds_count{command=\"flock.acquire\"} 1",
            "flockd_lock_grants_total{mode=\"exclusive\"} 5",
            "flockd_lock_wait_seconds_bucket{le=\"+Inf\",result=\"granted\"} 0",
            "flockd_fence_writes_total{result=\"refused\"} 0",
            "flockd_aof_records_per_fsync_count 0",
            "flockd_aof_write_errors_total 0",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in:\n{text}");
        }
    }
}
