//! The log: where this node's state changes go, and the one value the server and the commands
//! hold of it. A single node writes them to its append-only file ([`aof`]); a cluster node
//! proposes them to Raft ([`raft`]). Everything the rest of the daemon asks of a log
//! (proposing, the read point, whether it serves and takes writes, what INFO, ROLE, the metrics
//! and the console show, and controls such as BGREWRITEAOF, FLOCK.CLUSTER and a leader's
//! hand-over at a stop) is a method of [`Log`], so only this folder knows which one runs. A
//! router over several Raft groups would be one more [`Log`], with no command changed.

pub mod aof;
pub mod groups;
pub mod open;
pub mod raft;
mod view;

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use flockd_core::{Millis, Op};
use flockd_metrics::MetricsSnapshot;
use tokio::sync::{oneshot, watch};

use crate::config::Config;
use crate::services::applied::AppliedState;
use crate::services::clock::Clock;

pub use flockd_log::{ProposalResult, ProposeError};
pub use view::{LogMember, LogRole, LogView, node_name};

/// What opening a log leaves running: the state it applies to, the log, and each group's state,
/// log and clock.
pub struct Opened {
    /// The first group's state (the only one but on a multi-group cluster node).
    pub applied: Arc<AppliedState>,
    /// Where the server's proposals go: the only log, or the router over the groups' logs.
    pub log: Arc<dyn Log>,
    /// Each group's state, log and clock, in slot order: one on a single node and on a one-group
    /// cluster node.
    pub groups: Vec<Group>,
}

/// One group's state and its log: the names in its slots are applied there, its lease clock
/// expires them.
#[derive(Clone)]
pub struct Group {
    pub applied: Arc<AppliedState>,
    pub log: Arc<dyn Log>,
    /// The group's own log time, which its entries are stamped with where this node stamps
    /// them: every group's leader continues it from that group's log, never another's.
    pub clock: Arc<Clock>,
}

/// Why a log could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Aof(#[from] flockd_aof::AofError),
    #[error("cannot apply {what} at start: {source}")]
    Start {
        what: &'static str,
        source: ProposeError,
    },
    #[error("cluster: {0}")]
    Cluster(flockd_raft::StartError),
    /// The fault harness's sync-delay file is unusable (see `raft::test_sync_delay`).
    #[error("{0}")]
    TestSyncDelay(String),
    /// `FLOCKD_TEST_SNAPSHOT_EVERY` is not a number in range (see `raft::snapshot_every`).
    #[error("{0}")]
    TestSnapshotEvery(String),
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where an INFO section's fields go, one `name:value` at a time.
pub type Fields<'a> = &'a mut dyn FnMut(&'static str, &dyn Display);

/// A read's wait for a point where this node's applied state is current, resolving to the
/// time leases are judged by.
pub type ReadWait = BoxFuture<'static, Result<Millis, ProposeError>>;

pub trait Log: Send + Sync + 'static {
    // The write path.

    /// Queues `ops` as one entry of the log (applied together, atomically), stamped with this
    /// node's time. Never blocks.
    fn propose(&self, ops: Vec<Op>) -> Committing;
    /// Writes what was queued now rather than at the log's own pace (the AOF under `everysec`
    /// and `no`); a proposer calls it before awaiting its results. Where every proposal is
    /// written at once (`always`, Raft) there is nothing to hurry and it does nothing.
    fn write_now(&self);
    /// Whether this node serves commands at all (`Err`: a node taken out of its cluster, which
    /// answers every command but a few about itself with this error).
    fn check_serving(&self) -> Result<(), ProposeError>;
    /// Whether a proposal could be written now (`Err`: state changes are refused at admission,
    /// as Redis refuses them with `-MISCONF`).
    fn check_writable(&self) -> Result<(), ProposeError>;
    /// This node's time now, in log time.
    fn now(&self) -> Millis;
    /// True while this node may run the lease clock (expire leases, forget idle names): always
    /// on a single node; on a cluster's leader once it re-armed the leases.
    fn lease_duty(&self) -> watch::Receiver<bool>;
    /// What a linearizable read must wait for before it reads the applied state. `None`: read
    /// now (a single node's applied state is always current).
    fn read_point(&self) -> Option<ReadWait>;
    /// Which node serves a name in `slot` (Redis Cluster's routing, for `-MOVED`).
    fn route(&self, slot: u16) -> Route;

    // What it shows.

    fn view(&self) -> LogView;
    /// The slot ranges and who serves each, as CLUSTER SLOTS, SHARDS and NODES show them.
    /// `None` on a single node, which has no cluster. One group serves every slot.
    fn shards(&self) -> Option<Vec<Shard>> {
        let view = self.view();
        view.node_id.is_some().then(|| {
            vec![Shard {
                slots: 0..=flockd_core::SLOT_COUNT - 1,
                view,
            }]
        })
    }
    /// INFO persistence, after its title.
    fn persistence_info(&self, field: Fields<'_>);
    /// INFO replication's fields that only this kind of log has, after the role's.
    fn replication_info(&self, field: Fields<'_>);
    /// Its metrics.
    fn metrics(&self, snapshot: &mut MetricsSnapshot);

    // Controls.

    /// BGREWRITEAOF: `Err` says why not.
    fn rewrite(&self) -> Result<(), String>;
    /// FLOCK.CLUSTER's changes of membership; `None` on a single node.
    fn membership(&self) -> Option<Box<dyn Membership>>;
    /// CONFIG SET: what the log does with a changed configuration (the AOF's fsync policy and
    /// rewrite thresholds).
    fn reconfigure(&self, old: &Config, next: &Config);
    /// A stop: hands this node's leadership to another member within `limit`. True when
    /// another node leads now (then the stop drains the connections first).
    fn hand_over(&self, limit: Duration) -> BoxFuture<'_, bool>;
    /// Resolves when the leader differs from `known`, to the new one; to `known` itself when
    /// the log stopped. Never, on a single node.
    fn leader_changed(&self, known: Option<u64>) -> BoxFuture<'_, Option<u64>>;
    /// Why the cluster refuses this node, once it does (the node then stops).
    fn refusals(&self) -> Option<watch::Receiver<Option<String>>>;
    /// Writes and syncs what is queued and stops the log.
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// Where a command for a name is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Here: this node leads the name's group (a single node leads everything).
    Here,
    /// Another member leads it: its client address, for `-MOVED`.
    Leader { host: String, port: u16 },
    /// No leader is known now: the command goes on here and waits for one, as any proposal
    /// does (up to `cluster-wait-leader-ms`).
    Unknown,
}

/// A range of slots and the group that serves them, as this node sees it.
#[derive(Clone, Debug)]
pub struct Shard {
    pub slots: std::ops::RangeInclusive<u16>,
    pub view: LogView,
}

/// FLOCK.CLUSTER ADD, REMOVE and LEADER. Each resolves once the change is committed (or to
/// why it was not).
pub trait Membership: Send + Sync {
    fn add(&self, id: u64, addr: String) -> BoxFuture<'static, Result<(), String>>;
    fn remove(&self, id: u64) -> BoxFuture<'static, Result<(), String>>;
    fn transfer_leader(&self, id: u64) -> BoxFuture<'static, Result<(), String>>;
}

/// Proposed ops on their way: resolves to their results, in order.
pub struct Committing {
    receiver: oneshot::Receiver<ProposalResult>,
    /// What a log that dropped the proposal unanswered (it stopped) means by that.
    if_dropped: ProposeError,
}

impl Committing {
    pub fn new(receiver: oneshot::Receiver<ProposalResult>, if_dropped: ProposeError) -> Self {
        Committing {
            receiver,
            if_dropped,
        }
    }
}

impl Future for Committing {
    type Output = ProposalResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ProposalResult> {
        let this = self.get_mut();
        Pin::new(&mut this.receiver)
            .poll(cx)
            .map(|received| received.unwrap_or_else(|_| Err(this.if_dropped.clone())))
    }
}

/// FLOCK.CLUSTER ADD's address (`host:port[@cport]`), checked before anything is proposed.
pub fn check_member_addr(id: u64, addr: &str) -> Result<(), String> {
    flockd_raft::parse_addr(id, addr)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Proposes `ops`, writes them now and waits for their results.
pub async fn commit(log: &dyn Log, ops: Vec<Op>) -> ProposalResult {
    let proposal = log.propose(ops);
    log.write_now();
    proposal.await
}
