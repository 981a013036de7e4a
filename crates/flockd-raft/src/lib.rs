//! flockd-raft: the lock table replicated with Raft, on `openraft`. Every openraft type stays
//! inside this crate, so a version change touches one place.
//!
//! * [`types`]: what the log carries (a [`RaftProposal`]: ops, who proposed them, the leader's
//!   time) and openraft's type configuration.
//! * [`log_store`]: the log and vote on disk, in segment files written into space filled ahead
//!   (synced before acknowledged, group commit in its flush thread); a log of earlier versions,
//!   in `raft-log`'s files, is moved into them once.
//! * [`state_machine`]: committed entries applied through the server's [`flockd_log::Apply`] once each
//!   ([`dedup`]); snapshots in the AOF rewrite format.
//! * [`network`] and [`peer_server`]: the cluster port, both sides, on a [`transport`] (TCP,
//!   or an in-memory network for in-process clusters); every connection starts with both
//!   ends' [`identity`], so a member back with a wiped dir is refused.
//! * [`node`]: a running node, of one group or of several (`cluster-groups`: one openraft
//!   group per slot range, each with its own log dir, sharing the port and each peer's
//!   connection, where a group's requests are tagged with its number): proposing (forwarding to the leader, retrying after a leader
//!   change), taking office, membership, and the view ROLE and INFO show; [`counters`], what
//!   it counts for the metrics port.
//! * [`apply_trace`]: test-only, a line per applied entry, for the fault harness to show where
//!   replicas part.

pub mod apply_trace;
pub mod counters;
pub mod dedup;
pub mod error;
pub mod identity;
pub mod log_store;
pub mod network;
pub mod node;
pub mod peer_server;
pub mod peers;
pub mod pending;
pub mod state_machine;
pub mod transport;
pub mod types;

pub use counters::{LOG_FSYNC_SECONDS_BOUNDS, PROPOSAL_SECONDS_BOUNDS, RaftStats};
pub use error::StartError;
pub use flockd_log::{ProposalResult, ProposeError};
pub use node::{
    Cluster, ClusterSettings, ClusterView, GroupHost, Leader, MAX_GROUPS, Member, Role,
};
pub use peers::{Peer, parse_addr, parse_peers};
pub use types::{NodeId, RaftProposal};
