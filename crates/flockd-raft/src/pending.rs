//! This node's proposals waiting for their results. Every node computes every result when it
//! applies an entry; the node that proposed one answers its client from its own apply, so a
//! forwarded write needs no result on the wire and the client then reads its own write on the
//! node it is connected to.

use std::collections::BTreeMap;

use flockd_core::OpResult;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::ClusterError;

pub type ProposalResult = Result<Vec<OpResult>, ClusterError>;

#[derive(Default)]
struct Table {
    next_seq: u64,
    waiting: BTreeMap<u64, oneshot::Sender<ProposalResult>>,
}

#[derive(Default)]
pub struct PendingTable {
    table: Mutex<Table>,
}

impl PendingTable {
    /// A new proposal's seq and where its outcome will arrive.
    pub fn register(&self) -> (u64, oneshot::Receiver<ProposalResult>) {
        let (tx, rx) = oneshot::channel();
        let mut table = self.table.lock();
        let seq = table.next_seq;
        table.next_seq += 1;
        table.waiting.insert(seq, tx);
        (seq, rx)
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
        if let Some(tx) = self.table.lock().waiting.remove(&seq) {
            let _ = tx.send(outcome);
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
