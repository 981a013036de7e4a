//! Several Raft groups (`cluster-groups 4`) on 3 real `flockd` processes: four shards in CLUSTER
//! SLOTS, their leaders spread over the nodes, the redis crate's cluster client (defaults
//! throughout) sending each name's commands straight to its group's leader, `-CROSSSLOT` for
//! names of two slots, SCAN over every group from one node, and a kill -9 of a node: each group
//! it led fails over (the times are printed), the others keep going, the client carries on,
//! flockd's own client follows `-MOVED` under `cluster-redirect yes`,
//! and the node comes back on its data with every group. A node started with another number of
//! groups on that data is refused.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::Value;

use crate::common::cluster::Cluster;
use crate::slots::cycle;

const GROUPS: usize = 4;

fn groups_args() -> Vec<Vec<String>> {
    vec![vec!["--cluster-groups".to_string(), GROUPS.to_string()]; 4]
}

/// What node `i` says of the shards: each range's first slot and the index of its master
/// (`None` where the node does not answer or a master is not one of the cluster's ports).
fn masters(cluster: &Cluster, i: usize) -> Option<BTreeMap<u16, usize>> {
    let client = redis::Client::open(format!("redis://{}/", cluster.addr(i))).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn).ok()?;
    let Value::Array(ranges) = slots else {
        return None;
    };
    let mut out = BTreeMap::new();
    for range in ranges {
        let Value::Array(parts) = range else {
            return None;
        };
        let (Value::Int(start), Value::Array(master)) = (&parts[0], &parts[2]) else {
            return None;
        };
        let Value::Int(port) = master[1] else {
            return None;
        };
        let node = (0..cluster.nodes.len()).find(|n| i64::from(cluster.addr(*n).port()) == port)?;
        out.insert(*start as u16, node);
    }
    Some(out)
}

/// Waits until the running nodes agree on a master for each of the four ranges, none of them
/// `not`, and no node leads more than two: the leaders settled and spread.
fn settled(cluster: &Cluster, not: Option<usize>, timeout: Duration) -> BTreeMap<u16, usize> {
    let deadline = Instant::now() + timeout;
    loop {
        let seen: Vec<Option<BTreeMap<u16, usize>>> = (0..cluster.nodes.len())
            .filter(|i| cluster.nodes[*i].is_some())
            .map(|i| masters(cluster, i))
            .collect();
        if let Some(Some(first)) = seen.first()
            && first.len() == GROUPS
            && seen.iter().all(|s| s.as_ref() == Some(first))
            && first
                .values()
                .all(|m| Some(*m) != not && cluster.nodes[*m].is_some())
        {
            let running = cluster.nodes.iter().filter(|n| n.is_some()).count();
            let most = (0..cluster.nodes.len())
                .map(|n| first.values().filter(|m| **m == n).count())
                .max()
                .unwrap_or(0);
            if most <= GROUPS.div_ceil(running) {
                return first.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the groups did not settle within {timeout:?}: {seen:?}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Names over every group's slot range, `per_group` each.
fn names_per_group(per_group: usize) -> Vec<String> {
    let mut found: Vec<Vec<String>> = vec![vec![]; GROUPS];
    for i in 0..100_000u32 {
        let name = format!("order:{i}");
        let slot = flockd_core::slot_of(name.as_bytes());
        let group = usize::from(flockd_core::group_of_slot(slot, GROUPS as u16));
        if found[group].len() < per_group {
            found[group].push(name);
        }
        if found.iter().all(|f| f.len() == per_group) {
            break;
        }
    }
    found.concat()
}

#[test]
fn four_groups_spread_route_by_slot_and_fail_over_apart() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(four_groups());
}

async fn four_groups() {
    let mut cluster = Cluster::start_with(3, 3, groups_args());
    let before_kill = settled(&cluster, None, Duration::from_secs(30));
    println!("group masters (first slot -> node index): {before_kill:?}");

    // INFO and FLOCK.CLUSTER NODES give each group's leader.
    let info = cluster.replication(1);
    assert_eq!(
        info.get("raft_groups").map(String::as_str),
        Some("4"),
        "{info:?}"
    );
    for (start, master) in &before_kill {
        let group = usize::from(flockd_core::group_of_slot(*start, GROUPS as u16)) + 1;
        let line = &info[&format!("raft_group_{group}")];
        assert!(
            line.starts_with(&format!("leader={},", master + 1)),
            "group {group}: {line}"
        );
    }
    let members = cluster.call(0, &["FLOCK.CLUSTER", "NODES"]);
    assert_eq!(members.matches(" groups=1:").count(), 3, "{members}");

    // Every node describes the same four shards; names of two slots are refused.
    let nodes: Vec<String> = (0..3)
        .map(|i| format!("redis://{}/", cluster.addr(i)))
        .collect();
    assert_eq!(
        cluster.call(0, &["FLOCK.ACQUIREALL", "2", "a", "b", "1000"]),
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    let both = cluster.call(1, &["FLOCK.ACQUIREALL", "2", "{x}a", "{x}b", "1000"]);
    assert!(both.starts_with('*'), "{both}");

    let client = redis::cluster::ClusterClient::new(nodes).expect("cluster client");
    let mut conn = client
        .get_async_connection()
        .await
        .expect("cluster connection");
    let names = names_per_group(6);
    let before = cluster.forwarded();
    let mut tokens = BTreeMap::new();
    for name in &names {
        tokens.insert(name.clone(), cycle(&mut conn, name).await);
    }
    let forwarded_during = cluster.forwarded() - before;
    println!(
        "{} commands from the cluster client, {forwarded_during} forwarded",
        3 * names.len()
    );
    assert!(
        forwarded_during <= 2,
        "{forwarded_during} commands were forwarded, not sent to their group's leader"
    );

    // flockd's own client, given every node, follows -MOVED to each group's leader when the
    // nodes redirect (cluster-redirect yes), renews through it, and releases.
    for i in 0..3 {
        cluster.call(i, &["CONFIG", "SET", "cluster-redirect", "yes"]);
    }
    let urls: Vec<String> = (0..3)
        .map(|i| format!("redis://{}/", cluster.addr(i)))
        .collect();
    let own = flockd_client::Client::open_nodes(&urls)
        .await
        .expect("flockd client");
    for name in names_per_group(2) {
        let guard = own
            .lock(format!("own:{name}"))
            .lease(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("flockd client, {name}: {e}"))
            .expect("granted");
        assert!(guard.release().await.expect("released"));
    }
    for i in 0..3 {
        cluster.call(i, &["CONFIG", "SET", "cluster-redirect", "no"]);
    }

    // SCAN on one node walks every group's names.
    let mut one = redis::Client::open(format!("redis://{}/", cluster.addr(2)))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = 0u64;
    for _ in 0..10_000 {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(5)
            .query(&mut one)
            .unwrap();
        seen.extend(keys);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    for name in &names {
        assert!(seen.contains(name), "SCAN on one node missed {name}");
    }

    // Kill -9 the node leading the first group: each group it led fails over.
    let victim = before_kill[&0];
    let led: Vec<u16> = before_kill
        .iter()
        .filter(|(_, m)| **m == victim)
        .map(|(s, _)| *s)
        .collect();
    cluster.kill(victim);
    let killed = Instant::now();
    let mut failed_over = BTreeMap::new();
    let survivor = (0..3).find(|i| *i != victim).unwrap();
    while failed_over.len() < led.len() && killed.elapsed() < Duration::from_secs(20) {
        if let Some(now) = masters(&cluster, survivor) {
            for start in &led {
                if now.get(start).is_some_and(|m| *m != victim) {
                    failed_over.entry(*start).or_insert(killed.elapsed());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("groups led by the killed node, failed over after: {failed_over:?}");
    assert_eq!(failed_over.len(), led.len(), "{}", cluster.logs());
    settled(&cluster, Some(victim), Duration::from_secs(20));

    // The client carries on after its own refresh, on every group, tokens higher than before.
    let deadline = Instant::now() + Duration::from_secs(20);
    for name in &names {
        let token = loop {
            let got: redis::RedisResult<u64> = redis::cmd("FLOCK.ACQUIRE")
                .arg(name)
                .arg(30000)
                .query_async(&mut conn)
                .await;
            match got {
                Ok(token) => break token,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("acquire {name} after the kill: {e}\n{}", cluster.logs()),
            }
        };
        assert!(
            token > tokens[name],
            "{name}: {token} after {}",
            tokens[name]
        );
    }

    // The node comes back on its data, with every group.
    cluster.start_node(victim);
    settled(&cluster, None, Duration::from_secs(30));
    // It catches up in every group: the same names as a node that stayed.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (back, stayed) = (
            cluster.call(victim, &["DBSIZE"]),
            cluster.call(survivor, &["DBSIZE"]),
        );
        if back == stayed {
            println!(
                "DBSIZE on the restarted node and a survivor: {}",
                back.trim()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "DBSIZE {back:?} against {stayed:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Another number of groups on the same data is refused, saying why.
    cluster.kill(victim);
    cluster.extra_args[victim] = vec!["--cluster-groups".to_string(), "2".to_string()];
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cluster.start_node(victim);
    }));
    let why = match refused {
        Err(e) => e.downcast_ref::<String>().cloned().unwrap_or_default(),
        Ok(()) => panic!("a node of 4 groups started with 2"),
    };
    assert!(why.contains("cluster-groups 4"), "{why}");
}

/// FLOCK.CLUSTER ADD sent to any node adds the new node to every group (each change made by
/// that group's leader), and the leaders spread onto it: four groups on four nodes, one each.
#[test]
fn a_node_added_joins_every_group_and_takes_its_share_of_leaders() {
    let mut cluster = Cluster::start_with(3, 4, groups_args());
    settled(&cluster, None, Duration::from_secs(30));
    cluster.start_node(3);
    // Sent to a node that leads one group at most: the others' changes go to their leaders.
    let asked = (0..3)
        .min_by_key(|i| {
            cluster
                .replication(*i)
                .get("raft_groups_led")
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0)
        })
        .unwrap();
    let added = cluster.call(asked, &["FLOCK.CLUSTER", "ADD", "4", &cluster.address(3)]);
    assert_eq!(added, "+OK\r\n", "{}", cluster.logs());
    let masters = settled(&cluster, None, Duration::from_secs(30));
    println!("after the add: {masters:?}");
    assert!(
        masters.values().any(|m| *m == 3),
        "node 4 leads no group: {masters:?}"
    );
    // Every group commits through the new node and replicates to it.
    for name in names_per_group(1) {
        let token = cluster.call(3, &["FLOCK.ACQUIRE", &name, "30000"]);
        assert!(token.starts_with(':'), "{name}: {token}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sizes: Vec<String> = (0..4).map(|i| cluster.call(i, &["DBSIZE"])).collect();
        if sizes.iter().all(|s| *s == sizes[0]) && sizes[0] == format!(":{GROUPS}\r\n") {
            break;
        }
        assert!(Instant::now() < deadline, "DBSIZE {sizes:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
