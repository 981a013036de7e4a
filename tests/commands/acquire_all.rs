//! FLOCK.ACQUIREALL against the real binary over TCP (spec/primitives.md, "Several names at
//! once"): all or nothing with exact RESP2 and RESP3 bytes, bad arguments, WAIT that holds
//! nothing while it waits, a waiter that leaves (timeout, closed connection), SESSION, MULTI,
//! ACL key checks on every name, the redis crate's view of the reply, and a SIGKILL restart.

use std::time::{Duration, Instant};

use crate::common::{Raw, TestServer, wait_until};

const NULL_ARRAY2: &str = "*-1\r\n";
const NULL3: &str = "_\r\n";
const LIVENESS: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_millis(300);
const DURABLE: &[&str] = &["--appendfsync", "always"];

fn int(n: i64) -> String {
    format!(":{n}\r\n")
}

fn tokens(list: &[i64]) -> String {
    let mut s = format!("*{}\r\n", list.len());
    for t in list {
        s += &int(*t);
    }
    s
}

fn holdings(c: &mut Raw, name: &str) -> String {
    let reply = c.call(&["FLOCK.STATUS", name]);
    let at = reply.find("holdings\r\n").expect("holdings field");
    reply[at + "holdings\r\n".len()..]
        .split("\r\n")
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn every_name_or_none_with_tokens_in_the_order_given_in_resp2_and_resp3() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "b", "600000"]), int(1));
    assert_eq!(c.call(&["FLOCK.RELEASE", "b", "1"]), int(1));
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "3", "a", "b", "c", "600000"]),
        tokens(&[1, 2, 1])
    );
    // One busy name: nothing, and the free names stay free.
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "2", "d", "a", "600000"]),
        NULL_ARRAY2
    );
    assert_eq!(c.call(&["FLOCK.TOKEN", "d"]), int(0));
    assert_eq!(holdings(&mut c, "d"), ":0");
    // Each name is released with its own token.
    assert_eq!(c.call(&["FLOCK.RELEASE", "b", "2"]), int(1));
    assert_eq!(c.call(&["FLOCK.RELEASE", "a", "1"]), int(1));

    let mut r3 = server.raw().resp3();
    assert_eq!(
        r3.call(&["FLOCK.ACQUIREALL", "2", "a", "b", "600000"]),
        tokens(&[2, 3])
    );
    assert_eq!(
        r3.call(&["FLOCK.ACQUIREALL", "2", "a", "e", "600000"]),
        NULL3
    );
}

#[test]
fn bad_arguments_get_clear_errors_and_take_nothing() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    let cases: &[(&[&str], &str)] = &[
        (
            &["FLOCK.ACQUIREALL", "0", "a", "1000"],
            "-ERR invalid numnames: must be an integer from 1 to 64\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "65", "a", "1000"],
            "-ERR invalid numnames: must be an integer from 1 to 64\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "x", "a", "1000"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "3", "a", "b", "1000"],
            "-ERR numnames is 3 but fewer than 3 names and a lease-ms follow\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "2", "a", "a", "1000"],
            "-ERR lock name 'a' is given twice: FLOCK.ACQUIREALL names must be distinct\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "1", "a", "0"],
            "-ERR invalid lease-ms: must be an integer from 1 to 86400000\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "1", "a", "1000", "SHARED"],
            "-ERR unknown option 'SHARED' for 'flock.acquireall' (expected WAIT ms, OWNER id or SESSION)\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "1", "a", "1000", "LOCKDELAY", "5"],
            "-ERR unknown option 'LOCKDELAY' for 'flock.acquireall' (expected WAIT ms, OWNER id or SESSION)\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "1", "a", "1000", "WAIT"],
            "-ERR syntax error\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "1", "a", "1000", "SESSION", "SESSION"],
            "-ERR syntax error\r\n",
        ),
        (
            &["FLOCK.ACQUIREALL", "1", "a"],
            "-ERR wrong number of arguments for 'flock.acquireall' command\r\n",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(&c.call(args), want, "{args:?}");
    }
    // Nothing was taken, and the connection still works.
    assert_eq!(c.call(&["FLOCK.TOKEN", "a"]), int(0));
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "1", "a", "1000"]),
        tokens(&[1])
    );
    // The most names one call takes.
    let names: Vec<String> = (0..64).map(|i| format!("n{i}")).collect();
    let mut args: Vec<&str> = vec!["FLOCK.ACQUIREALL", "64"];
    args.extend(names.iter().map(String::as_str));
    args.push("60000");
    let reply = c.call(&args);
    assert!(reply.starts_with("*64\r\n:1\r\n"), "{reply}");
}

#[test]
fn a_waiter_holds_nothing_and_is_granted_when_the_last_name_frees() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "y", "600000"]), int(1));
    let mut waiter = server.raw();
    waiter.cmd(&[
        b"FLOCK.ACQUIREALL",
        b"2",
        b"x",
        b"y",
        b"600000",
        b"WAIT",
        b"20000",
    ]);
    assert_eq!(waiter.poll_reply(QUIET), None);
    // While it waits it holds nothing: "x" is free for anyone, "y" has no queue.
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "x", "2000"]), int(1));
    let status = holder.call(&["FLOCK.STATUS", "y"]);
    assert!(status.contains("waiters\r\n:0\r\n"), "{status}");
    // "y" frees while "x" is still held: nothing yet.
    assert_eq!(holder.call(&["FLOCK.RELEASE", "y", "1"]), int(1));
    assert_eq!(waiter.poll_reply(QUIET), None);
    // "x"'s lease runs out: both at once.
    let reply = waiter.poll_reply(LIVENESS).expect("granted");
    assert_eq!(reply, tokens(&[2, 2]));
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "y", "600000"]), "$-1\r\n");
}

#[test]
fn a_wait_that_times_out_or_whose_connection_closes_leaves_nothing_held() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "q", "600000"]), int(1));
    // Timed out: a null array, RESP2 and RESP3.
    let mut c = server.raw();
    let started = Instant::now();
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "2", "p", "q", "60000", "WAIT", "200"]),
        NULL_ARRAY2
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    let mut r3 = server.raw().resp3();
    assert_eq!(
        r3.call(&["FLOCK.ACQUIREALL", "2", "p", "q", "60000", "WAIT", "100"]),
        NULL3
    );
    // Closed while waiting: the wait ends, and nothing is granted to it later.
    let mut gone = server.raw();
    gone.cmd(&[
        b"FLOCK.ACQUIREALL",
        b"2",
        b"p",
        b"q",
        b"60000",
        b"WAIT",
        b"60000",
    ]);
    assert_eq!(gone.poll_reply(QUIET), None);
    drop(gone);
    wait_until(LIVENESS, "the closed waiter left", || {
        holder
            .call(&["INFO", "locks"])
            .contains("lock_waiters:0\r\n")
    });
    assert_eq!(holder.call(&["FLOCK.RELEASE", "q", "1"]), int(1));
    assert_eq!(
        holder.call(&["FLOCK.ACQUIREALL", "2", "p", "q", "1000"]),
        tokens(&[1, 2])
    );
}

#[test]
fn session_holdings_of_several_names_end_with_the_connection() {
    let server = TestServer::start(&[]);
    let mut other = server.raw();
    {
        let mut c = server.raw();
        assert_eq!(
            c.call(&["FLOCK.ACQUIREALL", "2", "s1", "s2", "600000", "SESSION"]),
            tokens(&[1, 1])
        );
    }
    assert_eq!(
        other.call(&[
            "FLOCK.ACQUIREALL",
            "2",
            "s2",
            "s1",
            "600000",
            "WAIT",
            "5000"
        ]),
        tokens(&[2, 2])
    );
    // Granted after a wait, then killed by the server.
    let mut c = server.raw();
    c.cmd(&[
        b"FLOCK.ACQUIREALL",
        b"2",
        b"s1",
        b"s3",
        b"600000",
        b"WAIT",
        b"20000",
        b"SESSION",
    ]);
    assert_eq!(c.poll_reply(QUIET), None);
    assert_eq!(other.call(&["FLOCK.RELEASE", "s1", "2"]), int(1));
    assert_eq!(c.poll_reply(LIVENESS).as_deref(), Some(&*tokens(&[3, 1])));
    let id = c.int(&["CLIENT", "ID"]);
    assert_eq!(
        other.call(&["CLIENT", "KILL", "ID", &id.to_string()]),
        int(1)
    );
    assert_eq!(
        other.call(&[
            "FLOCK.ACQUIREALL",
            "2",
            "s1",
            "s3",
            "600000",
            "WAIT",
            "5000"
        ]),
        tokens(&[4, 2])
    );
}

#[test]
fn inside_multi_a_wait_does_not_block() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "m2", "600000"]), int(1));
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "2", "m1", "m2", "1000", "WAIT", "60000"]),
        "+QUEUED\r\n"
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "1", "m1", "1000"]),
        "+QUEUED\r\n"
    );
    let started = Instant::now();
    assert_eq!(
        c.call(&["EXEC"]),
        format!("*2\r\n{NULL_ARRAY2}*1\r\n:1\r\n")
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn acl_checks_every_name_and_command_getkeys_lists_them() {
    let server = TestServer::start(&[]);
    let mut admin = server.raw();
    assert_eq!(
        admin.call(&["ACL", "SETUSER", "svc", "on", ">pw", "~orders:*", "+@all"]),
        "+OK\r\n"
    );
    let mut c = server.raw();
    assert_eq!(c.call(&["AUTH", "svc", "pw"]), "+OK\r\n");
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "2", "orders:1", "orders:2", "1000"]),
        tokens(&[1, 1])
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "2", "orders:3", "billing:1", "1000"]),
        "-NOPERM No permissions to access a key\r\n"
    );
    assert_eq!(admin.call(&["FLOCK.TOKEN", "orders:3"]), int(0));
    assert_eq!(
        admin.call(&[
            "COMMAND",
            "GETKEYS",
            "FLOCK.ACQUIREALL",
            "2",
            "a",
            "b",
            "1000",
            "WAIT",
            "5"
        ]),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
}

#[test]
fn the_redis_crate_reads_tokens_and_a_null_array() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let got: Option<Vec<u64>> = redis::cmd("FLOCK.ACQUIREALL")
        .arg(2)
        .arg("r1")
        .arg("r2")
        .arg(600_000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(got, Some(vec![1, 1]));
    let got: Option<Vec<u64>> = redis::cmd("FLOCK.ACQUIREALL")
        .arg(2)
        .arg("r2")
        .arg("r3")
        .arg(600_000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(got, None);
}

#[test]
fn holdings_of_several_names_survive_a_sigkill_and_a_rewrite() {
    let mut server = TestServer::start(DURABLE);
    let mut c = server.raw();
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "2", "k1", "k2", "600000", "OWNER", "o"]),
        tokens(&[1, 1])
    );
    server.restart_after_kill9(DURABLE);
    let mut c = server.raw();
    assert_eq!(holdings(&mut c, "k1"), ":1");
    assert_eq!(holdings(&mut c, "k2"), ":1");
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "2", "k2", "k3", "1000"]),
        NULL_ARRAY2
    );
    // Reentrant for its owner, with the next tokens.
    assert_eq!(
        c.call(&["FLOCK.ACQUIREALL", "2", "k1", "k2", "600000", "OWNER", "o"]),
        tokens(&[2, 2])
    );
    assert!(c.call(&["BGREWRITEAOF"]).starts_with('+'));
    wait_until(LIVENESS, "the rewrite finished", || {
        c.call(&["INFO", "persistence"])
            .contains("aof_rewrite_in_progress:0")
    });
    server.restart_after_kill9(DURABLE);
    let mut c = server.raw();
    let status = c.call(&["FLOCK.STATUS", "k2"]);
    assert!(status.contains("holds\r\n:2\r\n"), "{status}");
    assert_eq!(c.call(&["FLOCK.TOKEN", "k1"]), int(2));
}
