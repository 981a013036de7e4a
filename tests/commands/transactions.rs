//! MULTI/EXEC/DISCARD and MONITOR against the real binary, with exact RESP bytes: queued
//! commands, EXECABORT after a queue-time error, a WAIT inside MULTI that does not block, an
//! EXEC whose lock was taken meanwhile, one AOF record per transaction, and the monitor feed.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{Raw, TestServer, info_int};

const QUEUED: &str = "+QUEUED\r\n";

fn int(n: i64) -> String {
    format!(":{n}\r\n")
}

fn queue(raw: &mut Raw, args: &[&str]) {
    assert_eq!(raw.call(args), QUEUED, "{args:?}");
}

#[test]
fn exec_runs_the_queued_commands_as_one_entry() {
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    let written = info_int(&mut raw, "persistence", "aof_records_written");
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    queue(&mut raw, &["FLOCK.ACQUIRE", "t", "60000"]);
    queue(&mut raw, &["FENCE.SET", "t:v", "1", "paid"]);
    queue(&mut raw, &["FLOCK.TOKEN", "t"]);
    queue(&mut raw, &["FENCE.GET", "t:v"]);
    queue(&mut raw, &["PING"]);
    queue(&mut raw, &["FLOCK.RELEASE", "t", "7"]);
    assert_eq!(
        raw.call(&["EXEC"]),
        "*6\r\n:1\r\n:1\r\n:1\r\n$4\r\npaid\r\n+PONG\r\n-NOTOWNER lock 't' is not held by token 7\r\n"
    );
    // Every state command and read of the transaction went into one log record.
    assert_eq!(
        info_int(&mut raw, "persistence", "aof_records_written"),
        written + 1
    );
    // Outside the transaction the effects are there, and a second EXEC has no MULTI.
    assert_eq!(raw.call(&["FLOCK.TOKEN", "t"]), int(1));
    assert_eq!(raw.call(&["EXEC"]), "-ERR EXEC without MULTI\r\n");

    // RESP3: the reads inside come back in RESP3 shapes.
    let mut r3 = server.raw().resp3();
    assert_eq!(r3.call(&["MULTI"]), "+OK\r\n");
    queue(&mut r3, &["FLOCK.TTL", "nobody"]);
    queue(&mut r3, &["FENCE.GET", "nothing"]);
    assert_eq!(r3.call(&["EXEC"]), "*2\r\n:-2\r\n_\r\n");
}

#[test]
fn a_queue_time_error_aborts_exec_and_nothing_is_applied() {
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    queue(&mut raw, &["FLOCK.ACQUIRE", "a", "60000"]);
    assert_eq!(
        raw.call(&["FLOCK.ACQUIRE", "a"]),
        "-ERR wrong number of arguments for 'flock.acquire' command\r\n"
    );
    assert_eq!(
        raw.call(&["FLOCK.ACQUIRE", "a", "0"]),
        "-ERR invalid lease-ms: must be an integer from 1 to 86400000\r\n"
    );
    assert!(
        raw.call(&["NOSUCH"])
            .starts_with("-ERR unknown command 'NOSUCH'")
    );
    assert_eq!(
        raw.call(&["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(raw.call(&["FLOCK.TOKEN", "a"]), int(0));
    // The connection works on.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "a", "60000"]), int(1));
}

#[test]
fn discard_and_the_errors_of_misplaced_commands() {
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["DISCARD"]), "-ERR DISCARD without MULTI\r\n");
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    queue(&mut raw, &["FLOCK.ACQUIRE", "d", "60000"]);
    assert_eq!(
        raw.call(&["MULTI"]),
        "-ERR MULTI calls can not be nested\r\n"
    );
    assert_eq!(
        raw.call(&["WATCH", "d"]),
        "-ERR WATCH inside MULTI is not allowed\r\n"
    );
    assert_eq!(raw.call(&["DISCARD"]), "+OK\r\n");
    assert_eq!(raw.call(&["FLOCK.TOKEN", "d"]), int(0), "discarded");
    assert!(
        raw.call(&["WATCH", "d"])
            .starts_with("-ERR WATCH is not supported by flockd")
    );
    assert_eq!(raw.call(&["UNWATCH"]), "+OK\r\n");
    // MONITOR cannot be queued, and dooms the transaction.
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        raw.call(&["MONITOR"]),
        "-ERR Command not allowed inside a transaction\r\n"
    );
    assert!(raw.call(&["EXEC"]).starts_with("-EXECABORT"));
    // RESET ends a transaction too.
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    queue(&mut raw, &["FLOCK.ACQUIRE", "d", "60000"]);
    assert_eq!(raw.call(&["RESET"]), "+RESET\r\n");
    assert_eq!(raw.call(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(raw.call(&["FLOCK.TOKEN", "d"]), int(0));
}

#[test]
fn wait_inside_multi_does_not_block() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "w", "60000"]), int(1));
    let mut raw = server.raw();
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    queue(&mut raw, &["FLOCK.ACQUIRE", "w", "1000", "WAIT", "5000"]);
    queue(&mut raw, &["FLOCK.ACQUIRE", "free", "1000", "WAIT", "5000"]);
    let started = Instant::now();
    assert_eq!(raw.call(&["EXEC"]), "*2\r\n$-1\r\n:1\r\n");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "EXEC blocked for {:?}",
        started.elapsed()
    );
    let status = raw.call(&["FLOCK.STATUS", "w"]);
    assert!(
        status.contains("$7\r\nwaiters\r\n:0\r\n"),
        "queued: {status}"
    );
}

#[test]
fn exec_after_the_lock_was_handed_to_a_waiter_elsewhere() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "h", "300"]), int(1));
    let mut waiter = server.raw();
    waiter.send(&common::encode_request(&[
        b"FLOCK.ACQUIRE",
        b"h",
        b"60000",
        b"WAIT",
        b"10000",
    ]));
    // The holder queues a renewal, but its lease runs out and the waiter gets the lock first.
    assert_eq!(holder.call(&["MULTI"]), "+OK\r\n");
    queue(&mut holder, &["FLOCK.RENEW", "h", "1", "60000"]);
    queue(&mut holder, &["FENCE.SET", "h:v", "1", "late"]);
    assert_eq!(waiter.read_reply(), int(2));
    assert_eq!(waiter.call(&["FENCE.SET", "h:v", "2", "new"]), int(1));
    assert_eq!(
        holder.call(&["EXEC"]),
        "*2\r\n-NOTOWNER lock 'h' is not held by token 1\r\n:0\r\n"
    );
    assert_eq!(holder.call(&["FENCE.GET", "h:v"]), "$3\r\nnew\r\n");
}

#[test]
fn a_transaction_survives_a_crash_whole() {
    let mut server = TestServer::start(&[]);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    queue(&mut raw, &["FLOCK.ACQUIRE", "c", "600000"]);
    queue(&mut raw, &["FLOCK.ACQUIRE", "c2", "600000"]);
    queue(&mut raw, &["FENCE.SET", "c:v", "1", "both"]);
    assert_eq!(raw.call(&["EXEC"]), "*3\r\n:1\r\n:1\r\n:1\r\n");
    drop(raw);
    server.restart_after_kill9(&[]);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FLOCK.TOKEN", "c"]), int(1));
    assert_eq!(raw.call(&["FLOCK.TOKEN", "c2"]), int(1));
    assert_eq!(raw.call(&["FENCE.GET", "c:v"]), "$4\r\nboth\r\n");
}

#[test]
fn monitor_shows_other_clients_commands_without_passwords() {
    let server = TestServer::start(&["--requirepass", "s3cret"]);
    let mut monitor = server.raw();
    assert_eq!(monitor.call(&["AUTH", "s3cret"]), "+OK\r\n");
    assert_eq!(monitor.call(&["MONITOR"]), "+OK\r\n");
    let mut other = server.raw();
    assert_eq!(other.call(&["AUTH", "s3cret"]), "+OK\r\n");
    assert_eq!(other.call(&["FLOCK.ACQUIRE", "m x", "1000"]), int(1));
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains("FLOCK.ACQUIRE") && Instant::now() < deadline {
        if let Some(line) = monitor.poll_reply(Duration::from_millis(200)) {
            seen.push_str(&line);
        }
    }
    assert!(seen.contains(r#""AUTH" "(redacted)""#), "{seen}");
    assert!(!seen.contains("s3cret"), "{seen}");
    assert!(seen.contains(r#"] "FLOCK.ACQUIRE" "m x" "1000""#), "{seen}");
    assert!(
        seen.starts_with('+') && seen.contains(" [0 127.0.0.1:"),
        "{seen}"
    );
    // Other commands are ignored in monitor mode; RESET leaves it.
    monitor.send(b"PING\r\nRESET\r\n");
    let mut after = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !after.contains("+RESET") && Instant::now() < deadline {
        if let Some(line) = monitor.poll_reply(Duration::from_millis(200)) {
            after.push_str(&line);
        }
    }
    assert!(after.contains("+RESET\r\n"), "{after}");
    assert!(!after.contains("+PONG"), "{after}");
    // After RESET the connection is a normal one again (and must authenticate again).
    assert!(monitor.call(&["PING"]).starts_with("-NOAUTH"));
}
