//! In-process: the state machine as openraft drives it. Replicas fed one log end equal (state
//! digests), a proposal that reaches the log twice (forwarded again after a leader change)
//! applies once, and a replica that installs another's snapshot ends equal too.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{PlainHost, TempDir};
use flockd_core::{AcquireResult, Conditions, Millis, Op, OpResult};
use flockd_raft::pending::PendingTable;
use flockd_raft::state_machine::{MachineStore, Me};
use flockd_raft::types::{LeaderId, LogId, Origin, RaftEntry, RaftProposal};
use futures_util::stream;
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder};

struct Replica {
    _dir: TempDir,
    host: Arc<PlainHost>,
    pending: Arc<PendingTable>,
    store: MachineStore,
}

fn replica(node: u64) -> Replica {
    let dir = TempDir::new("replica");
    let host = Arc::new(PlainHost::default());
    let pending = Arc::new(PendingTable::default());
    let store = MachineStore::open(
        dir.path(),
        host.clone(),
        pending.clone(),
        Me {
            node,
            incarnation: 1,
        },
    )
    .expect("open");
    Replica {
        _dir: dir,
        host,
        pending,
        store,
    }
}

fn entry(index: u64, proposal: RaftProposal) -> RaftEntry {
    RaftEntry {
        log_id: LogId {
            leader_id: LeaderId {
                term: 1,
                node_id: 1,
            },
            index,
        },
        payload: EntryPayload::Normal(proposal),
    }
}

fn proposal(node: u64, seq: u64, at: u64, ops: Vec<Op>) -> RaftProposal {
    RaftProposal {
        origin: Origin {
            node,
            incarnation: 1,
            seq,
            floor: 0,
        },
        at: Millis(at),
        ops,
    }
}

fn acquire(name: &str) -> Op {
    Op::Acquire {
        name: Bytes::from(name.to_owned()),
        lease_ms: 10_000,
        owner: None,
        wait: false.into(),
        conditions: Conditions::default(),
    }
}

async fn feed(store: &mut MachineStore, entries: Vec<RaftEntry>) {
    let items = entries.into_iter().map(|e| Ok((e, None)));
    store.apply(stream::iter(items)).await.expect("apply");
}

/// A log of acquires and releases over a few names, by three proposers, with one retry.
fn log() -> Vec<RaftEntry> {
    let mut entries = Vec::new();
    let mut index = 1;
    for round in 0..30u64 {
        let node = round % 3 + 1;
        let name = format!("n{}", round % 4);
        entries.push(entry(
            index,
            proposal(node, round, 1000 + round * 10, vec![acquire(&name)]),
        ));
        index += 1;
        entries.push(entry(
            index,
            proposal(
                node,
                round + 1000,
                1000 + round * 10 + 5,
                vec![Op::ForceRelease {
                    name: Bytes::from(name),
                }],
            ),
        ));
        index += 1;
    }
    entries
}

#[tokio::test]
async fn replicas_fed_one_log_have_equal_digests() {
    let mut replicas: Vec<Replica> = (1..=3).map(replica).collect();
    for r in &mut replicas {
        feed(&mut r.store, log()).await;
    }
    let digests: Vec<u64> = replicas
        .iter()
        .map(|r| r.host.machine.read().digest())
        .collect();
    assert!(digests.windows(2).all(|w| w[0] == w[1]), "{digests:?}");
    assert_eq!(replicas[0].host.machine.read().last_token(b"n0"), 8);
}

#[tokio::test]
async fn a_proposal_logged_twice_applies_once_and_answers_its_node() {
    let mut r = replica(2);
    let (to, mut outcome) = tokio::sync::oneshot::channel();
    let seq = r.pending.register(
        std::time::Instant::now() + std::time::Duration::from_secs(60),
        vec![flockd_raft::pending::Answer { ops: 1, to }],
    );
    let first = proposal(2, seq, 100, vec![acquire("once")]);
    let mut retry = first.clone();
    retry.at = Millis(200);
    feed(&mut r.store, vec![entry(1, first), entry(2, retry)]).await;
    let results = outcome.try_recv().expect("answered").expect("applied");
    assert_eq!(results, vec![OpResult::Acquire(AcquireResult::Granted(1))]);
    let machine = r.host.machine.read();
    assert_eq!(
        machine.last_token(b"once"),
        1,
        "the retry did not grant again"
    );
    assert_eq!(r.store.remembered(), 1);
}

#[tokio::test]
async fn a_snapshot_installed_elsewhere_gives_the_same_state() {
    let mut leader = replica(1);
    feed(&mut leader.store, log()).await;
    let snapshot = leader.store.build_snapshot().await.expect("build");
    let mut follower = replica(3);
    follower
        .store
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .expect("install");
    assert_eq!(
        follower.host.machine.read().digest(),
        leader.host.machine.read().digest()
    );
    // The dedup table came along: the leader's log replayed on top changes nothing.
    let before = follower.host.machine.read().digest();
    feed(&mut follower.store, log()).await;
    assert_eq!(follower.host.machine.read().digest(), before);
    let (applied, _) = follower.store.applied_state().await.expect("state");
    assert_eq!(applied.map(|id| id.index), Some(60));
}

#[tokio::test]
async fn a_forcerelease_logged_again_after_a_new_grant_does_not_end_the_new_holding() {
    let mut r = replica(1);
    let force = proposal(
        2,
        1,
        110,
        vec![Op::ForceRelease {
            name: Bytes::from_static(b"retried"),
        }],
    );
    feed(
        &mut r.store,
        vec![
            entry(1, proposal(2, 0, 100, vec![acquire("retried")])),
            entry(2, force.clone()),
            // Another node's client gets the lock (token 2) ...
            entry(3, proposal(3, 0, 120, vec![acquire("retried")])),
            // ... and then the first force-release reaches the log again (forwarded a second
            // time after a leader change).
            entry(4, force),
        ],
    )
    .await;
    let machine = r.host.machine.read();
    let status = machine.status(b"retried", Millis(130));
    assert!(status.locked, "the retry ended the new holding");
    assert_eq!(status.token, Some(2));
}
