//! The daemon as a library: `flockd::server::run` started inside the test's own process (no
//! binary, no child), served over TCP to the redis crate, and stopped by SHUTDOWN, after which
//! `run` returns `Ok`. The other suites drive the binary, as users run it; this is the shape an
//! embedding (a test harness of another project, a benchmark) takes.

use std::time::{Duration, Instant};

use clap::Parser;

use crate::common::TempDir;
use crate::common::cluster::free_ports;

#[test]
fn a_server_runs_in_process_serves_and_stops_on_shutdown() {
    let dir = TempDir::new("in-process");
    let port = free_ports(1)[0].to_string();
    let dir_arg = dir.path().display().to_string();
    let cli = flockd::config::Cli::try_parse_from([
        "flockd",
        "--bind",
        "127.0.0.1",
        "--port",
        &port,
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
    let server = runtime.spawn(flockd::server::run(config, None));

    let url = format!("redis://127.0.0.1:{port}/");
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

    let _ = redis::cmd("SHUTDOWN").query::<redis::Value>(&mut conn);
    let stopped = runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), server).await })
        .expect("run returned within 10 s of SHUTDOWN")
        .expect("the server task did not panic");
    assert!(stopped.is_ok(), "run: {stopped:?}");
    // What was written is in the data directory, as a restart would read it.
    let aof = std::fs::read(dir.path().join("flockd.aof")).expect("the AOF");
    assert!(
        aof.windows(10).any(|w| w == b"order:1042"),
        "the grant is in the AOF"
    );
}
