//! A multi-group cluster node's log (`cluster-groups` above 1): one Raft log per group, each
//! serving a contiguous range of the 16384 slots, behind the one [`Log`] the server holds. A
//! proposal goes to the group of its names; the node's own view (ROLE, INFO, SENTINEL) is the
//! first group's; CLUSTER SLOTS and SHARDS show a shard per group; a membership change, a
//! hand-over at a stop and a close go to every group.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flockd_core::{Millis, Op, StateMachine};
use flockd_metrics::MetricsSnapshot;
use tokio::sync::watch;

use super::{
    BoxFuture, Committing, Fields, Group, Log, LogView, Membership, ProposeError, ReadWait, Route,
    Shard,
};
use crate::config::Config;

pub struct GroupedLog {
    logs: Vec<Arc<dyn Log>>,
}

impl GroupedLog {
    pub fn new(groups: &[Group]) -> GroupedLog {
        GroupedLog {
            logs: groups.iter().map(|g| g.log.clone()).collect(),
        }
    }

    fn count(&self) -> u16 {
        self.logs.len() as u16
    }

    fn first(&self) -> &dyn Log {
        &*self.logs[0]
    }
}

/// The group every name of `ops` belongs to: `Ok(None)` when they name none (an op about the
/// whole node), `Err` when they name more than one group's.
pub fn group_of_ops(ops: &[Op], groups: u16) -> Result<Option<u16>, ProposeError> {
    let mut found = None;
    let mut mixed = false;
    for op in ops {
        op.each_key(|key| {
            let group = flockd_core::group_of_slot(flockd_core::slot_of(key), groups);
            match found {
                None => found = Some(group),
                Some(g) if g != group => mixed = true,
                Some(_) => {}
            }
        });
    }
    match mixed {
        true => Err(ProposeError::CrossSlot),
        false => Ok(found),
    }
}

/// INFO's field for group `number` (`raft_group_1`, ...): made once for every group there can
/// be, since INFO's field names live as long as the process.
fn group_field(number: u16) -> &'static str {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (1..=flockd_raft::MAX_GROUPS)
            .map(|n| &*Box::leak(format!("raft_group_{n}").into_boxed_str()))
            .collect()
    });
    names
        .get(usize::from(number).saturating_sub(1))
        .copied()
        .unwrap_or("raft_group")
}

/// Where a multi-group node's cursor says which group it walks: the bits above a place's
/// (and below the fence keys' mark, [`flockd_core::keyspace::FENCE_SPACE`]).
const GROUP_SHIFT: u32 = flockd_core::PLACE_BITS;
const GROUP_MASK: u64 = 0x3f << GROUP_SHIFT;

/// A SCAN-like walk (SCAN, FLOCK.SCAN, the console's search) over every group's state, one
/// group after another: `walk` walks one machine from a cursor of its own, given the time of
/// that group's log now (each group has its own log time). With one group the cursor is the
/// machine's.
pub fn walk_groups(
    groups: &[Group],
    cursor: u64,
    walk: impl FnOnce(&StateMachine, u64, Millis) -> (u64, Vec<Bytes>),
) -> (u64, Vec<Bytes>) {
    if groups.len() == 1 {
        return walk(&groups[0].applied.read(), cursor, groups[0].log.now());
    }
    let group = ((cursor & GROUP_MASK) >> GROUP_SHIFT) as usize;
    // A cursor no walk handed out ends the walk, as Redis's own would.
    let Some(state) = groups.get(group) else {
        return (0, Vec::new());
    };
    let (next, keys) = walk(&state.applied.read(), cursor & !GROUP_MASK, state.log.now());
    let next = match next {
        0 if group + 1 < groups.len() => ((group + 1) as u64) << GROUP_SHIFT,
        0 => 0,
        inner => inner | ((group as u64) << GROUP_SHIFT),
    };
    (next, keys)
}

/// A proposal answered at once with `error`.
fn refused(error: ProposeError) -> Committing {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _ = tx.send(Err(error.clone()));
    Committing::new(rx, error)
}

impl Log for GroupedLog {
    fn propose(&self, ops: Vec<Op>) -> Committing {
        match group_of_ops(&ops, self.count()) {
            Ok(group) => self.logs[usize::from(group.unwrap_or(0))].propose(ops),
            Err(e) => refused(e),
        }
    }

    fn write_now(&self) {}

    fn check_serving(&self) -> Result<(), ProposeError> {
        self.first().check_serving()
    }

    fn check_writable(&self) -> Result<(), ProposeError> {
        self.first().check_writable()
    }

    fn now(&self) -> Millis {
        // There is no node-wide log time: each group has its own. What reads a name's time asks
        // that name's group (reads, scans); this is the first group's.
        self.first().now()
    }

    fn lease_duty(&self) -> watch::Receiver<bool> {
        // Each group's lease clock runs on its own (the server starts a timer task per group);
        // this one is the first group's.
        self.first().lease_duty()
    }

    fn read_point(&self) -> Option<ReadWait> {
        // Reads ask their own group (crate::commands); this is the first group's.
        self.first().read_point()
    }

    fn route(&self, slot: u16) -> Route {
        let group = flockd_core::group_of_slot(slot, self.count());
        self.logs[usize::from(group)].route(slot)
    }

    fn view(&self) -> LogView {
        self.first().view()
    }

    fn shards(&self) -> Option<Vec<Shard>> {
        let groups = self.count();
        Some(
            self.logs
                .iter()
                .enumerate()
                .map(|(group, log)| Shard {
                    slots: flockd_core::slots_of_group(group as u16, groups),
                    view: log.view(),
                })
                .collect(),
        )
    }

    fn persistence_info(&self, field: Fields<'_>) {
        self.first().persistence_info(field)
    }

    fn replication_info(&self, field: Fields<'_>) {
        // The node's fields are the first group's, but for the forwarded commands: every
        // group's, summed.
        const FORWARDED: &str = "raft_forwarded_commands";
        let forwarded: u64 = self
            .logs
            .iter()
            .map(|log| {
                let mut count = 0;
                log.replication_info(&mut |name, value| {
                    if name == FORWARDED {
                        count = value.to_string().parse().unwrap_or(0);
                    }
                });
                count
            })
            .sum();
        self.first()
            .replication_info(&mut |name, value| match name {
                FORWARDED => field(name, &forwarded),
                _ => field(name, value),
            });
        field("raft_groups", &self.count());
        let led = self
            .logs
            .iter()
            .filter(|log| matches!(log.route(0), Route::Here))
            .count();
        field("raft_groups_led", &led);
        // Each group as this node sees it, a line each, as Redis lists its replicas.
        for (log, number) in self.logs.iter().zip(1..) {
            let v = log.view();
            let value = format!(
                "leader={},term={},commit_index={},applied_index={},lag={}",
                v.leader_id.unwrap_or(0),
                v.term,
                v.commit_index,
                v.applied_index,
                v.commit_index.saturating_sub(v.applied_index)
            );
            field(group_field(number), &value);
        }
    }

    fn metrics(&self, snapshot: &mut MetricsSnapshot) {
        for log in &self.logs {
            log.metrics(snapshot);
        }
    }

    fn rewrite(&self) -> Result<(), String> {
        self.first().rewrite()
    }

    fn membership(&self) -> Option<Box<dyn Membership>> {
        let each = self
            .logs
            .iter()
            .map(|log| Some((log.membership()?, log.clone())))
            .collect::<Option<Vec<_>>>()?;
        Some(Box::new(EveryGroup(Arc::new(each))))
    }

    fn reconfigure(&self, old: &Config, next: &Config) {
        for log in &self.logs {
            log.reconfigure(old, next);
        }
    }

    fn hand_over(&self, limit: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            // Every group this node leads hands over at once, within the one limit.
            let mut handing = tokio::task::JoinSet::new();
            for log in &self.logs {
                let log = log.clone();
                handing.spawn(async move { log.hand_over(limit).await });
            }
            let mut any = false;
            while let Some(handed) = handing.join_next().await {
                any |= handed.unwrap_or(false);
            }
            any
        })
    }

    fn leader_changed(&self, known: Option<u64>) -> BoxFuture<'_, Option<u64>> {
        self.first().leader_changed(known)
    }

    fn refusals(&self) -> Option<watch::Receiver<Option<String>>> {
        // The groups share the node's identity, and so its refusals.
        self.first().refusals()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            for log in self.logs.iter().rev() {
                log.close().await;
            }
        })
    }
}

/// FLOCK.CLUSTER ADD, REMOVE and LEADER on a multi-group node: membership changes go to every
/// group in turn, each made by its leader (a member is a member of all of them); LEADER moves
/// every group this node leads.
struct EveryGroup(Arc<Vec<GroupMembership>>);

/// A group's membership changes, and its log (whether this node leads it).
type GroupMembership = (Box<dyn Membership>, Arc<dyn Log>);

impl EveryGroup {
    /// Makes `change` in every group in turn; the first group that fails stops it, named.
    fn in_turn(
        &self,
        change: impl Fn(&dyn Membership) -> BoxFuture<'static, Result<(), String>> + Send + 'static,
    ) -> BoxFuture<'static, Result<(), String>> {
        let groups = self.0.clone();
        Box::pin(async move {
            for (group, (membership, _)) in groups.iter().enumerate() {
                change(&**membership)
                    .await
                    .map_err(|e| format!("group {}: {e}", group + 1))?;
            }
            Ok(())
        })
    }
}

impl Membership for EveryGroup {
    fn add(&self, id: u64, addr: String) -> BoxFuture<'static, Result<(), String>> {
        self.in_turn(move |membership| membership.add(id, addr.clone()))
    }

    fn remove(&self, id: u64) -> BoxFuture<'static, Result<(), String>> {
        self.in_turn(move |membership| membership.remove(id))
    }

    fn transfer_leader(&self, id: u64) -> BoxFuture<'static, Result<(), String>> {
        let groups = self.0.clone();
        Box::pin(async move {
            let mut moved = 0;
            for (group, (membership, log)) in groups.iter().enumerate() {
                if !log.view().role.leads() {
                    continue;
                }
                membership
                    .transfer_leader(id)
                    .await
                    .map_err(|e| format!("group {}: {e}", group + 1))?;
                moved += 1;
            }
            match moved {
                0 => Err("this node leads no group".to_owned()),
                _ => Ok(()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn release(name: &str) -> Op {
        Op::Release {
            name: Bytes::from(name.to_owned()),
            token: 1,
        }
    }

    #[test]
    fn ops_go_to_the_group_of_their_names_and_never_to_two() {
        // "a" is slot 15495, "b" 3300: groups 3 and 0 of 4; "{a}x" shares a's slot.
        assert_eq!(group_of_ops(&[release("a")], 4), Ok(Some(3)));
        assert_eq!(group_of_ops(&[release("b")], 4), Ok(Some(0)));
        assert_eq!(
            group_of_ops(&[release("a"), release("{a}x")], 4),
            Ok(Some(3))
        );
        assert_eq!(
            group_of_ops(&[release("a"), release("b")], 4),
            Err(ProposeError::CrossSlot)
        );
        assert_eq!(group_of_ops(&[release("a"), release("b")], 1), Ok(Some(0)));
        assert_eq!(group_of_ops(&[Op::EndAllSessions], 4), Ok(None));
        let fenced = Op::FenceSet {
            key: Bytes::from_static(b"a"),
            token: 1,
            value: Bytes::new(),
            lock: Some(Bytes::from_static(b"b")),
        };
        assert_eq!(group_of_ops(&[fenced], 4), Err(ProposeError::CrossSlot));
    }
}
