//! The daemon as a library: `flockd::server::start` inside the test's own process (no binary, no
//! child) on a port the system picks, `Running::serve` serving it over TCP to the redis crate,
//! and `Running::stopper` stopping it as SHUTDOWN does, after which `serve` returns `Ok`. The other suites drive the binary, as users run it; this is the shape an
//! embedding (a test harness of another project, a benchmark) takes.

use std::time::{Duration, Instant};

use clap::Parser;

use crate::common::TempDir;

#[test]
fn a_server_starts_in_process_serves_and_stops() {
    let dir = TempDir::new("in-process");
    let dir_arg = dir.path().display().to_string();
    let cli = flockd::config::Cli::try_parse_from([
        "flockd",
        "--bind",
        "127.0.0.1",
        "--port",
        "0",
        "--dir",
        &dir_arg,
    ])
    .expect("flags");
    let config = cli.settings.resolve().expect("configuration");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let running = runtime
        .block_on(flockd::server::start(config, None))
        .expect("start");
    let addr = running.local_addr();
    assert_ne!(addr.port(), 0, "the port the system picked");
    let stop = running.stopper();
    let server = runtime.spawn(running.serve());

    let url = format!("redis://{addr}/");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conn = loop {
        match redis::Client::open(url.as_str()).and_then(|c| c.get_connection()) {
            Ok(conn) => break conn,
            Err(e) if Instant::now() < deadline => {
                assert!(!server.is_finished(), "the server stopped: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("no server within 10 s: {e}"),
        }
    };
    let token: u64 = redis::cmd("FLOCK.ACQUIRE")
        .arg("order:1042")
        .arg(30000)
        .query(&mut conn)
        .expect("acquire");
    assert_eq!(token, 1);
    let stored: i64 = redis::cmd("FENCE.SET")
        .arg("order:1042:row")
        .arg(token)
        .arg("paid")
        .query(&mut conn)
        .expect("fenced write");
    assert_eq!(stored, 1, "the fenced write is accepted");

    stop.cancel();
    let stopped = runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), server).await })
        .expect("serve returned within 10 s of the stop")
        .expect("the server task did not panic");
    assert!(stopped.is_ok(), "serve: {stopped:?}");
    assert!(
        redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection())
            .is_err(),
        "the port is closed"
    );
    // What was written is in the data directory, as a restart would read it.
    let aof = std::fs::read(dir.path().join("flockd.aof")).expect("the AOF");
    assert!(
        aof.windows(10).any(|w| w == b"order:1042"),
        "the grant is in the AOF"
    );
}
