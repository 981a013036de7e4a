//! `propose`: the one way a state change gets into the state machine. A connection turns a
//! command into ops and proposes them; what comes back are the results of applying them, once
//! they are durable (local AOF) or committed (later: on a Raft majority).
//!
//! [`LocalLog`] is today's implementation: the AOF with group commit. A replicated one slots in
//! behind the same [`Propose`] trait; commands never see which one runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use flockd_aof::{Aof, CommitError, Committed};
use flockd_core::{Op, OpResult};
use tokio::sync::oneshot;

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
pub struct Pending {
    receiver: oneshot::Receiver<Committed>,
}

impl Future for Pending {
    type Output = ProposalResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ProposalResult> {
        Pin::new(&mut self.receiver)
            .poll(cx)
            .map(|received| match received {
                Ok(committed) => committed.map_err(ProposeError::from),
                Err(_) => Err(ProposeError::ShuttingDown),
            })
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
    /// The proposer's time now, in log time.
    fn now(&self) -> flockd_core::Millis;
}

/// The single-node log: the append-only file.
pub struct LocalLog {
    pub aof: Arc<Aof>,
    pub clock: Clock,
}

impl Propose for LocalLog {
    fn propose(&self, ops: Vec<Op>) -> Pending {
        Pending {
            receiver: self.aof.propose(self.clock.now(), ops),
        }
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
}

/// Proposes `ops`, pushes them out and waits for their results.
pub async fn commit(log: &dyn Propose, ops: Vec<Op>) -> ProposalResult {
    let pending = log.propose(ops);
    log.push();
    pending.await
}
