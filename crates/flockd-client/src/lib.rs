//! A client for flockd's fenced locks, on the `redis` crate (async, tokio).
//!
//! [`Client::lock`] builds a request; [`LockBuilder::acquire`] returns a [`LockGuard`] with the
//! fencing token of the grant. While the guard lives a watchdog renews the lease at a third of
//! its length, and [`LockGuard::lost`] resolves the moment the lock can no longer be trusted:
//! a renewal failed, the lease is about to run out (counted from when each request was *sent*,
//! so a slow network or a paused process counts against it), or the server published that the
//! holding expired or was force-released. A grant that comes back after a wait longer than a
//! third of the lease is renewed before `acquire` returns, and counted from that renewal's send
//! (the server may have applied the grant any time during the wait); should that renewal be
//! refused, the lease ran out meanwhile and `acquire` returns `None`, as after a wait in vain. [`LockGuard::fence_set`] writes to a flockd fence
//! register with the token, refused by the server once the holding is gone.
//! [`LockGuard::release`] gives the lock back; a guard dropped without it releases in the
//! background.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), flockd_client::Error> {
//! let client = flockd_client::Client::open("redis://127.0.0.1:6390/").await?;
//! let Some(lock) = client
//!     .lock("order:1042")
//!     .lease(Duration::from_secs(30))
//!     .wait(Duration::from_secs(5))
//!     .acquire()
//!     .await?
//! else {
//!     return Ok(()); // busy for 5 s
//! };
//! tokio::select! {
//!     lost = lock.lost() => eprintln!("stop: {lost}"),
//!     _ = async {
//!         // Each write carries the token; flockd refuses it once the holding is gone.
//!         lock.fence_set("order:1042:state", "paid").await
//!     } => {}
//! }
//! lock.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`Client::open_nodes`] takes the nodes of a cluster: a request that meets a refused,
//! dropped or silent connection or `-CLUSTERDOWN` goes to the next node, so renewals go on
//! across a leader change (with one node, to the same one, reconnected). A renewal is retried
//! this way until the lease is about to run out; only then, or on an error reply other than
//! `-NOTOWNER`, is the lock lost by [`Lost::RenewFailed`].
//!
//! `examples/renewing_lock.rs` is the same as a whole program; the repository's tests run it
//! against a real server.

mod error;
mod guard;
mod lost;
mod nodes;
mod watchdog;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub use error::Error;
pub use guard::LockGuard;
pub use lost::Lost;
use nodes::Route;
use nodes::{Nodes, worth_another_node};

/// How a lock is shared, as `FLOCK.ACQUIRE`'s `SHARED` and `LIMIT n` say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// One holder (the default).
    #[default]
    Exclusive,
    /// Any number of `Shared` holders, no exclusive one: a read lock.
    Shared,
    /// Up to n holders: a semaphore of n permits.
    Limit(u16),
}

/// Connections to one flockd, or to the nodes of a cluster.
#[derive(Clone)]
pub struct Client {
    /// Renewals, releases and acquires that cannot block share one multiplexed connection,
    /// moved to the next node when its node fails.
    nodes: Arc<Nodes>,
}

/// Extra time a blocking request is given beyond what it asked the server to wait.
const REPLY_SLACK: Duration = Duration::from_secs(5);

impl Client {
    /// Connects to flockd at `url` (`redis://[user:pass@]host:port/`, `rediss://` with TLS if
    /// the redis crate was built with it).
    pub async fn open(url: &str) -> Result<Client, Error> {
        Client::open_nodes(&[url]).await
    }

    /// Connects to the first of several nodes of a cluster that answers. A request that meets
    /// a refused or dropped connection, a timeout or `-CLUSTERDOWN` goes to the next node, so
    /// renewals go on across a leader change.
    pub async fn open_nodes(urls: &[impl AsRef<str>]) -> Result<Client, Error> {
        let clients = urls
            .iter()
            .map(|url| redis::Client::open(url.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Client::from_clients(clients).await
    }

    /// As [`Client::open_nodes`], from clients built by the caller (TLS with a client
    /// certificate: `redis::Client::build_with_tls`).
    pub async fn from_clients(clients: Vec<redis::Client>) -> Result<Client, Error> {
        if clients.is_empty() {
            return Err(Error::Options("no server to connect to"));
        }
        Ok(Client {
            nodes: Arc::new(Nodes::connect(clients).await?),
        })
    }

    /// A lock request for `name`: exclusive, a 30 s lease, no wait, until changed.
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder<'_> {
        LockBuilder {
            client: self,
            name: name.into(),
            lease: Duration::from_secs(30),
            wait: None,
            owner: None,
            mode: Mode::Exclusive,
            session: false,
        }
    }
}

/// A lock request; [`LockBuilder::acquire`] sends it.
pub struct LockBuilder<'a> {
    client: &'a Client,
    name: String,
    lease: Duration,
    wait: Option<Duration>,
    owner: Option<String>,
    mode: Mode,
    session: bool,
}

impl LockBuilder<'_> {
    /// The lease (at least 1 ms). The watchdog renews it at a third of this.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Wait up to this long in the lock's FIFO queue (`WAIT ms`) instead of giving up at once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Reentrancy: acquires with the same owner are holds of one holding.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// A read lock.
    pub fn shared(mut self) -> Self {
        self.mode = Mode::Shared;
        self
    }

    /// One of `n` permits (1 is exclusive).
    pub fn limit(mut self, n: u16) -> Self {
        self.mode = Mode::Limit(n);
        self
    }

    /// The holding also ends when the guard's connection closes (the guard keeps a connection
    /// of its own for it).
    pub fn session(mut self) -> Self {
        self.session = true;
        self
    }

    /// The acquire, asking the server to wait `wait` (none: not at all).
    fn command(&self, wait: Option<Duration>) -> Result<redis::Cmd, Error> {
        let lease_ms = self.lease.as_millis();
        if lease_ms == 0 {
            return Err(Error::Options("the lease must be at least 1 ms"));
        }
        let mut cmd = redis::cmd("FLOCK.ACQUIRE");
        cmd.arg(&self.name).arg(lease_ms as u64);
        match self.mode {
            Mode::Exclusive => {}
            Mode::Shared => {
                cmd.arg("SHARED");
            }
            Mode::Limit(0) => return Err(Error::Options("a limit is 1 to 65535")),
            Mode::Limit(n) => {
                cmd.arg("LIMIT").arg(n);
            }
        }
        if let Some(wait) = wait.filter(|w| !w.is_zero()) {
            cmd.arg("WAIT").arg(wait.as_millis().max(1) as u64);
        }
        if let Some(owner) = &self.owner {
            cmd.arg("OWNER").arg(owner);
        }
        if self.session {
            cmd.arg("SESSION");
        }
        Ok(cmd)
    }

    /// Sends the acquire: a guard with the token, or `None` when the lock was not granted (at
    /// once, or within the wait).
    ///
    /// A node that cannot be reached, drops the connection or answers `-CLUSTERDOWN` is passed
    /// over for the next (each node once, or until the wait is over when waiting). An acquire
    /// whose connection dropped may have been granted unseen: that holding is never renewed
    /// and ends with its lease.
    pub async fn acquire(self) -> Result<Option<LockGuard>, Error> {
        self.command(None)?;
        let nodes = &self.client.nodes;
        let blocking = self.wait.is_some_and(|w| !w.is_zero());
        let wait_until = Instant::now() + self.wait.unwrap_or_default();
        let mut attempts = 0;
        let (index, conn, sent, reply) = loop {
            attempts += 1;
            // A retry asks for what is left of the wait.
            let wait = blocking.then(|| {
                wait_until
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1))
            });
            let cmd = self.command(wait)?;
            let connected = if blocking || self.session {
                let index = nodes.current_index().await;
                let timeout = wait.unwrap_or_default() + REPLY_SLACK;
                nodes
                    .open(index, timeout)
                    .await
                    .map(|conn| (index, conn))
                    .map_err(|e| (index, e))
            } else {
                nodes.shared().await
            };
            // Validity is counted from the moment the request left, not from the reply.
            let sent = Instant::now();
            let result = match connected {
                Ok((index, mut conn)) => cmd
                    .query_async::<redis::Value>(&mut conn)
                    .await
                    .map(|reply| (index, conn, reply))
                    .map_err(|e| (index, e)),
                Err(failed) => Err(failed),
            };
            match result {
                Ok((index, conn, reply)) => break (index, conn, sent, reply),
                // The name's group is led elsewhere (cluster-redirect yes): go there, once per
                // node at most.
                Err((_, e)) if attempts <= 2 * nodes.len() && nodes.moved(&e).await => {}
                Err((index, e)) if worth_another_node(&e) => {
                    nodes.failed(index).await;
                    let more = if blocking {
                        Instant::now() < wait_until
                    } else {
                        attempts < nodes.len()
                    };
                    if !more {
                        return Err(e.into());
                    }
                    nodes::pause().await;
                }
                Err((_, e)) => return Err(e.into()),
            }
        };
        let token = match reply {
            redis::Value::Int(token) if token > 0 => token as u64,
            redis::Value::Nil => return Ok(None),
            other => {
                return Err(Error::UnexpectedReply {
                    command: "FLOCK.ACQUIRE",
                    reply: format!("{other:?}"),
                });
            }
        };
        // A SESSION holding must keep its connection; any other goes through the nodes.
        let route = if self.session {
            Route::Pinned(conn)
        } else {
            Route::Nodes(self.client.nodes.clone())
        };
        // A grant after a wait was applied at some moment between the send and the reply: the
        // lease counted from the send may be nearly over although the server has just started
        // it. Renewed at once, it is counted from that renewal's send instead.
        let sent = if blocking && sent.elapsed() >= self.lease / 3 {
            match renew_late_grant(&route, &self.name, token, self.lease).await? {
                Some(renewed) => renewed,
                // The lease ran out between the grant and its reply: nothing is held.
                None => return Ok(None),
            }
        } else {
            sent
        };
        let events = nodes.pubsub(index).await;
        Ok(Some(
            LockGuard::start(
                self.name,
                token,
                self.lease,
                sent,
                route,
                nodes.clone(),
                events,
            )
            .await,
        ))
    }
}

/// Renews a grant that came back late; when the renewal was sent, or `None` if the holding is
/// gone (`-NOTOWNER`). The first send counts even if the request went again to another node:
/// the lease runs from an apply after it, so counting from it never overstates the lease.
async fn renew_late_grant(
    route: &Route,
    name: &str,
    token: u64,
    lease: Duration,
) -> Result<Option<Instant>, Error> {
    let mut cmd = redis::cmd("FLOCK.RENEW");
    cmd.arg(name).arg(token).arg(lease.as_millis() as u64);
    let sent = Instant::now();
    match route.query::<i64>(&cmd, sent + lease).await {
        Ok(1) => Ok(Some(sent)),
        Ok(other) => Err(Error::UnexpectedReply {
            command: "FLOCK.RENEW",
            reply: other.to_string(),
        }),
        Err(e) if e.code() == Some("NOTOWNER") => Ok(None),
        Err(e) => Err(e.into()),
    }
}
