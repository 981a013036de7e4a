//! The one task that expires leases: it sleeps until the earliest deadline in the state
//! machine's index (or until an apply reports an earlier one), then proposes the due leases as
//! one `Op::Expire`. Expiry is an op like any other, so it is durable before anyone is told, and
//! a replay or a replica applies the same expirations at the same log time.

use std::sync::Arc;
use std::time::Duration;

use flockd_core::Op;
use tracing::warn;

use super::shared::Shared;
use crate::log::{Group, commit};

/// Leases expired by one op at most (a burst of thousands is split, not one huge record).
const BATCH: usize = 4096;

/// Expires group `group`'s leases (the only group but on a multi-group cluster node).
pub async fn run(shared: Arc<Shared>, group: usize) {
    // On a cluster node only the group's leader's clock times leases: elsewhere the task waits
    // here.
    let Group {
        applied,
        log,
        clock,
    } = shared.groups[group].clone();
    let mut on_duty = log.lease_duty();
    loop {
        if !*on_duty.borrow_and_update() {
            tokio::select! {
                changed = on_duty.changed() => if changed.is_err() { return },
                _ = shared.shutdown.cancelled() => return,
            }
            continue;
        }
        let now = log.now();
        let (due, next) = {
            let mut timers = applied.lock_timers();
            let due = timers.due_leases(now, BATCH);
            (due, timers.next_deadline())
        };
        if !due.is_empty() {
            // Kept to hand back should the op not apply: the index holds them no more.
            let proposed = due.clone();
            if let Err(e) = commit(&*log, vec![Op::Expire { leases: due }]).await {
                // The log cannot take it now (MISCONF), or a cluster's leader changed: the
                // leases are scheduled again, to be tried once more.
                warn!("cannot expire leases: {e}");
                applied.lock_timers().reschedule_leases(&proposed);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shared.shutdown.cancelled() => return,
                }
            }
            continue;
        }
        tokio::select! {
            _ = async {
                match next {
                    Some(at) => tokio::time::sleep_until(clock.instant(at).into()).await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = applied.expiry_wake.notified() => {}
            _ = on_duty.changed() => {}
            _ = shared.shutdown.cancelled() => return,
        }
    }
}
