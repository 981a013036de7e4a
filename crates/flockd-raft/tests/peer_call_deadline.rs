//! A call to a peer answers within its timeout, whatever it waited for first. A read or a
//! forward gives its call what is left of the client's `cluster-wait-leader-ms`; the call used
//! to give that time to each of its steps in turn (the wait for another call's connect and
//! hello, the write, the answer), so it could answer late: the fault harness saw reads on a
//! follower answered success 3.52-3.55 s after they were sent, with a 3 s limit.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TempDir;
use flockd_raft::identity::{Identities, Identity};
use flockd_raft::network::{PeerClient, Request, Response, decode_request, frame, read_frame};
use flockd_raft::transport::{BoxFuture, Listener, PeerStream, Transport};
use tokio::io::AsyncWriteExt;

const PEER: Identity = Identity { node: 2, dir: 0xbb };

/// A peer that answers the hello only after `hello_after`, then reads every request and
/// answers none (a peer cut off after the handshake).
struct SlowPeer {
    hello_after: Duration,
}

impl Transport for SlowPeer {
    fn connect<'a>(&'a self, _addr: &'a str) -> BoxFuture<'a, std::io::Result<PeerStream>> {
        let hello_after = self.hello_after;
        Box::pin(async move {
            let (mine, mut theirs) = tokio::io::duplex(1 << 16);
            tokio::spawn(async move {
                while let Ok(Some((id, body))) = read_frame(&mut theirs).await {
                    if let Ok(Request::Hello(_)) = decode_request(&body) {
                        tokio::time::sleep(hello_after).await;
                        let answer = frame(id, &Response::Hello(PEER)).unwrap();
                        if theirs.write_all(&answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
            Ok(PeerStream::split(mine, "slow peer"))
        })
    }

    fn listen(
        &self,
        _addr: std::net::SocketAddr,
    ) -> BoxFuture<'_, std::io::Result<Box<dyn Listener>>> {
        Box::pin(async { Err(std::io::Error::other("not in this test")) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_answers_within_its_timeout_though_another_was_connecting() {
    let dir = TempDir::new("call-deadline");
    let identities = Arc::new(Identities::open(dir.path(), 1).unwrap());
    let transport = Arc::new(SlowPeer {
        hello_after: Duration::from_millis(700),
    });
    let client = Arc::new(PeerClient::new(
        PEER.node,
        "slow-peer:1".to_owned(),
        transport,
        identities,
    ));
    let timeout = Duration::from_secs(1);
    // The first call connects; its hello is answered 700 ms later.
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.call(&Request::ReadIndex, timeout).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The second waits for that connection, then for an answer that never comes.
    let started = Instant::now();
    let second = client.call(&Request::ReadIndex, timeout).await;
    let took = started.elapsed();
    assert!(second.is_err(), "{second:?}");
    // Before, it took the wait for the connection and then its whole timeout again: 1.65 s.
    assert!(
        took < timeout + Duration::from_millis(150),
        "the second call answered after {took:?}, its timeout {timeout:?}"
    );
    let first_result = first.await.unwrap();
    assert!(first_result.is_err(), "{first_result:?}");
}
