//! The one task that expires leases proactively: it sleeps until the earliest deadline, or until
//! the core reports an earlier one, then expires what is due and hands each lock to its first
//! waiter. No polling: with no leases it sleeps until woken.

use std::sync::Arc;

use tokio::sync::Notify;

use super::Shared;

pub async fn run(shared: Arc<Shared>, wake: Arc<Notify>) {
    loop {
        let now = shared.clock.now();
        shared.state.locks.expire_due(now, &*shared.aof);
        let next = shared.state.locks.next_deadline();
        tokio::select! {
            _ = async {
                match next {
                    Some(at) => tokio::time::sleep_until(shared.clock.instant(at).into()).await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = wake.notified() => {}
            _ = shared.shutdown.cancelled() => return,
        }
    }
}
