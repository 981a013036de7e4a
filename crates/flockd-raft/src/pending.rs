//! This node's proposals waiting for their results. Every node computes every result when it
//! applies an entry; the node that proposed one answers its client from its own apply, so a
//! forwarded write needs no result on the wire and the client then reads its own write on the
//! node it is connected to.
//!
//! Each proposal also has a deadline (`cluster-wait-leader-ms` after it was made): one that is
//! still waiting then, on any path (no leader, a forward, this node's own apply running late
//! after a partition), is answered as of unknown outcome by [`PendingTable::answer_overdue`],
//! so no client waits past the limit.

use std::collections::BTreeMap;
use std::time::Instant;

use flockd_core::OpResult;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::ClusterError;

pub type ProposalResult = Result<Vec<OpResult>, ClusterError>;

#[derive(Default)]
struct Table {
    next_seq: u64,
    /// By seq, so also by deadline: every proposal gets the same time to be answered.
    waiting: BTreeMap<u64, Waiting>,
}

struct Waiting {
    deadline: Instant,
    answer: oneshot::Sender<ProposalResult>,
    /// Why it is not answered yet, as last seen by the proposer (for the overdue answer).
    why: Option<String>,
}

#[derive(Default)]
pub struct PendingTable {
    table: Mutex<Table>,
}

impl PendingTable {
    /// A new proposal's seq and where its outcome will arrive, by `deadline` at the latest:
    /// a fixed time after the registration (see [`PendingTable::answer_overdue`]).
    pub fn register(&self, deadline: Instant) -> (u64, oneshot::Receiver<ProposalResult>) {
        let (answer, rx) = oneshot::channel();
        let mut table = self.table.lock();
        let seq = table.next_seq;
        table.next_seq += 1;
        table.waiting.insert(
            seq,
            Waiting {
                deadline,
                answer,
                why: None,
            },
        );
        (seq, rx)
    }

    /// Records why proposal `seq` is not answered yet (what its overdue answer will say).
    pub fn note(&self, seq: u64, why: &str) {
        if let Some(waiting) = self.table.lock().waiting.get_mut(&seq) {
            waiting.why = Some(why.to_owned());
        }
    }

    /// Answers every proposal still waiting at its deadline with `overdue(why)`, as the
    /// deadlines come, for as long as the node runs. One task does it for all proposals, with
    /// no timer and no wake-up per proposal: every deadline is `limit` after its registration,
    /// so a table found empty needs no look before `limit` has passed, and a full one none
    /// before its first deadline.
    pub async fn answer_overdue(
        &self,
        limit: std::time::Duration,
        overdue: impl Fn(Option<String>) -> ClusterError,
    ) {
        loop {
            let next = self
                .table
                .lock()
                .waiting
                .first_key_value()
                .map(|(_, w)| w.deadline);
            match next {
                None => tokio::time::sleep(limit).await,
                Some(deadline) => {
                    tokio::time::sleep_until(deadline.into()).await;
                    let now = Instant::now();
                    let mut table = self.table.lock();
                    while let Some(entry) = table.waiting.first_entry() {
                        if entry.get().deadline > now {
                            break;
                        }
                        let waiting = entry.remove();
                        let _ = waiting.answer.send(Err(overdue(waiting.why)));
                    }
                }
            }
        }
    }

    /// Every seq below this one has been answered.
    pub fn floor(&self) -> u64 {
        let table = self.table.lock();
        table
            .waiting
            .keys()
            .next()
            .copied()
            .unwrap_or(table.next_seq)
    }

    /// Answers proposal `seq` (if it still waits).
    pub fn resolve(&self, seq: u64, outcome: ProposalResult) {
        if let Some(waiting) = self.table.lock().waiting.remove(&seq) {
            let _ = waiting.answer.send(outcome);
        }
    }

    pub fn is_waiting(&self, seq: u64) -> bool {
        self.table.lock().waiting.contains_key(&seq)
    }

    /// Seqs still waiting.
    pub fn waiting(&self) -> Vec<u64> {
        self.table.lock().waiting.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;

    /// A proposal nobody answers is answered at its deadline, with the last reason noted; one
    /// answered first keeps its answer; the floor moves past both.
    #[tokio::test]
    async fn an_unanswered_proposal_is_answered_at_its_deadline() {
        let table = Arc::new(PendingTable::default());
        let sweeper = table.clone();
        tokio::spawn(async move {
            sweeper
                .answer_overdue(Duration::from_millis(50), |why| ClusterError::NoLeader {
                    waited_ms: 50,
                    why: why.unwrap_or_default(),
                })
                .await
        });
        let start = Instant::now();
        let (late, late_rx) = table.register(start + Duration::from_millis(50));
        let (answered, answered_rx) = table.register(start + Duration::from_millis(60));
        table.note(late, "applied elsewhere");
        table.resolve(answered, Ok(vec![]));
        let outcome = tokio::time::timeout(Duration::from_secs(5), late_rx)
            .await
            .expect("answered in time")
            .expect("sent");
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(
            outcome,
            Err(ClusterError::NoLeader {
                waited_ms: 50,
                why: "applied elsewhere".into()
            })
        );
        assert_eq!(answered_rx.await.expect("sent"), Ok(vec![]));
        assert_eq!(table.floor(), 2);
        // A proposal registered after the table went empty is answered at its deadline too.
        let (_, again) = table.register(Instant::now() + Duration::from_millis(50));
        let again = tokio::time::timeout(Duration::from_secs(5), again).await;
        assert!(matches!(again, Ok(Ok(Err(ClusterError::NoLeader { .. })))));
    }
}
