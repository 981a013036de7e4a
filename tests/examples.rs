//! The documentation's examples run against the real server: the Python one (redis-py) as a
//! script, the Rust one compiled in as a module.

mod common;

#[path = "../docs/examples/rust/fenced_worker.rs"]
mod fenced_worker;

use std::process::Command;
use std::time::Duration;

use common::TestServer;

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
        eprintln!(
            "NOTICE: skipping python_fenced_worker_runs: `python3 -c 'import redis'` failed (pip install redis)"
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
            .env("FLOCKD_ADDR", server.addr.to_string())
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
        .env("FLOCKD_ADDR", server.addr.to_string())
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
    let addr = server.addr.to_string();
    assert_eq!(fenced_worker::run(&addr).expect("first run"), 1);
    assert_eq!(fenced_worker::run(&addr).expect("second run"), 2);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["FENCE.GET", "res:orders:42"]),
        "$18\r\nwritten by token 2\r\n"
    );
    // A holder in the way: the worker queues and is served when the holder releases.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "orders:42", "60000"]), ":3\r\n");
    let worker = std::thread::spawn(move || fenced_worker::run(&addr));
    common::wait_until(Duration::from_secs(10), "the worker queued", || {
        raw.call(&["FLOCK.STATUS", "orders:42"])
            .contains("$7\r\nwaiters\r\n:1\r\n")
    });
    assert_eq!(raw.call(&["FLOCK.RELEASE", "orders:42", "3"]), ":1\r\n");
    assert_eq!(worker.join().unwrap().expect("queued run"), 4);
}
