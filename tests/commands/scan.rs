//! SCAN and TYPE against the real binary: the real redis-cli's `--scan` and `--scan --pattern`, a
//! COUNT 1 walk over lock names and fence keys through the redis crate, the TYPE filter, exact
//! RESP2/RESP3 replies, Redis's errors for bad arguments, and ACL key patterns.

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

use crate::common::{Raw, TestServer};

/// The first cursor of the fence keys' part of a walk: the top bit marks that space.
const FENCE_SPACE: u64 = 1 << 63;

fn acquire(raw: &mut Raw, name: &str) {
    let reply = raw.call(&["FLOCK.ACQUIRE", name, "600000"]);
    assert!(reply.starts_with(':'), "{name}: {reply}");
}

fn fence(raw: &mut Raw, key: &str) {
    assert_eq!(raw.call(&["FENCE.SET", key, "1", "v"]), ":1\r\n", "{key}");
}

/// Lock names only, fence keys only, and names that are both.
struct Keys {
    locks: Vec<String>,
    fences: Vec<String>,
    both: Vec<String>,
}

impl Keys {
    fn all(&self) -> BTreeSet<String> {
        self.locks
            .iter()
            .chain(&self.fences)
            .chain(&self.both)
            .cloned()
            .collect()
    }
}

fn populate(server: &TestServer, per_kind: usize) -> Keys {
    let mut raw = server.raw();
    let mut keys = Keys {
        locks: vec![],
        fences: vec![],
        both: vec![],
    };
    for i in 0..per_kind {
        let (lock, key, both) = (
            format!("order:lock:{i}"),
            format!("invoice:fence:{i}"),
            format!("order:both:{i}"),
        );
        acquire(&mut raw, &lock);
        fence(&mut raw, &key);
        acquire(&mut raw, &both);
        fence(&mut raw, &both);
        keys.locks.push(lock);
        keys.fences.push(key);
        keys.both.push(both);
    }
    keys
}

/// A whole SCAN walk with `options`; every name with how often it came back, and the cursors.
fn walk(
    conn: &mut redis::Connection,
    options: &[&str],
    between: impl FnMut(&mut redis::Connection),
) -> (HashMap<String, usize>, Vec<u64>) {
    common::scan_walk(conn, "SCAN", options, between)
}

fn redis_cli_installed() -> bool {
    let found = Command::new("redis-cli").arg("--version").output().is_ok();
    if !found {
        common::skipping("no redis-cli");
    }
    found
}

fn redis_cli(server: &TestServer, args: &[&str]) -> Vec<String> {
    let output = Command::new("timeout")
        .args(["30", "redis-cli", "-h", "127.0.0.1", "-p"])
        .arg(server.addr.port().to_string())
        .args(args)
        .output()
        .expect("run redis-cli");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "redis-cli {args:?}: {:?}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.lines().map(str::to_string).collect()
}

fn once_each(lines: &[String]) -> BTreeSet<String> {
    let set: BTreeSet<String> = lines.iter().cloned().collect();
    assert_eq!(set.len(), lines.len(), "a name came back twice: {lines:?}");
    set
}

#[test]
fn redis_cli_scan_lists_every_lock_name_and_fence_key_once() {
    if !redis_cli_installed() {
        return;
    }
    let server = TestServer::start(&[]);
    let keys = populate(&server, 20);
    let mut raw = server.raw();
    acquire(&mut raw, "user:7");
    fence(&mut raw, "orderly");

    let mut expected = keys.all();
    expected.extend(["user:7".to_string(), "orderly".to_string()]);
    let lines = redis_cli(&server, &["--scan"]);
    assert_eq!(once_each(&lines), expected);

    let orders: BTreeSet<String> = expected
        .iter()
        .filter(|k| k.starts_with("order:"))
        .cloned()
        .collect();
    assert_eq!(orders.len(), 40);
    let lines = redis_cli(&server, &["--scan", "--pattern", "order:*"]);
    assert_eq!(once_each(&lines), orders);

    // Both spaces meet the pattern: lock names only, fence keys only, and names that are both.
    let lines = redis_cli(&server, &["--scan", "--pattern", "*:both:1?"]);
    let tens: BTreeSet<String> = (10..20).map(|i| format!("order:both:{i}")).collect();
    assert_eq!(once_each(&lines), tens);
    let lines = redis_cli(&server, &["--scan", "--pattern", "invoice:*"]);
    assert_eq!(
        once_each(&lines),
        keys.fences.iter().cloned().collect::<BTreeSet<_>>()
    );
}

#[test]
fn a_count_1_walk_over_both_spaces_returns_each_name_once() {
    let server = TestServer::start(&[]);
    let keys = populate(&server, 60);
    let mut conn = server.conn();
    let mut extra = 0;
    let (seen, cursors) = walk(&mut conn, &["COUNT", "1"], |conn| {
        // Keys that come during the walk may or may not be listed; those that stay must be,
        // once, however the tables grow meanwhile.
        let _: u64 = redis::cmd("FLOCK.ADVANCE")
            .arg(format!("new:lock:{extra}"))
            .arg(5)
            .query(conn)
            .unwrap();
        let _: u64 = redis::cmd("FENCE.SET")
            .arg(format!("new:fence:{extra}"))
            .arg(1)
            .arg("v")
            .query(conn)
            .unwrap();
        extra += 1;
    });
    for name in keys.all() {
        assert_eq!(seen.get(&name), Some(&1), "{name}: {seen:?}");
    }
    for (name, times) in &seen {
        assert_eq!(*times, 1, "{name} came back {times} times");
    }
    // The walk went through the lock names, then the fence keys.
    let first_fence = cursors
        .iter()
        .position(|c| *c >= FENCE_SPACE)
        .expect("the walk reached the fence keys");
    assert!(first_fence > 0, "{cursors:?}");
    assert!(
        cursors[first_fence..].iter().all(|c| *c >= FENCE_SPACE),
        "{cursors:?}"
    );
    // COUNT 1: about one name a call (names sharing a place come together).
    assert!(cursors.len() + 1 >= keys.all().len(), "{}", cursors.len());
}

#[test]
fn type_answers_and_filters() {
    let server = TestServer::start(&[]);
    let keys = populate(&server, 5);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["TYPE", &keys.locks[0]]), "+flock\r\n");
    assert_eq!(raw.call(&["TYPE", &keys.fences[0]]), "+fence\r\n");
    // A name that is both is a fence key: that kind is never removed.
    assert_eq!(raw.call(&["TYPE", &keys.both[0]]), "+fence\r\n");
    assert_eq!(raw.call(&["TYPE", "missing"]), "+none\r\n");
    assert_eq!(raw.call(&["type", "missing"]), "+none\r\n");

    let mut conn = server.conn();
    let only = |conn: &mut redis::Connection, kind: &str| -> BTreeSet<String> {
        let (seen, _) = walk(conn, &["TYPE", kind, "COUNT", "2"], |_| {});
        assert!(seen.values().all(|n| *n == 1), "{seen:?}");
        seen.into_keys().collect()
    };
    let locks: BTreeSet<String> = keys.locks.iter().cloned().collect();
    let fences: BTreeSet<String> = keys.fences.iter().chain(&keys.both).cloned().collect();
    assert_eq!(only(&mut conn, "flock"), locks);
    assert_eq!(only(&mut conn, "FENCE"), fences);
    assert_eq!(only(&mut conn, "string"), BTreeSet::new());
    // MATCH and TYPE together.
    let (seen, _) = walk(
        &mut conn,
        &["MATCH", "order:*", "TYPE", "fence", "COUNT", "1000"],
        |_| {},
    );
    assert_eq!(
        seen.into_keys().collect::<BTreeSet<_>>(),
        keys.both.iter().cloned().collect::<BTreeSet<_>>()
    );
}

#[test]
fn exact_replies_in_resp2_and_resp3() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    assert_eq!(c.call(&["SCAN", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "only", "60000"]), ":1\r\n");
    assert_eq!(
        c.call(&["SCAN", "0", "COUNT", "100"]),
        "*2\r\n$1\r\n0\r\n*1\r\n$4\r\nonly\r\n"
    );
    let mut r3 = server.raw().resp3();
    assert_eq!(
        r3.call(&["SCAN", "0", "MATCH", "o*"]),
        "*2\r\n$1\r\n0\r\n*1\r\n$4\r\nonly\r\n"
    );
    assert_eq!(r3.call(&["TYPE", "only"]), "+flock\r\n");
    assert_eq!(r3.call(&["TYPE", "nothing"]), "+none\r\n");
    // The cursor of the fence keys' space is a valid start too.
    assert_eq!(
        c.call(&["SCAN", &FENCE_SPACE.to_string()]),
        "*2\r\n$1\r\n0\r\n*0\r\n"
    );
    assert_eq!(
        c.call(&["SCAN", "18446744073709551615"]),
        "*2\r\n$1\r\n0\r\n*0\r\n"
    );
}

#[test]
fn bad_arguments_get_redis_errors_and_the_connection_stays() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    let cases: &[(&[&str], &str)] = &[
        (&["SCAN", "abc"], "-ERR invalid cursor\r\n"),
        (&["SCAN", "-1"], "-ERR invalid cursor\r\n"),
        (&["SCAN", "18446744073709551616"], "-ERR invalid cursor\r\n"),
        (&["SCAN", "0", "COUNT", "0"], "-ERR syntax error\r\n"),
        (&["SCAN", "0", "COUNT", "-3"], "-ERR syntax error\r\n"),
        (
            &["SCAN", "0", "COUNT", "many"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (&["SCAN", "0", "COUNT"], "-ERR syntax error\r\n"),
        (&["SCAN", "0", "MATCH"], "-ERR syntax error\r\n"),
        (&["SCAN", "0", "TYPE"], "-ERR syntax error\r\n"),
        (&["SCAN", "0", "HELD"], "-ERR syntax error\r\n"),
        (&["SCAN", "0", "NOSUCH", "x"], "-ERR syntax error\r\n"),
        (
            &["SCAN"],
            "-ERR wrong number of arguments for 'scan' command\r\n",
        ),
        (
            &["TYPE"],
            "-ERR wrong number of arguments for 'type' command\r\n",
        ),
        (
            &["TYPE", "a", "b"],
            "-ERR wrong number of arguments for 'type' command\r\n",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(&c.call(args), want, "{args:?}");
        assert_eq!(c.call(&["PING"]), "+PONG\r\n", "after {args:?}");
    }
    // A COUNT beyond what one call looks at is a hint, as in Redis: it is capped, not refused.
    assert_eq!(
        c.call(&["SCAN", "0", "COUNT", "99999999999"]),
        "*2\r\n$1\r\n0\r\n*0\r\n"
    );
}

#[test]
fn acl_key_patterns_guard_type_and_scan_is_read_not_admin() {
    let server = TestServer::start(&[]);
    let mut admin = server.raw();
    acquire(&mut admin, "orders:1");
    acquire(&mut admin, "secret:1");
    assert_eq!(
        admin.call(&[
            "ACL",
            "SETUSER",
            "reader",
            "on",
            ">pw",
            "~orders:*",
            "+@read"
        ]),
        "+OK\r\n"
    );
    let mut reader = server.raw();
    assert_eq!(reader.call(&["AUTH", "reader", "pw"]), "+OK\r\n");
    assert_eq!(reader.call(&["TYPE", "orders:1"]), "+flock\r\n");
    assert_eq!(
        reader.call(&["TYPE", "secret:1"]),
        "-NOPERM No permissions to access a key\r\n"
    );
    // As Redis's SCAN (and FLOCK.SCAN), key patterns do not filter the names listed.
    let listed = reader.call(&["SCAN", "0", "COUNT", "100"]);
    assert!(
        listed.contains("orders:1") && listed.contains("secret:1"),
        "{listed}"
    );

    let read = admin.call(&["ACL", "CAT", "read"]);
    assert!(
        read.contains("\r\nscan\r\n") && read.contains("\r\ntype\r\n"),
        "{read}"
    );
    for category in ["admin", "dangerous", "write"] {
        let listed = admin.call(&["ACL", "CAT", category]);
        assert!(
            !listed.contains("\r\nscan\r\n") && !listed.contains("\r\ntype\r\n"),
            "{category}: {listed}"
        );
    }
    // Redis: SCAN is @slow (a call may look at many keys), TYPE @fast.
    assert!(admin.call(&["ACL", "CAT", "slow"]).contains("\r\nscan\r\n"));
    assert!(admin.call(&["ACL", "CAT", "fast"]).contains("\r\ntype\r\n"));
}

#[test]
fn command_docs_describe_scan_and_type() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    let info = c.call(&["COMMAND", "INFO", "scan", "type"]);
    assert!(
        info.starts_with("*2\r\n*") && !info.contains("*-1\r\n"),
        "{info}"
    );
    let docs = c.call(&["COMMAND", "DOCS", "scan"]);
    for word in [
        "cursor", "MATCH", "pattern", "COUNT", "count", "TYPE", "type",
    ] {
        assert!(docs.contains(&format!("\r\n{word}\r\n")), "{word}: {docs}");
    }
    let docs = c.call(&["COMMAND", "DOCS", "type"]);
    assert!(docs.contains("\r\nkey\r\n"), "{docs}");
}
