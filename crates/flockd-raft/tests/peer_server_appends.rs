//! A follower answers a connection's stream of appends in the order they came, each under its
//! own id, even when the leader sends the next before the last is answered; when openraft ends
//! a stream (a conflict), what was queued behind it is answered too, and the next append starts
//! a new stream.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{PlainHost, TempDir};
use flockd_raft::append_stream::{Requests, Results};
use flockd_raft::identity::Identity;
use flockd_raft::network::{Request, Response, decode_response, frame, read_frame};
use flockd_raft::peer_server::{PeerHandler, serve_connection};
use flockd_raft::pending::PendingTable;
use flockd_raft::state_machine::{MachineStore, Me, SnapshotData};
use flockd_raft::transport::{BoxFuture, PeerStream};
use flockd_raft::types::{LeaderId, LogId, SnapshotMeta, Vote};
use futures_util::StreamExt;
use openraft::raft::{AppendEntriesRequest, StreamAppendError};
use tokio::io::{AsyncWriteExt, DuplexStream};

const ME: Identity = Identity { node: 1, dir: 0xaa };
/// The index at which the follower's log "conflicts" with the leader's.
const CONFLICT_AT: u64 = 3;

fn log_id(index: u64) -> LogId {
    LogId {
        leader_id: LeaderId {
            term: 3,
            node_id: 2,
        },
        index,
    }
}

fn append(prev: u64) -> Request {
    Request::StreamAppend(AppendEntriesRequest {
        vote: Vote::new_committed(3, 2),
        prev_log_id: Some(log_id(prev)),
        leader_commit: None,
        entries: vec![],
    })
}

/// openraft's follower, as far as a stream goes: each request matches at its prev_log_id,
/// slower for the earlier ones (an answer may not overtake), until the one at
/// [`CONFLICT_AT`], whose conflict ends the stream.
struct Follower;

impl PeerHandler for Follower {
    fn greet(&self, _peer: Identity) -> Result<Identity, String> {
        Ok(ME)
    }
    fn refused(&self, _why: String) {}
    fn handle(&self, _request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async { Response::Failed("not here".to_owned()) })
    }
    fn stream_append(&self, requests: Requests) -> Results {
        Box::pin(
            requests
                .then(|rpc| async move {
                    let prev = rpc.prev_log_id.expect("a prev_log_id");
                    tokio::time::sleep(Duration::from_millis(20u64.saturating_sub(prev.index * 5)))
                        .await;
                    if prev.index == CONFLICT_AT {
                        Err(StreamAppendError::Conflict(prev))
                    } else {
                        Ok(Some(prev))
                    }
                })
                .scan(false, |ended, result| {
                    let stop = *ended;
                    *ended = result.is_err();
                    std::future::ready((!stop).then_some(Ok(result)))
                }),
        )
    }
    fn install(
        &self,
        _vote: Vote,
        _meta: SnapshotMeta,
        _file: SnapshotData,
    ) -> BoxFuture<'_, Response> {
        Box::pin(async { Response::Failed("not here".to_owned()) })
    }
}

async fn send(to: &mut DuplexStream, id: u64, request: &Request) {
    to.write_all(&frame(id, request).unwrap()).await.unwrap();
}

async fn answer(from: &mut DuplexStream) -> (u64, Response) {
    let (id, body) = tokio::time::timeout(Duration::from_secs(30), read_frame(from))
        .await
        .expect("an answer in time")
        .unwrap()
        .expect("an answer");
    (id, decode_response(&body).unwrap())
}

fn matched_at(response: &Response) -> Option<u64> {
    match response {
        Response::Appended(Ok(Some(id))) => Some(id.index),
        _ => None,
    }
}

#[tokio::test]
async fn appends_are_answered_in_order_and_a_conflict_ends_only_its_stream() {
    let dir = TempDir::new("appends");
    let store = MachineStore::open(
        dir.path(),
        Arc::new(PlainHost::default()),
        Arc::new(PendingTable::default()),
        Me {
            node: 1,
            incarnation: 1,
        },
    )
    .unwrap();
    let (mut peer, ours) = tokio::io::duplex(1 << 16);
    let serving = tokio::spawn(serve_connection(
        PeerStream::split(ours, "test"),
        Arc::new(Follower),
        store,
    ));
    send(
        &mut peer,
        1,
        &Request::Hello(Identity { node: 2, dir: 0xbb }),
    )
    .await;
    assert!(matches!(answer(&mut peer).await, (1, Response::Hello(ME))));

    // Five appends at once, none waiting for an answer: prev 1 and 2 match, 3 conflicts.
    for prev in 1..=5 {
        send(&mut peer, 10 + prev, &append(prev)).await;
    }
    let mut answers = Vec::new();
    for _ in 1..=5 {
        answers.push(answer(&mut peer).await);
    }
    let ids: Vec<u64> = answers.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [11, 12, 13, 14, 15], "in the order sent: {answers:?}");
    assert_eq!(matched_at(&answers[0].1), Some(1), "{answers:?}");
    assert_eq!(matched_at(&answers[1].1), Some(2), "{answers:?}");
    assert!(
        matches!(&answers[2].1, Response::Appended(Err(StreamAppendError::Conflict(id))) if id.index == CONFLICT_AT),
        "{answers:?}"
    );
    // Behind the conflict: each is answered once, by the ended stream (failed) or a new one.
    for (prev, (_, response)) in (4..=5).zip(&answers[3..]) {
        assert!(
            matches!(response, Response::Failed(_)) || matched_at(response) == Some(prev),
            "{answers:?}"
        );
    }

    // The next append starts a new stream.
    send(&mut peer, 30, &append(6)).await;
    let (id, response) = answer(&mut peer).await;
    assert_eq!((id, matched_at(&response)), (30, Some(6)), "{response:?}");

    drop(peer);
    tokio::time::timeout(Duration::from_secs(30), serving)
        .await
        .expect("the connection ends with its peer")
        .unwrap()
        .unwrap();
}
