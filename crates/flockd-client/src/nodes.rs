//! The servers a client may talk to (one flockd, or the members of a cluster, any of which
//! serves every command) and the shared connection in use. A request that meets a refused,
//! dropped or silent connection, or `-CLUSTERDOWN` (a node that found no leader in time), is
//! sent again to the next node, for as long as its caller's deadline allows: that is how
//! renewals go on across a leader change.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSub};
use redis::{AsyncConnectionConfig, FromRedisValue, RedisError};
use tokio::sync::Mutex;
use tokio::time::{Instant, sleep, timeout};

/// How long a request that does not block may take on the shared connection. Not the redis
/// crate's 500 ms: under `appendfsync always` on a slow disk a renewal can take longer and
/// still be in time. A renewal is bounded by its lease anyway (see `watchdog`).
pub(crate) const SHARED_REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to one node may take before the next is tried (a node that drops
/// packets would otherwise hold a renewal up for the kernel's whole SYN retry time).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The pause before a request goes to the next node, so a cluster whose nodes all refuse at
/// once is not asked in a tight loop.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

pub(crate) struct Nodes {
    clients: Vec<redis::Client>,
    current: Mutex<Current>,
}

/// The node requests go to, and its shared connection once made.
struct Current {
    index: usize,
    conn: Option<MultiplexedConnection>,
}

/// Whether another node (or the same one, reconnected) may answer where this one failed: the
/// connection is gone or silent, or the node could not reach a leader. An error reply of any
/// other kind (`-NOTOWNER`, `-NOPERM`, `-ERR`) is the answer itself.
pub(crate) fn worth_another_node(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || matches!(e.code(), Some("CLUSTERDOWN" | "TRYAGAIN" | "LOADING"))
}

impl Nodes {
    /// Connects to the first of `clients` that answers, in order.
    pub async fn connect(clients: Vec<redis::Client>) -> Result<Nodes, RedisError> {
        let nodes = Nodes {
            clients,
            current: Mutex::new(Current {
                index: 0,
                conn: None,
            }),
        };
        let mut last = None;
        for _ in 0..nodes.clients.len() {
            match nodes.shared().await {
                Ok(_) => return Ok(nodes),
                Err((_, e)) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            RedisError::from((redis::ErrorKind::InvalidClientConfig, "no server given"))
        }))
    }

    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// The shared connection and the node it goes to, connecting first if there is none. A
    /// node that cannot be reached is passed over: the next call tries the next one.
    pub async fn shared(&self) -> Result<(usize, MultiplexedConnection), (usize, RedisError)> {
        let mut current = self.current.lock().await;
        let index = current.index;
        if let Some(conn) = &current.conn {
            return Ok((index, conn.clone()));
        }
        match self.open(index, SHARED_REPLY_TIMEOUT).await {
            Ok(conn) => {
                current.conn = Some(conn.clone());
                Ok((index, conn))
            }
            Err(e) => {
                current.index = (index + 1) % self.clients.len();
                Err((index, e))
            }
        }
    }

    /// The node to try now for a request on a connection of its own.
    pub async fn current_index(&self) -> usize {
        self.current.lock().await.index
    }

    /// Node `index` failed a request: the next request goes to the next node (unless another
    /// caller has moved on already).
    pub async fn failed(&self, index: usize) {
        let mut current = self.current.lock().await;
        if current.index == index {
            current.conn = None;
            current.index = (index + 1) % self.clients.len();
        }
    }

    /// Follows a `-MOVED slot host:port` (a node of a multi-group cluster run with
    /// `cluster-redirect yes`, naming the leader of the name's group): the next request goes to
    /// that node, if it is one of the nodes given. False for any other error, or a node not
    /// given (the error is then the answer).
    pub async fn moved(&self, e: &RedisError) -> bool {
        let Some((addr, _slot)) = e.redirect_node() else {
            return false;
        };
        if e.code() != Some("MOVED") {
            return false;
        }
        let Some(index) = self.clients.iter().position(|c| same_node(c, addr)) else {
            return false;
        };
        let mut current = self.current.lock().await;
        if current.index != index {
            current.index = index;
            current.conn = None;
        }
        true
    }

    /// A connection of its own to node `index`, with a reply timeout of `reply_timeout`.
    pub async fn open(
        &self,
        index: usize,
        reply_timeout: Duration,
    ) -> Result<MultiplexedConnection, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(reply_timeout));
        self.clients[index]
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// A pub/sub connection to node `index` (every node publishes the changes it applied).
    pub async fn pubsub(&self, index: usize) -> Option<PubSub> {
        timeout(CONNECT_TIMEOUT, self.clients[index].get_async_pubsub())
            .await
            .ok()?
            .ok()
    }

    /// Sends `cmd` on the shared connection, to the next node and the next after a failure
    /// that another node may not have, until it is answered or `until` is near. The caller
    /// bounds the whole by its own deadline as well: one attempt may take a reply timeout.
    pub async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        until: Instant,
    ) -> Result<T, RedisError> {
        loop {
            let attempt = async {
                let (index, mut conn) = self.shared().await?;
                cmd.query_async::<T>(&mut conn)
                    .await
                    .map_err(|e| (index, e))
            };
            match attempt.await {
                Ok(reply) => return Ok(reply),
                Err((_, e)) if self.moved(&e).await => {
                    if Instant::now() >= until {
                        return Err(e);
                    }
                }
                Err((index, e)) if worth_another_node(&e) => {
                    self.failed(index).await;
                    if Instant::now() + RETRY_PAUSE >= until {
                        return Err(e);
                    }
                    sleep(RETRY_PAUSE).await;
                }
                Err((_, e)) => return Err(e),
            }
        }
    }
}

/// Whether `client` connects to `addr` (`host:port`, as `-MOVED` names a node).
fn same_node(client: &redis::Client, addr: &str) -> bool {
    use redis::ConnectionAddr;
    let (host, port) = match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) => (host, *port),
        ConnectionAddr::TcpTls { host, port, .. } => (host, *port),
        _ => return false,
    };
    addr.rsplit_once(':')
        .is_some_and(|(h, p)| h == host && p.parse::<u16>().ok() == Some(port))
}

/// The pause between attempts on a blocking request's own connections.
pub(crate) async fn pause() {
    sleep(RETRY_PAUSE).await;
}

/// Where a holding's requests go.
#[derive(Clone)]
pub(crate) enum Route {
    /// A SESSION holding lives and dies with the connection that acquired it.
    Pinned(MultiplexedConnection),
    /// Any other goes to whichever node answers.
    Nodes(Arc<Nodes>),
}

impl Route {
    /// Sends `cmd`; through the nodes it is sent again elsewhere after a connection failure or
    /// `-CLUSTERDOWN`, until `until`.
    pub async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        until: Instant,
    ) -> Result<T, RedisError> {
        match self {
            Route::Pinned(conn) => cmd.query_async(&mut conn.clone()).await,
            Route::Nodes(nodes) => nodes.query(cmd, until).await,
        }
    }
}
