//! In-process: three real nodes (openraft, the log store on disk, the state machine) in one test,
//! talking over the in-memory network, so a test can crash a node, wipe one, restart them all
//! or lose one answer at the moment it wants. The leader crashes and the others go on with
//! every token; a dead follower replaced under a new id catches up from a snapshot taken under
//! load, and a node wiped and restarted under its old id is refused (it forgot its vote) while
//! the others go on and replace it under a new id; a full restart
//! re-arms every lease; a RELEASE and a FORCERELEASE whose answer was lost are sent again and
//! apply once; and at the end of each, every replica's state digest is the same.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{PlainHost, TempDir};
use flockd_core::time::Clock;
use flockd_core::{AcquireResult, Conditions, Millis, Op, OpResult};
use flockd_raft::transport::memory::Network;
use flockd_raft::{Cluster, ClusterSettings, Role, parse_peers};

const NODES: u64 = 3;
const HEARTBEAT_MS: u64 = 50;
const ELECTION_MS: u64 = 600;
/// How long any wait of these tests may take before it fails.
const PATIENCE: Duration = Duration::from_secs(20);

struct Node {
    id: u64,
    /// The cluster address the in-memory network knows it by.
    addr: String,
    dir: PathBuf,
    host: Arc<PlainHost>,
    running: Option<Arc<Cluster>>,
}

struct TestCluster {
    network: Network,
    nodes: Vec<Node>,
    peers: String,
    snapshot_every: u64,
    log_kept_after_snapshot: u64,
    _root: TempDir,
}

fn cport(id: u64) -> u16 {
    17_000 + id as u16
}

/// `host:port@cport` (the client port is never listened on here).
fn member_addr(id: u64) -> String {
    format!("127.0.0.1:{}@{}", 7_000 + id, cport(id))
}

/// `id=host:port@cport`, as `cluster-peers` lists it.
fn peer(id: u64) -> String {
    format!("{id}={}", member_addr(id))
}

impl TestCluster {
    async fn start(snapshot_every: u64, log_kept_after_snapshot: u64) -> TestCluster {
        let root = TempDir::new("cluster");
        let peers = (1..=NODES).map(peer).collect::<Vec<_>>().join(",");
        let nodes = (1..=NODES)
            .map(|id| Node {
                id,
                addr: format!("127.0.0.1:{}", cport(id)),
                dir: root.path().join(format!("node-{id}")),
                host: Arc::new(PlainHost::default()),
                running: None,
            })
            .collect();
        let mut cluster = TestCluster {
            network: Network::new(),
            nodes,
            peers,
            snapshot_every,
            log_kept_after_snapshot,
            _root: root,
        };
        for id in 1..=NODES {
            cluster.boot(id).await;
        }
        cluster
    }

    fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    fn running(&self, id: u64) -> &Arc<Cluster> {
        self.node(id).running.as_ref().expect("the node runs")
    }

    /// Starts node `id` on its directory as it is (a restart, if it ran before), with a fresh
    /// state in memory, as a new process would have.
    async fn boot(&mut self, id: u64) {
        if self.nodes.len() < id as usize {
            // A node that joins later (FLOCK.CLUSTER ADD): named after the founders.
            self.nodes.push(Node {
                id,
                addr: format!("127.0.0.1:{}", cport(id)),
                dir: self._root.path().join(format!("node-{id}")),
                host: Arc::new(PlainHost::default()),
                running: None,
            });
        }
        let mut peers = self.peers.clone();
        if id > NODES {
            peers.push_str(&format!(",{}", peer(id)));
        }
        let settings = ClusterSettings {
            node_id: id,
            peers: parse_peers(&peers).expect("peers"),
            dir: self.node(id).dir.clone(),
            bind: "127.0.0.1".parse().unwrap(),
            cport: cport(id),
            heartbeat_ms: HEARTBEAT_MS,
            election_timeout_ms: ELECTION_MS,
            wait_leader_ms: 10_000,
            snapshot_every: self.snapshot_every,
            log_kept_after_snapshot: self.log_kept_after_snapshot,
            sync_delay_ms: Default::default(),
            apply_trace: false,
        };
        let host = Arc::new(PlainHost::default());
        let endpoint = Arc::new(self.network.endpoint(&self.node(id).addr));
        let clock = Arc::new(Clock::continuing_from(Millis(0)));
        let running = Cluster::start_on(settings, host.clone(), clock, None, endpoint)
            .await
            .expect("the node starts");
        let node = &mut self.nodes[(id - 1) as usize];
        node.host = host;
        node.running = Some(Arc::new(running));
    }

    /// Node `id` stops at once: Raft shut down, its port closed, every connection ended.
    async fn crash(&mut self, id: u64) {
        let node = &mut self.nodes[(id - 1) as usize];
        self.network.crash(&node.addr);
        if let Some(running) = node.running.take() {
            running.shutdown().await;
        }
    }

    /// The node that leads and has re-armed the leases, among the running ones.
    async fn leader(&self) -> u64 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            for node in &self.nodes {
                if let Some(running) = &node.running
                    && running.view().role == Role::Leader
                    && *running.lease_duty().borrow()
                {
                    return node.id;
                }
            }
            assert!(Instant::now() < deadline, "no leader within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every running node has applied what the leader has, then returns their
    /// state digests, which must all be equal.
    async fn converged(&self) -> u64 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let running: Vec<&Node> = self.nodes.iter().filter(|n| n.running.is_some()).collect();
            let applied: Vec<u64> = running
                .iter()
                .map(|n| n.running.as_ref().unwrap().view().applied_index)
                .collect();
            let commit = running
                .iter()
                .map(|n| n.running.as_ref().unwrap().view().commit_index)
                .max()
                .unwrap_or(0);
            if applied.iter().all(|a| *a == commit) {
                let digests: Vec<u64> = running
                    .iter()
                    .map(|n| n.host.machine.read().digest())
                    .collect();
                if digests.iter().all(|d| *d == digests[0]) {
                    return digests[0];
                }
            }
            assert!(
                Instant::now() < deadline,
                "replicas did not converge: applied {applied:?}, commit {commit}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn run(node: &Cluster, ops: Vec<Op>) -> Vec<OpResult> {
    tokio::time::timeout(PATIENCE, node.propose(ops))
        .await
        .expect("answered in time")
        .expect("an answer")
        .expect("committed")
}

fn acquire(name: &str, owner: &str, lease_ms: u64) -> Op {
    Op::Acquire {
        name: Bytes::from(name.to_owned()),
        lease_ms,
        owner: Some(Bytes::from(owner.to_owned())),
        wait: false.into(),
        conditions: Conditions::default(),
    }
}

async fn granted(node: &Cluster, name: &str, owner: &str, lease_ms: u64) -> u64 {
    match run(node, vec![acquire(name, owner, lease_ms)]).await[..] {
        [OpResult::Acquire(AcquireResult::Granted(token))] => token,
        ref other => panic!("{name} was not granted to {owner}: {other:?}"),
    }
}

fn status(node: &Node, name: &str) -> flockd_core::LockStatus {
    let machine = node.host.machine.read();
    let now = machine.time();
    machine.status(name.as_bytes(), now)
}

fn other_than(ids: &[u64]) -> u64 {
    (1..=NODES)
        .find(|id| !ids.contains(id))
        .expect("a third node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_crashes_and_every_token_goes_on() {
    let mut cluster = TestCluster::start(1_000_000, 1000).await;
    let first = cluster.leader().await;
    let mut last = Vec::new();
    for i in 0..20 {
        let name = format!("lock-{i}");
        let t = granted(cluster.running(first), &name, "a", 60_000).await;
        run(
            cluster.running(first),
            vec![Op::Release {
                name: Bytes::from(name),
                token: t,
            }],
        )
        .await;
        last.push(t);
    }
    cluster.crash(first).await;
    let second = cluster.leader().await;
    assert_ne!(first, second);
    let follower = other_than(&[first, second]);
    // Through the new leader and through the remaining follower (forwarded).
    for (i, previous) in last.iter().enumerate() {
        let through = if i % 2 == 0 { second } else { follower };
        let name = format!("lock-{i}");
        let t = granted(cluster.running(through), &name, "b", 60_000).await;
        assert!(t > *previous, "{name}: token {t} after {previous}");
    }
    cluster.converged().await;
    // The crashed node comes back and catches up from the log.
    cluster.boot(first).await;
    cluster.converged().await;
    for i in 0..20 {
        let s = status(cluster.node(first), &format!("lock-{i}"));
        assert!(s.locked && s.owner.as_deref() == Some(&b"b"[..]), "{s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_follower_replaced_on_an_empty_dir_catches_up_from_a_snapshot_under_load() {
    // A snapshot every 50 entries, and only 5 entries kept below it: a node that has nothing
    // cannot catch up from the log. The replacement gets a new id, as docs/cluster.md says
    // (a wiped node under its old id would have forgotten its vote).
    let mut cluster = TestCluster::start(50, 5).await;
    let leader = cluster.leader().await;
    let dead = other_than(&[leader]);
    let mut tokens = Vec::new();
    for i in 0..300 {
        tokens.push(granted(cluster.running(leader), &format!("before-{i}"), "a", 60_000).await);
    }
    cluster.crash(dead).await;
    cluster.running(leader).remove(dead).await.expect("REMOVE");
    // Load goes on while the leader builds snapshots and the new node takes one in.
    let load = {
        let leader_node = cluster.running(leader).clone();
        tokio::spawn(async move {
            let mut done = 0u64;
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline && done < 5_000 {
                let name = Bytes::from(format!("during-{}", done % 100));
                let rx =
                    leader_node.propose(vec![acquire_op(name.clone()), Op::ForceRelease { name }]);
                rx.await.expect("answered").expect("committed");
                done += 1;
            }
            done
        })
    };
    let replacement = NODES + 1;
    cluster.boot(replacement).await;
    let addr = member_addr(replacement);
    tokio::time::timeout(PATIENCE, cluster.running(leader).add(replacement, &addr))
        .await
        .expect("ADD in time")
        .expect("ADD");
    let done = load.await.expect("load task");
    assert!(done > 0);
    cluster.converged().await;
    assert!(
        cluster
            .node(replacement)
            .host
            .replaced
            .load(Ordering::Relaxed)
            >= 1,
        "the new node never installed a snapshot"
    );
    let view = cluster.running(leader).view();
    assert!(
        view.member(replacement).is_some_and(|m| m.voter),
        "{view:?}"
    );
    for (i, t) in tokens.iter().enumerate() {
        let s = status(cluster.node(replacement), &format!("before-{i}"));
        assert_eq!(s.token, Some(*t), "before-{i} on the new node");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_wiped_under_its_old_id_is_refused_and_the_others_go_on() {
    // Its vote went with its dir: let back in, it could vote twice in one term. Node 1 is the
    // founder (a wiped founder even tries to form a new cluster on its first start), so both
    // it and a plain follower are wiped in turn, each while it does not lead.
    let mut cluster = TestCluster::start(50, 5).await;
    let mut tokens = Vec::new();
    for round in 0..2 {
        let mut leader = cluster.leader().await;
        let wiped = if round == 0 { 1 } else { 3 };
        if leader == wiped {
            cluster
                .running(leader)
                .transfer_leader(2)
                .await
                .expect("leadership moves");
            let deadline = Instant::now() + PATIENCE;
            while leader == wiped {
                assert!(Instant::now() < deadline, "leadership did not move");
                tokio::time::sleep(Duration::from_millis(20)).await;
                leader = cluster.leader().await;
            }
        }
        for i in 0..50 {
            let name = format!("before-{round}-{i}");
            tokens.push((
                name.clone(),
                granted(cluster.running(leader), &name, "a", 60_000).await,
            ));
        }
        cluster.crash(wiped).await;
        std::fs::remove_dir_all(&cluster.node(wiped).dir).expect("wipe");
        cluster.boot(wiped).await;
        let mut refusals = cluster.running(wiped).refusals();
        let why = tokio::time::timeout(PATIENCE, refusals.wait_for(Option::is_some))
            .await
            .expect("refused in time")
            .expect("the node runs")
            .clone()
            .unwrap();
        assert!(
            why.contains(&format!("node {wiped} is back with another data dir"))
                && why.contains(&format!("FLOCK.CLUSTER REMOVE {wiped}")),
            "{why}"
        );
        // Refused, not caught up: no snapshot reached it, its state is empty.
        assert_eq!(cluster.node(wiped).host.replaced.load(Ordering::Relaxed), 0);
        assert_eq!(status(cluster.node(wiped), &tokens[0].0).token, None);
        cluster.crash(wiped).await;
        // The two others are a majority and go on.
        for i in 0..20 {
            let name = format!("after-{round}-{i}");
            tokens.push((
                name.clone(),
                granted(cluster.running(leader), &name, "a", 60_000).await,
            ));
        }
        cluster.converged().await;
        // The procedure: remove it, then it comes back empty under a new id and is added.
        cluster
            .running(leader)
            .remove(wiped)
            .await
            .expect("removed");
        let replacement = NODES + 1 + round;
        cluster.boot(replacement).await;
        cluster
            .running(leader)
            .add(replacement, &member_addr(replacement))
            .await
            .expect("added");
        cluster.converged().await;
        for (name, t) in &tokens {
            let s = status(cluster.node(replacement), name);
            assert_eq!(s.token, Some(*t), "{name} on node {replacement}");
        }
    }
}

fn acquire_op(name: Bytes) -> Op {
    Op::Acquire {
        name,
        lease_ms: 60_000,
        owner: None,
        wait: false.into(),
        conditions: Conditions::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_restart_rearms_every_lease() {
    let mut cluster = TestCluster::start(1_000_000, 1000).await;
    let leader = cluster.leader().await;
    const LEASE_MS: u64 = 4_000;
    let mut tokens = Vec::new();
    for i in 0..10 {
        tokens.push(granted(cluster.running(leader), &format!("held-{i}"), "a", LEASE_MS).await);
    }
    cluster.converged().await;
    for id in 1..=NODES {
        cluster.crash(id).await;
    }
    for id in 1..=NODES {
        cluster.boot(id).await;
    }
    let leader = cluster.leader().await;
    cluster.converged().await;
    let node = cluster.node(leader);
    let running = cluster.running(leader);
    for (i, t) in tokens.iter().enumerate() {
        let name = format!("held-{i}");
        let machine = node.host.machine.read();
        let s = machine.status(name.as_bytes(), running.now());
        assert!(s.locked && s.token == Some(*t), "{name}: {s:?}");
        // Log time stands still while nobody leads, so without a re-arm less than the lease
        // would be left; the new leader gave every live lease its full length again, plus
        // the election allowance, counted from its taking office.
        assert!(
            s.ttl_ms > LEASE_MS as i64,
            "{name}: {} ms left of a {LEASE_MS} ms lease after the restart",
            s.ttl_ms
        );
    }
    // Tokens go on from where they were.
    let t = granted(running, "held-0-next", "b", LEASE_MS).await;
    assert!(t > 0);
    match run(running, vec![acquire("held-0", "b", LEASE_MS)]).await[..] {
        [OpResult::Acquire(AcquireResult::Busy)] => {}
        ref other => panic!("held-0 should still be held: {other:?}"),
    }
}

/// Sends `ops` through follower `via`, loses the leader's answer (the request reaches the
/// leader, then the two are partitioned both ways), lets `meanwhile` run on the leader, then
/// heals the follower's link to the leader first (so its retry reaches the leader while the
/// leader still cannot replicate to it) and the other way once the retry has arrived.
async fn with_lost_answer<F>(
    cluster: &TestCluster,
    leader: u64,
    via: u64,
    ops: Vec<Op>,
    meanwhile: F,
) -> Vec<OpResult>
where
    F: std::future::Future<Output = ()>,
{
    let (from, to) = (&cluster.node(via).addr, &cluster.node(leader).addr);
    let skipped_before = cluster.running(leader).view().duplicates_skipped;
    // The request must be the next bytes `via` sends the leader, not the hello of a new
    // connection: a read through `via` makes sure its connection is up.
    cluster
        .running(via)
        .read_point()
        .await
        .expect("a read point through the follower");
    cluster.network.partition_after_next(from, to);
    let answer = cluster.running(via).propose(ops);
    let deadline = Instant::now() + PATIENCE;
    while cluster.network.armed(from, to) {
        assert!(Instant::now() < deadline, "the request never left");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    meanwhile.await;
    cluster.network.heal(from, to);
    while cluster.running(leader).view().duplicates_skipped == skipped_before {
        assert!(
            Instant::now() < deadline,
            "the retry never reached the leader"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.network.heal(to, from);
    tokio::time::timeout(PATIENCE, answer)
        .await
        .expect("answered in time")
        .expect("an answer")
        .expect("committed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_release_and_forcerelease_apply_once() {
    let cluster = TestCluster::start(1_000_000, 1000).await;
    let leader = cluster.leader().await;
    let via = other_than(&[leader]);

    // RELEASE of a holding held twice (reentrant): applied twice, it would free the lock.
    let t = granted(cluster.running(leader), "reentrant", "a", 60_000).await;
    assert!(granted(cluster.running(leader), "reentrant", "a", 60_000).await > t);
    let release = vec![Op::Release {
        name: Bytes::from_static(b"reentrant"),
        token: t,
    }];
    let results = with_lost_answer(&cluster, leader, via, release, async {}).await;
    assert_eq!(results, vec![OpResult::Release(Ok(false))]);
    cluster.converged().await;
    for id in 1..=NODES {
        let s = status(cluster.node(id), "reentrant");
        assert!(s.locked && s.holds == 1, "node {id}: {s:?}");
    }

    // FORCERELEASE, and another holder granted the lock while its answer was lost: applied
    // twice, it would take the lock from that holder.
    granted(cluster.running(leader), "forced", "a", 60_000).await;
    let force = vec![Op::ForceRelease {
        name: Bytes::from_static(b"forced"),
    }];
    let leader_node = cluster.running(leader);
    let regrant = async {
        // The first copy took effect on the leader: the name is free for "b".
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let [OpResult::Acquire(AcquireResult::Granted(_))] =
                run(leader_node, vec![acquire("forced", "b", 60_000)]).await[..]
            {
                break;
            }
            assert!(Instant::now() < deadline, "forced never became free");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let results = with_lost_answer(&cluster, leader, via, force, regrant).await;
    assert_eq!(results, vec![OpResult::ForceRelease(1)]);
    cluster.converged().await;
    for id in 1..=NODES {
        let s = status(cluster.node(id), "forced");
        assert!(
            s.locked && s.owner.as_deref() == Some(&b"b"[..]),
            "node {id}: {s:?}"
        );
    }
}
