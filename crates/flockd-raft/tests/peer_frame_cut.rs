//! A frame cut short is the last thing written on its connection. A call to a peer gives up on
//! its write at its timeout (a peer paused with SIGSTOP reads nothing, and the socket's buffer
//! fills); the frame is then half sent. Another call already waiting for the connection's writer
//! used to write its own frame right after, and the peer, once it read again, took the second
//! frame's bytes for the rest of the first: a request made of two. The decoder ignores trailing
//! bytes, so such a mix could even decode, as a Raft append whose last entry is not what the
//! leader sent.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::TempDir;
use flockd_raft::identity::{Identities, Identity};
use flockd_raft::network::{PeerClient, Request, Response, decode_request, frame, read_frame};
use flockd_raft::transport::{BoxFuture, Listener, PeerStream, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::{Mutex, oneshot};

const PEER: Identity = Identity { node: 2, dir: 0xcc };
/// The pipe's buffer: far smaller than the big request, so its write blocks part way.
const PIPE: usize = 4096;

/// A peer that answers the hello, then reads nothing until it is resumed (a paused process),
/// and then hands every byte it gets, up to the end of the stream, to the test.
struct PausedPeer {
    resume: Mutex<Option<oneshot::Receiver<()>>>,
    received: Mutex<Option<oneshot::Sender<Vec<u8>>>>,
}

impl Transport for PausedPeer {
    fn connect<'a>(&'a self, _addr: &'a str) -> BoxFuture<'a, std::io::Result<PeerStream>> {
        Box::pin(async move {
            let (mine, theirs) = tokio::io::duplex(PIPE);
            let resume = self.resume.lock().await.take().expect("one connection");
            let received = self.received.lock().await.take().expect("one connection");
            tokio::spawn(serve(theirs, resume, received));
            Ok(PeerStream::split(mine, "paused peer"))
        })
    }

    fn listen(
        &self,
        _addr: std::net::SocketAddr,
    ) -> BoxFuture<'_, std::io::Result<Box<dyn Listener>>> {
        Box::pin(async { Err(std::io::Error::other("not in this test")) })
    }
}

async fn serve(
    mut theirs: DuplexStream,
    resume: oneshot::Receiver<()>,
    received: oneshot::Sender<Vec<u8>>,
) {
    let Ok(Some((id, body))) = read_frame(&mut theirs).await else {
        return;
    };
    assert!(matches!(decode_request(&body), Ok(Request::Hello(_))));
    let hello = frame(id, &Response::Hello(PEER)).unwrap();
    theirs.write_all(&hello).await.unwrap();
    let _ = resume.await;
    // Everything until the dialer hangs up, or until nothing more comes for a second.
    let mut bytes = Vec::new();
    let mut chunk = vec![0; 1 << 16];
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_secs(1), theirs.read(&mut chunk)).await
        && n > 0
    {
        bytes.extend_from_slice(&chunk[..n]);
    }
    let _ = received.send(bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_cut_short_is_the_last_thing_on_its_connection() {
    let dir = TempDir::new("peer-frames");
    let identities = Arc::new(Identities::open(dir.path(), 1).unwrap());
    let (resume, resumed) = oneshot::channel();
    let (received_tx, received) = oneshot::channel();
    let transport = Arc::new(PausedPeer {
        resume: Mutex::new(Some(resumed)),
        received: Mutex::new(Some(received_tx)),
    });
    let client = Arc::new(PeerClient::new(
        PEER.node,
        "paused-peer:1".to_owned(),
        transport,
        identities,
    ));
    let big = big_request();
    let cut = tokio::spawn({
        let client = client.clone();
        async move { client.call(&big, Duration::from_millis(400)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Finds the connection live and waits for the writer behind the big request, and gets it when that one gives up.
    let behind = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .call(&Request::Probe, Duration::from_millis(1500))
                .await
        }
    });
    assert!(
        cut.await.unwrap().is_err(),
        "the big request cannot be sent"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    resume.send(()).unwrap();
    let bytes = tokio::time::timeout(Duration::from_secs(5), received)
        .await
        .expect("the peer reports what it read")
        .unwrap();
    let _ = behind.await.unwrap();

    // What the peer read after the hello: the big request's frame cut short, and nothing
    // after it.
    let after = &bytes[..];
    assert!(after.len() >= 12, "the big request's header was sent");
    let big_id = u64::from_be_bytes(after[4..12].try_into().unwrap());
    let big_frame = frame(big_id, &big_request()).unwrap();
    assert!(
        after.len() < big_frame.len(),
        "the big request was cut short ({} of {} bytes)",
        after.len(),
        big_frame.len()
    );
    let same = after
        .iter()
        .zip(&big_frame)
        .take_while(|(a, b)| a == b)
        .count();
    assert_eq!(
        same,
        after.len(),
        "{} bytes came after the hello, and from byte {same} on they are not the big \
         request's: another frame was written after it was cut",
        after.len()
    );
}

fn big_request() -> Request {
    Request::SnapshotChunk {
        transfer: 7,
        offset: 0,
        data: vec![0xab; 16 * PIPE],
    }
}

#[test]
fn a_body_with_bytes_left_over_does_not_decode() {
    let mut body = postcard::to_allocvec(&Request::ReadIndex).unwrap();
    assert!(matches!(decode_request(&body), Ok(Request::ReadIndex)));
    // The start of another frame after it: what a frame cut short and the next one make.
    body.extend_from_slice(&frame(9, &Request::Probe).unwrap());
    assert!(
        decode_request(&body).is_err(),
        "a request with bytes left over decoded"
    );
}
