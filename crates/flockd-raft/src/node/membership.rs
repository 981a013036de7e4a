//! FLOCK.CLUSTER ADD, REMOVE and LEADER: membership changes and leadership transfer.

use super::*;

impl Cluster {
    /// FLOCK.CLUSTER ADD: the node joins as a learner, catches up, then becomes a voter.
    pub async fn add(&self, id: NodeId, addr: &str) -> Result<(), String> {
        let peer = parse_addr(id, addr).map_err(|e| e.to_string())?;
        let raft = &self.node.raft;
        info!(node = id, addr = %peer.addr(), "FLOCK.CLUSTER ADD: the node joins as a learner");
        let added = async {
            raft.add_learner(id, basic_node(&peer.addr()), true)
                .await
                .map_err(write_error)?;
            info!(
                node = id,
                "FLOCK.CLUSTER ADD: caught up; it becomes a voter"
            );
            raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                .await
                .map_err(write_error)
        };
        match added.await {
            Ok(_) => {
                info!(
                    node = id,
                    "FLOCK.CLUSTER ADD: done, the node is a voting member"
                );
                Ok(())
            }
            Err(why) => {
                warn!(node = id, "FLOCK.CLUSTER ADD failed: {why}");
                Err(why)
            }
        }
    }

    /// FLOCK.CLUSTER REMOVE: the node leaves the voters and the cluster.
    pub async fn remove(&self, id: NodeId) -> Result<(), String> {
        let raft = &self.node.raft;
        info!(node = id, "FLOCK.CLUSTER REMOVE: taking the node out");
        match raft
            .change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
            .await
            .map_err(write_error)
        {
            Ok(_) => {
                info!(
                    node = id,
                    "FLOCK.CLUSTER REMOVE: done, the node is no longer a member"
                );
                Ok(())
            }
            Err(why) => {
                warn!(node = id, "FLOCK.CLUSTER REMOVE failed: {why}");
                Err(why)
            }
        }
    }

    /// FLOCK.CLUSTER LEADER: hands leadership to `id`.
    pub async fn transfer_leader(&self, id: NodeId) -> Result<(), String> {
        let view = self.view();
        if view.role != Role::Leader {
            return Err(match view.leader {
                Some(l) => format!("this node is not the leader (node {l} is)"),
                None => "no leader is known".to_owned(),
            });
        }
        if view.member(id).is_none_or(|m| !m.voter) {
            return Err(format!("node {id} is not a voting member"));
        }
        self.node
            .raft
            .trigger()
            .transfer_leader(id)
            .await
            .map_err(|e| e.to_string())
    }
}

pub(super) fn write_error(e: RaftError<FlockRaft, ClientWriteError<FlockRaft>>) -> String {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => match f.leader_id {
            Some(l) => format!("this node is not the leader (node {l} is)"),
            None => "no leader is known".to_owned(),
        },
        other => other.to_string(),
    }
}
