//! The server as the commands see it: [`Services`] answered from the server's wiring.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::shared::Shared;
use crate::commands::Services;
use crate::log::Log;
use crate::services::acl::AclState;
use crate::services::clients::ClientRegistry;
use crate::services::host::StateHost;
use crate::services::live_config::{LiveConfig, ReconfigureError};
use crate::services::stats::{self, ServerStats};

impl Services for Shared {
    fn config(&self) -> &LiveConfig {
        &self.config
    }

    fn reconfigure(&self, changes: &[(String, String)]) -> Result<(), ReconfigureError> {
        super::reconfigure::change(self, changes)
    }

    fn reset_stats(&self) {
        stats::reset(&self.stats);
        self.host.reset_counters();
    }

    fn host(&self) -> &Arc<StateHost> {
        &self.host
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
