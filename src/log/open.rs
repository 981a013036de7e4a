//! Which log a node runs: Raft with `cluster-peers`, else the AOF.

use std::sync::Arc;

use super::{OpenError, Opened, aof, raft};
use crate::config::Config;
use crate::services::applied::AppliedState;

/// Opens the log the configuration asks for: Raft with `cluster-peers`, else the AOF.
pub async fn open(
    config: &Config,
    bump_tokens: Option<u64>,
    addr: std::net::SocketAddr,
    cluster_tls: Option<flockd_tls::ClusterTls>,
    new_applied: impl FnOnce(flockd_core::StateMachine) -> Arc<AppliedState>,
) -> Result<Opened, OpenError> {
    match &config.cluster {
        Some(cluster) => raft::open(config, cluster, cluster_tls, new_applied).await,
        None => aof::open(config, bump_tokens, addr, new_applied).await,
    }
}
