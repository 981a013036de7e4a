//! Real client handshakes with the `redis` crate (sync, async multiplexed, RESP3), many
//! concurrent connections, `maxclients`, and the binary's configuration surface (flags,
//! environment, config file, `--version`, `--help`, JSON logs).

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::{Raw, Server, TempDir, TestServer, run_flockd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn sync_connection_handshake_and_commands() {
    let server = TestServer::start(&[]);
    let mut con = server.conn();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    let () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("sync-client")
        .query(&mut con)
        .unwrap();
    let name: Option<String> = redis::cmd("CLIENT").arg("GETNAME").query(&mut con).unwrap();
    assert_eq!(name.as_deref(), Some("sync-client"));
    // The crate sends CLIENT SETINFO during its handshake; the server recorded it.
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut con).unwrap();
    assert!(
        info.contains(" name=sync-client ") && info.contains(" lib-name=redis-rs "),
        "{info}"
    );

    let token: Option<i64> = redis::cmd("FLOCK.ACQUIRE")
        .arg("order:1")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(token, Some(1));
    let again: Option<i64> = redis::cmd("FLOCK.ACQUIRE")
        .arg("order:1")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(again, None, "a held lock gives nil");
    let ttl: i64 = redis::cmd("FLOCK.TTL")
        .arg("order:1")
        .query(&mut con)
        .unwrap();
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    let freed: i64 = redis::cmd("FLOCK.RELEASE")
        .arg("order:1")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(freed, 1);
    let next: Option<i64> = redis::cmd("FLOCK.ACQUIRE")
        .arg("order:1")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(next, Some(2));

    // Errors surface as redis errors with the server's code, and the connection stays usable.
    let err = redis::cmd("FLOCK.RELEASE")
        .arg("order:1")
        .arg(1)
        .query::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("NOTOWNER"), "{err}");
    let err = redis::cmd("FLOCK.ACQUIRE")
        .arg("x")
        .arg("soon")
        .query::<Option<i64>>(&mut con)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("value is not an integer or out of range"),
        "{err}"
    );
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");

    // The crate's pipeline: answers in order.
    let (a, b, c): (Option<i64>, Option<i64>, i64) = redis::pipe()
        .cmd("FLOCK.ACQUIRE")
        .arg("pipe:a")
        .arg(1000)
        .cmd("FLOCK.ACQUIRE")
        .arg("pipe:a")
        .arg(1000)
        .cmd("FLOCK.TOKEN")
        .arg("pipe:a")
        .query(&mut con)
        .unwrap();
    assert_eq!((a, b, c), (Some(1), None, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_multiplexed_connection() {
    let server = TestServer::start(&[]);
    let client = server.client();
    let con = tokio::time::timeout(
        Duration::from_secs(30),
        client.get_multiplexed_async_connection(),
    )
    .await
    .expect("connect in time")
    .expect("connect");
    // The crate's default of 500 ms per reply is about the machine, not the server: under a
    // loaded CI machine 100 concurrent fsynced acquires can take longer.
    let mut con = con;
    con.set_response_timeout(Duration::from_secs(30));
    let mut c = con.clone();
    let pong: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
    assert_eq!(pong, "PONG");
    // Many concurrent requests over one multiplexed connection, each answered correctly.
    let mut tasks = Vec::new();
    for i in 0..100 {
        let mut c = con.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("async:{i}");
            let first: Option<i64> = redis::cmd("FLOCK.ACQUIRE")
                .arg(&name)
                .arg(60_000)
                .query_async(&mut c)
                .await
                .unwrap();
            let second: Option<i64> = redis::cmd("FLOCK.ACQUIRE")
                .arg(&name)
                .arg(60_000)
                .query_async(&mut c)
                .await
                .unwrap();
            let echoed: String = redis::cmd("ECHO")
                .arg(&name)
                .query_async(&mut c)
                .await
                .unwrap();
            (first, second, echoed == name)
        }));
    }
    for task in tasks {
        let outcome = tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("in time")
            .unwrap();
        assert_eq!(outcome, (Some(1), None, true));
    }
    // A blocking WAIT on one multiplexed connection does not need a second connection to finish.
    let mut c = con.clone();
    let waited: Option<i64> = redis::cmd("FLOCK.ACQUIRE")
        .arg("async:0")
        .arg(1000)
        .arg("WAIT")
        .arg(50)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(waited, None);
}

#[test]
fn resp3_via_url_decodes_status_as_a_map() {
    let server = TestServer::start(&[]);
    let client = redis::Client::open(format!("redis://{}/?protocol=resp3", server.addr)).unwrap();
    let mut con = client.get_connection().unwrap();
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut con).unwrap();
    assert!(
        info.contains(" resp=3 "),
        "the crate switched with HELLO 3: {info}"
    );
    let token: Option<i64> = redis::cmd("FLOCK.ACQUIRE")
        .arg("resp3")
        .arg(60_000)
        .arg("OWNER")
        .arg("me")
        .query(&mut con)
        .unwrap();
    assert_eq!(token, Some(1));
    let status: redis::Value = redis::cmd("FLOCK.STATUS")
        .arg("resp3")
        .query(&mut con)
        .unwrap();
    let redis::Value::Map(pairs) = &status else {
        panic!("FLOCK.STATUS in RESP3 must be a map, got {status:?}");
    };
    let keys: Vec<String> = pairs
        .iter()
        .map(|(k, _)| redis::from_redis_value_ref(k).unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "name",
            "locked",
            "token",
            "owner",
            "ttl",
            "holds",
            "waiters",
            "last-token",
            "holdings",
            "limit",
            "delay",
        ]
    );
    let map: HashMap<String, redis::Value> = redis::from_redis_value_ref(&status).unwrap();
    assert_eq!(map["locked"], redis::Value::Int(1));
    assert_eq!(map["token"], redis::Value::Int(1));
    assert_eq!(map["owner"], redis::Value::BulkString(b"me".to_vec()));
    assert_eq!(map["holds"], redis::Value::Int(1));
    // A free lock: nulls are RESP3 nulls.
    let free: redis::Value = redis::cmd("FLOCK.STATUS")
        .arg("free-one")
        .query(&mut con)
        .unwrap();
    let free: HashMap<String, redis::Value> = redis::from_redis_value(free).unwrap();
    assert_eq!(free["token"], redis::Value::Nil);
    assert_eq!(free["owner"], redis::Value::Nil);
    assert_eq!(free["ttl"], redis::Value::Int(-2));
    // And in RESP2 the crate still decodes the flat array into a map.
    let mut con2 = server.conn();
    let flat: HashMap<String, redis::Value> = redis::cmd("FLOCK.STATUS")
        .arg("resp3")
        .query(&mut con2)
        .unwrap();
    assert_eq!(flat["last-token"], redis::Value::Int(1));
    let held: Option<i64> = redis::cmd("FLOCK.ACQUIRE")
        .arg("resp3")
        .arg(1000)
        .query(&mut con)
        .unwrap();
    assert_eq!(held, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_hundred_concurrent_connections() {
    const N: usize = 1500;
    let server = TestServer::start(&[]);
    let addr = server.addr;
    let all_connected = std::sync::Arc::new(tokio::sync::Barrier::new(N));
    let mut tasks = Vec::new();
    for i in 0..N {
        let all_connected = all_connected.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            // Every connection is open at the same time before any of them sends.
            all_connected.wait().await;
            let name = format!("pool:{i}");
            let request = format!("*1\r\n$4\r\nPING\r\n*3\r\n$13\r\nFLOCK.ACQUIRE\r\n${}\r\n{name}\r\n$5\r\n60000\r\n", name.len());
            stream.write_all(request.as_bytes()).await.expect("send");
            let expected = b"+PONG\r\n:1\r\n";
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while got.len() < expected.len() {
                let n = stream.read(&mut buf).await.expect("read");
                assert!(n > 0, "connection {i} closed early; got {:?}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, expected, "connection {i}");
            stream
        }));
    }
    let mut streams = Vec::new();
    let deadline = Duration::from_secs(60);
    for task in tasks {
        streams.push(
            tokio::time::timeout(deadline, task)
                .await
                .expect("answered in time")
                .unwrap(),
        );
    }
    let mut raw = Raw::connect(addr);
    let info = raw.call(&["INFO", "clients"]);
    assert!(
        info.contains(&format!("connected_clients:{}\r\n", N + 1)),
        "{info}"
    );
    assert_eq!(raw.call(&["FLOCK.TOKEN", "pool:1499"]), ":1\r\n");
    drop(streams);
    server.assert_alive();
}

#[test]
fn maxclients_refuses_the_extra_client_without_stalling_accepts() {
    let server = TestServer::start(&["--maxclients", "5"]);
    let mut open: Vec<Raw> = (0..5).map(|_| server.raw()).collect();
    for raw in &mut open {
        assert_eq!(raw.call(&["PING"]), "+PONG\r\n");
    }
    // The 6th (and a few more) are refused and closed.
    for _ in 0..3 {
        let mut extra = server.raw();
        assert_eq!(
            extra.read_to_close(),
            "-ERR max number of clients reached\r\n"
        );
    }
    for raw in &mut open {
        assert_eq!(
            raw.call(&["PING"]),
            "+PONG\r\n",
            "the admitted clients still work"
        );
    }
    // Close one: a new client gets in (once the server has noticed the close).
    let mut closing = open.pop().unwrap();
    assert_eq!(closing.call(&["QUIT"]), "+OK\r\n");
    assert!(closing.is_closed(Duration::from_secs(10)));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut fresh = loop {
        let mut raw = server.raw();
        match raw.try_call(&["PING"]) {
            Some(reply) if reply == "+PONG\r\n" => break raw,
            Some(reply) => assert_eq!(reply, "-ERR max number of clients reached\r\n"),
            None => {}
        }
        assert!(
            Instant::now() < deadline,
            "no slot freed after a client left"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        fresh.call(&["FLOCK.ACQUIRE", "after-max", "1000"]),
        ":1\r\n"
    );
    let info = fresh.call(&["INFO", "stats"]);
    assert!(!info.contains("rejected_connections:0\r\n"), "{info}");
}

#[test]
fn bad_configuration_is_refused_with_a_clear_message() {
    let short = Duration::from_secs(20);
    let out = run_flockd(&["--port", "70000"], &[], short);
    assert!(out.status.is_some_and(|s| !s.success()), "{out:?}");
    assert!(
        out.stderr.contains("'port'") && out.stderr.contains("0..=65535"),
        "{}",
        out.stderr
    );

    let out = run_flockd(&["--appendfsync", "sometimes"], &[], short);
    assert!(out.status.is_some_and(|s| !s.success()), "{out:?}");
    assert!(
        out.stderr.contains("'appendfsync'") && out.stderr.contains("always, everysec, no"),
        "{}",
        out.stderr
    );

    let out = run_flockd(&["--maxclients", "0"], &[], short);
    assert!(
        out.status.is_some_and(|s| !s.success()) && out.stderr.contains("'maxclients'"),
        "{out:?}"
    );

    let dir = TempDir::new("badconf");
    let file = dir.path().join("flockd.toml");
    std::fs::write(&file, "port = 0\nprot = 6390\n").unwrap();
    let out = run_flockd(&["--config", file.to_str().unwrap()], &[], short);
    assert!(out.status.is_some_and(|s| !s.success()), "{out:?}");
    assert!(
        out.stderr.contains("prot") && out.stderr.contains(file.to_str().unwrap()),
        "{}",
        out.stderr
    );

    // A bad value in the environment is named too.
    let out = run_flockd(&[], &[("FLOCKD_APPENDFSYNC", "never")], short);
    assert!(
        out.status.is_some_and(|s| !s.success()) && out.stderr.contains("'appendfsync'"),
        "{out:?}"
    );
}

#[test]
fn version_and_help() {
    let out = run_flockd(&["--version"], &[], Duration::from_secs(20));
    assert!(out.status.is_some_and(|s| s.success()), "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        format!("flockd {}", env!("CARGO_PKG_VERSION"))
    );
    let out = run_flockd(&["--help"], &[], Duration::from_secs(20));
    assert!(out.status.is_some_and(|s| s.success()), "{out:?}");
    for flag in [
        "--port",
        "--bind",
        "--dir",
        "--appendfsync",
        "--requirepass",
        "--maxclients",
        "--config",
    ] {
        assert!(
            out.stdout.contains(flag),
            "--help lacks {flag}:\n{}",
            out.stdout
        );
    }
}

#[test]
fn port_zero_ready_line_names_the_real_port() {
    let server = TestServer::start(&[]);
    assert_ne!(server.addr.port(), 0);
    assert!(server.addr.ip().is_loopback());
    let log = server.log();
    assert!(
        log.contains(&format!("ready to accept connections on {}", server.addr)),
        "{log}"
    );
    let mut raw = server.raw();
    let info = raw.call(&["INFO", "server"]);
    assert!(
        info.contains(&format!("tcp_port:{}\r\n", server.addr.port())),
        "{info}"
    );
}

#[test]
fn json_log_format() {
    let dir = TempDir::new("json");
    let mut server = Server::start_in(dir.path(), &["--log-format", "json"]);
    server.assert_alive();
    server.signal("TERM");
    assert_eq!(
        server
            .wait_exit(Duration::from_secs(30))
            .and_then(|s| s.code()),
        Some(0)
    );
    std::thread::sleep(Duration::from_millis(100));
    let log = server.log();
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 3, "{log}");
    for line in &lines {
        assert!(
            line.starts_with('{') && line.ends_with('}'),
            "not a JSON line: {line}"
        );
        assert!(
            line.contains("\"level\":\"") && line.contains("\"timestamp\":\""),
            "{line}"
        );
    }
    let ready = format!(
        "\"message\":\"ready to accept connections on {}\"",
        server.addr
    );
    assert!(lines.iter().any(|l| l.contains(&ready)), "{log}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"message\":\"received SIGTERM\"")),
        "{log}"
    );
}

#[test]
fn environment_variables_are_honoured_and_flags_beat_them() {
    // FLOCKD_PORT alone picks the port (find a free one first).
    let port = common::cluster::free_ports(1)[0];
    let dir = TempDir::new("env");
    let args = vec![
        "--bind".to_string(),
        "127.0.0.1".to_string(),
        "--dir".to_string(),
        dir.path().display().to_string(),
    ];
    let server = Server::try_spawn(
        dir.path(),
        args,
        &[
            ("FLOCKD_PORT", &port.to_string()),
            ("FLOCKD_MAXCLIENTS", "77"),
        ],
    )
    .unwrap_or_else(|log| {
        panic!("did not start with FLOCKD_PORT={port} (port taken meanwhile?):\n{log}")
    });
    assert_eq!(server.addr.port(), port);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["CONFIG", "GET", "maxclients"]),
        "*2\r\n$10\r\nmaxclients\r\n$2\r\n77\r\n"
    );
    drop(server);

    // A flag beats its variable: an invalid FLOCKD_PORT is ignored when --port is given.
    let dir = TempDir::new("env2");
    let server = Server::try_start_in_with_env(
        dir.path(),
        &["--maxclients", "9"],
        &[("FLOCKD_PORT", "70000"), ("FLOCKD_MAXCLIENTS", "77")],
    )
    .unwrap_or_else(|log| panic!("--port must win over FLOCKD_PORT:\n{log}"));
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["CONFIG", "GET", "maxclients"]),
        "*2\r\n$10\r\nmaxclients\r\n$1\r\n9\r\n"
    );
    drop(server);

    // And the variable alone with a bad value is refused, naming the key.
    let out = run_flockd(&[], &[("FLOCKD_PORT", "70000")], Duration::from_secs(20));
    assert!(
        out.status.is_some_and(|s| !s.success()) && out.stderr.contains("'port'"),
        "{out:?}"
    );
}

#[test]
fn config_file_values_are_used_and_flags_override_them() {
    let dir = TempDir::new("conffile");
    let file = dir.path().join("flockd.toml");
    std::fs::write(
        &file,
        "maxclients = 42\nmax-name-bytes = 8\nappendfsync = \"everysec\"\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start_in(
        &data,
        &["--config", file.to_str().unwrap(), "--maxclients", "43"],
    );
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["CONFIG", "GET", "maxclients"]),
        "*2\r\n$10\r\nmaxclients\r\n$2\r\n43\r\n"
    );
    assert_eq!(
        raw.call(&["CONFIG", "GET", "appendfsync"]),
        "*2\r\n$11\r\nappendfsync\r\n$8\r\neverysec\r\n"
    );
    assert_eq!(
        raw.call(&["FLOCK.ACQUIRE", "ninechars", "1000"]),
        "-ERR invalid lock name: must be 1 to 8 bytes\r\n"
    );
}
