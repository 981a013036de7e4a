//! A snapshot transfer that a peer abandons leaves no file behind: begun anew under another id,
//! or ended with a length that does not match what arrived (found by the `peer_handshake` fuzz
//! target: `receiving-*.tmp` files stayed in the snapshot dir until the next snapshot or
//! restart, each up to the snapshot size limit).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{PlainHost, TempDir};
use flockd_raft::dedup::Dedup;
use flockd_raft::identity::Identity;
use flockd_raft::network::{Request, Response, decode_response, frame, read_frame};
use flockd_raft::peer_server::{PeerHandler, serve_connection};
use flockd_raft::pending::PendingTable;
use flockd_raft::state_machine::{MachineStore, Me, SnapshotData};
use flockd_raft::transport::{BoxFuture, PeerStream};
use flockd_raft::types::{SnapshotMeta, Vote};
use tokio::io::{AsyncWriteExt, DuplexStream};

const ME: Identity = Identity { node: 1, dir: 0xaa };

/// Takes every hello; nothing else reaches it in these tests.
struct Greeter;

impl PeerHandler for Greeter {
    fn greet(&self, _peer: Identity) -> Result<Identity, String> {
        Ok(ME)
    }
    fn refused(&self, _why: String) {}
    fn handle(&self, _request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async { Response::Failed("not here".to_owned()) })
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

fn transfers_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("receiving-"))
        .collect();
    names.sort();
    names
}

/// Sends `request` as frame `id` and returns the answer.
async fn call(to: &mut DuplexStream, id: u64, request: &Request) -> Response {
    to.write_all(&frame(id, request).unwrap()).await.unwrap();
    let (got, body) = tokio::time::timeout(Duration::from_secs(30), read_frame(to))
        .await
        .expect("an answer in time")
        .unwrap()
        .expect("an answer");
    assert_eq!(got, id);
    decode_response(&body).unwrap()
}

#[tokio::test]
async fn an_abandoned_transfer_leaves_no_file() {
    let dir = TempDir::new("transfers");
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
        Arc::new(Greeter),
        store,
    ));
    let hello = call(
        &mut peer,
        1,
        &Request::Hello(Identity { node: 2, dir: 0xbb }),
    )
    .await;
    assert!(matches!(hello, Response::Hello(ME)), "{hello:?}");

    let begin = |transfer| Request::SnapshotBegin { transfer };
    let chunk = |transfer| Request::SnapshotChunk {
        transfer,
        offset: 0,
        data: vec![7; 1000],
    };
    assert!(matches!(
        call(&mut peer, 2, &begin(5)).await,
        Response::SnapshotChunk
    ));
    assert!(matches!(
        call(&mut peer, 3, &chunk(5)).await,
        Response::SnapshotChunk
    ));
    assert_eq!(transfers_in(dir.path()), ["receiving-5.tmp"]);
    // The leader gave up on transfer 5 and starts 6: 5's file goes.
    assert!(matches!(
        call(&mut peer, 4, &begin(6)).await,
        Response::SnapshotChunk
    ));
    assert_eq!(transfers_in(dir.path()), ["receiving-6.tmp"]);
    assert!(matches!(
        call(&mut peer, 5, &chunk(6)).await,
        Response::SnapshotChunk
    ));
    // An end that does not match what arrived ends the transfer, and its file.
    let end = Request::SnapshotEnd {
        transfer: 6,
        len: 999,
        vote: Vote::new_committed(3, 2),
        meta: SnapshotMeta::default(),
        dedup: Dedup::default(),
    };
    assert!(matches!(
        call(&mut peer, 6, &end).await,
        Response::Failed(_)
    ));
    assert_eq!(transfers_in(dir.path()), Vec::<String>::new());

    // Still serving: a transfer begun and cut off by a hang-up goes too (as it did before).
    assert!(matches!(
        call(&mut peer, 7, &begin(8)).await,
        Response::SnapshotChunk
    ));
    drop(peer);
    tokio::time::timeout(Duration::from_secs(30), serving)
        .await
        .expect("the connection ends")
        .unwrap()
        .unwrap();
    assert_eq!(transfers_in(dir.path()), Vec::<String>::new());
}
