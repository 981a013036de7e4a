//! What a command may use of the running server, and nothing more: the applied state and the
//! point a read must wait for, the users, the configuration and its changes, the counters, the
//! connected clients, the figures of the log under the state (the AOF, or the Raft node) and
//! the addresses it serves on. The server implements it (`crate::server::services`); a command
//! never sees how the server is wired together.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use flockd_aof::{Aof, ReplayReport};
use flockd_raft::Cluster;

use crate::services::acl::AclState;
use crate::services::clients::ClientRegistry;
use crate::services::host::StateHost;
use crate::services::live_config::{LiveConfig, ReconfigureError};
use crate::services::propose::ReadPoint;
use crate::services::stats::ServerStats;

pub trait Services: Send + Sync {
    /// The running configuration (`load()` it: one atomic read).
    fn config(&self) -> &LiveConfig;
    /// CONFIG SET: every change checked first, then all made; blocks while a change of the
    /// fsync policy syncs what was written before.
    fn reconfigure(&self, changes: &[(String, String)]) -> Result<(), ReconfigureError>;
    /// CONFIG RESETSTAT: the server's counters and the lock table's event counters.
    fn reset_stats(&self);
    /// The state machine as applied here, with its pub/sub, FLOCK.HOT and waits.
    fn host(&self) -> &Arc<StateHost>;
    /// Where a read must wait before it runs on a cluster node (`None`: at once).
    fn read_point(&self) -> Option<ReadPoint>;
    fn acl(&self) -> &AclState;
    fn stats(&self) -> &ServerStats;
    fn clients(&self) -> &ClientRegistry;
    /// The AOF under a single node's state (`None` on a cluster node).
    fn aof(&self) -> Option<&Arc<Aof>>;
    /// The Raft node under a cluster node's state (`None` on a single node).
    fn cluster(&self) -> Option<&Arc<Cluster>>;
    /// What loading the AOF at start found.
    fn replayed(&self) -> &ReplayReport;
    fn started(&self) -> Instant;
    /// The client port's address (the TLS port's, when only TLS listens).
    fn local_addr(&self) -> SocketAddr;
    fn tls_addr(&self) -> Option<SocketAddr>;
    /// Where this node answers as a Sentinel (`sentinel-port`).
    fn sentinel_addr(&self) -> Option<SocketAddr>;
    /// SHUTDOWN: asks the server to stop (a leader hands its office over first).
    fn stop(&self);
}
