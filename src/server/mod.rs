//! Server wiring: load the AOF into the state machine, open the log, listen, accept clients up
//! to `maxclients`, run the timer tasks (lease expiry, idle names), and shut down cleanly (stop
//! accepting, let connections finish the command in flight, flush and fsync the AOF).
//!
//! The layers, in the order a request meets them: `connection` (bytes to requests, replies to
//! bytes), `admission` (lookup, auth, arity, MISCONF), `crate::commands` (typed commands: state
//! commands become ops), `propose` (the log: the AOF here), `host` (the state machine applies
//! what the log committed, and routes its events to `waiters`).

mod accounting;
mod admission;
mod connection;
pub mod console;
mod expiry;
pub mod metrics;
pub mod reconfigure;
mod replies;
mod sentinel;
mod services;
mod session;
mod shared;
mod stopping;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flockd_aof::{Aof, AofOptions};
use flockd_core::{Op, StateMachine};
use flockd_proto::Limits;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::config::Config;
use crate::services::clients::ClientRegistry;
use crate::services::clock::Clock;
use crate::services::host::StateHost;
use crate::services::propose::{LocalLog, Propose, commit};

use crate::services::stats::{self, ServerStats};

pub use shared::Shared;

/// Redis's input limits for clients that have not authenticated yet.
pub const PREAUTH_LIMITS: Limits = Limits {
    max_bulk_len: 16 * 1024,
    max_args: 10,
    max_inline_len: 16 * 1024,
};
pub const PREAUTH_QUERY_BUFFER: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    DataDir(#[from] crate::data_dir::DirLockError),
    #[error(transparent)]
    Aof(#[from] flockd_aof::AofError),
    #[error("cannot apply {what} at start: {source}")]
    Start {
        what: &'static str,
        source: crate::services::propose::ProposeError,
    },
    #[error("ACL: {0}")]
    Acl(#[from] flockd_acl::AclError),
    #[error("TLS: {0}")]
    Tls(#[from] flockd_tls::TlsError),
    #[error("cluster: {0}")]
    Cluster(flockd_raft::StartError),
    #[error(
        "{TEST_SYNC_DELAY_VAR} must name a file holding milliseconds from 0 to {TEST_SYNC_DELAY_MAX_MS}: {0}"
    )]
    TestSyncDelay(String),
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
    let users = crate::commands::permissions::load_users(&config)?;
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
    let Started {
        host,
        proposer,
        aof,
        clock,
        cluster,
        replayed,
    } = match &config.cluster {
        Some(cluster) => start_cluster(&config, cluster, cluster_tls).await?,
        None => start_local(&config, bump_tokens).await?,
    };
    let shared = Arc::new(Shared {
        acl: crate::services::acl::AclState::new(users),
        config: crate::services::live_config::LiveConfig::new(config),
        host,
        proposer,
        aof,
        cluster,
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
        replayed,
    });

    metrics.serving(shared.clone());
    if shared.config.load().metrics_port.is_some() {
        console.serving(shared.clone());
    }
    let refused = Arc::new(parking_lot::Mutex::new(None));
    if let Some(cluster) = &shared.cluster {
        tokio::spawn(stop_when_refused(
            cluster.refusals(),
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
    if let Some(cluster) = &shared.cluster {
        cluster.shutdown().await;
        info!("Raft stopped; bye");
    }
    if let Some(aof) = shared.aof.clone() {
        if let Err(e) = tokio::task::spawn_blocking(move || aof.shutdown()).await {
            error!("AOF shutdown failed: {e}");
        }
        info!("AOF flushed and synced; bye");
    }
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

/// A single node's state to seed a new cluster with: its AOF, loaded, when the node has no
/// Raft state yet. Its live leases are re-armed and its waits and SESSION holdings end (their
/// connections are gone), as a single node's restart does.
fn seed_from_aof(config: &Config) -> Result<Option<StateMachine>, ServerError> {
    let aof_path = config.aof_path();
    if config.dir.join("raft").exists() || !aof_path.exists() {
        return Ok(None);
    }
    let mut machine = StateMachine::new();
    let replayed = tokio::task::block_in_place(|| flockd_aof::load(&aof_path, &mut machine))
        .map_err(flockd_aof::AofError::from)?;
    machine.reset_stats();
    let at = flockd_core::Millis(machine.time().0 + 1);
    let position = machine.position() + 1;
    machine.apply(position, at, &Op::Rearm { extra_ms: 0 });
    machine.apply(position, at, &Op::EndAllSessions);
    info!(
        file = %aof_path.display(),
        records = replayed.records,
        floor = machine.token_floor(),
        "seeding the cluster from the single node's AOF"
    );
    Ok(Some(machine))
}

/// What a start leaves running: the state, the log that changes it, and the clock that stamps.
struct Started {
    host: Arc<StateHost>,
    proposer: Arc<dyn Propose>,
    aof: Option<Arc<Aof>>,
    clock: Arc<Clock>,
    cluster: Option<Arc<flockd_raft::Cluster>>,
    replayed: flockd_aof::ReplayReport,
}

fn new_host(config: &Config, machine: StateMachine) -> Arc<StateHost> {
    let host = Arc::new(StateHost::new(machine, config.hot_locks_capacity));
    host.pubsub.configure(
        config.notify_flock_events,
        config.client_output_buffer_limit_pubsub,
    );
    host
}

/// The single node: the AOF loaded into the state machine, opened for appending, live leases
/// re-armed.
async fn start_local(config: &Config, bump_tokens: Option<u64>) -> Result<Started, ServerError> {
    let aof_path = config.aof_path();
    let mut machine = StateMachine::new();
    let replayed = tokio::task::block_in_place(|| flockd_aof::load(&aof_path, &mut machine))
        .map_err(flockd_aof::AofError::from)?;
    // INFO counts what this run does, not the replayed history.
    machine.reset_stats();
    info!(
        file = %aof_path.display(),
        records = replayed.records,
        bytes = replayed.bytes,
        ms = replayed.elapsed.as_millis() as u64,
        "AOF loaded"
    );
    let (position, last_at) = (machine.position(), machine.time());
    let rearm = machine.has_holdings_or_waiters();
    let end_sessions = machine.has_session_holdings();
    let clock = Arc::new(Clock::continuing_from(last_at));
    let host = new_host(config, machine);
    let aof = tokio::task::block_in_place(|| {
        Aof::open(
            AofOptions {
                path: aof_path,
                fsync: config.appendfsync,
                rewrite_min_size: config.auto_aof_rewrite_min_size,
                rewrite_percentage: config.auto_aof_rewrite_percentage,
            },
            host.clone(),
            position,
            last_at,
        )
    })?;
    let proposer: Arc<dyn Propose> = Arc::new(LocalLog {
        aof: aof.clone(),
        clock: clock.clone(),
        leading: tokio::sync::watch::channel(true).0,
    });
    if rearm {
        // Leases that were live at the stop get their full length from now (a restart never
        // shortens one); waits died with their connections, and so did every SESSION holding
        // (after the re-arm, so no waiter of the last run is handed what they free). Applied
        // now, logged in front of the next entry written (see `Aof::prepend_applied`).
        let mut ops = vec![Op::Rearm { extra_ms: 0 }];
        if end_sessions {
            ops.push(Op::EndAllSessions);
        }
        let entry = flockd_log::Entry {
            position: position + 1,
            at: clock.now(),
            ops,
        };
        let mut results = Vec::new();
        flockd_log::Apply::apply(&*host, std::slice::from_ref(&entry), true, &mut results);
        aof.prepend_applied(entry);
        info!("re-armed live leases, ended the last run's sessions: {results:?}");
    }
    if let Some(by) = bump_tokens {
        let results = commit(&*proposer, vec![Op::BumpAll { by }])
            .await
            .map_err(|source| ServerError::Start {
                what: "--bump-tokens",
                source,
            })?;
        warn!(
            by,
            floor = host.read().token_floor(),
            "raised every token counter (--bump-tokens): {results:?}"
        );
    }
    Ok(Started {
        host,
        proposer,
        aof: Some(aof),
        clock,
        cluster: None,
        replayed,
    })
}

/// The fault harness (tests/faults) plays a slow disk with this: the name of a file that holds
/// the milliseconds slept before each synced write of the Raft log (no file: 0), read again
/// every 100 ms so a run can slow a node down and speed it up again. An environment variable,
/// not a config key, because nothing but a test should ever set it.
const TEST_SYNC_DELAY_VAR: &str = "FLOCKD_TEST_SYNC_DELAY_FILE";
const TEST_SYNC_DELAY_MAX_MS: u64 = 1000;

fn test_sync_delay() -> Result<Arc<std::sync::atomic::AtomicU64>, ServerError> {
    let delay = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let Some(path) = std::env::var_os(TEST_SYNC_DELAY_VAR) else {
        return Ok(delay);
    };
    let path = std::path::PathBuf::from(path);
    let read = move || read_test_sync_delay(&path);
    delay.store(read()?, std::sync::atomic::Ordering::Relaxed);
    tracing::warn!(
        "{TEST_SYNC_DELAY_VAR} is set: Raft log syncs wait as long as that file says (a test setting)"
    );
    let shared = delay.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            match read() {
                Ok(ms) => shared.store(ms, std::sync::atomic::Ordering::Relaxed),
                Err(e) => tracing::warn!("{e}"),
            }
        }
    });
    Ok(delay)
}

/// The milliseconds in the test sync-delay file: 0 without the file, an error for anything but
/// a number up to [`TEST_SYNC_DELAY_MAX_MS`].
fn read_test_sync_delay(path: &std::path::Path) -> Result<u64, ServerError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            return Err(ServerError::TestSyncDelay(format!(
                "{}: {e}",
                path.display()
            )));
        }
    };
    match text.trim().parse::<u64>() {
        Ok(ms) if ms <= TEST_SYNC_DELAY_MAX_MS => Ok(ms),
        _ => Err(ServerError::TestSyncDelay(format!(
            "{}: {text:?}",
            path.display()
        ))),
    }
}

/// A cluster node: the state from the last snapshot in `dir/raft`, the Raft log after it, the
/// peers on the cluster port. The leader's duties (re-arming leases, expiring them) start when
/// this node takes office.
async fn start_cluster(
    config: &Config,
    cluster: &crate::config::ClusterConfig,
    tls: Option<flockd_tls::ClusterTls>,
) -> Result<Started, ServerError> {
    let clock = Arc::new(Clock::continuing_from(flockd_core::Millis(0)));
    let host = new_host(config, StateMachine::new());
    let seed = seed_from_aof(config)?;
    let cport = cluster
        .peers
        .iter()
        .find(|p| p.id == cluster.node_id)
        .map_or(config.port.saturating_add(10000), |p| p.cport);
    let settings = flockd_raft::ClusterSettings {
        node_id: cluster.node_id,
        peers: cluster.peers.clone(),
        dir: config.dir.join("raft"),
        bind: config.bind,
        cport,
        heartbeat_ms: cluster.heartbeat_ms,
        election_timeout_ms: cluster.election_timeout_ms,
        wait_leader_ms: cluster.wait_leader_ms,
        snapshot_every: 50_000,
        log_kept_after_snapshot: 1000,
        sync_delay_ms: test_sync_delay()?,
    };
    let node = match tls {
        Some(config) => {
            let transport = flockd_raft::transport::Tls { config };
            flockd_raft::Cluster::start_on(
                settings,
                host.clone(),
                clock.clone(),
                seed,
                Arc::new(transport),
            )
            .await
        }
        None => flockd_raft::Cluster::start(settings, host.clone(), clock.clone(), seed).await,
    }
    .map_err(ServerError::Cluster)?;
    info!(
        node = cluster.node_id,
        peers = %cluster.peers_text(),
        "cluster node started; the cluster port listens on {}:{cport}",
        config.bind
    );
    let node = Arc::new(node);
    Ok(Started {
        host,
        proposer: Arc::new(crate::services::propose::ClusterLog {
            cluster: node.clone(),
        }),
        aof: None,
        clock,
        cluster: Some(node),
        replayed: flockd_aof::ReplayReport {
            records: 0,
            bytes: 0,
            truncated_at: None,
            elapsed: Duration::ZERO,
            version: None,
        },
    })
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
                    Some(tls) => connection::serve(shared, tls, handle).await,
                    None => shared.clients.unregister(handle.id),
                }
            });
        }
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

/// Once a second, picks least-recently-used idle names beyond `max-idle-names` and proposes to
/// forget them (a pass over the table, so off the async workers).
async fn reclaim_idle_names(shared: Arc<Shared>) {
    /// Names forgotten by one op at most.
    const BATCH: usize = 10_000;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // Only the leader forgets names (the followers apply its Forget ops).
    let leading = shared.proposer.leadership();
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
            let host = shared.host.clone();
            let names =
                tokio::task::spawn_blocking(move || host.timers().idle_candidates(max, BATCH))
                    .await
                    .unwrap_or_default();
            if names.is_empty() {
                break;
            }
            let full = names.len() == BATCH;
            match commit(&*shared.proposer, vec![Op::Forget { names }]).await {
                Ok(results) => {
                    if let Some(flockd_core::OpResult::Forget(forgotten)) = results.first() {
                        stats::bump(&shared.stats.names_forgotten, *forgotten as u64);
                        tracing::debug!(
                            forgotten,
                            floor = shared.host.read().token_floor(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_sync_delay_file_holds_milliseconds_or_is_refused() {
        let dir = std::env::temp_dir().join(format!("flockd-sync-delay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("delay");
        assert_eq!(read_test_sync_delay(&file).unwrap(), 0, "no file: no delay");
        std::fs::write(&file, "40\n").unwrap();
        assert_eq!(read_test_sync_delay(&file).unwrap(), 40);
        for bad in ["", "fast", "-1", "1001", "4 0"] {
            std::fs::write(&file, bad).unwrap();
            let err = read_test_sync_delay(&file).unwrap_err().to_string();
            assert!(
                err.contains(TEST_SYNC_DELAY_VAR) && err.contains("0 to 1000"),
                "{bad:?}: {err}"
            );
        }
        let err = read_test_sync_delay(&dir).unwrap_err().to_string();
        assert!(
            err.contains(&dir.display().to_string()),
            "a directory: {err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
