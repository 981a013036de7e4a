//! Which members answer, and whether this node is still one of them.
//!
//! Every node probes every member it knows (and its `cluster-peers`) twice a second over the
//! cluster port. An answer marks the member up ([`Node::member_up`]: answered within
//! [`DOWN_AFTER`]) and names the membership that member knows. A node taken out with
//! `FLOCK.CLUSTER REMOVE` may never receive the entry that removes it (the leader stops
//! replicating to it), so it learns its removal here: from its own membership, or from a
//! member that knows a newer membership without it. It then answers every command with an
//! error that says so (see [`Removal`]). Every change of membership is logged on every node.
//!
//! The waits a node's connections queued must not outlive it: the leader proposes
//! `Op::DropWaits` for a member the moment it counts as down, and a node that starts proposes
//! it for itself once it hears a leader (its earlier run's connections are gone). A live
//! connection whose wait was dropped this way queues again with the time it has left.

use futures_util::future::join_all;

use super::*;
use crate::network::ProbeAnswer;

/// How often each member is probed.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// How long a probe may take: a member slower than this counts as not answering it.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// A member that answered nothing (probe, append, vote) for this long is shown as down.
pub const DOWN_AFTER: Duration = Duration::from_millis(2000);

/// This node is no longer a member: how it knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    pub node: NodeId,
    /// The membership without this node: its log index and its members.
    pub index: Option<u64>,
    pub members: Vec<NodeId>,
}

impl std::fmt::Display for Removal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let members = self
            .members
            .iter()
            .map(|id| id.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        write!(
            f,
            "this node (id {}) was removed from the cluster (FLOCK.CLUSTER REMOVE): the membership",
            self.node
        )?;
        if let Some(index) = self.index {
            write!(f, " at index {index}")?;
        }
        write!(
            f,
            " lists nodes {members}; it serves no commands: use another node, or add it again with FLOCK.CLUSTER ADD"
        )
    }
}

/// The membership this node has applied, as a probe answers it.
fn own_membership(node: &Node) -> (ProbeAnswer, BTreeMap<NodeId, String>) {
    let metrics = node.raft.metrics();
    let m = metrics.borrow_watched();
    let config = &m.membership_config;
    let addrs: BTreeMap<NodeId, String> = config
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect();
    (
        ProbeAnswer {
            membership_index: config.log_id().as_ref().map(|id| id.index),
            members: addrs.keys().copied().collect(),
        },
        addrs,
    )
}

impl Node {
    /// What this node answers a probe.
    pub(super) fn probe_answer(&self) -> ProbeAnswer {
        own_membership(self).0
    }

    /// Whether member `id` answered lately (this node always does).
    pub(super) fn member_up(&self, id: NodeId) -> bool {
        id == self.me.node || self.peers.answered_within(id, DOWN_AFTER)
    }

    /// Why this node serves nothing, if it was removed.
    pub(super) fn removal(&self) -> Option<Removal> {
        if !self.removed.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.removal.lock().clone()
    }

    fn set_removal(&self, removal: Option<Removal>) {
        let mut current = self.removal.lock();
        if *current == removal {
            return;
        }
        match (&*current, &removal) {
            (None, Some(r)) => warn!("{r}"),
            (Some(_), None) => info!(
                node = self.me.node,
                "this node is a member of the cluster again: it serves commands"
            ),
            _ => {}
        }
        self.removed
            .store(removal.is_some(), std::sync::atomic::Ordering::Release);
        *current = removal;
    }

    /// Asks `id` at `addr` which membership it knows (`None`: no answer in time).
    async fn probe(&self, id: NodeId, addr: &str) -> Option<ProbeAnswer> {
        let client = self.peers.client(id, addr);
        match client
            .call_in(self.group, Request::Probe, PROBE_TIMEOUT)
            .await
        {
            Ok(Response::Probe(answer)) => Some(answer),
            _ => None,
        }
    }
}

/// Probes the members, logs membership changes and decides whether this node was removed, for
/// as long as the node runs.
pub(super) async fn watch_members(node: Arc<Node>) {
    let mut logged: Option<(Option<u64>, Vec<NodeId>)> = None;
    let mut down = BTreeSet::new();
    let mut own_waits_dropped = false;
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        if node.raft.metrics().borrow_watched().state == ServerState::Shutdown {
            return;
        }
        let (mine, mut addrs) = own_membership(&node);
        log_membership(&node, &mine, &mut logged);
        for peer in &node.settings.peers {
            addrs.entry(peer.id).or_insert_with(|| peer.addr());
        }
        addrs.remove(&node.me.node);
        let answers = join_all(addrs.iter().map(|(id, addr)| node.probe(*id, addr))).await;
        node.set_removal(removal(node.me.node, &mine, answers.into_iter().flatten()));
        if !own_waits_dropped
            && node
                .raft
                .metrics()
                .borrow_watched()
                .current_leader
                .is_some()
        {
            own_waits_dropped = true;
            drop(node.propose(vec![Op::DropWaits { node: node.me.node }]));
        }
        drop_waits_of_the_down(&node, &mine.members, &mut down);
    }
}

/// On the leader in office: ends the waits of each member that has just gone down.
fn drop_waits_of_the_down(node: &Arc<Node>, members: &[NodeId], down: &mut BTreeSet<NodeId>) {
    let leads = node.in_office();
    for &id in members {
        if id == node.me.node || node.member_up(id) {
            down.remove(&id);
            continue;
        }
        // Down since the last look: only a leader's proposal ends the waits; any other node
        // just notes it, so it does not propose again when it becomes the leader later (a new
        // leader's re-arm ends every wait anyway).
        if down.insert(id) && leads {
            info!(
                node = node.me.node,
                "node {id} does not answer: the waits of its connections end"
            );
            drop(node.propose(vec![Op::DropWaits { node: id }]));
        }
    }
}

/// Whether node `me` is removed, given the membership it applied and its members' answers: it
/// had a membership (a node waiting to be added has none) and that membership, or a newer one a
/// member knows, does not list it.
fn removal(
    me: NodeId,
    mine: &ProbeAnswer,
    answers: impl Iterator<Item = ProbeAnswer>,
) -> Option<Removal> {
    mine.membership_index?;
    let newest = answers
        .filter(|a| a.membership_index > mine.membership_index)
        .max_by_key(|a| a.membership_index);
    let known = newest.as_ref().unwrap_or(mine);
    (!known.members.contains(&me)).then(|| Removal {
        node: me,
        index: known.membership_index,
        members: known.members.clone(),
    })
}

/// Logs the membership when it differs from the last one logged.
fn log_membership(
    node: &Node,
    mine: &ProbeAnswer,
    logged: &mut Option<(Option<u64>, Vec<NodeId>)>,
) {
    let now = (mine.membership_index, mine.members.clone());
    if mine.membership_index.is_none() || logged.as_ref() == Some(&now) {
        return;
    }
    let metrics = node.raft.metrics();
    let m = metrics.borrow_watched();
    let voters: Vec<NodeId> = m.membership_config.voter_ids().collect();
    let learners: Vec<NodeId> = m.membership_config.membership().learner_ids().collect();
    drop(m);
    let was_member = logged
        .as_ref()
        .is_some_and(|(_, members)| members.contains(&node.me.node));
    info!(
        node = node.me.node,
        index = mine.membership_index.unwrap_or(0),
        "membership: voters {voters:?}, learners {learners:?}"
    );
    if !was_member && mine.members.contains(&node.me.node) {
        let what = if voters.contains(&node.me.node) {
            "a voter"
        } else {
            "a learner"
        };
        info!(
            node = node.me.node,
            "this node is a member of the cluster, {what}"
        );
    }
    *logged = Some(now);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(index: Option<u64>, members: &[NodeId]) -> ProbeAnswer {
        ProbeAnswer {
            membership_index: index,
            members: members.to_vec(),
        }
    }

    #[test]
    fn a_node_waiting_to_be_added_is_not_removed() {
        let answers = vec![at(Some(9), &[1, 2, 3])];
        assert_eq!(removal(4, &at(None, &[]), answers.into_iter()), None);
    }

    #[test]
    fn a_newer_membership_without_this_node_removes_it() {
        let mine = at(Some(7), &[1, 2, 3, 4]);
        let answers = vec![at(Some(9), &[1, 2, 3]), at(Some(7), &[1, 2, 3, 4])];
        let r = removal(4, &mine, answers.into_iter()).expect("removed");
        assert_eq!((r.index, r.members), (Some(9), vec![1, 2, 3]));
        // An older one does not.
        assert_eq!(
            removal(4, &mine, vec![at(Some(5), &[1, 2, 3])].into_iter()),
            None
        );
        // Its own membership without it does, and so does no answer at all then.
        assert!(removal(4, &at(Some(9), &[1, 2, 3]), std::iter::empty()).is_some());
        // Added again later: a member again.
        assert_eq!(
            removal(4, &mine, vec![at(Some(12), &[1, 2, 3, 4])].into_iter()),
            None
        );
    }

    #[test]
    fn the_error_names_the_removal_and_what_to_do() {
        let r = Removal {
            node: 4,
            index: Some(9),
            members: vec![1, 2, 3],
        };
        assert_eq!(
            r.to_string(),
            "this node (id 4) was removed from the cluster (FLOCK.CLUSTER REMOVE): the membership \
             at index 9 lists nodes 1, 2, 3; it serves no commands: use another node, or add it \
             again with FLOCK.CLUSTER ADD"
        );
    }
}
