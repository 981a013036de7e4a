//! Server wiring: open the log (`crate::log::open`: the AOF loaded into the state machine, or
//! Raft), listen, accept clients up to `maxclients`, run the timer tasks (lease expiry, idle
//! names), and shut down cleanly (stop accepting, let connections finish the command in flight,
//! close the log).
//!
//! The layers, in the order a request meets them: `connection` (bytes to requests, replies to
//! bytes), `admission` (lookup, auth, arity, whether the log serves and takes writes),
//! `crate::commands` (typed commands: state commands become ops), `crate::log` (where they are
//! proposed), `crate::services::applied` (the state machine applies what the log committed, and
//! routes its events to `waiters`).

mod accounting;
mod admission;
mod connection;
pub mod console;
mod expiry;
mod for_commands;
pub mod metrics;
pub mod reconfigure;
mod routing;
mod sentinel;
mod shared;
mod stopping;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flockd_core::{Op, StateMachine};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::config::Config;
use crate::log::{Opened, commit};
use crate::services::applied::AppliedState;
use crate::services::clients::ClientRegistry;

use crate::services::stats::{self, ServerStats};

pub use shared::{PREAUTH_LIMITS, PREAUTH_QUERY_BUFFER, Shared};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    DataDir(#[from] crate::data_dir::DirLockError),
    #[error(transparent)]
    Log(#[from] crate::log::OpenError),
    #[error("ACL: {0}")]
    Acl(#[from] flockd_acl::AclError),
    #[error("TLS: {0}")]
    Tls(#[from] flockd_tls::TlsError),
    #[error("the cluster refused this node: {0}")]
    Refused(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

pub async fn run(config: Config, bump_tokens: Option<u64>) -> Result<(), ServerError> {
    let shutdown = CancellationToken::new();
    // Whatever can refuse the start is asked first (the TLS and ACL files, the ports), so a
    // refused start has created nothing: no data directory, no file in it.
    let tls = match config.tls_settings() {
        Some(settings) => Some(Arc::new(flockd_tls::Acceptor::new(&settings)?)),
        None => None,
    };
    let cluster_tls = match config.cluster_tls_settings() {
        Some(settings) if config.cluster.is_some() => Some(flockd_tls::cluster_tls(&settings)?),
        _ => None,
    };
    let users = crate::commands::permissions::load_users(crate::commands::TABLE, &config)?;
    // Up before the AOF loads, so /readyz can answer 503 while it does.
    let metrics = Arc::new(metrics::DaemonMetrics::default());
    let console = Arc::new(console::Console::new(config.console));
    if let Some(port) = config.metrics_port {
        let addr = SocketAddr::new(config.metrics_bind, port);
        let local = metrics::start(addr, metrics.clone(), console.clone(), shutdown.clone())
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        info!("metrics on http://{local}/metrics");
        if config.console {
            info!("console on http://{local}/");
        }
    }
    let listen = |port: u16| async move {
        let addr = SocketAddr::new(config.bind, port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| ServerError::Bind { addr, source })?;
        Ok::<_, ServerError>((listener, local))
    };
    // Bound (not yet accepting) before the state loads: a client that connects meanwhile waits
    // in the backlog and is served once the server is ready.
    let plain = match config.tls_only {
        true => None,
        false => Some(listen(config.port).await?),
    };
    let tls_listener = match config.tls_port {
        Some(port) => Some(listen(port).await?),
        None => None,
    };
    let tls_addr = tls_listener.as_ref().map(|(_, addr)| *addr);
    let sentinel_listener = match config.sentinel_port {
        Some(port) => Some(listen(port).await?),
        None => None,
    };
    let sentinel_addr = sentinel_listener.as_ref().map(|(_, addr)| *addr);
    let local_addr = match (&plain, tls_addr) {
        (Some((_, addr)), _) => *addr,
        (None, Some(addr)) => addr,
        (None, None) => unreachable!("tls-only is refused without tls-port"),
    };
    // Before anything in `dir` is read: held until the process ends.
    let _dir_lock = crate::data_dir::lock(&config.dir)?;
    let Opened {
        applied,
        log,
        clock,
    } = crate::log::open::open(&config, bump_tokens, local_addr, cluster_tls, |machine| {
        new_applied(&config, machine)
    })
    .await?;
    let shared = Arc::new(Shared {
        acl: crate::services::acl::AclState::new(users),
        config: crate::services::live_config::LiveConfig::new(config),
        applied,
        log,
        clock,
        clients: ClientRegistry::default(),
        monitors: crate::services::monitor::Monitors::default(),
        stats: ServerStats::new(crate::commands::TABLE.len()),
        shutdown,
        stopping: CancellationToken::new(),
        draining: CancellationToken::new(),
        started: Instant::now(),
        local_addr,
        tls,
        tls_addr,
        sentinel_addr,
    });

    metrics.serving(shared.clone());
    if shared.config.load().metrics_port.is_some() {
        console.serving(shared.clone());
    }
    let refused = Arc::new(parking_lot::Mutex::new(None));
    if let Some(refusals) = shared.log.refusals() {
        tokio::spawn(stop_when_refused(
            refusals,
            shared.shutdown.clone(),
            refused.clone(),
        ));
    }
    tokio::spawn(sentinel::announce_leader_changes(shared.clone()));
    let expiry = tokio::spawn(expiry::run(shared.clone()));
    tokio::spawn(reclaim_idle_names(shared.clone()));
    tokio::spawn(sample_memory(shared.clone()));
    tokio::spawn(stopping::stop_when_asked(shared.clone()));
    tokio::spawn(watch_signals(
        shared.stopping.clone(),
        shared.shutdown.clone(),
    ));
    if shared.tls.is_some() {
        tokio::spawn(reload_tls_on_sighup(shared.clone()));
    }

    // The TLS and sentinel lines first: whoever waits for the plain one then has them all.
    if let Some(addr) = sentinel_addr {
        info!("sentinel port on {addr}");
    }
    if let Some(addr) = tls_addr {
        info!("ready to accept TLS connections on {addr}");
    }
    if plain.is_some() {
        info!("ready to accept connections on {local_addr}");
    }
    let plain = plain.map(|(listener, _)| listener);
    let tls_listener = tls_listener.map(|(listener, _)| listener);
    let sentinel_listener = sentinel_listener.map(|(listener, _)| listener);
    let connections = TaskTracker::new();
    loop {
        let (accepted, over_tls) = tokio::select! {
            accepted = accept_on(plain.as_ref()) => (accepted, false),
            accepted = accept_on(tls_listener.as_ref()) => (accepted, true),
            accepted = accept_on(sentinel_listener.as_ref()) => (accepted, false),
            _ = shared.shutdown.cancelled() => break,
        };
        match accepted {
            Ok((stream, peer)) => accept(&shared, &connections, stream, peer, over_tls),
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(plain);
    drop(tls_listener);
    drop(sentinel_listener);
    info!(
        "shutting down: waiting for {} connection(s) to finish",
        shared.clients.connected()
    );
    connections.close();
    let grace = Duration::from_millis(shared.config.load().shutdown_timeout_ms);
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        warn!("connections still open after {grace:?}; closing them");
    }
    let _ = expiry.await;
    shared.log.close().await;
    match refused.lock().take() {
        Some(why) => Err(ServerError::Refused(why)),
        None => Ok(()),
    }
}

/// A node its peers refuse (back with a wiped dir under its old id) can take no part in the
/// cluster: it stops, and the reason (with the procedure) is the process's error.
async fn stop_when_refused(
    mut refusals: tokio::sync::watch::Receiver<Option<String>>,
    shutdown: CancellationToken,
    slot: Arc<parking_lot::Mutex<Option<String>>>,
) {
    let why = loop {
        if let Some(why) = refusals.borrow_and_update().clone() {
            break why;
        }
        if refusals.changed().await.is_err() {
            return;
        }
    };
    error!("the cluster refuses this node; stopping: {why}");
    *slot.lock() = Some(why);
    shutdown.cancel();
}

fn new_applied(config: &Config, machine: StateMachine) -> Arc<AppliedState> {
    let applied = Arc::new(AppliedState::new(machine, config.hot_locks_capacity));
    applied.pubsub.configure(
        config.notify_flock_events,
        config.client_output_buffer_limit_pubsub,
    );
    applied
}

/// The next connection on `listener`; never, without one.
async fn accept_on(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// What a client without a certificate reads on a port that requires one.
const NO_CERTIFICATE_REPLY: &[u8] = b"-ERR TLS client certificate required (tls-auth-clients yes): connect with a certificate the server's CA signed (redis-cli --tls --cert FILE --key FILE)\r\n";

/// How long a client has to finish the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS handshake of a new connection, or `None` (logged) if it fails. Plain text sent to
/// the TLS port gets a RESP error saying so before the close, so a misconfigured client learns
/// why instead of seeing a reset.
async fn handshake(
    shared: &Shared,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<flockd_tls::TlsStream<TcpStream>> {
    let acceptor = shared.tls.as_ref()?;
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await;
    // 0x16: a TLS handshake record; anything else is not TLS.
    if let Ok(Ok(1)) = peeked
        && first[0] != 0x16
    {
        info!(%peer, "plain text on the TLS port; closed");
        let mut stream = stream;
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            let _ = stream
                .write_all(b"-ERR this port speaks TLS: connect with TLS (redis-cli --tls)\r\n")
                .await;
            let _ = stream.shutdown().await;
        })
        .await;
        return None;
    }
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(flockd_tls::Accepted::Ready(tls))) => Some(tls),
        Ok(Ok(flockd_tls::Accepted::NoCertificate(mut tls))) => {
            // The words a TLS alert cannot carry to redis-cli, which shows an alert as "Server
            // closed the connection": the client reads this as its first reply.
            info!(%peer, "TLS handshake failed: peer sent no certificates");
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                let _ = tls.write_all(NO_CERTIFICATE_REPLY).await;
                let _ = tls.shutdown().await;
            })
            .await;
            None
        }
        Ok(Err(e)) => {
            info!(%peer, "TLS handshake failed: {e}");
            None
        }
        Err(_) => {
            info!(%peer, "TLS handshake timed out after {TLS_HANDSHAKE_TIMEOUT:?}");
            None
        }
    }
}

/// On SIGHUP, reads the TLS files again for new connections (open ones keep theirs).
async fn reload_tls_on_sighup(shared: Arc<Shared>) {
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

fn accept(
    shared: &Arc<Shared>,
    connections: &TaskTracker,
    stream: TcpStream,
    peer: SocketAddr,
    over_tls: bool,
) {
    stats::bump(&shared.stats.connections_received, 1);
    let _ = stream.set_nodelay(true);
    let laddr = stream.local_addr().unwrap_or(shared.local_addr);
    match shared
        .clients
        .register(peer, laddr, shared.config.load().maxclients)
    {
        Some(handle) if over_tls => {
            let shared = shared.clone();
            connections.spawn(async move {
                match handshake(&shared, stream, peer).await {
                    Some(tls) => connection::serve::serve(shared, tls, handle).await,
                    None => shared.clients.unregister(handle.id),
                }
            });
        }
        Some(handle) => {
            connections.spawn(connection::serve::serve(shared.clone(), stream, handle));
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

/// Once a second, picks least-recently-used idle names beyond `max-idle-names` and proposes to
/// forget them (a pass over the table, so off the async workers).
async fn reclaim_idle_names(shared: Arc<Shared>) {
    /// Names forgotten by one op at most.
    const BATCH: usize = 10_000;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // Only the leader forgets names (the followers apply its Forget ops).
    let leading = shared.log.lease_duty();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.shutdown.cancelled() => return,
        }
        // Read each time: CONFIG SET max-idle-names takes effect at the next tick (0: no bound).
        let max = shared.config.load().max_idle_names;
        if max == 0 || !*leading.borrow() {
            continue;
        }
        loop {
            let applied = shared.applied.clone();
            let names = tokio::task::spawn_blocking(move || {
                applied.lock_timers().idle_candidates(max, BATCH)
            })
            .await
            .unwrap_or_default();
            if names.is_empty() {
                break;
            }
            let full = names.len() == BATCH;
            match commit(&*shared.log, vec![Op::Forget { names }]).await {
                Ok(results) => {
                    if let Some(flockd_core::OpResult::Forget(forgotten)) = results.first() {
                        stats::bump(&shared.stats.names_forgotten, *forgotten as u64);
                        tracing::debug!(
                            forgotten,
                            floor = shared.applied.read().token_floor(),
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

async fn watch_signals(stopping: CancellationToken, shutdown: CancellationToken) {
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
