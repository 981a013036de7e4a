//! Sentinel-compatible discovery on a 3-node cluster of real `flockd` processes: every node
//! answers SENTINEL get-master-addr-by-name / masters / master / replicas / slaves / sentinels /
//! myid in Sentinel's shapes, publishes `+switch-master` when the leader changes, and redis-rs's
//! own Sentinel client follows a killed leader with no error beyond its documented retry (ask
//! the SentinelClient for a new connection). redis-py's and ioredis's Sentinel clients are
//! tested the same way in tests/cluster_clients/ (CI runs them).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::cluster::{Cluster, free_ports};
use redis::sentinel::{SentinelClient, SentinelServerType};

/// The fields of one Sentinel state (a flat RESP2 array of bulk strings), by name.
fn state(entry: &redis::Value) -> std::collections::HashMap<String, String> {
    let redis::Value::Array(items) = entry else {
        panic!("not an array: {entry:?}");
    };
    items
        .chunks(2)
        .map(|kv| {
            let text = |v: &redis::Value| match v {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("not a bulk string: {other:?}"),
            };
            (text(&kv[0]), text(&kv[1]))
        })
        .collect()
}

/// The `port` fields of some Sentinel states, sorted.
fn ports_of(entries: &[redis::Value]) -> Vec<String> {
    let mut ports: Vec<String> = entries.iter().map(|e| state(e)["port"].clone()).collect();
    ports.sort();
    ports
}

/// The client ports of every node but `skip`, sorted.
fn ports_except(cluster: &Cluster, skip: usize) -> Vec<String> {
    let mut ports: Vec<String> = (0..3)
        .filter(|j| *j != skip)
        .map(|j| cluster.addr(j).port().to_string())
        .collect();
    ports.sort();
    ports
}

fn connect(cluster: &Cluster, i: usize) -> redis::Connection {
    redis::Client::open(format!("redis://{}/", cluster.addr(i)))
        .expect("client")
        .get_connection()
        .expect("connect")
}

#[test]
fn every_node_describes_the_leader_and_the_members_as_sentinel_does() {
    let cluster = Cluster::start(3);
    for i in 0..3 {
        let mut c = connect(&cluster, i);
        // A follower that has not heard the leader for two election timeouts names none (a
        // loaded machine can delay heartbeats that long): ask again, up to 20 s.
        let deadline = Instant::now() + Duration::from_secs(20);
        let leader = loop {
            let leader = cluster.wait_for_leader(Duration::from_secs(20));
            let addr: Option<Vec<String>> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg("flockd")
                .query(&mut c)
                .expect("get-master-addr-by-name");
            let want = vec![
                "127.0.0.1".to_string(),
                cluster.addr(leader).port().to_string(),
            ];
            if addr.as_ref() == Some(&want) {
                break leader;
            }
            assert!(
                Instant::now() < deadline,
                "node {} names {addr:?}, not node {}",
                i + 1,
                leader + 1
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let leader_port = cluster.addr(leader).port().to_string();
        let unknown: Option<Vec<String>> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("other")
            .query(&mut c)
            .expect("an unknown name");
        assert_eq!(unknown, None);

        let masters: Vec<redis::Value> = redis::cmd("SENTINEL")
            .arg("masters")
            .query(&mut c)
            .expect("masters");
        assert_eq!(masters.len(), 1);
        let m = state(&masters[0]);
        assert_eq!(m["name"], "flockd");
        assert_eq!(m["ip"], "127.0.0.1");
        assert_eq!(m["port"], leader_port);
        assert_eq!(m["flags"], "master");
        assert_eq!(m["num-slaves"], "2");
        assert_eq!(m["num-other-sentinels"], "2");
        assert_eq!(m["quorum"], "2");
        let one: redis::Value = redis::cmd("SENTINEL")
            .arg("master")
            .arg("flockd")
            .query(&mut c)
            .expect("master");
        assert_eq!(state(&one)["port"], leader_port);

        for sub in ["replicas", "slaves"] {
            let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                .arg(sub)
                .arg("flockd")
                .query(&mut c)
                .expect(sub);
            assert_eq!(
                ports_of(&replicas),
                ports_except(&cluster, leader),
                "{sub} on node {}",
                i + 1
            );
            for r in &replicas {
                let r = state(r);
                assert_eq!(r["flags"], "slave");
                assert_eq!(r["master-port"], leader_port);
                assert_eq!(r["master-link-status"], "ok");
            }
        }
        let sentinels: Vec<redis::Value> = redis::cmd("SENTINEL")
            .arg("sentinels")
            .arg("flockd")
            .query(&mut c)
            .expect("sentinels");
        assert_eq!(
            ports_of(&sentinels),
            ports_except(&cluster, i),
            "the other sentinels of node {}",
            i + 1
        );
        let id: String = redis::cmd("SENTINEL")
            .arg("myid")
            .query(&mut c)
            .expect("myid");
        assert_eq!(id, format!("{:040x}", i + 1));

        // Errors name what was wrong, and the connection stays open.
        for (args, want) in [
            (vec!["master", "other"], "No such master with that name"),
            (vec!["replicas", "other"], "No such master with that name"),
            (vec!["frob"], "unknown subcommand"),
            (vec!["masters", "extra"], "wrong number of arguments"),
            (vec!["get-master-addr-by-name"], "wrong number of arguments"),
        ] {
            let err = redis::cmd("SENTINEL")
                .arg(&args)
                .query::<redis::Value>(&mut c)
                .expect_err("an error");
            assert!(err.to_string().contains(want), "{args:?}: {err}");
        }
        let pong: String = redis::cmd("PING").query(&mut c).expect("still open");
        assert_eq!(pong, "PONG");
    }
}

/// A raw subscriber to `+switch-master` on node `i`: its messages' payloads, line by line.
fn subscribe_switch_master(cluster: &Cluster, i: usize) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(cluster.addr(i)).expect("subscriber");
    s.write_all(b"SUBSCRIBE +switch-master\r\n")
        .expect("subscribe");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    // *3 $9 subscribe $14 +switch-master :1
    for _ in 0..6 {
        line.clear();
        r.read_line(&mut line).expect("subscribe reply");
    }
    assert_eq!(line.trim(), ":1");
    r
}

fn next_message(r: &mut BufReader<TcpStream>) -> String {
    let mut lines = Vec::new();
    for _ in 0..7 {
        let mut line = String::new();
        r.read_line(&mut line)
            .expect("a +switch-master message in time");
        lines.push(line.trim().to_string());
    }
    assert_eq!(lines[2], "message", "{lines:?}");
    assert_eq!(lines[4], "+switch-master", "{lines:?}");
    lines[6].clone()
}

#[test]
fn redis_rs_sentinel_follows_a_killed_leader_and_switch_master_is_published() {
    // redis-rs checks that its sentinels say ROLE sentinel: each node has a sentinel port too.
    let sentinel_ports = free_ports(3);
    let extra = sentinel_ports
        .iter()
        .map(|p| vec!["--sentinel-port".to_string(), p.to_string()])
        .collect();
    let mut cluster = Cluster::start_with(3, 3, extra);
    let leader = cluster.wait_for_leader(Duration::from_secs(20));
    let watcher = (leader + 1) % 3;
    let mut switch = subscribe_switch_master(&cluster, watcher);
    let sentinels: Vec<String> = sentinel_ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    // On the sentinel port the node is a Sentinel, and only that.
    let mut s = redis::Client::open(sentinels[0].as_str())
        .expect("client")
        .get_connection()
        .expect("the sentinel port");
    let role: redis::Value = redis::cmd("ROLE").query(&mut s).expect("ROLE");
    assert_eq!(
        role,
        redis::Value::Array(vec![
            redis::Value::BulkString(b"sentinel".to_vec()),
            redis::Value::Array(vec![redis::Value::BulkString(b"flockd".to_vec())]),
        ])
    );
    let refused = redis::cmd("FLOCK.ACQUIRE")
        .arg("x")
        .arg(1000)
        .query::<redis::Value>(&mut s)
        .expect_err("no locks on the sentinel port");
    assert!(refused.to_string().contains("sentinel port"), "{refused}");
    drop(s);
    let mut client = SentinelClient::build(sentinels, "flockd", None, SentinelServerType::Master)
        .expect("sentinel client");
    let mut conn = client.get_connection().expect("the master");
    let mut tokens = Vec::new();
    let mut retries = 0u32;
    let started = Instant::now();
    let mut killed_at = None;
    // 200 acquire/release cycles through whatever the sentinel client found; the leader is
    // killed after 50. Bounded: 200 cycles and 60 s.
    while tokens.len() < 200 {
        assert!(started.elapsed() < Duration::from_secs(60), "too slow");
        if tokens.len() == 50 && killed_at.is_none() {
            cluster.kill(leader);
            killed_at = Some(Instant::now());
        }
        let cycle = (|| -> redis::RedisResult<u64> {
            let token: u64 = redis::cmd("FLOCK.ACQUIRE")
                .arg("sentinel:lock")
                .arg(10_000)
                .query(&mut conn)?;
            let _: i64 = redis::cmd("FLOCK.RELEASE")
                .arg("sentinel:lock")
                .arg(token)
                .query(&mut conn)?;
            Ok(token)
        })();
        match cycle {
            Ok(t) => tokens.push(t),
            // The documented retry: a dropped connection (or -CLUSTERDOWN while a new leader
            // is elected) means asking the sentinel client for the master again.
            Err(e)
                if e.is_io_error()
                    || e.is_connection_dropped()
                    || e.code() == Some("CLUSTERDOWN") =>
            {
                retries += 1;
                assert!(retries < 100, "still failing: {e}");
                std::thread::sleep(Duration::from_millis(100));
                if let Ok(c) = client.get_connection() {
                    conn = c;
                }
            }
            Err(e) => panic!("an error reached the application: {e}\n{}", cluster.logs()),
        }
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let new_leader = cluster.wait_for_leader(Duration::from_secs(20));
    assert_ne!(new_leader, leader);
    let message = next_message(&mut switch);
    assert_eq!(
        message,
        format!(
            "flockd 127.0.0.1 {} 127.0.0.1 {}",
            cluster.addr(leader).port(),
            cluster.addr(new_leader).port()
        )
    );
    eprintln!(
        "redis-rs sentinel: 200 cycles, {retries} retries after the leader kill, {:?} in all",
        started.elapsed()
    );
}
