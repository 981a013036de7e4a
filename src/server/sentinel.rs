//! Sentinel's `+switch-master`, published by every node when the leader it knows changes to
//! another member: `<master-name> <old-ip> <old-port> <new-ip> <new-port>`, as Redis Sentinel
//! publishes it at the end of a failover. Clients that subscribe to it on their sentinel (ioredis
//! with `failoverDetector`) move to the new leader without waiting for an error.

use std::sync::Arc;

use super::Shared;

pub const SWITCH_MASTER: &[u8] = b"+switch-master";

pub async fn announce_leader_changes(shared: Arc<Shared>) {
    let Some(cluster) = shared.cluster.clone() else {
        return;
    };
    let address = |id| {
        cluster
            .view()
            .member(id)
            .map(|m| (m.peer.host.clone(), m.peer.port))
    };
    let mut known = cluster.view().leader;
    // The last leader with an address: a change is announced from it, even across a time
    // with no leader (an election), as Sentinel announces from the old master.
    let mut last = known.and_then(|id| address(id).map(|a| (id, a)));
    loop {
        let next = tokio::select! {
            next = cluster.leader_changed(known) => next,
            () = shared.shutdown.cancelled() => return,
        };
        if next == known {
            return; // shutting down
        }
        known = next;
        let Some(id) = next else { continue };
        let Some(new) = address(id) else { continue };
        if let Some((old_id, old)) = &last
            && *old_id != id
        {
            let name = shared.config.load().sentinel_master_name.clone();
            let payload = format!("{name} {} {} {} {}", old.0, old.1, new.0, new.1);
            tracing::info!("leader changed: +switch-master {payload}");
            shared
                .host
                .pubsub
                .publish_message(SWITCH_MASTER, payload.as_bytes());
        }
        last = Some((id, new));
    }
}
