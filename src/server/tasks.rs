//! The server's background tasks besides lease expiry (`expiry.rs`): forgetting idle names,
//! sampling memory, reloading TLS files on SIGHUP, and turning signals into a stop.

use std::sync::Arc;
use std::time::Duration;

use flockd_core::Op;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::shared::Shared;
use crate::log::{Group, commit};
use crate::services::stats;

/// On SIGHUP, reads the TLS files again for new connections (open ones keep theirs).
pub(super) async fn reload_tls_on_sighup(shared: Arc<Shared>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        error!("cannot install the SIGHUP handler; TLS files reload only by CONFIG SET");
        return;
    };
    loop {
        tokio::select! {
            _ = hup.recv() => {}
            _ = shared.shutdown.cancelled() => return,
        }
        let config = shared.config.load();
        let (Some(acceptor), Some(settings)) = (&shared.tls, config.tls_settings()) else {
            continue;
        };
        match acceptor.reload(&settings) {
            Ok(()) => info!("SIGHUP: TLS certificates reloaded for new connections"),
            Err(e) => error!("SIGHUP: TLS reload failed, keeping the certificates in use: {e}"),
        }
    }
}

/// Once a second, picks least-recently-used idle names beyond `max-idle-names` and proposes to
/// forget them (a pass over the table, so off the async workers).
pub(super) async fn reclaim_idle_names(shared: Arc<Shared>, group: usize) {
    /// Names forgotten by one op at most.
    const BATCH: usize = 10_000;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // Only the group's leader forgets its names (the followers apply its Forget ops).
    let Group { applied, log, .. } = shared.groups[group].clone();
    let on_duty = log.lease_duty();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.shutdown.cancelled() => return,
        }
        // Read each time: CONFIG SET max-idle-names takes effect at the next tick (0: no bound).
        let max = shared.config.load().max_idle_names;
        if max == 0 || !*on_duty.borrow() {
            continue;
        }
        loop {
            let marks = applied.clone();
            let names = tokio::task::spawn_blocking(move || {
                marks.lock_timers().idle_candidates(max, BATCH)
            })
            .await
            .unwrap_or_default();
            if names.is_empty() {
                break;
            }
            let full = names.len() == BATCH;
            match commit(&*log, vec![Op::Forget { names }]).await {
                Ok(results) => {
                    if let Some(flockd_core::OpResult::Forget(forgotten)) = results.first() {
                        stats::bump(&shared.stats.names_forgotten, *forgotten as u64);
                        tracing::debug!(
                            forgotten,
                            floor = applied.read().token_floor(),
                            "forgot idle lock names"
                        );
                    }
                }
                Err(e) => {
                    warn!("cannot forget idle names: {e}");
                    break;
                }
            }
            if !full {
                break;
            }
        }
    }
}

/// Keeps `used_memory_peak` honest between INFO calls: samples the memory once a second.
pub async fn sample_memory(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.shutdown.cancelled() => return,
        }
        stats::memory(&shared.stats);
    }
}

pub(super) async fn watch_signals(stopping: CancellationToken, shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => info!("received SIGTERM"),
        _ = int.recv() => info!("received SIGINT"),
        _ = shutdown.cancelled() => return,
    }
    stopping.cancel();
}
