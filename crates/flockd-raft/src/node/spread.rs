//! Group leaders spread over the nodes (a multi-group cluster). Elections put leaders where
//! they fall: the founder leads every new group, and a node's death moves all it led onto the
//! survivors, so one node would take every write. Every few seconds each node counts the
//! leaders of all groups, and a node that leads two more than the member that leads fewest (or
//! more than its share, ceil(groups / members up)) hands one of its groups to that member.
//! Only while every group has a leader and the member is up, one hand-over a round, so a
//! failover settles before anything moves.

use std::collections::BTreeMap;
use std::sync::Weak;

use super::*;

/// How often a node looks at the spread.
const SPREAD_EVERY: Duration = Duration::from_secs(2);

/// Which of `groups` to hand to which member, if any: `leaders` is each group's leader,
/// `members` the voters that are up (this node among them).
fn next_move(
    me: NodeId,
    leaders: &[Option<NodeId>],
    members: &[NodeId],
) -> Option<(usize, NodeId)> {
    if members.is_empty() || leaders.iter().any(Option::is_none) {
        return None;
    }
    let mut led: BTreeMap<NodeId, usize> = members.iter().map(|m| (*m, 0)).collect();
    for leader in leaders.iter().flatten() {
        if let Some(count) = led.get_mut(leader) {
            *count += 1;
        }
    }
    let mine = *led.get(&me)?;
    let share = leaders.len().div_ceil(members.len());
    // The member leading fewest (the smallest id among equals), not this node.
    let (&target, &fewest) = led
        .iter()
        .filter(|(id, _)| **id != me)
        .min_by_key(|(id, count)| (**count, **id))?;
    if mine > share || mine >= fewest + 2 {
        // The last group this node leads: the moves of a round of nodes do not collide on one.
        let group = leaders.iter().rposition(|l| *l == Some(me))?;
        return Some((group, target));
    }
    None
}

/// Runs on every node of a multi-group cluster, for as long as its groups do.
pub(super) async fn spread_leaders(groups: Vec<Weak<Node>>) {
    let mut tick = tokio::time::interval(SPREAD_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(nodes) = groups.iter().map(Weak::upgrade).collect::<Option<Vec<_>>>() else {
            return;
        };
        let first = nodes[0].view();
        if first.role == Role::Shutdown || first.removed.is_some() {
            return;
        }
        let leaders: Vec<Option<NodeId>> = nodes.iter().map(|n| n.view().leader).collect();
        let members: Vec<NodeId> = first
            .members
            .iter()
            .filter(|m| m.voter && m.up)
            .map(|m| m.id)
            .collect();
        let me = first.node_id;
        if let Some((group, target)) = next_move(me, &leaders, &members) {
            info!(
                group = group + 1,
                to = target,
                "handing the group's leadership over, to spread the leaders over the nodes"
            );
            if let Err(e) = nodes[group].raft.trigger().transfer_leader(target).await {
                warn!(
                    group,
                    to = target,
                    "could not hand the leadership over: {e}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::next_move;

    #[test]
    fn a_node_leading_more_than_its_share_hands_one_group_to_the_least_loaded() {
        let all = [1, 2, 3];
        // The founder leads all four groups: it hands its last one to node 2.
        assert_eq!(next_move(1, &[Some(1); 4], &all), Some((3, 2)));
        assert_eq!(next_move(2, &[Some(1); 4], &all), None);
        // 2, 1, 1 is as even as four groups on three nodes get.
        let spread = [Some(1), Some(2), Some(1), Some(3)];
        for me in all {
            assert_eq!(next_move(me, &spread, &all), None);
        }
        // 3, 1, 0: node 1 is over its share (2).
        let uneven = [Some(1), Some(1), Some(2), Some(1)];
        assert_eq!(next_move(1, &uneven, &all), Some((3, 3)));
        // Node 3 down: 4 groups on 2 nodes, 2 each, nothing moves to the dead node.
        let two = [Some(1), Some(2), Some(1), Some(2)];
        assert_eq!(next_move(1, &two, &[1, 2]), None);
        // A group without a leader (an election): nothing moves.
        assert_eq!(next_move(1, &[Some(1), None, Some(1), Some(1)], &all), None);
        // Two groups on three nodes: 1, 1, 0 stays.
        assert_eq!(next_move(1, &[Some(1), Some(2)], &all), None);
        assert_eq!(next_move(1, &[Some(1), Some(1)], &all), Some((1, 2)));
    }
}
