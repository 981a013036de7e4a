//! The documentation's examples run against the real server: the Python one (redis-py) as a
//! script, the Rust one compiled in as a module.

use crate::common;

#[path = "../../docs/examples/rust/fenced_worker.rs"]
mod fenced_worker;

use std::process::Command;
use std::time::Duration;

use crate::common::TestServer;

fn python_has_redis() -> bool {
    Command::new("python3")
        .args(["-c", "import redis"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn python_fenced_worker_runs() {
    if !python_has_redis() {
        common::skipping(
            "skipping python_fenced_worker_runs: `python3 -c 'import redis'` failed (pip install redis)",
        );
        return;
    }
    let server = TestServer::start(&[]);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/examples/python/fenced_worker.py"
    );
    for expected_token in 1..=2 {
        let out = Command::new("python3")
            .arg(script)
            .env("FLOCKD_URL", format!("redis://{}", server.addr))
            .output()
            .expect("run python3");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "fenced_worker.py failed: {:?}\n{stdout}\n{stderr}",
            out.status
        );
        assert!(
            stdout.contains(&format!("acquired orders:42 with token {expected_token}")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("stored: written by token {expected_token}")),
            "{stdout}"
        );
        assert!(stdout.contains("released (free=1)"), "{stdout}");
    }
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FENCE.TOKEN", "res:orders:42"]), ":2\r\n");
    assert_eq!(raw.call(&["FLOCK.TTL", "orders:42"]), ":-2\r\n");

    // While someone else holds the lock past the script's WAIT, it gives up with exit code 1.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "orders:42", "60000"]), ":3\r\n");
    let out = Command::new("python3")
        .arg(script)
        .env("FLOCKD_URL", format!("redis://{}", server.addr))
        .output()
        .expect("run python3");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("lock busy"));
}

#[test]
fn rust_fenced_worker_runs() {
    let server = TestServer::start(&[]);
    let url = format!("redis://{}", server.addr);
    assert_eq!(fenced_worker::run(&url).expect("first run"), 1);
    assert_eq!(fenced_worker::run(&url).expect("second run"), 2);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["FENCE.GET", "res:orders:42"]),
        "$18\r\nwritten by token 2\r\n"
    );
    // A holder in the way: the worker queues and is served when the holder releases.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "orders:42", "60000"]), ":3\r\n");
    let worker = std::thread::spawn(move || fenced_worker::run(&url));
    common::wait_until(Duration::from_secs(10), "the worker queued", || {
        raw.call(&["FLOCK.STATUS", "orders:42"])
            .contains("$7\r\nwaiters\r\n:1\r\n")
    });
    assert_eq!(raw.call(&["FLOCK.RELEASE", "orders:42", "3"]), ":1\r\n");
    assert_eq!(worker.join().unwrap().expect("queued run"), 4);
}

/// What docs/clients.md says about the `redis` crate and a blocking acquire: a read timeout
/// (sync: `set_read_timeout`; async: the 500 ms default response timeout) fails the call but
/// keeps the connection, so the server still grants the abandoned acquire, which then holds the
/// lock for its whole lease. If this test fails after a `redis` upgrade, update docs/clients.md.
#[test]
fn redis_rs_timeouts_as_documented() {
    let server = TestServer::start(&[]);
    let client = server.client();
    let mut raw = server.raw();

    // A holder that releases after 1.5 s; the call waits up to 3 s but times out after 0.5 s.
    let held_then_released = |raw: &mut common::Raw, name: &str| {
        assert_eq!(raw.call(&["FLOCK.ACQUIRE", name, "60000"]), ":1\r\n");
        let addr = server.addr.to_string();
        let name = name.to_string();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            let mut c = redis::Client::open(format!("redis://{addr}/"))
                .unwrap()
                .get_connection()
                .unwrap();
            let freed: i64 = redis::cmd("FLOCK.RELEASE")
                .arg(&name)
                .arg(1)
                .query(&mut c)
                .unwrap();
            assert_eq!(freed, 1);
        })
    };
    let acquire = |name: &str| {
        let mut c = redis::cmd("FLOCK.ACQUIRE");
        c.arg(name).arg(30000).arg("WAIT").arg(3000);
        c
    };

    // Sync connection with a read timeout.
    let releaser = held_then_released(&mut raw, "rs:sync");
    let mut con = client.get_connection().unwrap();
    con.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let started = std::time::Instant::now();
    let got: redis::RedisResult<Option<i64>> = acquire("rs:sync").query(&mut con);
    assert!(got.is_err(), "{got:?}");
    assert!(started.elapsed() < Duration::from_millis(1400));
    releaser.join().unwrap();
    common::wait_until(
        Duration::from_secs(5),
        "the abandoned acquire granted",
        || raw.call(&["FLOCK.TOKEN", "rs:sync"]) == ":2\r\n",
    );
    let ttl = raw.call(&["FLOCK.TTL", "rs:sync"]);
    assert!(ttl.starts_with(":2"), "held for its 30 s lease: {ttl}");
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(
        pong, "PONG",
        "the connection stays open and skips the late reply"
    );

    // Async multiplexed connection with the crate's defaults (500 ms response timeout).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let releaser = held_then_released(&mut raw, "rs:async");
    let got: redis::RedisResult<Option<i64>> = rt.block_on(async {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let started = std::time::Instant::now();
        let got = acquire("rs:async").query_async(&mut con).await;
        assert!(started.elapsed() < Duration::from_millis(1400));
        // Keep the connection open until the grant has happened.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        got
    });
    assert!(got.is_err(), "{got:?}");
    releaser.join().unwrap();
    common::wait_until(
        Duration::from_secs(5),
        "the abandoned async acquire granted",
        || raw.call(&["FLOCK.TOKEN", "rs:async"]) == ":2\r\n",
    );
    let ttl = raw.call(&["FLOCK.TTL", "rs:async"]);
    assert!(ttl.starts_with(":2"), "held for its 30 s lease: {ttl}");
}
