//! Fuzz target for the serving side of the cluster port without TLS, from the first byte a
//! connecting peer sends: arbitrary bytes go through `serve_connection` (the code a node runs
//! for each accepted peer) with this node's real `Identities` (node 1, dir id `aa`, having seen
//! node 2 with dir `bb` and node 3 with dir `cc`; the input's first byte says which of them are
//! members) and a handler that answers every request after the hello with a failure.
//!
//! Checked: nothing panics and the connection ends when the peer's bytes do (a hang is a
//! libFuzzer timeout); every reply is a well-formed frame answering a frame the peer sent, at
//! most one reply per frame; until a hello is accepted every frame is answered in order with
//! what the protocol says (an undecodable frame `undecodable`, and nothing after it, any other
//! request "a hello first", the hello itself this node's identity or the refusal `Identities`
//! must give), a `Refuse` stops the connection and reaches the handler, and no request reaches the handler
//! or a snapshot install; no transfer leaves its file behind once the connection is over; and
//! no input makes it allocate more than a small multiple of its size.
//!
//! The first byte: bit 0 writes the input over a seed stream (a hello, then one of every
//! request) instead of taking it as is; bits 1 and 2 make nodes 2 and 3 members; bit 3 fixes
//! up the checksums of embedded AOF entry records.
#![no_main]

#[path = "alloc_limit.rs"]
mod alloc_limit;
#[path = "peer_seeds.rs"]
mod peer_seeds;

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use flockd_core::{Millis, OpResult, Snapshot, StateMachine};
use flockd_log::{Apply, Entry};
use flockd_raft::identity::{Identities, Identity};
use flockd_raft::network::{Request, Response, decode_request, decode_response, read_frame};
use flockd_raft::peer_server::{PeerHandler, serve_connection};
use flockd_raft::pending::PendingTable;
use flockd_raft::state_machine::{MachineStore, Me, SnapshotData};
use flockd_raft::transport::{BoxFuture, PeerStream};
use flockd_raft::types::{FlockRaft, Membership, SnapshotMeta, StoredMembership, Vote};
use libfuzzer_sys::fuzz_target;
use openraft::async_runtime::Watch;

#[global_allocator]
static ALLOC: alloc_limit::Counting = alloc_limit::Counting;

const ME: Identity = Identity { node: 1, dir: 0xaa };
/// The dirs this node saw before: `peer-dirs` as `Identities` writes it.
const SEEN: &str = "2 00000000000000bb\n3 00000000000000cc\n";

/// Allowed peak: a few copies of the input (frames, decoded requests, a transfer's chunks),
/// replies of a bounded size per frame, a sequence reserved for as many elements as bytes
/// remain, and what a connection costs whatever it is sent (its task, channel and buffers).
fn allowance(input_len: usize) -> usize {
    let element = std::mem::size_of::<flockd_raft::types::RaftEntry>()
        .max(std::mem::size_of::<flockd_core::Op>());
    (64 + 2 * element) * input_len + 1024 * 1024
}

struct NoHost;

impl Apply for NoHost {
    fn apply(&self, _entries: &[Entry], _local: bool, _results: &mut Vec<Vec<OpResult>>) {}
    fn snapshot(&self) -> Snapshot {
        StateMachine::new().snapshot()
    }
    fn replace(&self, _machine: StateMachine) {}
    fn time(&self) -> Millis {
        Millis(0)
    }
}

/// What a node does with a hello or a refusal (the same calls as the server's), and nothing
/// past it: every other request is counted and failed.
struct Handler {
    identities: Identities,
    handled: AtomicUsize,
    installed: AtomicUsize,
}

impl PeerHandler for Handler {
    fn greet(&self, peer: Identity) -> Result<Identity, String> {
        self.identities.check(peer).map(|()| self.identities.me())
    }

    fn refused(&self, why: String) {
        self.identities.refused_by_peer(why);
    }

    fn handle(&self, _request: Request) -> BoxFuture<'_, Response> {
        self.handled.fetch_add(1, Ordering::Relaxed);
        Box::pin(async { Response::Failed("not served here".to_owned()) })
    }

    fn install(
        &self,
        _vote: Vote,
        _meta: SnapshotMeta,
        file: SnapshotData,
    ) -> BoxFuture<'_, Response> {
        self.installed.fetch_add(1, Ordering::Relaxed);
        // A node takes the file over (it becomes the snapshot); here it goes.
        let _ = std::fs::remove_file(&file.path);
        Box::pin(async { Response::Failed("not installed here".to_owned()) })
    }
}

struct Fixture {
    runtime: tokio::runtime::Runtime,
    ids: PathBuf,
    store_dir: PathBuf,
    store: MachineStore,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let root = base.join(format!("flockd-fuzz-handshake-{}", std::process::id()));
        let ids = root.join("raft");
        let store_dir = root.join("snapshots");
        std::fs::create_dir_all(&ids).expect("fuzz dir");
        std::fs::write(ids.join("dir-id"), format!("{:016x}\n", ME.dir)).expect("dir-id");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let store = MachineStore::open(
            &store_dir,
            Arc::new(NoHost),
            Arc::new(PendingTable::default()),
            Me {
                node: ME.node,
                incarnation: 1,
            },
        )
        .expect("store");
        Fixture {
            runtime,
            ids,
            store_dir,
            store,
        }
    })
}

/// A watch of metrics whose membership has `voters`, as Raft would give `Identities`.
fn members(
    voters: BTreeSet<u64>,
) -> openraft::alias::WatchReceiverOf<FlockRaft, openraft::RaftMetrics<FlockRaft>> {
    let mut metrics = openraft::RaftMetrics::<FlockRaft>::new_initial(ME.node);
    metrics.membership_config = Arc::new(StoredMembership::new(
        None,
        Membership::new_with_defaults(vec![voters], BTreeSet::new()),
    ));
    openraft::alias::WatchOf::<FlockRaft>::channel(metrics).1
}

/// What `Identities` must answer a hello from `peer`: Ok, or a refusal.
fn expected_greeting(peer: Identity, member: impl Fn(u64) -> bool) -> bool {
    if peer.node == ME.node {
        return peer.dir == ME.dir;
    }
    let seen = match peer.node {
        2 => Some(0xbb),
        3 => Some(0xcc),
        _ => None,
    };
    match seen {
        Some(dir) if dir != peer.dir => !member(peer.node),
        _ => true,
    }
}

/// Frames from bytes in memory, as `read_frame` reads them, until the bytes end or go bad.
fn frames(mut bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let mut read = pin!(read_frame(&mut bytes));
        match read.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(Some(frame))) => out.push(frame),
            Poll::Ready(_) => return out,
            Poll::Pending => panic!("a frame read from memory waited"),
        }
    }
}

fn transfers_left(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("store dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("receiving-"))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let fx = fixture();
    let mut bytes = if mode & 1 != 0 {
        peer_seeds::overwrite(rest)
    } else {
        rest.to_vec()
    };
    if mode & 8 != 0 {
        peer_seeds::seal_entries(&mut bytes);
    }
    let member = |node: u64| (node == 2 && mode & 2 != 0) || (node == 3 && mode & 4 != 0);
    std::fs::write(fx.ids.join("peer-dirs"), SEEN).expect("peer-dirs");

    let ((result, output, handler), peak) = alloc_limit::peak_during(|| {
        let identities = Identities::open(&fx.ids, ME.node).expect("identities");
        let voters: BTreeSet<u64> = [1, 2, 3]
            .into_iter()
            .filter(|n| *n == 1 || member(*n))
            .collect();
        identities.watch_membership(members(voters));
        let handler = Arc::new(Handler {
            identities,
            handled: AtomicUsize::new(0),
            installed: AtomicUsize::new(0),
        });
        let (ours, theirs) = tokio::io::duplex(64 << 10);
        let stream = PeerStream {
            reader: Box::new(io::Cursor::new(bytes.clone())),
            writer: Box::new(ours),
            peer: "fuzz".to_owned(),
        };
        let serving = serve_connection(stream, handler.clone(), fx.store.clone());
        let (result, output) = fx.runtime.block_on(async {
            use tokio::io::AsyncReadExt;
            let mut theirs = theirs;
            let mut output = Vec::new();
            let (result, read) = tokio::join!(serving, theirs.read_to_end(&mut output));
            read.expect("the replies read to their end");
            (result, output)
        });
        (result, output, handler)
    });

    if let Err(e) = &result {
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
            ),
            "{e}"
        );
    }
    let sent = frames(&bytes);
    let replies: Vec<(u64, Response)> = frames(&output)
        .into_iter()
        .map(|(id, body)| (id, decode_response(&body).expect("a reply decodes")))
        .collect();
    assert_eq!(
        frames(&output)
            .iter()
            .map(|(_, b)| b.len() + 12)
            .sum::<usize>(),
        output.len(),
        "the replies are whole frames"
    );
    assert!(
        replies.len() <= sent.len(),
        "{} replies to {} frames",
        replies.len(),
        sent.len()
    );
    assert!(
        replies
            .iter()
            .all(|(id, _)| sent.iter().any(|(sid, _)| sid == id))
    );

    // Until a hello is accepted, the replies come in order, one per frame.
    let mut greeted = false;
    for (k, (id, body)) in sent.iter().enumerate() {
        let reply = replies.get(k).map(|(rid, r)| {
            assert_eq!(rid, id);
            r
        });
        match decode_request(body) {
            Err(_) => {
                assert!(
                    matches!(reply, Some(Response::Failed(why)) if why.starts_with("undecodable: ")),
                    "{reply:?}"
                );
                assert_eq!(replies.len(), k + 1, "nothing after an undecodable frame");
                break;
            }
            Ok(Request::Hello(peer)) => {
                if expected_greeting(peer, member) {
                    assert!(
                        matches!(reply, Some(Response::Hello(me)) if *me == ME),
                        "{peer:?}: {reply:?}"
                    );
                    greeted = true;
                } else {
                    assert!(
                        matches!(reply, Some(Response::Refused(_))),
                        "{peer:?}: {reply:?}"
                    );
                    assert_eq!(replies.len(), k + 1, "nothing after a refusal");
                }
                break;
            }
            Ok(Request::Refuse(why)) => {
                assert_eq!(
                    handler.identities.refusals().borrow().as_deref(),
                    Some(why.as_str())
                );
                assert_eq!(replies.len(), k, "nothing after the peer refused");
                break;
            }
            Ok(_) => assert!(
                matches!(reply, Some(Response::Failed(why)) if why.contains("a hello first")),
                "{reply:?}"
            ),
        }
    }
    if !greeted {
        assert_eq!(handler.handled.load(Ordering::Relaxed), 0);
        assert_eq!(handler.installed.load(Ordering::Relaxed), 0);
        assert!(
            replies
                .iter()
                .all(|(_, r)| matches!(r, Response::Failed(_) | Response::Refused(_)))
        );
    }
    let left = transfers_left(&fx.store_dir);
    for name in &left {
        let _ = std::fs::remove_file(fx.store_dir.join(name));
    }
    assert!(
        left.is_empty(),
        "a transfer's file outlived its connection: {left:?}"
    );
    assert!(
        peak <= allowance(data.len()),
        "{peak} bytes allocated for a {}-byte input",
        data.len()
    );
});
