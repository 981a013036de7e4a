//! How a proposal reaches the leader: written here when this node leads, else forwarded over
//! the cluster port, tried again after every leader change (the same seq, so it takes effect at
//! most once) until it is answered or `cluster-wait-leader-ms` passes.
//!
//! Commands proposed at the same moment (many clients' at once, under load) are gathered into
//! one proposal, one entry: what a replicated write costs beyond its ops (a trip through
//! openraft's core, the log's encoding and flush, a replication message per follower, a forward
//! from a follower, an apply) is then paid once for all of them, as the single node's group
//! commit does for its file. Their ops keep their order; each client gets its own results.
//!
//! A follower keeps one forward in flight: what its clients send meanwhile is gathered into the
//! next. A forward costs a request and an answer on the cluster port and an entry at the leader
//! whatever it carries, and the leader's log syncs one round at a time anyway, so forwards sent
//! while one is on its way only wait there in smaller pieces (measured in docs/benchmarks.md,
//! "One forward in flight"). The leader itself keeps every proposal in flight: its log store
//! gathers them into its syncs.

use super::*;

use crate::pending::Answer;

/// A client's proposal waiting to be gathered.
pub(super) struct Proposed {
    ops: Vec<Op>,
    deadline: Instant,
    answer: oneshot::Sender<ProposalResult>,
}

/// The most ops gathered into one proposal (one larger on its own still goes, alone).
const GATHER_OPS: usize = 512;

/// Gathers the proposals queued at the moment into one and sends it on its way, for as long as
/// the node lives (its queue closes with it).
pub(super) async fn gather(
    node: std::sync::Weak<Node>,
    mut queue: mpsc::UnboundedReceiver<Proposed>,
) {
    let mut held = None;
    loop {
        let first = match held.take() {
            Some(first) => first,
            None => match queue.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        // The commands that are ready to run now (other clients', under load) add theirs
        // first; with nothing else ready this costs one turn of the scheduler.
        tokio::task::yield_now().await;
        let Proposed {
            mut ops,
            deadline,
            answer,
        } = first;
        let mut answers = vec![Answer {
            ops: ops.len(),
            to: answer,
        }];
        while ops.len() < GATHER_OPS {
            match queue.try_recv() {
                Ok(next) if ops.len() + next.ops.len() <= GATHER_OPS => {
                    answers.push(Answer {
                        ops: next.ops.len(),
                        to: next.answer,
                    });
                    ops.extend(next.ops);
                }
                Ok(next) => {
                    held = Some(next);
                    break;
                }
                Err(_) => break,
            }
        }
        let Some(node) = node.upgrade() else {
            return;
        };
        // The first one's deadline is the earliest: no client waits past its own.
        let seq = node.pending.register(deadline, answers);
        if node.in_office() {
            tokio::spawn(node.submit(seq, ops, deadline));
        } else {
            node.submit(seq, ops, deadline).await;
        }
    }
}

impl Node {
    /// `cluster-wait-leader-ms`: how long a command may wait for a leader to commit it.
    pub(super) fn wait_leader(&self) -> Duration {
        Duration::from_millis(self.settings.wait_leader_ms)
    }

    pub(super) fn propose(&self, mut ops: Vec<Op>) -> oneshot::Receiver<ProposalResult> {
        // A wait queued from here ends with this node (Op::DropWaits), should it die.
        for op in &mut ops {
            op.set_waiting_node(self.me.node);
        }
        let (answer, outcome) = oneshot::channel();
        let proposed = Proposed {
            ops,
            deadline: Instant::now() + self.wait_leader(),
            answer,
        };
        if let Err(mpsc::error::SendError(lost)) = self.proposals.send(proposed) {
            let _ = lost.answer.send(Err(ProposeError::ShuttingDown));
        }
        outcome
    }

    /// Gets proposal `seq` committed: here if this node leads, else at the leader it knows,
    /// again after every failure (the same seq: a copy that did take effect makes the others
    /// no-ops) until it is answered or `deadline` passes.
    pub(super) async fn submit(self: Arc<Self>, seq: u64, ops: Vec<Op>, deadline: Instant) {
        let mut metrics = self.raft.server_metrics();
        let mut last_why = "no leader is known".to_owned();
        let proposed = deadline - self.wait_leader();
        loop {
            if !self.pending.is_waiting(seq) {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                self.pending.resolve(
                    seq,
                    Err(ProposeError::NoLeader {
                        waited_ms: self.settings.wait_leader_ms,
                        why: last_why,
                    }),
                );
                return;
            }
            let proposal = RaftProposal {
                origin: Origin {
                    node: self.me.node,
                    incarnation: self.me.incarnation,
                    seq,
                    floor: self.pending.floor(),
                },
                at: Millis(0),
                ops: ops.clone(),
            };
            let leader = metrics.borrow_watched().current_leader;
            let outcome = match leader {
                // A leader cut off from the majority holds the entry until it commits or a
                // newer leader's log replaces it (after the partition heals): the client is
                // answered at its limit all the same. Should the entry commit later, its apply
                // finds the seq answered and drops the result.
                Some(id) if id == self.me.node => {
                    tokio::time::timeout(deadline - now, self.write_here(proposal))
                        .await
                        .unwrap_or_else(|_| Forwarded::Failed(UNACKNOWLEDGED_WRITE.to_owned()))
                }
                Some(id) => {
                    self.counters.forwarded(ops.len());
                    tokio::select! {
                        outcome = self.forward(id, proposal, deadline - now) => outcome,
                        () = leader_moved_from(self.raft.server_metrics(), id) => {
                            Forwarded::Failed(format!("node {id} stopped leading while it had the request"))
                        }
                    }
                }
                None => Forwarded::NotLeader { leader: None },
            };
            match outcome {
                // Applied on the leader: this node's own apply answers the client (or, should
                // it come too late, the pending table does at the deadline).
                Forwarded::Committed => {
                    self.counters.proposal_committed(proposed.elapsed());
                    return;
                }
                Forwarded::NotLeader { leader } => last_why = not_leading(leader),
                Forwarded::Failed(why) => last_why = why,
            }
            self.pending.note(seq, &last_why);
            news_of_a_leader(&mut metrics, deadline).await;
        }
    }

    /// Whether this node leads and has taken office (it stamps proposals with its clock).
    pub(super) fn in_office(&self) -> bool {
        self.stamping.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Proposes on this node as the leader: stamped with the leader's clock, once it is in
    /// office (until then the proposer tries again shortly).
    pub(super) async fn write_here(&self, mut proposal: RaftProposal) -> Forwarded {
        if !self.in_office() {
            return Forwarded::NotLeader {
                leader: Some(self.me.node),
            };
        }
        proposal.at = self.clock.now();
        match self.raft.client_write(proposal).await {
            Ok(_) => Forwarded::Committed,
            // Discarded: a newer leader's log replaced the entry here (it may have committed
            // there all the same). Sent again with the same seq, it takes effect at most once.
            Err(RaftError::APIError(
                ClientWriteError::ForwardToLeader(f) | ClientWriteError::LogEntryDiscarded(f),
            )) => Forwarded::NotLeader {
                leader: f.leader_id,
            },
            Err(e) => Forwarded::Failed(e.to_string()),
        }
    }

    pub(super) async fn forward(
        &self,
        leader: NodeId,
        proposal: RaftProposal,
        left: Duration,
    ) -> Forwarded {
        let Some(addr) = self.address_of(leader) else {
            return Forwarded::NotLeader { leader: None };
        };
        let client = self.peers.client(leader, &addr);
        match client
            .call_in(self.group, Request::Forward(proposal), left)
            .await
        {
            Ok(Response::Forwarded(outcome)) => outcome,
            Ok(other) => Forwarded::Failed(format!("unexpected answer {other:?}")),
            Err(e) => Forwarded::Failed(e.to_string()),
        }
    }

    pub(super) fn address_of(&self, id: NodeId) -> Option<String> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        metrics
            .membership_config
            .nodes()
            .find(|(nid, _)| **nid == id)
            .map(|(_, n)| n.addr.clone())
    }
}

/// Why a write proposed on the leader got no answer in time: no majority acknowledged its entry
/// (this leader is cut off, or the majority is slow). Its outcome is unknown: the entry stays in
/// this leader's log and may still commit.
pub(super) const UNACKNOWLEDGED_WRITE: &str = "the leader got no majority to acknowledge it; its outcome is unknown, it may still take effect";

/// Why the last attempt found no leader to take it.
pub(super) fn not_leading(leader: Option<NodeId>) -> String {
    match leader {
        Some(l) => format!("node {l} was said to lead"),
        None => "no leader is known".to_owned(),
    }
}

/// Returns once this node knows a leader other than `leader`: a request sent to a leader that was
/// paused or cut off is then sent again to the new one at once (the copies share a seq, so at
/// most one takes effect), instead of waiting out `cluster-wait-leader-ms` on the old one.
pub(super) async fn leader_moved_from(mut metrics: ServerMetrics, leader: NodeId) {
    loop {
        let current = metrics.borrow_watched().current_leader;
        if current.is_some_and(|id| id != leader) {
            return;
        }
        if metrics.changed().await.is_err() {
            // shutting down: the request's own deadline ends the wait
            std::future::pending::<()>().await;
        }
    }
}

/// Waits for news of a leader (or a little while) before the next attempt.
pub(super) async fn news_of_a_leader(metrics: &mut ServerMetrics, deadline: Instant) {
    let pause = Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now()));
    let _ = tokio::time::timeout(pause, metrics.changed()).await;
}
