//! In-process: three nodes of three groups each (`cluster-groups 3`) on the in-memory network.
//! Every group elects its own leader and commits through any node (forwarded to that group's
//! leader over the connection the groups share); each group's state machine sees only its own
//! entries; a crashed node's groups fail over; after a full
//! restart every group has its tokens; a dir made with another number of groups is refused;
//! a node taking office in one group leaves the time of the groups it already leads alone.

// Groups and nodes are numbers here, and the loops read several tables by them.
#![allow(clippy::needless_range_loop)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{PlainHost, TempDir};
use flockd_core::time::Clock;
use flockd_core::{AcquireResult, Conditions, Millis, Op, OpResult};
use flockd_log::Apply;
use flockd_raft::transport::memory::Network;
use flockd_raft::{Cluster, ClusterSettings, GroupHost, Role, StartError, parse_peers};

const NODES: u64 = 3;
const GROUPS: usize = 3;
const PATIENCE: Duration = Duration::from_secs(20);

fn cport(id: u64) -> u16 {
    18_000 + id as u16
}

fn peers() -> String {
    (1..=NODES)
        .map(|id| format!("{id}=127.0.0.1:{}@{}", 8_000 + id, cport(id)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A node's groups: their state machines and their running Raft, in group order.
struct Node {
    hosts: Vec<Arc<PlainHost>>,
    groups: Vec<Cluster>,
}

fn settings(id: u64, dir: &Path) -> ClusterSettings {
    ClusterSettings {
        node_id: id,
        peers: parse_peers(&peers()).expect("peers"),
        dir: dir.to_owned(),
        bind: "127.0.0.1".parse().unwrap(),
        cport: cport(id),
        heartbeat_ms: 50,
        election_timeout_ms: 600,
        wait_leader_ms: 10_000,
        snapshot_every: 1_000_000,
        log_kept_after_snapshot: 1000,
        sync_delay_ms: Default::default(),
        apply_trace: false,
    }
}

async fn boot(network: &Network, id: u64, dir: &Path, groups: usize) -> Result<Node, StartError> {
    let hosts: Vec<Arc<PlainHost>> = (0..groups)
        .map(|_| Arc::new(PlainHost::default()))
        .collect();
    let group_hosts = hosts
        .iter()
        .map(|h| GroupHost {
            apply: h.clone() as Arc<dyn Apply>,
            clock: Arc::new(Clock::continuing_from(Millis(0))),
        })
        .collect();
    let endpoint = Arc::new(network.endpoint(&format!("127.0.0.1:{}", cport(id))));
    let groups = Cluster::start_groups(settings(id, dir), group_hosts, None, endpoint).await?;
    Ok(Node { hosts, groups })
}

/// Every node on its dir (started afresh, or again on what it left).
async fn boot_all(network: &Network, root: &TempDir) -> Vec<Option<Node>> {
    let mut nodes = Vec::new();
    for id in 1..=NODES {
        let node = boot(network, id, &dir_of(root, id), GROUPS).await;
        nodes.push(Some(node.unwrap_or_else(|e| panic!("node {id}: {e}"))));
    }
    nodes
}

fn dir_of(root: &TempDir, id: u64) -> PathBuf {
    root.path().join(format!("node-{id}"))
}

/// The node leading `group` with its leases re-armed, among `nodes` (`None`: crashed).
async fn leader_of(nodes: &[Option<Node>], group: usize) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        for (i, node) in nodes.iter().enumerate() {
            if let Some(node) = node
                && node.groups[group].view().role == Role::Leader
                && *node.groups[group].lease_duty().borrow()
            {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "group {group}: no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn acquire(node: &Cluster, name: &str) -> u64 {
    let op = Op::Acquire {
        name: Bytes::from(name.to_owned()),
        lease_ms: 60_000,
        owner: None,
        wait: false.into(),
        conditions: Conditions::default(),
    };
    let results = tokio::time::timeout(PATIENCE, node.propose(vec![op]))
        .await
        .expect("answered in time")
        .expect("an answer")
        .expect("committed");
    match results[..] {
        [OpResult::Acquire(AcquireResult::Granted(token))] => token,
        ref other => panic!("{name}: {other:?}"),
    }
}

async fn release(node: &Cluster, name: &str, token: u64) {
    let op = Op::Release {
        name: Bytes::from(name.to_owned()),
        token,
    };
    tokio::time::timeout(PATIENCE, node.propose(vec![op]))
        .await
        .expect("answered in time")
        .expect("an answer")
        .expect("committed");
}

/// Whether `name` is known to group `group` of every running node.
fn known_everywhere(nodes: &[Option<Node>], group: usize, name: &str) -> bool {
    nodes.iter().flatten().all(|n| {
        let machine = n.hosts[group].machine.read();
        machine.last_token(name.as_bytes()) > 0
    })
}

async fn wait_known(nodes: &[Option<Node>], group: usize, name: &str) {
    let deadline = Instant::now() + PATIENCE;
    while !known_everywhere(nodes, group, name) {
        assert!(
            Instant::now() < deadline,
            "{name} not applied by group {group} everywhere"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_elect_commit_fail_over_and_restart_apart() {
    let root = TempDir::new("groups");
    let network = Network::new();
    let mut nodes = boot_all(&network, &root).await;
    // Every group commits through every node; its name stays in its own state machine.
    let mut tokens = vec![Vec::new(); GROUPS];
    for group in 0..GROUPS {
        leader_of(&nodes, group).await;
        for through in 0..nodes.len() {
            let name = format!("g{group}-via{through}");
            let node = nodes[through].as_ref().unwrap();
            let token = acquire(&node.groups[group], &name).await;
            tokens[group].push((name, token));
        }
    }
    for group in 0..GROUPS {
        for (name, _) in &tokens[group] {
            wait_known(&nodes, group, name).await;
            for other in (0..GROUPS).filter(|g| *g != group) {
                let machine = nodes[0].as_ref().unwrap().hosts[other].machine.read();
                assert_eq!(
                    machine.last_token(name.as_bytes()),
                    0,
                    "{name} leaked into {other}"
                );
            }
        }
    }

    // A crash: the groups the node led elect anew (the others keep theirs, but for the leaders
    // the survivors then spread between them).
    let leaders: Vec<usize> = {
        let mut v = Vec::new();
        for group in 0..GROUPS {
            v.push(leader_of(&nodes, group).await);
        }
        v
    };
    let victim = leaders[0];
    network.crash(&format!("127.0.0.1:{}", cport(victim as u64 + 1)));
    let crashed = nodes[victim].take().unwrap();
    for group in crashed.groups.iter() {
        group.shutdown().await;
    }
    drop(crashed);
    for group in 0..GROUPS {
        let now = leader_of(&nodes, group).await;
        assert_ne!(now, victim);
        if leaders[group] != victim {
            assert_eq!(
                now, leaders[group],
                "group {group} changed leader needlessly"
            );
        }
        let survivor = nodes.iter().flatten().next().unwrap();
        let name = format!("g{group}-after-crash");
        let token = acquire(&survivor.groups[group], &name).await;
        tokens[group].push((name, token));
    }

    // A full restart: every group comes back with every token, and a name acquired again gets
    // a higher one.
    for node in nodes.iter_mut() {
        if let Some(node) = node.take() {
            for group in &node.groups {
                group.shutdown().await;
            }
        }
    }
    for id in 1..=NODES {
        network.crash(&format!("127.0.0.1:{}", cport(id)));
    }
    let network = Network::new();
    let mut nodes = boot_all(&network, &root).await;
    for group in 0..GROUPS {
        let leader = leader_of(&nodes, group).await;
        for (name, token) in &tokens[group] {
            let node = nodes[leader].as_ref().unwrap();
            // Held before the restart (60 s leases, re-armed): released, then taken again.
            release(&node.groups[group], name, *token).await;
            let again = acquire(&node.groups[group], name).await;
            assert!(again > *token, "{name}: {again} after {token}");
        }
    }
    for node in nodes.iter_mut().flatten() {
        for group in &node.groups {
            group.shutdown().await;
        }
    }

    // Another number of groups on the same dirs is refused, saying why.
    let refused = match boot(&Network::new(), 1, &dir_of(&root, 1), 2).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a dir of 3 groups started as 2"),
    };
    assert!(refused.contains("cluster-groups 3"), "{refused}");
}

/// A new leader continues its clock from the log time of the group it takes office in, which
/// may be seconds behind (an idle group) or ahead of another group's. Each group has a clock of
/// its own: were the node's groups to share one, taking office in one group would move the
/// time of every group it already leads, and ending their leases early is the forward case
/// (the fault harness saw a lease granted again 402 ms before it could end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_office_in_one_group_leaves_the_other_groups_time_alone() {
    let root = TempDir::new("groups-clocks");
    let network = Network::new();
    let nodes = boot_all(&network, &root).await;
    let x = leader_of(&nodes, 0).await;
    let x_id = x as u64 + 1;
    // Group 1 led elsewhere (the founder leads every group at first).
    let other_id = if x_id == 1 { 2 } else { 1 };
    if leader_of(&nodes, 1).await == x {
        nodes[x].as_ref().unwrap().groups[1]
            .transfer_leader(other_id)
            .await
            .expect("transfer group 1 away");
    }
    let deadline = Instant::now() + PATIENCE;
    let mut y = leader_of(&nodes, 1).await;
    while y == x {
        assert!(Instant::now() < deadline, "group 1 stays with node {x_id}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        y = leader_of(&nodes, 1).await;
    }
    // Group 1 idles, so its log time falls behind; group 0 goes on.
    for i in 0..10 {
        acquire(&nodes[x].as_ref().unwrap().groups[0], &format!("busy-{i}")).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let x_node = nodes[x].as_ref().unwrap();
    let before = x_node.groups[0].now();
    let since = Instant::now();
    nodes[y].as_ref().unwrap().groups[1]
        .transfer_leader(x_id)
        .await
        .expect("transfer group 1 to node x");
    let deadline = Instant::now() + PATIENCE;
    while !(x_node.groups[1].view().role == Role::Leader && *x_node.groups[1].lease_duty().borrow())
    {
        assert!(
            Instant::now() < deadline,
            "node {x_id} never took office in group 1"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = x_node.groups[0].now();
    let elapsed = since.elapsed().as_millis() as u64;
    let group_1 = x_node.groups[1].now();
    eprintln!(
        "group 0's time on node {x_id}: {before:?} then {after:?} over {elapsed} ms; group 1's \
         time there now {group_1:?}"
    );
    assert!(
        after >= before && after.0 <= before.0 + elapsed + 1,
        "group 0's time moved when node {x_id} took office in group 1: {before:?} to {after:?} \
         in {elapsed} ms"
    );
    for node in nodes.iter().flatten() {
        for group in &node.groups {
            group.shutdown().await;
        }
    }
}
