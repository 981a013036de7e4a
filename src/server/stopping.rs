//! A stop that was asked for (SIGTERM, SIGINT, `SHUTDOWN`). On a cluster's leader it first hands
//! the leadership to the most caught-up follower while this node still serves its clients, then
//! drains: each connection is closed between two commands (its client then asks its sentinels
//! and finds the new leader), while the port still accepts and serves a client that comes back
//! to it (redis-py retries a command cut off mid-flight on the same address). Only then does it
//! stop serving. Killed outright, a leader leaves the others naming it until they miss
//! its heartbeats; stopped this way it kept being named while its port already refused, so a
//! Sentinel client (redis-py) that reconnected to it spent its whole retry budget on
//! `Connection refused`. etcd hands over its leadership on a graceful stop for the same reason.

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::shared::Shared;

/// Waits for a stop to be asked for, hands the leadership over if this node leads, then starts
/// the shutdown proper.
pub async fn stop_when_asked(shared: Arc<Shared>) {
    tokio::select! {
        () = shared.stopping.cancelled() => {}
        () = shared.shutdown.cancelled() => return,
    }
    let limit = Duration::from_millis(
        shared
            .config
            .load()
            .cluster
            .as_ref()
            .map_or(3000, |c| c.wait_leader_ms),
    );
    if shared.log.hand_over(limit).await {
        drain(&shared, limit).await;
    }
    shared.shutdown.cancel();
}

/// Closes connections as they fall idle, until none has been open for `QUIET` (a client whose
/// command was cut off mid-flight comes back within its retry back-off), or `limit` has passed.
async fn drain(shared: &Shared, limit: Duration) {
    const QUIET: Duration = Duration::from_secs(1);
    shared.draining.cancel();
    let started = tokio::time::Instant::now();
    let mut last_seen = started;
    while started.elapsed() < limit && last_seen.elapsed() < QUIET {
        if shared.clients.connected() > 0 {
            last_seen = tokio::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    info!(
        "stopping: drained in {} ms, {} connection(s) left",
        started.elapsed().as_millis(),
        shared.clients.connected()
    );
}
