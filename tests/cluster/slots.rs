//! Redis Cluster's protocol on a 3-node cluster of real `flockd` processes (one Raft group, so
//! one shard holding all 16384 slots): CLUSTER SLOTS, SHARDS, NODES, INFO, MYID and KEYSLOT in
//! Redis 7's shapes, READONLY/READWRITE/ASKING, `-MOVED` under `cluster-redirect yes`, and the
//! redis crate's own cluster client, with its defaults, sending every command to the leader
//! and carrying on after a kill -9 of it. A single node says cluster support is disabled, as
//! Redis does. redis-py's `RedisCluster` is tested the same way in tests/redis_cluster/.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::Value;
use redis::cluster_async::ClusterConnection;

use crate::common::cluster::Cluster;
use crate::common::{Server, TempDir};

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Int(i) => i.to_string(),
        Value::Okay => "OK".to_string(),
        other => panic!("not a string: {other:?}"),
    }
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

fn query(conn: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(conn)
}

fn node_id(i: usize) -> String {
    format!("{:040x}", i + 1)
}

/// A flat RESP2 map (`[k1, v1, k2, v2, ...]`) by key.
fn fields(v: &Value) -> HashMap<String, &Value> {
    items(v)
        .chunks(2)
        .map(|kv| (text(&kv[0]), &kv[1]))
        .collect()
}

fn conn_to(cluster: &Cluster, i: usize) -> redis::Connection {
    redis::Client::open(format!("redis://{}/", cluster.addr(i)))
        .expect("client")
        .get_connection()
        .expect("connect")
}

#[test]
fn every_node_describes_one_shard_whose_master_is_the_leader() {
    let cluster = Cluster::start(3);
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    for i in 0..3 {
        let mut c = conn_to(&cluster, i);

        // A replica is listed, and a member shown online, once this node's probe of it was
        // answered (Redis leaves failed replicas out): the probes of the members answer at
        // their own pace after the start, the leader's too.
        let deadline = Instant::now() + Duration::from_secs(10);
        let (slots, shards) = loop {
            let slots = query(&mut c, &["CLUSTER", "SLOTS"]).expect("CLUSTER SLOTS");
            let shards = query(&mut c, &["CLUSTER", "SHARDS"]).expect("CLUSTER SHARDS");
            let listed = items(&slots).first().map_or(0, |r| items(r).len());
            let online = items(&shards).first().is_some_and(|shard| {
                items(fields(shard)["nodes"])
                    .iter()
                    .all(|n| text(fields(n)["health"]) == "online")
            });
            if (listed == 5 && online) || Instant::now() > deadline {
                break (slots, shards);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let ranges = items(&slots);
        assert_eq!(ranges.len(), 1, "one range: {slots:?}");
        let range = items(&ranges[0]);
        assert_eq!(
            (text(&range[0]), text(&range[1])),
            ("0".into(), "16383".into())
        );
        assert_eq!(range.len(), 5, "master and two replicas: {range:?}");
        let master = items(&range[2]);
        assert_eq!(text(&master[0]), "127.0.0.1");
        assert_eq!(text(&master[1]), cluster.ports[leader].to_string());
        assert_eq!(text(&master[2]), node_id(leader));
        assert_eq!(master[3], Value::Array(vec![]), "no networking metadata");
        let mut replica_ports: Vec<String> =
            range[3..].iter().map(|r| text(&items(r)[1])).collect();
        replica_ports.sort();
        let mut expected: Vec<String> = (0..3)
            .filter(|j| *j != leader)
            .map(|j| cluster.ports[j].to_string())
            .collect();
        expected.sort();
        assert_eq!(replica_ports, expected);

        let shards = items(&shards);
        assert_eq!(shards.len(), 1);
        let shard = fields(&shards[0]);
        assert_eq!(
            items(shard["slots"]).iter().map(text).collect::<Vec<_>>(),
            ["0", "16383"]
        );
        let nodes = items(shard["nodes"]);
        assert_eq!(nodes.len(), 3);
        let first = fields(&nodes[0]);
        assert_eq!(text(first["id"]), node_id(leader));
        assert_eq!(text(first["role"]), "master");
        assert_eq!(text(first["port"]), cluster.ports[leader].to_string());
        assert_eq!(text(first["health"]), "online");
        for n in &nodes[1..] {
            assert_eq!(text(fields(n)["role"]), "replica");
        }

        let listing = text(&query(&mut c, &["CLUSTER", "NODES"]).expect("CLUSTER NODES"));
        let lines: Vec<&str> = listing.lines().collect();
        assert_eq!(lines.len(), 3, "{listing}");
        for line in &lines {
            let cols: Vec<&str> = line.split(' ').collect();
            let j = (0..3)
                .find(|j| node_id(*j) == cols[0])
                .expect("a member's id");
            assert_eq!(cols[1], cluster.address(j), "{line}");
            assert_eq!(cols[2].contains("myself"), j == i, "{line}");
            if j == leader {
                assert!(cols[2].contains("master") && cols[3] == "-", "{line}");
                assert_eq!(cols[8], "0-16383", "{line}");
            } else {
                assert!(cols[2].contains("slave"), "{line}");
                assert_eq!(cols[3], node_id(leader), "{line}");
                assert_eq!(cols.len(), 8, "a replica has no slots: {line}");
            }
            assert_eq!(cols[7], "connected", "{line}");
        }

        let info = text(&query(&mut c, &["CLUSTER", "INFO"]).expect("CLUSTER INFO"));
        for want in [
            "cluster_enabled:1",
            "cluster_state:ok",
            "cluster_slots_assigned:16384",
            "cluster_slots_ok:16384",
            "cluster_known_nodes:3",
            "cluster_size:1",
        ] {
            assert!(info.lines().any(|l| l == want), "{want} in {info}");
        }
        assert_eq!(
            text(&query(&mut c, &["CLUSTER", "MYID"]).unwrap()),
            node_id(i)
        );
        // Values Redis 7's CLUSTER KEYSLOT gives.
        for (name, slot) in [
            ("somekey", 11058),
            ("foo{hash_tag}", 2515),
            ("order:1042", 15446),
        ] {
            assert_eq!(
                text(&query(&mut c, &["CLUSTER", "KEYSLOT", name]).unwrap()),
                slot.to_string()
            );
        }
        for cmd in ["READONLY", "READWRITE", "ASKING"] {
            assert_eq!(text(&query(&mut c, &[cmd]).unwrap()), "OK");
        }
        let info = text(&query(&mut c, &["INFO", "cluster"]).unwrap());
        assert!(info.contains("cluster_enabled:1"), "{info}");
        // Bad input: Redis's errors, and the connection goes on.
        let err = query(&mut c, &["CLUSTER", "NOPE"]).unwrap_err();
        assert!(
            err.to_string().contains("unknown subcommand 'NOPE'"),
            "{err}"
        );
        let err = query(&mut c, &["CLUSTER", "KEYSLOT"]).unwrap_err();
        assert!(
            err.to_string().contains("wrong number of arguments"),
            "{err}"
        );
        assert_eq!(text(&query(&mut c, &["PING"]).unwrap()), "PONG");
    }
}

#[test]
fn a_single_node_has_cluster_support_disabled() {
    let dir = TempDir::new("slots-single");
    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.conn();
    for args in [
        &["CLUSTER", "SLOTS"][..],
        &["CLUSTER", "INFO"],
        &["CLUSTER", "KEYSLOT", "a"],
        &["READONLY"],
        &["ASKING"],
    ] {
        let err = query(&mut c, args).unwrap_err();
        assert!(
            err.to_string()
                .contains("This instance has cluster support disabled"),
            "{args:?}: {err}"
        );
    }
    let info = text(&query(&mut c, &["INFO", "cluster"]).unwrap());
    assert!(info.contains("cluster_enabled:0"), "{info}");
    assert_eq!(text(&query(&mut c, &["PING"]).unwrap()), "PONG");
}

#[test]
fn redirect_yes_answers_moved_with_the_leaders_address_and_no_forwards() {
    let redirect = vec!["--cluster-redirect".to_string(), "yes".to_string()];
    let cluster = Cluster::start_with(3, 3, vec![redirect; 3]);
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let follower = (leader + 1) % 3;
    let moved = format!("MOVED 15446 127.0.0.1:{}", cluster.ports[leader]);
    let mut c = conn_to(&cluster, follower);

    // Writes and reads for a name: redirected, and nothing done here.
    for args in [
        &["FLOCK.ACQUIRE", "order:1042", "30000"][..],
        &["FENCE.SET", "order:1042", "1", "v"],
        &["FLOCK.STATUS", "order:1042"],
        &["FENCE.GET", "order:1042"],
    ] {
        let err = query(&mut c, args).unwrap_err();
        assert_eq!(err.code(), Some("MOVED"), "{args:?}: {err}");
        assert!(
            err.to_string().contains(&moved[6..]),
            "{args:?}: {err} (want {moved})"
        );
    }
    // Commands without a name run here.
    assert_eq!(text(&query(&mut c, &["PING"]).unwrap()), "PONG");
    assert_eq!(text(&query(&mut c, &["DBSIZE"]).unwrap()), "0");
    // READONLY: reads run here; writes are still redirected. READWRITE ends it.
    query(&mut c, &["READONLY"]).unwrap();
    let status = query(&mut c, &["FLOCK.STATUS", "order:1042"]).expect("a read runs here");
    assert_eq!(text(fields(&status)["locked"]), "0");
    let err = query(&mut c, &["FLOCK.ACQUIRE", "order:1042", "30000"]).unwrap_err();
    assert_eq!(err.code(), Some("MOVED"), "{err}");
    query(&mut c, &["READWRITE"]).unwrap();
    let err = query(&mut c, &["FENCE.GET", "order:1042"]).unwrap_err();
    assert_eq!(err.code(), Some("MOVED"), "{err}");
    // In a transaction, as in Redis: the redirected command fails EXEC.
    query(&mut c, &["MULTI"]).unwrap();
    assert!(query(&mut c, &["FLOCK.ACQUIRE", "order:1042", "30000"]).is_err());
    let err = query(&mut c, &["EXEC"]).unwrap_err();
    assert_eq!(err.code(), Some("EXECABORT"), "{err}");

    // A shard channel routes by its own slot; channels of two slots are refused.
    let channel = "__flock__:{order:1042}";
    let err = query(&mut c, &["SSUBSCRIBE", channel]).unwrap_err();
    assert_eq!(err.code(), Some("MOVED"), "{err}");
    let slot = flockd_core::slot_of(channel.as_bytes());
    assert!(
        err.to_string()
            .contains(&format!("{slot} 127.0.0.1:{}", cluster.ports[leader])),
        "{err}"
    );
    let mut l = conn_to(&cluster, leader);
    let err = query(&mut l, &["SSUBSCRIBE", "a", "b"]).unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    assert!(
        err.to_string()
            .contains("Keys in request don't hash to the same slot"),
        "{err}"
    );

    // The leader serves it.
    let token = text(&query(&mut l, &["FLOCK.ACQUIRE", "order:1042", "30000"]).unwrap());
    assert_eq!(token, "1");

    // Back to forwarding, at run time: the follower takes the command to the leader.
    query(&mut c, &["CONFIG", "SET", "cluster-redirect", "no"]).unwrap();
    let released = query(&mut c, &["FLOCK.RELEASE", "order:1042", "1"]).expect("forwarded");
    assert_eq!(text(&released), "1");
}

/// Names spread over the slot space: `per_range` names in each of `ranges` equal ranges.
fn spread_names(ranges: u16, per_range: usize) -> Vec<String> {
    let width = flockd_core::SLOT_COUNT / ranges;
    let mut found: Vec<Vec<String>> = vec![vec![]; usize::from(ranges)];
    for i in 0..200_000u32 {
        let name = format!("order:{i}");
        let slot = flockd_core::slot_of(name.as_bytes());
        let range = usize::from((slot / width).min(ranges - 1));
        if found[range].len() < per_range {
            found[range].push(name);
        }
        if found.iter().all(|f| f.len() == per_range) {
            break;
        }
    }
    found.concat()
}

#[test]
fn the_redis_crate_cluster_client_goes_to_the_leader_and_carries_on_after_its_kill() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(cluster_client_across_a_kill());
}

async fn acquire(conn: &mut ClusterConnection, name: &str) -> redis::RedisResult<u64> {
    redis::cmd("FLOCK.ACQUIRE")
        .arg(name)
        .arg(30000)
        .query_async(conn)
        .await
}

/// An acquire, its renewal and its release through a cluster client: the token.
pub(crate) async fn cycle(conn: &mut redis::cluster_async::ClusterConnection, name: &str) -> u64 {
    let token: u64 = redis::cmd("FLOCK.ACQUIRE")
        .arg(name)
        .arg(30000)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("acquire {name}: {e}"));
    let renewed: i64 = redis::cmd("FLOCK.RENEW")
        .arg(name)
        .arg(token)
        .arg(30000)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("renew {name}: {e}"));
    assert_eq!(renewed, 1, "renew {name}");
    let released: i64 = redis::cmd("FLOCK.RELEASE")
        .arg(name)
        .arg(token)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("release {name}: {e}"));
    assert_eq!(released, 1, "release {name}");
    token
}

async fn cluster_client_across_a_kill() {
    let mut cluster = Cluster::start(3);
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let nodes: Vec<String> = (0..3)
        .map(|i| format!("redis://{}/", cluster.addr(i)))
        .collect();
    // The client as its documentation starts it: defaults throughout.
    let client = redis::cluster::ClusterClient::new(nodes).expect("cluster client");
    let mut conn = client
        .get_async_connection()
        .await
        .expect("cluster connection");

    let before = cluster.forwarded();
    let names = spread_names(16, 8);
    for name in &names {
        cycle(&mut conn, name).await;
    }
    let sent = 3 * names.len() as u64;
    let forwarded_during = cluster.forwarded() - before;
    println!("{sent} commands from the cluster client, {forwarded_during} forwarded by a follower");
    // Every command went straight to the leader. The only forwards a follower may make
    // meanwhile are its own start-up entry (it drops its previous run's waits), once each.
    assert!(
        forwarded_during <= 2,
        "{forwarded_during} of {sent} commands were forwarded, not sent to the leader"
    );

    // Kill -9 the leader: the client's own refresh finds the new one.
    cluster.kill(leader);
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(20);
    let mut first_ok = None;
    let mut last_error = None;
    let mut i = 0u32;
    while Instant::now() < deadline {
        i += 1;
        match acquire(&mut conn, &format!("after-kill:{i}")).await {
            Ok(_) => {
                first_ok = Some(killed.elapsed());
                break;
            }
            Err(e) => last_error = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first_ok = first_ok.unwrap_or_else(|| {
        panic!(
            "the cluster client did not carry on within 20 s of the kill (last: {last_error:?})\n{}",
            cluster.logs()
        )
    });
    println!(
        "first acquire through the cluster client {first_ok:?} after the kill ({} failed before it)",
        i - 1
    );
    let new_leader = cluster.wait_for_leader(Duration::from_secs(10));
    assert_ne!(new_leader, leader);
    // And it keeps going, over every slot range again.
    for name in spread_names(16, 2) {
        let token = acquire(&mut conn, &name)
            .await
            .unwrap_or_else(|e| panic!("acquire {name} after the failover: {e}"));
        assert!(token >= 2, "{name}: tokens never go back");
    }
}

/// A shard subscriber on a follower (cluster-redirect no) gets a lock's events as `smessage`,
/// whichever node took the change: every node publishes what it applies.
#[test]
fn a_shard_subscriber_on_any_node_gets_the_locks_events() {
    let cluster = Cluster::start(3);
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    let follower = (leader + 1) % 3;
    let mut sub = crate::common::Raw::connect(cluster.addr(follower));
    sub.send(b"SSUBSCRIBE __flock__:{order:7} {order:7}:other\r\n");
    assert!(sub.read_reply().contains("ssubscribe"));
    assert!(sub.read_reply().contains("{order:7}:other"));
    let mut l = conn_to(&cluster, leader);
    assert_eq!(
        text(&query(&mut l, &["FLOCK.ACQUIRE", "{order:7}", "30000"]).unwrap()),
        "1"
    );
    let got = sub
        .poll_reply(Duration::from_secs(5))
        .expect("an smessage within 5 s");
    assert_eq!(
        got,
        "*3\r\n$8\r\nsmessage\r\n$19\r\n__flock__:{order:7}\r\n$9\r\ngranted 1\r\n"
    );
}
