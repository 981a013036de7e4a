//! `propose`: the one way a state change gets into the state machine. A connection turns a
//! command into ops and proposes them; what comes back are the results of applying them, once
//! they are durable (local AOF) or committed (later: on a Raft majority).
//!
//! [`LocalLog`] is the single node's: the AOF with group commit. [`ClusterLog`] is a cluster
//! node's: the Raft log of `flockd-raft`. Commands never see which one runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use flockd_aof::{Aof, CommitError, Committed};
use flockd_core::{Op, OpResult};
use tokio::sync::{oneshot, watch};

use super::clock::Clock;

/// Why proposed ops were not applied. Nothing of them was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// The log cannot be written (`-MISCONF`).
    #[error("{0}")]
    Unwritable(String),
    /// The server is stopping.
    #[error("the AOF is shutting down")]
    ShuttingDown,
    /// No leader committed it in time, or this node cannot tell its outcome (`-CLUSTERDOWN`).
    #[error("{0}")]
    ClusterDown(String),
}

impl From<flockd_raft::ClusterError> for ProposeError {
    fn from(e: flockd_raft::ClusterError) -> Self {
        match e {
            flockd_raft::ClusterError::ShuttingDown => ProposeError::ShuttingDown,
            other => ProposeError::ClusterDown(other.to_string()),
        }
    }
}

impl From<CommitError> for ProposeError {
    fn from(e: CommitError) -> Self {
        match e {
            CommitError::WriteFailed(_) => ProposeError::Unwritable(e.to_string()),
            CommitError::ShuttingDown => ProposeError::ShuttingDown,
        }
    }
}

pub type ProposalResult = Result<Vec<OpResult>, ProposeError>;

/// Proposed ops on their way: resolves to their results, in order.
pub enum Pending {
    Local(oneshot::Receiver<Committed>),
    Cluster(oneshot::Receiver<flockd_raft::ProposalResult>),
}

impl Future for Pending {
    type Output = ProposalResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ProposalResult> {
        match self.get_mut() {
            Pending::Local(receiver) => {
                Pin::new(receiver).poll(cx).map(|received| match received {
                    Ok(committed) => committed.map_err(ProposeError::from),
                    Err(_) => Err(ProposeError::ShuttingDown),
                })
            }
            Pending::Cluster(receiver) => {
                Pin::new(receiver).poll(cx).map(|received| match received {
                    Ok(outcome) => outcome.map_err(ProposeError::from),
                    Err(_) => Err(ProposeError::ShuttingDown),
                })
            }
        }
    }
}

pub trait Propose: Send + Sync + 'static {
    /// Queues `ops` as one entry of the log (applied together, atomically), stamped with the
    /// proposer's time. Never blocks.
    fn propose(&self, ops: Vec<Op>) -> Pending;
    /// Makes what was queued go out now rather than at the log's own pace; a proposer calls it
    /// before awaiting its results.
    fn push(&self);
    /// Whether a proposal could be committed now (`Err`: refuse state changes at admission).
    fn check_writable(&self) -> Result<(), ProposeError>;
    /// Whether this node serves commands at all (`Err`: a cluster node taken out of its
    /// cluster, which answers every command but a few about itself with this error).
    fn check_serving(&self) -> Result<(), ProposeError> {
        Ok(())
    }
    /// The proposer's time now, in log time.
    fn now(&self) -> flockd_core::Millis;
    /// True while this node may run the lease clock (expire leases, forget idle names): always
    /// for a single node, only on a cluster's leader once it re-armed the leases.
    fn leadership(&self) -> watch::Receiver<bool>;
    /// What a linearizable read must wait for before it reads the applied state, resolving to
    /// the time it judges leases by. `None`: read now (a single node's applied state is
    /// always current). A cluster node's may lag, so it waits for the leader's read point.
    fn read_point(&self) -> Option<ReadPoint>;
}

/// A read's wait for a point where this node's applied state is current.
pub type ReadPoint =
    Pin<Box<dyn Future<Output = Result<flockd_core::Millis, ProposeError>> + Send>>;

/// The single-node log: the append-only file.
pub struct LocalLog {
    pub aof: Arc<Aof>,
    pub clock: Arc<Clock>,
    /// Always true: a single node runs its own lease clock.
    pub leading: watch::Sender<bool>,
}

impl Propose for LocalLog {
    fn propose(&self, ops: Vec<Op>) -> Pending {
        Pending::Local(self.aof.propose(self.clock.now(), ops))
    }

    fn push(&self) {
        self.aof.write_now();
    }

    fn check_writable(&self) -> Result<(), ProposeError> {
        self.aof.check_writable().map_err(|e| match e {
            flockd_aof::AofError::ShuttingDown => ProposeError::ShuttingDown,
            other => ProposeError::Unwritable(other.to_string()),
        })
    }

    fn now(&self) -> flockd_core::Millis {
        self.clock.now()
    }

    fn leadership(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn read_point(&self) -> Option<ReadPoint> {
        None
    }
}

/// A cluster node's log: Raft. A proposal made here reaches the leader (forwarded if need
/// be), and its results come from this node's own apply of the committed entry.
pub struct ClusterLog {
    pub cluster: Arc<flockd_raft::Cluster>,
}

impl Propose for ClusterLog {
    fn propose(&self, ops: Vec<Op>) -> Pending {
        Pending::Cluster(self.cluster.propose(ops))
    }

    fn push(&self) {}

    fn check_writable(&self) -> Result<(), ProposeError> {
        // A node without a leader keeps a command for `cluster-wait-leader-ms` before it
        // answers -CLUSTERDOWN, so nothing is refused up front.
        Ok(())
    }

    fn check_serving(&self) -> Result<(), ProposeError> {
        match self.cluster.removed() {
            Some(removal) => Err(ProposeError::ClusterDown(removal.to_string())),
            None => Ok(()),
        }
    }

    fn now(&self) -> flockd_core::Millis {
        self.cluster.now()
    }

    fn leadership(&self) -> watch::Receiver<bool> {
        self.cluster.leadership()
    }

    fn read_point(&self) -> Option<ReadPoint> {
        let cluster = self.cluster.clone();
        Some(Box::pin(async move { Ok(cluster.read_point().await?) }))
    }
}

/// Proposes `ops`, pushes them out and waits for their results.
pub async fn commit(log: &dyn Propose, ops: Vec<Op>) -> ProposalResult {
    let pending = log.propose(ops);
    log.push();
    pending.await
}
