//! FLOCK.CLUSTER ADD, REMOVE and LEADER: membership changes and leadership transfer.

use super::*;

impl Cluster {
    /// FLOCK.CLUSTER ADD: the node joins as a learner, catches up, then becomes a voter.
    pub async fn add(&self, id: NodeId, addr: &str) -> Result<(), String> {
        let peer = parse_addr(id, addr).map_err(|e| e.to_string())?;
        let raft = &self.node.raft;
        raft.add_learner(id, basic_node(&peer.addr()), true)
            .await
            .map_err(write_error)?;
        raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(write_error)?;
        Ok(())
    }

    /// FLOCK.CLUSTER REMOVE: the node leaves the voters and the cluster.
    pub async fn remove(&self, id: NodeId) -> Result<(), String> {
        let raft = &self.node.raft;
        raft.change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
            .await
            .map_err(write_error)?;
        Ok(())
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
