//! What the log carries: a [`RaftProposal`] (one entry's ops, who proposed them and when the leader
//! stamped them) and openraft's type configuration around it. Every openraft type the rest of
//! the crate names is aliased here.

use std::fmt;

use flockd_core::{Millis, Op};
use flockd_log::Version;
use flockd_log::record::{Payload, Record, decode_record, encode_entry};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

openraft::declare_raft_types!(
    /// flockd's Raft: node ids are `u64`, a node's address is `host:port@cport`.
    pub FlockRaft:
        D = RaftProposal,
        R = RaftResponse,
        Node = openraft::BasicNode,
);

pub type NodeId = u64;
pub type LogId = openraft::alias::LogIdOf<FlockRaft>;
pub type Vote = openraft::alias::VoteOf<FlockRaft>;
/// A Raft log entry (openraft's), not to be confused with the committed [`flockd_log::Entry`]
/// the state machine applies.
pub type RaftEntry = openraft::alias::EntryOf<FlockRaft>;
pub type EntryPayload = openraft::EntryPayload<RaftProposal, NodeId, openraft::BasicNode>;
pub type Membership = openraft::Membership<NodeId, openraft::BasicNode>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<FlockRaft>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<FlockRaft>;
pub type LeaderId = openraft::alias::LeaderIdOf<FlockRaft>;

/// Who proposed an entry, so that a proposal sent twice (forwarded again after a leader change)
/// takes effect once: `seq` numbers the proposals of one run (`incarnation`) of node `node`,
/// and every seq below `floor` had already been answered there when this one was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub node: NodeId,
    pub incarnation: u64,
    pub seq: u64,
    pub floor: u64,
}

/// One log entry of flockd: ops applied together, at the time the leader stamped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftProposal {
    pub origin: Origin,
    pub at: Millis,
    pub ops: Vec<Op>,
}

impl fmt::Display for RaftProposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "proposal {}/{}#{} at {} ({} op(s))",
            self.origin.node,
            self.origin.incarnation,
            self.origin.seq,
            self.at.0,
            self.ops.len()
        )
    }
}

/// On the wire and on disk the ops are one AOF entry record: the format (and its tests) that
/// already says what every op is in bytes.
#[derive(Serialize, Deserialize)]
struct ProposalWire {
    origin: Origin,
    #[serde(with = "serde_bytes")]
    entry: Vec<u8>,
}

impl Serialize for RaftProposal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut entry = Vec::new();
        encode_entry(0, self.at, &self.ops, &mut entry).map_err(serde::ser::Error::custom)?;
        ProposalWire {
            origin: self.origin,
            entry,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RaftProposal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = ProposalWire::deserialize(deserializer)?;
        match decode_record(Version::V2, &wire.entry) {
            Ok((Payload::V2(Record::Entry { at, ops, .. }), used)) if used == wire.entry.len() => {
                Ok(RaftProposal {
                    origin: wire.origin,
                    at,
                    ops,
                })
            }
            Ok(_) => Err(serde::de::Error::custom("not one entry record")),
            Err(e) => Err(serde::de::Error::custom(e)),
        }
    }
}

/// What openraft hands back for an applied entry. Results travel another way: every node
/// computes them when it applies, and the proposing node answers its client from its own
/// apply (see `pending::PendingTable`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftResponse;

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_proposal_round_trips_through_postcard() {
        let proposal = RaftProposal {
            origin: Origin {
                node: 3,
                incarnation: 77,
                seq: 9,
                floor: 4,
            },
            at: Millis(123_456),
            ops: vec![
                Op::Release {
                    name: Bytes::from_static(b"order:1"),
                    token: 5,
                },
                Op::ForceRelease {
                    name: Bytes::from_static(b"x"),
                },
            ],
        };
        let bytes = postcard::to_allocvec(&proposal).unwrap();
        let back: RaftProposal = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, proposal);
    }

    #[test]
    fn damaged_entry_bytes_are_an_error_not_a_panic() {
        let wire = ProposalWire {
            origin: Origin {
                node: 1,
                incarnation: 1,
                seq: 1,
                floor: 1,
            },
            entry: vec![1, 2, 3, 4, 5, 6, 7, 8, 9],
        };
        let bytes = postcard::to_allocvec(&wire).unwrap();
        assert!(postcard::from_bytes::<RaftProposal>(&bytes).is_err());
    }
}
