//! Sentinel's `+switch-master`, published by every node when the leader it knows changes to
//! another member: `<master-name> <old-ip> <old-port> <new-ip> <new-port>`, as Redis Sentinel
//! publishes it at the end of a failover. Clients that subscribe to it on their sentinel (ioredis
//! with `failoverDetector`) move to the new leader without waiting for an error.

use std::sync::Arc;

use super::shared::Shared;

pub const SWITCH_MASTER: &[u8] = b"+switch-master";

pub async fn announce_leader_changes(shared: Arc<Shared>) {
    let log = &shared.log;
    let address = |id| log.view().member(id).map(|m| (m.host.clone(), m.port));
    let mut known = log.view().leader_id;
    // The last leader seen, even across a time with no leader (an election), as Sentinel
    // announces from the old master. Kept as an id and resolved only when a change is announced:
    // a new cluster names its first leader before its membership (and so that leader's address)
    // is applied, and an address looked up then was missing, which silenced this node's first
    // `+switch-master` for good.
    let mut last = known;
    loop {
        let next = tokio::select! {
            next = log.leader_changed(known) => next,
            () = shared.shutdown.cancelled() => return,
        };
        if next == known {
            return; // shutting down
        }
        known = next;
        let Some(id) = next else { continue };
        if let Some(old_id) = last
            && old_id != id
        {
            match (address(old_id), address(id)) {
                (Some(old), Some(new)) => {
                    let name = shared.config.load().sentinel_master_name.clone();
                    let payload = format!("{name} {} {} {} {}", old.0, old.1, new.0, new.1);
                    tracing::info!("leader changed: +switch-master {payload}");
                    shared
                        .applied
                        .pubsub
                        .publish_message(SWITCH_MASTER, payload.as_bytes());
                }
                _ => tracing::warn!(
                    "leader changed from node {old_id} to node {id}, but a member's address is \
                     unknown here: no +switch-master"
                ),
            }
        }
        last = Some(id);
    }
}
