//! Start-up: everything that can refuse a start is checked first (TLS and ACL files, the ports),
//! then the data directory is locked, the log opened (`crate::log::open`: the AOF loaded into
//! the state machine, or Raft), the shared state built and the timer tasks started. What is
//! left running is a [`Running`] server, listening but not yet accepting: [`Running::serve`]
//! (`accept.rs`) accepts until it stops.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use flockd_core::StateMachine;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::shared::Shared;
use super::tasks::{reclaim_idle_names, reload_tls_on_sighup, sample_memory, watch_signals};
use super::{console, expiry, metrics, sentinel, stopping};
use crate::config::Config;
use crate::data_dir::DirLock;
use crate::log::Opened;
use crate::services::applied::AppliedState;
use crate::services::clients::ClientRegistry;
use crate::services::stats::ServerStats;

/// Why the server did not start, or stopped.
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

/// A started server: its state loaded, its ports bound, its timer tasks running.
pub struct Running {
    pub(super) shared: Arc<Shared>,
    pub(super) plain: Option<TcpListener>,
    pub(super) tls: Option<TcpListener>,
    pub(super) sentinel: Option<TcpListener>,
    /// Each group's lease expiry task.
    pub(super) expiry: JoinSet<()>,
    /// Why the cluster refused this node, once it did.
    pub(super) refused: Arc<parking_lot::Mutex<Option<String>>>,
    /// Held until the server is gone: no other process opens the same data directory.
    pub(super) _dir_lock: DirLock,
}

impl Running {
    /// The client port's address (the TLS port's, with `tls-only`).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// A handle that stops the server as SHUTDOWN does (a leader hands over first).
    pub fn stopper(&self) -> CancellationToken {
        self.shared.stopping.clone()
    }
}

/// Starts the server: see the module's documentation.
pub async fn start(config: Config, bump_tokens: Option<u64>) -> Result<Running, ServerError> {
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
    let dir_lock = crate::data_dir::lock(&config.dir)?;
    let Opened {
        applied,
        log,
        groups,
    } = crate::log::open::open(&config, bump_tokens, local_addr, cluster_tls, |machine| {
        new_applied(&config, machine)
    })
    .await?;
    let shared = Arc::new(Shared {
        acl: crate::services::acl::AclState::new(users),
        config: crate::services::live_config::LiveConfig::new(config),
        applied,
        log,
        groups,
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
    // Each group's lease clock runs on its own: its leader expires its leases and forgets its
    // idle names.
    let mut expiry = JoinSet::new();
    for group in 0..shared.groups.len() {
        expiry.spawn(expiry::run(shared.clone(), group));
        tokio::spawn(reclaim_idle_names(shared.clone(), group));
    }
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
    Ok(Running {
        shared,
        plain,
        tls: tls_listener,
        sentinel: sentinel_listener,
        expiry,
        refused,
        _dir_lock: dir_lock,
    })
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
