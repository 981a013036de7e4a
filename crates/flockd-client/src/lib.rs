//! A client for flockd's fenced locks, on the `redis` crate (async, tokio).
//!
//! [`Client::lock`] builds a request; [`LockBuilder::acquire`] returns a [`LockGuard`] with the
//! fencing token of the grant. While the guard lives a watchdog renews the lease at a third of
//! its length, and [`LockGuard::lost`] resolves the moment the lock can no longer be trusted:
//! a renewal failed, the lease is about to run out (counted from when each request was *sent*,
//! so a slow network or a paused process counts against it), or the server published that the
//! holding expired or was force-released. [`LockGuard::fence_set`] writes to a flockd fence
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
//! `examples/renewing_lock.rs` is the same as a whole program; the repository's tests run it
//! against a real server.

mod error;
mod guard;
mod watchdog;

use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

pub use error::Error;
pub use guard::{LockGuard, Lost};

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

/// Connections to one flockd.
#[derive(Clone)]
pub struct Client {
    client: redis::Client,
    /// Renewals, releases and acquires that cannot block: one multiplexed connection for all.
    shared: MultiplexedConnection,
}

/// Extra time a blocking request is given beyond what it asked the server to wait.
const REPLY_SLACK: Duration = Duration::from_secs(5);
/// How long a request that does not block may take on the shared connection. Not the redis
/// crate's 500 ms: under `appendfsync always` on a slow disk a renewal can take longer and
/// still be in time. A renewal is bounded by its lease anyway (see `watchdog`).
const SHARED_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

impl Client {
    /// Connects to flockd at `url` (`redis://host:port/`, `rediss://` with TLS if the redis
    /// crate was built with it).
    pub async fn open(url: &str) -> Result<Client, Error> {
        let client = redis::Client::open(url)?;
        let config = AsyncConnectionConfig::new().set_response_timeout(Some(SHARED_REPLY_TIMEOUT));
        let shared = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Client { client, shared })
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

    /// A connection of its own, with a reply timeout of `timeout` (a blocking acquire must not
    /// hold up the shared connection, and a SESSION holding lives as long as its connection).
    async fn dedicated(&self, timeout: Duration) -> Result<MultiplexedConnection, Error> {
        let config = AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
        Ok(self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
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

    fn command(&self) -> Result<redis::Cmd, Error> {
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
        if let Some(wait) = self.wait.filter(|w| !w.is_zero()) {
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
    pub async fn acquire(self) -> Result<Option<LockGuard>, Error> {
        let cmd = self.command()?;
        let blocking = self.wait.is_some_and(|w| !w.is_zero());
        let mut conn = if blocking || self.session {
            let wait = self.wait.unwrap_or_default();
            self.client.dedicated(wait + REPLY_SLACK).await?
        } else {
            self.client.shared.clone()
        };
        // Validity is counted from the moment the request left, not from the reply.
        let sent = tokio::time::Instant::now();
        let reply: redis::Value = cmd.query_async(&mut conn).await?;
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
        // A SESSION holding must keep its connection; any other goes on the shared one.
        let conn = if self.session {
            conn
        } else {
            self.client.shared.clone()
        };
        let events = self.client.client.get_async_pubsub().await;
        Ok(Some(
            LockGuard::start(self.name, token, self.lease, sent, conn, events.ok()).await,
        ))
    }
}
