//! Linearizable reads: the leader's read point (ReadIndex, confirmed by a quorum), asked here
//! when this node leads, else of the leader over the cluster port.
//!
//! A follower asks once for every read that came while its last ask was on its way: a point
//! the leader named after a read arrived serves that read (the read then waits until this node
//! has applied it), so one ask and one answer on the cluster port serve them all. A read that
//! came while an ask was on its way waits for the next: the point that ask brings back may
//! have been named before the read arrived.

use super::propose::{leader_moved_from, news_of_a_leader, not_leading};
use super::*;

impl Node {
    pub(super) async fn read_point(&self) -> Result<Millis, ProposeError> {
        let deadline = Instant::now() + self.wait_leader();
        let mut metrics = self.raft.server_metrics();
        let mut last_why = "no leader is known".to_owned();
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(ProposeError::NoLeader {
                    waited_ms: self.settings.wait_leader_ms,
                    why: last_why,
                });
            }
            let leader = metrics.borrow_watched().current_leader;
            let point = match leader {
                Some(id) if id == self.me.node => {
                    tokio::time::timeout(deadline - now, self.read_index_here())
                        .await
                        .unwrap_or_else(|_| ReadPoint::Failed(UNCONFIRMED_READ.to_owned()))
                }
                Some(id) => self.shared_read_index(id, deadline - now).await,
                None => ReadPoint::NotLeader { leader: None },
            };
            match point {
                ReadPoint::Ready { index, at } => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    return match self
                        .raft
                        .wait(Some(left))
                        .applied_index_at_least(Some(index), "read point")
                        .await
                    {
                        Ok(_) => Ok(at),
                        Err(openraft::metrics::WaitError::ShuttingDown) => {
                            Err(ProposeError::ShuttingDown)
                        }
                        Err(openraft::metrics::WaitError::Timeout(..)) => {
                            Err(ProposeError::NoLeader {
                                waited_ms: self.settings.wait_leader_ms,
                                why: format!("this node had not applied index {index} yet"),
                            })
                        }
                    };
                }
                ReadPoint::NotLeader { leader } => last_why = not_leading(leader),
                ReadPoint::Failed(why) => last_why = why,
            }
            news_of_a_leader(&mut metrics, deadline).await;
        }
    }

    /// The read point as the leader: its commit index once a quorum confirmed it still leads
    /// (a leader cut off from the majority gets no confirmation and names none).
    pub(super) async fn read_index_here(&self) -> ReadPoint {
        if !self.in_office() {
            return ReadPoint::NotLeader {
                leader: Some(self.me.node),
            };
        }
        match self.raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
            Ok(linearizer) => ReadPoint::Ready {
                index: linearizer.read_log_id().index(),
                at: self.clock.now(),
            },
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                ReadPoint::NotLeader {
                    leader: f.leader_id,
                }
            }
            // openraft's text names every member: the reply keeps to the point.
            Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(_))) => {
                ReadPoint::Failed(UNCONFIRMED_READ.to_owned())
            }
            Err(e) => ReadPoint::Failed(e.to_string()),
        }
    }

    /// The leader's read point through the follower's shared ask ([`gather_reads`]).
    async fn shared_read_index(&self, leader: NodeId, left: Duration) -> ReadPoint {
        let (answer, point) = oneshot::channel();
        let asked = ReadAsked {
            leader,
            left,
            answer,
        };
        if self.reads.send(asked).is_err() {
            return ReadPoint::Failed(SHUTTING_DOWN.to_owned());
        }
        match tokio::time::timeout(left, point).await {
            Ok(Ok(point)) => point,
            Ok(Err(_)) => ReadPoint::Failed(SHUTTING_DOWN.to_owned()),
            Err(_) => ReadPoint::Failed(UNCONFIRMED_READ.to_owned()),
        }
    }

    async fn read_index_at(&self, leader: NodeId, left: Duration) -> ReadPoint {
        let Some(addr) = self.address_of(leader) else {
            return ReadPoint::NotLeader { leader: None };
        };
        let client = self.peers.client(leader, &addr);
        match client.call_in(self.group, Request::ReadIndex, left).await {
            Ok(Response::ReadPoint(point)) => point,
            Ok(other) => ReadPoint::Failed(format!("unexpected answer {other:?}")),
            Err(e) => ReadPoint::Failed(e.to_string()),
        }
    }
}

/// Why the leader named no read point in time: no majority confirmed it still leads.
pub(super) const UNCONFIRMED_READ: &str =
    "the leader got no majority to confirm that it still leads";

const SHUTTING_DOWN: &str = "this node is shutting down";

/// A read waiting for the leader's read point.
pub(super) struct ReadAsked {
    leader: NodeId,
    /// How long the read may still wait.
    left: Duration,
    answer: oneshot::Sender<ReadPoint>,
}

/// Asks the leader for a read point once for all the reads queued at the time, for as long as
/// the node lives (its queue closes with it). The ask gives up when another node is known to
/// lead: its reads then ask that one.
pub(super) async fn gather_reads(
    node: std::sync::Weak<Node>,
    mut queue: mpsc::UnboundedReceiver<ReadAsked>,
) {
    let mut asked = Vec::new();
    while let Some(first) = queue.recv().await {
        asked.push(first);
        while let Ok(more) = queue.try_recv() {
            asked.push(more);
        }
        let Some(node) = node.upgrade() else {
            return;
        };
        // One leader, but for the moment a leader changes: each named one is asked once.
        while let Some(leader) = asked.first().map(|a: &ReadAsked| a.leader) {
            let (these, others): (Vec<_>, Vec<_>) =
                asked.drain(..).partition(|a| a.leader == leader);
            asked = others;
            let left = these.iter().map(|a| a.left).max().unwrap_or_default();
            let point = tokio::select! {
                point = node.read_index_at(leader, left) => point,
                () = leader_moved_from(node.raft.server_metrics(), leader) => {
                    ReadPoint::Failed(format!("node {leader} stopped leading while it had the read"))
                }
            };
            for read in these {
                let _ = read.answer.send(point.clone());
            }
        }
    }
}
