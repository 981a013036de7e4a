//! The metrics port against the real binary, over raw HTTP/1.1: `/metrics` has the contract's
//! names with the values the commands just caused, `/livez` and `/readyz` answer, and bad
//! input (unknown paths and methods, oversized headers, a slowloris client, a connection flood)
//! gets a clear HTTP error or a closed connection while the port keeps serving.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::{TestServer, wait_until};

/// Sends `request` as is and reads the whole response (the request asks to close).
fn http(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

fn get(addr: SocketAddr, path: &str) -> String {
    http(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

fn status(response: &str) -> &str {
    response.lines().next().unwrap_or_default()
}

/// The value of the sample `series` (name and labels exactly as exported).
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in:\n{body}"))
}

#[test]
fn metrics_show_what_the_commands_did() {
    let server = TestServer::start(&["--metrics-port", "0"]);
    let addr = server.metrics_addr();
    let mut raw = server.raw();
    let mut other = server.raw();
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "a", "60000"]), ":1\r\n");
    // Busy, a renewal, a refused release, a fence write accepted and one refused.
    assert_eq!(other.call(&["FLOCK.ACQUIRE", "a", "60000"]), "$-1\r\n");
    assert_eq!(raw.call(&["FLOCK.RENEW", "a", "1", "60000"]), ":1\r\n");
    assert!(
        raw.call(&["FLOCK.RELEASE", "a", "9"])
            .starts_with("-NOTOWNER")
    );
    assert_eq!(raw.call(&["FENCE.SET", "k", "2", "v"]), ":1\r\n");
    assert_eq!(raw.call(&["FENCE.SET", "k", "1", "v"]), ":0\r\n");
    // A wait that times out, then one that is granted when the holder releases.
    assert_eq!(
        other.call(&["FLOCK.ACQUIRE", "a", "60000", "WAIT", "50"]),
        "$-1\r\n"
    );
    other.cmd(&[b"FLOCK.ACQUIRE", b"a", b"60000", b"WAIT", b"10000"]);
    wait_until(Duration::from_secs(5), "the waiter is queued", || {
        let body = get(addr, "/metrics");
        sample(&body, "flockd_lock_waiters") == 1.0
    });
    assert_eq!(raw.call(&["FLOCK.RELEASE", "a", "1"]), ":1\r\n");
    assert_eq!(other.read_reply(), ":2\r\n");
    // A hold that expires, one force-released.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "e", "30"]), ":1\r\n");
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "f", "60000"]), ":1\r\n");
    assert_eq!(raw.call(&["FLOCK.FORCERELEASE", "f"]), ":1\r\n");
    wait_until(Duration::from_secs(5), "the short lease expired", || {
        let body = get(addr, "/metrics");
        sample(&body, "flockd_lock_expirations_total") == 1.0
    });

    let response = get(addr, "/metrics");
    assert_eq!(status(&response), "HTTP/1.1 200 OK", "{response}");
    assert!(
        response
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{response}"
    );
    let body = &response[response.find("\r\n\r\n").unwrap() + 4..];
    assert!(body.ends_with("# EOF\n"), "{body}");
    let expect = |series: &str, value: f64| {
        assert_eq!(sample(body, series), value, "{series}");
    };
    expect(
        &format!(
            "flockd_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        ),
        1.0,
    );
    expect("flockd_connected_clients", 2.0);
    expect("flockd_blocked_clients", 0.0);
    expect("flockd_commands_total{command=\"flock.acquire\"}", 6.0);
    expect(
        "flockd_command_errors_total{command=\"flock.release\",error=\"NOTOWNER\"}",
        1.0,
    );
    expect(
        "flockd_command_duration_seconds_count{command=\"flock.acquire\"}",
        6.0,
    );
    expect(
        "flockd_command_duration_seconds_bucket{le=\"+Inf\",command=\"flock.acquire\"}",
        6.0,
    );
    expect("flockd_lock_names", 3.0);
    expect("flockd_locks_held", 1.0);
    expect("flockd_lock_waiters", 0.0);
    expect("flockd_lock_grants_total{mode=\"exclusive\"}", 4.0);
    expect("flockd_lock_renewals_total", 1.0);
    expect("flockd_lock_releases_total", 1.0);
    expect("flockd_lock_expirations_total", 1.0);
    expect("flockd_lock_force_releases_total", 1.0);
    expect("flockd_lock_busy_total", 1.0);
    expect("flockd_lock_wait_seconds_count{result=\"granted\"}", 1.0);
    expect("flockd_lock_wait_seconds_count{result=\"timeout\"}", 1.0);
    // The timed-out wait asked for 50 ms: it took at least that.
    assert!(sample(body, "flockd_lock_wait_seconds_sum{result=\"timeout\"}") >= 0.05);
    expect("flockd_lock_hold_seconds_count{ended=\"released\"}", 1.0);
    expect("flockd_lock_hold_seconds_count{ended=\"expired\"}", 1.0);
    expect(
        "flockd_lock_hold_seconds_count{ended=\"forcereleased\"}",
        1.0,
    );
    expect("flockd_fence_writes_total{result=\"accepted\"}", 1.0);
    expect("flockd_fence_writes_total{result=\"refused\"}", 1.0);
    expect("flockd_token_floor", 0.0);
    expect("flockd_aof_rewrites_total", 0.0);
    expect("flockd_aof_write_errors_total", 0.0);
    // appendfsync always: every change was synced, group commit or not.
    let fsyncs = sample(body, "flockd_aof_fsync_duration_seconds_count");
    assert!(fsyncs >= 1.0, "{fsyncs}");
    assert_eq!(sample(body, "flockd_aof_records_per_fsync_count"), fsyncs);
    assert!(sample(body, "flockd_aof_records_per_fsync_sum") >= 10.0);
    assert!(sample(body, "flockd_aof_size_bytes") > 0.0);
    // No lock name is ever a label.
    for name in ["\"a\"", "\"e\"", "\"f\"", "\"k\""] {
        assert!(!body.contains(name), "{name} in:\n{body}");
    }
}

#[test]
fn health_endpoints_and_http_errors() {
    let server = TestServer::start(&["--metrics-port", "0"]);
    let addr = server.metrics_addr();
    let livez = get(addr, "/livez");
    assert_eq!(status(&livez), "HTTP/1.1 200 OK");
    assert!(livez.ends_with("ok\n"), "{livez}");
    let readyz = get(addr, "/readyz");
    assert_eq!(status(&readyz), "HTTP/1.1 200 OK");
    assert!(readyz.ends_with("ready\n"), "{readyz}");
    let missing = get(addr, "/admin");
    assert_eq!(status(&missing), "HTTP/1.1 404 Not Found");
    assert!(missing.ends_with("not found: try /metrics, /livez or /readyz\n"));
    let post = http(
        addr,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    );
    assert_eq!(status(&post), "HTTP/1.1 405 Method Not Allowed");
    assert!(post.contains("allow: GET, HEAD"), "{post}");
    let head = http(
        addr,
        b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status(&head), "HTTP/1.1 200 OK");
    assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");
    let garbage = http(
        addr,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    );
    assert!(
        garbage.is_empty() || status(&garbage).starts_with("HTTP/1.1 400"),
        "{garbage:?}"
    );
    // Two requests on one keep-alive connection.
    let both = http(
        addr,
        b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(both.matches("HTTP/1.1 200 OK").count(), 2, "{both}");
    server.assert_alive();
}

#[test]
fn oversized_slow_and_flooding_clients_are_cut_off() {
    let server = TestServer::start(&["--metrics-port", "0"]);
    let addr = server.metrics_addr();
    // 100 KiB of headers: refused, not buffered.
    let mut big = b"GET /metrics HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..1000 {
        big.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "y".repeat(90)).as_bytes());
    }
    big.extend_from_slice(b"\r\n");
    let refused = http(addr, &big);
    assert!(
        refused.is_empty() || status(&refused).starts_with("HTTP/1.1 431"),
        "{}",
        status(&refused)
    );

    // A slowloris client: half a request, then nothing. Dropped after the header timeout (5 s).
    let started = Instant::now();
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(14),
        "dropped after {waited:?}"
    );

    // A flood of idle connections: those over the limit are closed at once; the port serves
    // again once they are gone.
    let flood: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let mut closed = 0;
    for mut stream in flood.iter() {
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut byte = [0u8; 1];
        if let Ok(0) = stream.read(&mut byte) {
            closed += 1;
        }
    }
    assert!(closed >= 100 - 64, "{closed} of 100 closed at once");
    drop(flood);
    wait_until(Duration::from_secs(10), "the port serves again", || {
        status(&get(addr, "/livez")) == "HTTP/1.1 200 OK"
    });
    server.assert_alive();
}

#[test]
fn a_cluster_node_has_the_raft_series() {
    let metrics_port = vec!["--metrics-port".to_string(), "0".to_string()];
    let mut cluster = Cluster::start_with(3, 3, vec![metrics_port; 3]);
    let leader = cluster.wait_for_leader(Duration::from_secs(30));
    let follower = (leader + 1) % 3;
    let scrape = |cluster: &Cluster, i: usize| {
        let node = cluster.nodes[i].as_ref().expect("running");
        get(node.metrics_addr(), "/metrics")
    };
    // Through a follower: forwarded to the leader, and the proposal's time counted there.
    cluster.call(follower, &["FLOCK.ACQUIRE", "metrics:raft", "60000"]);
    let on_follower = scrape(&cluster, follower);
    assert_eq!(sample(&on_follower, "flockd_raft_is_leader"), 0.0);
    assert!(sample(&on_follower, "flockd_raft_term") >= 1.0);
    // One group, labelled group="1": led by the leader, not this node.
    assert!(
        on_follower.contains("flockd_raft_group_is_leader{group=\"1\"} 0\n"),
        "{on_follower}"
    );
    assert!(
        on_follower.contains(&format!(
            "flockd_raft_group_leader{{group=\"1\"}} {}\n",
            leader + 1
        )),
        "{on_follower}"
    );
    wait_until(
        Duration::from_secs(10),
        "the follower counts its leader",
        || {
            sample(
                &scrape(&cluster, follower),
                "flockd_raft_leader_changes_total",
            ) >= 1.0
        },
    );
    assert!(sample(&on_follower, "flockd_raft_forwarded_commands_total") >= 1.0);
    // The follower's own apply answers the client; the leader's answer to the forward, which
    // counts the proposal's time, may come a moment later.
    wait_until(
        Duration::from_secs(10),
        "the proposal's time is counted",
        || {
            let body = scrape(&cluster, follower);
            sample(&body, "flockd_raft_proposal_duration_seconds_count") >= 1.0
        },
    );
    assert!(sample(&on_follower, "flockd_raft_applied_index") >= 1.0);
    assert!(sample(&on_follower, "flockd_memory_used_bytes") > 0.0);
    assert!(sample(&on_follower, "flockd_memory_rss_bytes") > 0.0);
    let on_leader = scrape(&cluster, leader);
    assert_eq!(sample(&on_leader, "flockd_raft_is_leader"), 1.0);
    assert!(sample(&on_leader, "flockd_raft_commit_index") >= 1.0);
    // The Raft log's fsyncs: the Durability row's only series on a cluster (no AOF there).
    for body in [&on_leader, &scrape(&cluster, follower)] {
        assert!(
            sample(body, "flockd_raft_log_fsync_duration_seconds_count") >= 1.0,
            "{body}"
        );
        assert!(
            sample(
                body,
                "flockd_raft_log_fsync_duration_seconds_bucket{le=\"+Inf\"}"
            ) >= 1.0
        );
    }

    // A new leader after the old one is killed: the survivors count the change.
    let before = sample(
        &scrape(&cluster, follower),
        "flockd_raft_leader_changes_total",
    );
    cluster.kill(leader);
    let next = cluster.wait_for_leader(Duration::from_secs(30));
    assert_ne!(next, leader);
    // Counted by a task that follows openraft's metrics: it may trail INFO by a moment.
    wait_until(
        Duration::from_secs(10),
        "the follower counts the new leader",
        || {
            sample(
                &scrape(&cluster, follower),
                "flockd_raft_leader_changes_total",
            ) > before
        },
    );
    assert_eq!(
        sample(&scrape(&cluster, next), "flockd_raft_is_leader"),
        1.0
    );
}

#[test]
fn a_single_node_has_no_raft_series() {
    let server = TestServer::start(&["--metrics-port", "0"]);
    let body = get(server.metrics_addr(), "/metrics");
    assert!(!body.contains("flockd_raft_"), "{body}");
    assert!(sample(&body, "flockd_memory_used_bytes") > 0.0);
}

/// Prometheus only sees a counter's increase when the series existed before it: the error
/// series are there, at zero, before the first error, and unknown commands count too.
#[test]
fn error_series_exist_from_the_start_and_count_unknown_commands() {
    let server = TestServer::start(&["--metrics-port", "0"]);
    let addr = server.metrics_addr();
    let body = get(addr, "/metrics");
    for series in [
        "flockd_command_errors_total{command=\"flock.release\",error=\"NOTOWNER\"}",
        "flockd_command_errors_total{command=\"flock.acquire\",error=\"ERR\"}",
        "flockd_command_errors_total{command=\"flock.forcerelease\",error=\"NOPERM\"}",
        "flockd_command_errors_total{command=\"unknown\",error=\"unknown\"}",
    ] {
        assert_eq!(sample(&body, series), 0.0, "{series}");
    }
    let mut raw = server.raw();
    assert!(
        raw.call(&["NOSUCHCMD", "x"])
            .starts_with("-ERR unknown command")
    );
    assert!(
        raw.call(&["FLOCK.NOPE"])
            .starts_with("-ERR unknown command")
    );
    let body = get(addr, "/metrics");
    assert_eq!(
        sample(
            &body,
            "flockd_command_errors_total{command=\"unknown\",error=\"unknown\"}"
        ),
        2.0
    );
    // The name a client sent never becomes a label.
    assert!(
        !body.contains("nosuchcmd") && !body.contains("NOSUCHCMD"),
        "{body}"
    );
}
