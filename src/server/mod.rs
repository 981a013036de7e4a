//! Server wiring: load the AOF into the state, listen, accept clients up to `maxclients`, run
//! the expiry task, and shut down cleanly (stop accepting, let connections finish the command in
//! flight, flush and fsync the AOF).

pub mod clients;
pub mod clock;
mod connection;
pub mod context;
mod expiry;
pub mod stats;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flockd_aof::{Aof, AofOptions};
use flockd_core::State;
use flockd_proto::Limits;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::config::Config;
use clients::ClientRegistry;
use clock::Clock;
use stats::ServerStats;

/// Redis's input limits for clients that have not authenticated yet.
pub const PREAUTH_LIMITS: Limits = Limits {
    max_bulk_len: 16 * 1024,
    max_args: 10,
    max_inline_len: 16 * 1024,
};
pub const PREAUTH_QUERY_BUFFER: usize = 1024 * 1024;

/// Everything connections share.
pub struct Shared {
    pub config: Config,
    pub state: Arc<State>,
    pub aof: Arc<Aof>,
    pub clock: Clock,
    pub clients: ClientRegistry,
    pub stats: ServerStats,
    pub shutdown: CancellationToken,
    pub started: Instant,
    pub local_addr: SocketAddr,
    pub limits: Limits,
    pub arg_limits: crate::commands::ArgLimits,
    pub replayed: flockd_aof::ReplayReport,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Aof(#[from] flockd_aof::AofError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

pub async fn run(config: Config, bump_tokens: Option<u64>) -> Result<(), ServerError> {
    std::fs::create_dir_all(&config.dir).map_err(|source| ServerError::DataDir {
        path: config.dir.clone(),
        source,
    })?;
    let clock = Clock::new();
    let state = Arc::new(State::default());
    let aof_path = config.aof_path();
    let replayed = tokio::task::block_in_place(|| replay(&aof_path, &state))?;
    state.locks.rearm_after_replay(clock.now());
    info!(
        file = %aof_path.display(),
        records = replayed.records,
        bytes = replayed.bytes,
        ms = replayed.elapsed.as_millis() as u64,
        "AOF loaded"
    );
    let aof = Aof::open(
        AofOptions {
            path: aof_path,
            fsync: config.appendfsync,
            rewrite_min_size: config.auto_aof_rewrite_min_size,
            rewrite_percentage: config.auto_aof_rewrite_percentage,
        },
        state.clone(),
    )?;

    if let Some(by) = bump_tokens {
        let names = state.locks.bump_all(by, &*aof);
        warn!(
            by,
            names,
            floor = state.locks.token_floor(),
            "raised every token counter (--bump-tokens)"
        );
    }

    let addr = SocketAddr::new(config.bind, config.port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| ServerError::Bind { addr, source })?;

    let limits = Limits {
        max_bulk_len: config.proto_max_bulk_len,
        max_args: config.max_args,
        max_inline_len: config.max_inline_len,
    };
    let arg_limits = crate::commands::ArgLimits {
        max_name_bytes: config.max_name_bytes,
        max_lease_ms: config.max_lease_ms,
        max_wait_ms: config.max_wait_ms,
    };
    let shared = Arc::new(Shared {
        config,
        state,
        aof,
        clock,
        clients: ClientRegistry::default(),
        stats: ServerStats::default(),
        shutdown: CancellationToken::new(),
        started: Instant::now(),
        local_addr,
        limits,
        arg_limits,
        replayed,
    });

    let wake_expiry = Arc::new(Notify::new());
    let hook_wake = wake_expiry.clone();
    shared
        .state
        .locks
        .set_deadline_hook(Box::new(move |_| hook_wake.notify_one()));
    let expiry = tokio::spawn(expiry::run(shared.clone(), wake_expiry));
    tokio::spawn(reclaim_idle_names(shared.clone()));
    tokio::spawn(watch_signals(shared.shutdown.clone()));

    info!("ready to accept connections on {local_addr}");
    let connections = TaskTracker::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => accept(&shared, &connections, stream, peer),
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shared.shutdown.cancelled() => break,
        }
    }
    drop(listener);
    info!(
        "shutting down: waiting for {} connection(s) to finish",
        shared.clients.connected()
    );
    connections.close();
    let grace = Duration::from_millis(shared.config.shutdown_timeout_ms);
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        warn!("connections still open after {grace:?}; closing them");
    }
    let _ = expiry.await;
    let aof = shared.aof.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || aof.shutdown()).await {
        error!("AOF shutdown failed: {e}");
    }
    info!("AOF flushed and synced; bye");
    Ok(())
}

/// Replays the AOF into `state` with one thread per core: the reading thread decodes records and
/// deals them out by lane (see `State::replay_lane`: a name's records keep their order, and
/// lanes never share a table shard), the lane threads apply them. Replay is random access to a
/// table that can hold millions of names, so it scales with cores.
fn replay(
    path: &std::path::Path,
    state: &State,
) -> Result<flockd_aof::ReplayReport, flockd_aof::AofError> {
    const BATCH: usize = 4096;
    let lanes = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    if lanes == 1 {
        return flockd_aof::load(path, &mut |change| state.apply_change(&change));
    }
    std::thread::scope(|scope| {
        let senders: Vec<_> = (0..lanes)
            .map(|_| {
                let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<flockd_core::Change>>(8);
                scope.spawn(move || {
                    for batch in rx {
                        batch.iter().for_each(|change| state.apply_change(change));
                    }
                });
                tx
            })
            .collect();
        let mut batches: Vec<Vec<flockd_core::Change>> =
            (0..lanes).map(|_| Vec::with_capacity(BATCH)).collect();
        let report = flockd_aof::load(path, &mut |change| {
            let lane = state.replay_lane(&change, lanes);
            batches[lane].push(change);
            if batches[lane].len() >= BATCH {
                let full = std::mem::replace(&mut batches[lane], Vec::with_capacity(BATCH));
                // A lane thread only stops when its sender is dropped, below.
                let _ = senders[lane].send(full);
            }
        });
        for (sender, batch) in senders.iter().zip(batches) {
            let _ = sender.send(batch);
        }
        drop(senders);
        report
    })
}

fn accept(shared: &Arc<Shared>, connections: &TaskTracker, stream: TcpStream, peer: SocketAddr) {
    stats::bump(&shared.stats.connections_received, 1);
    let _ = stream.set_nodelay(true);
    let laddr = stream.local_addr().unwrap_or(shared.local_addr);
    match shared
        .clients
        .register(peer, laddr, shared.config.maxclients)
    {
        Some(handle) => {
            connections.spawn(connection::serve(shared.clone(), stream, handle));
        }
        None => {
            // Reply and close off the accept loop, so a flood of refused clients never stalls it.
            stats::bump(&shared.stats.rejected_connections, 1);
            connections.spawn(async move {
                let mut stream = stream;
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    let _ = stream
                        .write_all(b"-ERR max number of clients reached\r\n")
                        .await;
                    let _ = stream.shutdown().await;
                })
                .await;
            });
        }
    }
}

/// Once a second, forgets least-recently-used idle names beyond `max-idle-names` (a pass over
/// the table, so off the async workers).
async fn reclaim_idle_names(shared: Arc<Shared>) {
    let max = shared.config.max_idle_names;
    if max == 0 {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.shutdown.cancelled() => return,
        }
        let worker = shared.clone();
        let forgotten =
            tokio::task::spawn_blocking(move || worker.state.locks.reclaim_idle(max, &*worker.aof))
                .await
                .unwrap_or(0);
        if forgotten > 0 {
            stats::bump(&shared.stats.names_forgotten, forgotten as u64);
            tracing::debug!(
                forgotten,
                floor = shared.state.locks.token_floor(),
                "forgot idle lock names"
            );
        }
    }
}

async fn watch_signals(shutdown: CancellationToken) {
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
    shutdown.cancel();
}
