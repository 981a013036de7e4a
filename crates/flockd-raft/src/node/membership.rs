//! FLOCK.CLUSTER ADD, REMOVE and LEADER: membership changes and leadership transfer.

use super::*;

/// How long a membership change sent to the leader may take: an added node catches up first.
const MEMBERSHIP_WAIT: Duration = Duration::from_secs(120);

impl Cluster {
    /// FLOCK.CLUSTER ADD: the node joins as a learner, catches up, then becomes a voter. Made
    /// by the group's leader: sent there when another node leads.
    pub async fn add(&self, id: NodeId, addr: &str) -> Result<(), String> {
        parse_addr(id, addr).map_err(|e| e.to_string())?;
        self.node
            .change_members(MembershipChange::Add {
                id,
                addr: addr.to_owned(),
            })
            .await
    }

    /// FLOCK.CLUSTER REMOVE: the node leaves the voters and the cluster. Made by the group's
    /// leader: sent there when another node leads.
    pub async fn remove(&self, id: NodeId) -> Result<(), String> {
        self.node
            .change_members(MembershipChange::Remove { id })
            .await
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

impl Node {
    /// Makes `change` here if this node leads the group. A node of several groups leads some
    /// and not others, and FLOCK.CLUSTER changes them all: it sends the change to the group's
    /// leader. A node of one group says who leads, as it always did.
    async fn change_members(&self, change: MembershipChange) -> Result<(), String> {
        let leader = self.raft.metrics().borrow_watched().current_leader;
        match leader {
            Some(id) if id == self.me.node => self.change_members_here(change).await,
            Some(id) if self.groups == 1 => {
                Err(format!("this node is not the leader (node {id} is)"))
            }
            Some(id) => {
                let addr = self
                    .address_of(id)
                    .ok_or_else(|| format!("the leader, node {id}, has no known address"))?;
                let client = self.peers.client(id, &addr);
                match client
                    .call_in(self.group, Request::Membership(change), MEMBERSHIP_WAIT)
                    .await
                {
                    Ok(Response::Membership(None)) => Ok(()),
                    Ok(Response::Membership(Some(why))) => Err(why),
                    Ok(other) => Err(format!("unexpected answer {other:?}")),
                    Err(e) => Err(format!("node {id}, the leader: {e}")),
                }
            }
            None => Err("no leader is known".to_owned()),
        }
    }

    /// Makes `change` as this group's leader (or says who leads).
    pub(super) async fn change_members_here(&self, change: MembershipChange) -> Result<(), String> {
        let raft = &self.raft;
        match change {
            MembershipChange::Add { id, addr } => {
                let peer = parse_addr(id, &addr).map_err(|e| e.to_string())?;
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
            MembershipChange::Remove { id } => {
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
        }
    }
}
