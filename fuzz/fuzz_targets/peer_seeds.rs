//! Valid peer messages, one of each request and response a peer can send, framed as they go on
//! the wire, so the fuzzer starts from deep structures (an append carrying entries with ops and
//! a membership, a snapshot's end with its meta and dedup table) instead of having to find them
//! byte by byte; and the checksum fix-up for AOF entry records embedded in peer messages.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use bytes::Bytes;
use flockd_aof::record::{FRAME_HEADER_LEN, checksum, length_is_sane};
use flockd_core::{Millis, Op};
use flockd_raft::dedup::Dedup;
use flockd_raft::identity::Identity;
use flockd_raft::network::{Forwarded, MembershipChange, ReadPoint, Request, Response, frame};
use flockd_raft::types::{
    LeaderId, LogId, Membership, Origin, RaftProposal, RaftEntry, SnapshotMeta, StoredMembership, Vote,
};
use openraft::EntryPayload;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    VoteRequest, VoteResponse,
};

fn log_id(term: u64, index: u64) -> LogId {
    LogId {
        leader_id: LeaderId { term, node_id: 2 },
        index,
    }
}

fn proposal() -> RaftProposal {
    let mut dedup = Dedup::default();
    let origin = Origin {
        node: 2,
        incarnation: 5,
        seq: 9,
        floor: 3,
    };
    dedup.admit(&origin);
    RaftProposal {
        origin,
        at: Millis(1_700_000_000_000),
        ops: vec![
            Op::Release {
                name: Bytes::from_static(b"orders:17"),
                token: 42,
            },
            Op::ForceRelease {
                name: Bytes::from_static(b"x"),
            },
        ],
    }
}

fn membership() -> Membership {
    Membership::new_with_defaults(
        vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([2, 3, 4])],
        BTreeSet::from([5]),
    )
}

fn meta() -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: Some(log_id(3, 40)),
        last_membership: StoredMembership::new(Some(log_id(2, 10)), membership()),
    }
}

fn dedup() -> Dedup {
    let mut dedup = Dedup::default();
    for seq in [4, 5, 7] {
        dedup.admit(&Origin {
            node: 3,
            incarnation: 1,
            seq,
            floor: 2,
        });
    }
    dedup
}

fn messages() -> Vec<Vec<u8>> {
    let vote = Vote::new_committed(3, 2);
    let entries: Vec<RaftEntry> = vec![
        RaftEntry {
            log_id: log_id(3, 41),
            payload: EntryPayload::Blank,
        },
        RaftEntry {
            log_id: log_id(3, 42),
            payload: EntryPayload::Normal(proposal()),
        },
        RaftEntry {
            log_id: log_id(3, 43),
            payload: EntryPayload::Membership(membership()),
        },
    ];
    let requests = vec![
        Request::Hello(Identity { node: 2, dir: 0xbb }),
        Request::Refuse("node 1 is back with another data dir".to_owned()),
        Request::Append(AppendEntriesRequest {
            vote,
            prev_log_id: Some(log_id(3, 40)),
            leader_commit: Some(log_id(3, 40)),
            entries,
        }),
        Request::Vote(VoteRequest::new(Vote::new(4, 2), Some(log_id(3, 43)))),
        Request::PreVote(VoteRequest::new(Vote::new(4, 2), None)),
        Request::SnapshotBegin { transfer: 6 },
        Request::SnapshotChunk {
            transfer: 6,
            offset: 0,
            data: b"FLOCKAO2 and some bytes".to_vec(),
        },
        Request::SnapshotEnd {
            transfer: 6,
            len: 23,
            vote,
            meta: meta(),
            dedup: dedup(),
        },
        Request::TransferLeader(TransferLeaderRequest::new(vote, 3, Some(log_id(3, 43)))),
        Request::Forward(proposal()),
        Request::ReadIndex,
        // A multi-group node's: another group's request on the shared connection, and a
        // membership change sent to a group's leader.
        Request::Group {
            group: 2,
            request: Box::new(Request::ReadIndex),
        },
        Request::Membership(MembershipChange::Add {
            id: 4,
            addr: "127.0.0.1:6393@16393".to_owned(),
        }),
        Request::Membership(MembershipChange::Remove { id: 3 }),
    ];
    let responses = vec![
        Response::Hello(Identity { node: 1, dir: 0xaa }),
        Response::Refused("two processes run as node 1 from different dirs".to_owned()),
        Response::Append(AppendEntriesResponse::Success),
        Response::Append(AppendEntriesResponse::PartialSuccess(Some(log_id(3, 42)))),
        Response::Append(AppendEntriesResponse::Conflict),
        Response::Append(AppendEntriesResponse::HigherVote(Vote::new(5, 3))),
        Response::Vote(VoteResponse::new(vote, Some(log_id(3, 43)), true)),
        Response::SnapshotChunk,
        Response::Snapshot(SnapshotResponse::new(vote)),
        Response::TransferLeader(Ok(())),
        Response::Forwarded(Forwarded::Committed),
        Response::Forwarded(Forwarded::NotLeader { leader: Some(2) }),
        Response::Forwarded(Forwarded::Failed("no leader".to_owned())),
        Response::ReadPoint(ReadPoint::Ready {
            index: 43,
            at: Millis(1_700_000_000_500),
        }),
        Response::ReadPoint(ReadPoint::NotLeader { leader: None }),
        Response::Failed("undecodable: a bad varint".to_owned()),
        Response::Membership(None),
        Response::Membership(Some("no leader is known".to_owned())),
    ];
    let mut framed = Vec::new();
    for (id, request) in requests.iter().enumerate() {
        framed.push(frame(id as u64 + 1, request).expect("a seed encodes"));
    }
    for (id, response) in responses.iter().enumerate() {
        framed.push(frame(id as u64 + 1, response).expect("a seed encodes"));
    }
    // A hello, then the rest of a connection's requests, as one stream.
    framed.push(framed[..requests.len()].concat());
    framed
}

/// Every seed message, each a whole frame (and one a whole connection's worth).
pub fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(messages)
}

/// The seed `input[0]` picks, with the input's next bytes, three at a time, written over it:
/// a big-endian position (one past the end appends) and the byte to put there.
pub fn overwrite(input: &[u8]) -> Vec<u8> {
    let Some((&pick, edits)) = input.split_first() else {
        return Vec::new();
    };
    let seeds = seeds();
    let mut bytes = seeds[pick as usize % seeds.len()].clone();
    for edit in edits.chunks_exact(3) {
        let at = u16::from_be_bytes([edit[0], edit[1]]) as usize % (bytes.len() + 1);
        if at == bytes.len() {
            bytes.push(edit[2]);
        } else {
            bytes[at] = edit[2];
        }
    }
    bytes
}

/// Writes the right checksum into every AOF record that fills a postcard byte string exactly
/// (a length varint followed by a record of that length), as a proposal's entry does.
pub fn seal_entries(bytes: &mut [u8]) {
    let mut at = 0;
    while at < bytes.len() {
        let (declared, used) = varint(&bytes[at..]);
        let start = at + used;
        at += 1;
        let Some(declared) = declared else {
            continue;
        };
        if declared < FRAME_HEADER_LEN as u64 || start + FRAME_HEADER_LEN > bytes.len() {
            continue;
        }
        let len = u32::from_le_bytes(bytes[start..start + 4].try_into().unwrap());
        let end = start + FRAME_HEADER_LEN + len as usize;
        if !length_is_sane(len)
            || declared != (FRAME_HEADER_LEN + len as usize) as u64
            || end > bytes.len()
        {
            continue;
        }
        let crc = checksum(len, &bytes[start + FRAME_HEADER_LEN..end]);
        bytes[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }
}

/// A postcard varint (LEB128, at most 10 bytes) at the start of `bytes`, and the bytes it took.
fn varint(bytes: &[u8]) -> (Option<u64>, usize) {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return (Some(value), i + 1);
        }
    }
    (None, 0)
}
