//! A one-group cluster written by the release before several Raft groups existed
//! (`tests/fixtures/cluster-v1.tar.gz`, made by `tests/fixtures/make_cluster_v1_dirs.sh`) starts
//! on today's binary unchanged: the same leader election, every token and fence where it was,
//! the next token above them, its Raft log moved from raft-log's files into segments, and no
//! file of the multi-group layout written into its dirs. The
//! same data started with `cluster-groups 4` is refused, saying why. The fixture's nodes listen
//! on the loopback ports its membership names: 23111-23113, cluster ports 24111-24113, below
//! the kernel's ephemeral range, so no free port handed to another test collides with them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Raw, Server, TempDir};

const PEERS: &str = "1=127.0.0.1:23111@24111,2=127.0.0.1:23112@24112,3=127.0.0.1:23113@24113";

fn start(root: &Path, i: usize, extra: &[&str]) -> Result<Server, String> {
    let dir = root.join(format!("node{i}"));
    let mut args: Vec<String> = [
        "--bind",
        "127.0.0.1",
        "--port",
        &format!("2311{i}"),
        "--dir",
        &dir.display().to_string(),
        "--node-id",
        &i.to_string(),
        "--cluster-peers",
        PEERS,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::try_spawn(&dir, args, &[("FLOCKD_LOG_LEVEL", "info,openraft=warn")])
}

fn int(reply: &str) -> i64 {
    reply
        .trim()
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an integer: {reply:?}"))
}

#[test]
fn a_one_group_cluster_of_the_previous_release_starts_unchanged() {
    let root = TempDir::new("cluster-v1");
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cluster-v1.tar.gz"
    );
    let untar = Command::new("tar")
        .args(["-C", &root.path().display().to_string(), "-xzf", fixture])
        .status()
        .expect("tar");
    assert!(untar.success());
    // Another number of groups on this data is refused before anything is written.
    let refused = match start(root.path(), 1, &["--cluster-groups", "4"]) {
        Err(log) => log,
        Ok(_) => panic!("a one-group node's data started as 4 groups"),
    };
    assert!(refused.contains("cluster-groups 1"), "{refused}");

    let nodes: Vec<Server> = (1..=3)
        .map(|i| start(root.path(), i, &[]).unwrap_or_else(|log| panic!("node {i}:\n{log}")))
        .collect();
    let mut raw = Raw::connect(nodes[0].addr);
    let deadline = Instant::now() + Duration::from_secs(20);
    // A read of the held name through node 1 waits for a leader and answers from the old log.
    let token = loop {
        let reply = raw.call(&["FLOCK.TOKEN", "v1:a"]);
        if reply.starts_with(':') {
            break int(&reply);
        }
        assert!(Instant::now() < deadline, "no answer: {reply:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(token, 3, "v1:a's token as the old release left it");
    assert_eq!(int(&raw.call(&["FLOCK.TOKEN", "v1:b"])), 1);
    assert_eq!(int(&raw.call(&["FENCE.TOKEN", "v1:row"])), 3);
    // Still held (its lease re-armed by the new leader), and the next grant goes on above.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "v1:a", "1000"]), "$-1\r\n");
    assert_eq!(int(&raw.call(&["FLOCK.ACQUIRE", "v1:b", "1000"])), 2);
    let info = raw.call(&["INFO", "replication"]);
    assert!(!info.contains("raft_groups"), "{info}");
    let shards = raw.call(&["CLUSTER", "SLOTS"]);
    assert!(shards.starts_with("*1\r\n"), "one shard: {shards:?}");
    for i in 1..=3 {
        let raft = root.path().join(format!("node{i}/raft"));
        assert!(!raft.join("cluster-groups").exists(), "node {i}");
        assert!(!raft.join("group-2").exists(), "node {i}");
        // The old release's log (raft-log's files) was moved into the first segment.
        let log: Vec<String> = std::fs::read_dir(raft.join("log"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            log.iter().any(|n| n == "segment-00000000000000000001.log"),
            "node {i}: {log:?}"
        );
        assert!(
            !log.iter().any(|n| n.ends_with(".wal") || n == "LOCK"),
            "node {i}: {log:?}"
        );
    }
    drop(nodes);
}
