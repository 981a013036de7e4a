//! What a command may use of the running server, and nothing more: the applied state and the
//! point a read must wait for, the users, the configuration and its changes, the counters, the
//! connected clients, the log under the state (its stats and controls, whichever log it is)
//! and the addresses it serves on. The server implements it (`crate::server::shared`); a command
//! never sees how the server is wired together.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::meta::Meta;
use crate::log::{Group, Log};
use crate::services::acl::AclState;
use crate::services::applied::AppliedState;
use crate::services::clients::ClientRegistry;
use crate::services::live_config::{LiveConfig, ReconfigureError};
use crate::services::stats::ServerStats;

pub trait Server: Send + Sync {
    /// The running configuration (`load()` it: one atomic read).
    fn config(&self) -> &LiveConfig;
    /// CONFIG SET: every change checked first, then all made; blocks while a change of the
    /// fsync policy syncs what was written before.
    fn reconfigure(&self, changes: &[(String, String)]) -> Result<(), ReconfigureError>;
    /// CONFIG RESETSTAT: the server's counters and the lock table's event counters.
    fn reset_stats(&self);
    /// The state machine as applied here, with its pub/sub, FLOCK.HOT and waits: the first
    /// group's, on a multi-group cluster node (pub/sub is the node's, whichever group).
    fn applied(&self) -> &Arc<AppliedState>;
    /// Each group's state and log, in slot order: one but on a multi-group cluster node.
    fn groups(&self) -> &[Group];
    /// The group that serves `name` (a lock name or fence key).
    fn group_of(&self, name: &[u8]) -> &Group;
    fn acl(&self) -> &AclState;
    fn stats(&self) -> &ServerStats;
    fn clients(&self) -> &ClientRegistry;
    /// The log under the state: the AOF on a single node, Raft on a cluster node.
    fn log(&self) -> &dyn Log;
    fn started(&self) -> Instant;
    /// The client port's address (the TLS port's, when only TLS listens).
    fn local_addr(&self) -> SocketAddr;
    fn tls_addr(&self) -> Option<SocketAddr>;
    /// Where this node answers as a Sentinel (`sentinel-port`).
    fn sentinel_addr(&self) -> Option<SocketAddr>;
    /// Every command's metadata, in table order (COMMAND, INFO commandstats, LATENCY, ACL):
    /// the table lists these very commands, so they reach it through the server.
    fn command_table(&self) -> &'static [Meta];
    /// SHUTDOWN: asks the server to stop (a leader hands its office over first).
    fn stop(&self);
}
