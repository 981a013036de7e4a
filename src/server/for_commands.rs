//! The server as the commands see it: [`Server`], answered from the wiring in `shared.rs`, with
//! CONFIG SET's effects from `reconfigure.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::shared::Shared;
use crate::commands::Server;
use crate::log::{Group, Log};
use crate::services::acl::AclState;
use crate::services::applied::AppliedState;
use crate::services::clients::ClientRegistry;
use crate::services::live_config::{LiveConfig, ReconfigureError};
use crate::services::stats::{self, ServerStats};

/// The server as the commands see it.
impl Server for Shared {
    fn config(&self) -> &LiveConfig {
        &self.config
    }

    fn reconfigure(&self, changes: &[(String, String)]) -> Result<(), ReconfigureError> {
        super::reconfigure::change(self, changes)
    }

    fn reset_stats(&self) {
        stats::reset(&self.stats);
        for group in &self.groups {
            group.applied.reset_counters();
        }
    }

    fn applied(&self) -> &Arc<AppliedState> {
        &self.applied
    }

    fn groups(&self) -> &[Group] {
        &self.groups
    }

    fn group_of(&self, name: &[u8]) -> &Group {
        Shared::group_of(self, name)
    }

    fn acl(&self) -> &AclState {
        &self.acl
    }

    fn stats(&self) -> &ServerStats {
        &self.stats
    }

    fn clients(&self) -> &ClientRegistry {
        &self.clients
    }

    fn log(&self) -> &dyn Log {
        &*self.log
    }

    fn started(&self) -> Instant {
        self.started
    }

    fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    fn sentinel_addr(&self) -> Option<SocketAddr> {
        self.sentinel_addr
    }

    fn command_table(&self) -> &'static [crate::commands::Meta] {
        crate::commands::TABLE
    }

    fn stop(&self) {
        self.stopping.cancel();
    }
}
