//! Everything connections share: the server's wiring, built once at start. The commands see it
//! through [`crate::commands::Server`] (`for_commands.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use flockd_proto::Limits;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::log::{Group, Log};
use crate::services::acl::AclState;
use crate::services::applied::AppliedState;
use crate::services::clients::ClientRegistry;
use crate::services::live_config::LiveConfig;
use crate::services::monitor::Monitors;
use crate::services::stats::ServerStats;

/// Everything connections share.
pub struct Shared {
    /// Users and permissions.
    pub acl: AclState,
    /// The running configuration (CONFIG SET changes it).
    pub config: LiveConfig,
    /// The state machine: read by connections, applied to by the log.
    pub applied: Arc<AppliedState>,
    /// Where state changes go: the AOF on a single node, Raft on a cluster node.
    pub log: Arc<dyn Log>,
    /// Each group's state and log, in slot order (one but on a multi-group cluster node):
    /// `applied` and `log` above are the first group's state and the router over them all.
    pub groups: Vec<Group>,
    pub clients: ClientRegistry,
    pub monitors: Monitors,
    pub stats: ServerStats,
    pub shutdown: CancellationToken,
    /// A stop was asked for (a signal, SHUTDOWN): `stopping::stop_when_asked` hands a leader's
    /// office over, then cancels `shutdown`.
    pub stopping: CancellationToken,
    /// Set once a stopping leader has handed its office over: connections between commands are
    /// closed, the port still accepts, until none is left or the drain's time is up.
    pub draining: CancellationToken,
    pub started: Instant,
    pub local_addr: SocketAddr,
    /// Where this node answers as a Sentinel (`sentinel-port`).
    pub sentinel_addr: Option<SocketAddr>,
    /// The TLS port's acceptor (reloaded by SIGHUP and CONFIG SET tls-*) and address.
    pub tls: Option<Arc<flockd_tls::Acceptor>>,
    pub tls_addr: Option<SocketAddr>,
}

/// Redis's input limits for clients that have not authenticated yet.
pub const PREAUTH_LIMITS: Limits = Limits {
    max_bulk_len: 16 * 1024,
    max_args: 10,
    max_inline_len: 16 * 1024,
};
pub const PREAUTH_QUERY_BUFFER: usize = 1024 * 1024;

impl Shared {
    /// The group that serves `name` (a lock name or fence key).
    pub fn group_of(&self, name: &[u8]) -> &Group {
        &self.groups[self.group_index(name)]
    }

    /// The number of the group that serves `name`.
    pub fn group_index(&self, name: &[u8]) -> usize {
        match self.groups.len() {
            1 => 0,
            n => usize::from(flockd_core::group_of_slot(
                flockd_core::slot_of(name),
                n as u16,
            )),
        }
    }
}

/// The request parser's limits for authenticated clients.
pub fn limits(config: &Config) -> Limits {
    Limits {
        max_bulk_len: config.proto_max_bulk_len,
        max_args: config.max_args,
        max_inline_len: config.max_inline_len,
    }
}
