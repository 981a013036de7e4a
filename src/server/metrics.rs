//! The daemon's side of the metrics port: turns its counters (INFO's, commandstats, the lock
//! table's, the AOF writer's) into a [`MetricsSnapshot`] at each scrape. The port starts before
//! the AOF is loaded, so `/readyz` can say 503 "loading" while it is.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use flockd_metrics::{
    CommandErrors, CommandMetrics, HistogramData, MetricsSnapshot, MetricsSource,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::shared::Shared;
use crate::commands::TABLE;
use crate::services::applied::Totals;
use crate::services::stats::{self, HISTOGRAM_BUCKETS, bucket_usec};
use flockd_histogram::Histogram;

/// What the metrics port reads; the server is set once it serves.
#[derive(Default)]
pub struct DaemonMetrics {
    shared: OnceLock<Arc<Shared>>,
}

impl DaemonMetrics {
    pub fn serving(&self, shared: Arc<Shared>) {
        let _ = self.shared.set(shared);
    }
}

/// Binds the metrics port and serves it (and the console's pages) in the background until
/// `shutdown`.
pub async fn start(
    addr: SocketAddr,
    source: Arc<DaemonMetrics>,
    console: Arc<super::console::Console>,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(flockd_metrics::serve(
        listener,
        source,
        Some(console),
        shutdown,
    ));
    Ok(local)
}

fn from_time_histogram(h: &Histogram) -> HistogramData {
    HistogramData::from_histogram(&h.read())
}

/// A command's duration histogram in seconds. Its last level also holds every call slower
/// than a second (Redis's histogram clamps there), so it is reported as +Inf only.
fn command_duration(stat: &stats::CommandStat) -> HistogramData {
    let bounds: Vec<f64> = (0..HISTOGRAM_BUCKETS - 1)
        .map(|i| bucket_usec(i) as f64 / 1e6)
        .collect();
    HistogramData::from_counts(
        &bounds,
        &stat.histogram.counts(),
        stats::read(&stat.usec) as f64 / 1e6,
    )
}

impl MetricsSource for DaemonMetrics {
    fn ready(&self) -> Result<(), String> {
        match self.shared.get() {
            Some(shared) if shared.shutdown.is_cancelled() => Err("shutting down".into()),
            // A cluster node without a leader cannot commit anything: not ready.
            Some(shared) if !shared.log.view().knows_leader() => {
                Err("no cluster leader is known".into())
            }
            Some(_) => Ok(()),
            None => Err("loading the append-only file".into()),
        }
    }

    fn snapshot(&self) -> MetricsSnapshot {
        let version = env!("CARGO_PKG_VERSION").to_string();
        let Some(shared) = self.shared.get() else {
            return MetricsSnapshot {
                version,
                ..MetricsSnapshot::default()
            };
        };
        let commands = TABLE
            .iter()
            .zip(&shared.stats.commands)
            .filter_map(|(meta, stat)| {
                let calls = stats::read(&stat.calls);
                (calls > 0).then(|| CommandMetrics {
                    command: meta.name.to_string(),
                    calls,
                    duration: command_duration(stat),
                })
            })
            .collect();
        let mut command_errors: Vec<CommandErrors> = TABLE
            .iter()
            .zip(&shared.stats.commands)
            .map(|(meta, stat)| {
                let counted = stat.errors.lock();
                let mut errors: Vec<(String, u64)> = stats::ERROR_KINDS
                    .iter()
                    .map(|kind| {
                        let n = counted
                            .iter()
                            .find(|(c, _)| &**c == *kind)
                            .map_or(0, |c| c.1);
                        (kind.to_string(), n)
                    })
                    .collect();
                // A code from elsewhere (a forwarded reply's) is shown once it happened.
                errors.extend(
                    counted
                        .iter()
                        .filter(|(c, _)| !stats::ERROR_KINDS.contains(&&**c))
                        .map(|(c, n)| (c.to_string(), *n)),
                );
                CommandErrors {
                    command: meta.name.to_string(),
                    errors,
                }
            })
            .collect();
        // The name an unknown command was sent with is the client's text: never a label.
        command_errors.push(CommandErrors {
            command: "unknown".into(),
            errors: vec![(
                "unknown".into(),
                stats::read(&shared.stats.unknown_commands),
            )],
        });
        let Totals {
            locks,
            fences,
            token_floor,
        } = Totals::of(shared.groups.iter().map(|g| &*g.applied));
        let holds = &shared.applied.holds;
        let memory = stats::memory(&shared.stats);
        let mut snapshot = MetricsSnapshot {
            version,
            connected_clients: shared.clients.connected() as u64,
            blocked_clients: shared.clients.blocked() as u64,
            commands,
            command_errors,
            lock_names: locks.names,
            locks_held: locks.locks_held,
            lock_waiters: locks.waiters,
            lock_grants: vec![("exclusive".to_string(), locks.grants)],
            lock_renewals: locks.renewals,
            lock_releases: locks.releases,
            lock_expirations: locks.expirations,
            lock_force_releases: locks.force_releases,
            lock_busy: locks.busy,
            lock_wait: vec![
                (
                    "granted".into(),
                    from_time_histogram(&shared.stats.wait_granted),
                ),
                (
                    "timeout".into(),
                    from_time_histogram(&shared.stats.wait_timed_out),
                ),
            ],
            lock_hold: vec![
                ("released".into(), from_time_histogram(&holds.released)),
                ("expired".into(), from_time_histogram(&holds.expired)),
                (
                    "forcereleased".into(),
                    from_time_histogram(&holds.force_released),
                ),
            ],
            fence_writes_accepted: fences.accepted,
            fence_writes_refused: fences.refused,
            token_floor,
            memory_used_bytes: memory.used,
            memory_rss_bytes: memory.rss,
            // Each log fills in its own metrics (a cluster node's AOF ones stay at zero).
            ..MetricsSnapshot::default()
        };
        shared.log.metrics(&mut snapshot);
        snapshot
    }
}
