//! The lock primitives of the contract (spec/primitives.md): shared holdings and semaphores with
//! their admission rule and FIFO, reentrancy and the upgrade error, FLOCK.HOLDERS and the new
//! FLOCK.STATUS fields, SESSION holdings, LOCKDELAY and FENCE.SET ... LOCK; against the real
//! binary over TCP, with exact RESP2 and RESP3 bytes, and through SIGKILL restarts.

use std::time::{Duration, Instant};

use crate::common::{Raw, TestServer, wait_until};

const NULL2: &str = "$-1\r\n";
const LIVENESS: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_millis(300);
const DURABLE: &[&str] = &["--appendfsync", "always"];

fn int(n: i64) -> String {
    format!(":{n}\r\n")
}

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

/// The RESP2 bytes of FLOCK.STATUS: the eleven fields in the contract's order.
#[allow(clippy::too_many_arguments)]
fn status2(
    name: &str,
    token: Option<i64>,
    owner: Option<&str>,
    ttl: i64,
    holds: i64,
    waiters: i64,
    last: i64,
    holdings: i64,
    limit: i64,
    delay: i64,
) -> String {
    let mut s = String::from("*22\r\n");
    s += &bulk("name");
    s += &bulk(name);
    s += &bulk("locked");
    s += &int(i64::from(token.is_some()));
    s += &bulk("token");
    s += &token.map_or(NULL2.to_string(), int);
    s += &bulk("owner");
    s += &owner.map_or(NULL2.to_string(), bulk);
    s += &bulk("ttl");
    s += &int(ttl);
    s += &bulk("holds");
    s += &int(holds);
    s += &bulk("waiters");
    s += &int(waiters);
    s += &bulk("last-token");
    s += &int(last);
    s += &bulk("holdings");
    s += &int(holdings);
    s += &bulk("limit");
    s += &int(limit);
    s += &bulk("delay");
    s += &int(delay);
    s
}

/// FLOCK.STATUS's fields as (field, value) text pairs, ttl and delay included.
fn status(raw: &mut Raw, name: &str) -> Vec<(String, String)> {
    let reply = raw.call(&["FLOCK.STATUS", name]);
    let mut lines = reply.split("\r\n").skip(1);
    let mut out = Vec::new();
    let mut next = || -> String {
        let head = lines.next().expect("item");
        if head == "$-1" {
            "nil".into()
        } else if let Some(n) = head.strip_prefix(':') {
            n.into()
        } else {
            lines.next().expect("bulk").into()
        }
    };
    for _ in 0..11 {
        let key = next();
        let value = next();
        out.push((key, value));
    }
    out
}

fn field(status: &[(String, String)], name: &str) -> i64 {
    status
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in {status:?}"))
        .1
        .parse()
        .unwrap_or(-99)
}

#[test]
fn readers_share_a_writer_waits_for_all_and_later_readers_queue_behind_it() {
    let server = TestServer::start(&[]);
    let mut r1 = server.raw();
    let mut r2 = server.raw();
    let mut w = server.raw();
    assert_eq!(r1.call(&["FLOCK.ACQUIRE", "rw", "60000", "SHARED"]), int(1));
    assert_eq!(r2.call(&["FLOCK.ACQUIRE", "rw", "60000", "shared"]), int(2));
    // A writer is not admitted while readers hold.
    assert_eq!(w.call(&["FLOCK.ACQUIRE", "rw", "60000"]), NULL2);
    w.cmd(&[b"FLOCK.ACQUIRE", b"rw", b"60000", b"WAIT", b"10000"]);
    assert_eq!(w.poll_reply(QUIET), None, "the writer waits");
    // A reader that would fit waits behind the queued writer: no writer starvation.
    let mut r3 = server.raw();
    assert_eq!(r3.call(&["FLOCK.ACQUIRE", "rw", "60000", "SHARED"]), NULL2);
    let s = status(&mut r3, "rw");
    assert_eq!(
        (
            field(&s, "holdings"),
            field(&s, "limit"),
            field(&s, "waiters")
        ),
        (2, -1, 1)
    );
    assert_eq!(field(&s, "token"), 2, "the most recently granted holding");
    // Each reader releases its own holding; the writer gets the lock after the last one.
    assert_eq!(r1.call(&["FLOCK.RELEASE", "rw", "1"]), int(1));
    assert_eq!(w.poll_reply(QUIET), None, "one reader still holds");
    assert_eq!(r2.call(&["FLOCK.RELEASE", "rw", "2"]), int(1));
    assert_eq!(w.poll_reply(LIVENESS).as_deref(), Some(":3\r\n"));
    // And readers wait while the writer holds.
    assert_eq!(r1.call(&["FLOCK.ACQUIRE", "rw", "60000", "SHARED"]), NULL2);
    let s = status(&mut r1, "rw");
    assert_eq!((field(&s, "holdings"), field(&s, "limit")), (1, 1));
}

#[test]
fn consecutive_readers_at_the_head_are_granted_together() {
    let server = TestServer::start(&[]);
    let mut w = server.raw();
    assert_eq!(w.call(&["FLOCK.ACQUIRE", "g", "60000"]), int(1));
    let mut readers: Vec<Raw> = (0..3).map(|_| server.raw()).collect();
    for r in &mut readers {
        r.cmd(&[
            b"FLOCK.ACQUIRE",
            b"g",
            b"60000",
            b"SHARED",
            b"WAIT",
            b"10000",
        ]);
        // In this order: each is queued before the next is sent.
        wait_until(LIVENESS, "the reader is queued", || {
            let mut probe = server.raw();
            let s = status(&mut probe, "g");
            field(&s, "waiters") > 0
        });
    }
    wait_until(LIVENESS, "three readers queued", || {
        let mut probe = server.raw();
        field(&status(&mut probe, "g"), "waiters") == 3
    });
    let mut writer2 = server.raw();
    writer2.cmd(&[b"FLOCK.ACQUIRE", b"g", b"60000", b"WAIT", b"10000"]);
    wait_until(LIVENESS, "the second writer is queued", || {
        let mut probe = server.raw();
        field(&status(&mut probe, "g"), "waiters") == 4
    });
    assert_eq!(w.call(&["FLOCK.RELEASE", "g", "1"]), int(1));
    let mut tokens: Vec<String> = readers
        .iter_mut()
        .map(|r| r.poll_reply(LIVENESS).expect("a grant"))
        .collect();
    tokens.sort();
    assert_eq!(tokens, [":2\r\n", ":3\r\n", ":4\r\n"]);
    assert_eq!(writer2.poll_reply(QUIET), None, "the writer waits for them");
    let mut probe = server.raw();
    let s = status(&mut probe, "g");
    assert_eq!((field(&s, "holdings"), field(&s, "waiters")), (3, 1));
}

#[test]
fn a_semaphore_admits_its_smallest_limit() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "api", "60000", "LIMIT", "3"]),
        int(1)
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "api", "60000", "LIMIT", "3"]),
        int(2)
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "api", "60000", "LIMIT", "3"]),
        int(3)
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "api", "60000", "LIMIT", "3"]),
        NULL2
    );
    // A request with a smaller limit is not admitted with three holdings; a larger one neither,
    // since the holdings' own limit is 3.
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "api", "60000", "LIMIT", "2"]),
        NULL2
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "api", "60000", "LIMIT", "9"]),
        NULL2
    );
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "api", "60000", "SHARED"]), NULL2);
    assert_eq!(c.call(&["FLOCK.RELEASE", "api", "2"]), int(1));
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "api", "60000", "LIMIT", "3"]),
        int(4)
    );
    let s = status(&mut c, "api");
    assert_eq!((field(&s, "holdings"), field(&s, "limit")), (3, 3));
    // FORCERELEASE removes every holding and says how many.
    assert_eq!(c.call(&["FLOCK.FORCERELEASE", "api"]), int(3));
    assert_eq!(c.call(&["FLOCK.FORCERELEASE", "api"]), int(0));
    assert_eq!(
        c.call(&["FLOCK.STATUS", "api"]),
        status2("api", None, None, -2, 0, 0, 4, 0, 0, 0)
    );
}

#[test]
fn reentrancy_stays_in_one_holding_and_a_shared_owner_cannot_upgrade() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    // An exclusive owner may also take SHARED: a hold of its exclusive holding.
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "x", "60000", "OWNER", "a"]),
        int(1)
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "x", "60000", "SHARED", "OWNER", "a"]),
        int(2)
    );
    let s = status(&mut c, "x");
    assert_eq!((field(&s, "holds"), field(&s, "holdings")), (2, 1));
    // A shared owner asking for exclusive gets the error, and nothing changes.
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "s", "60000", "SHARED", "OWNER", "b"]),
        int(1)
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "s", "60000", "OWNER", "b"]),
        "-ERR cannot upgrade a shared holding to exclusive: release it first, or acquire exclusively from the start\r\n"
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "s", "60000", "SHARED", "OWNER", "b"]),
        int(2),
        "a shared owner's shared acquire is a hold of its holding"
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "s", "60000", "SHARED", "OWNER", "c"]),
        int(3),
        "another owner gets its own holding"
    );
    let s = status(&mut c, "s");
    assert_eq!((field(&s, "holdings"), field(&s, "holds")), (2, 1));
    // RELEASE of a reentrant holding keeps it until its last hold (other holdings don't count).
    assert_eq!(c.call(&["FLOCK.RELEASE", "s", "1"]), int(0));
    assert_eq!(c.call(&["FLOCK.RELEASE", "s", "2"]), int(1));
    assert_eq!(
        c.call(&["FLOCK.RELEASE", "s", "1"]),
        "-NOTOWNER lock 's' is not held by token 1\r\n"
    );
}

#[test]
fn holders_lists_every_live_holding_in_grant_order_in_resp2_and_resp3() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    assert_eq!(c.call(&["FLOCK.HOLDERS", "h"]), "*0\r\n");
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "h", "600000", "LIMIT", "5", "OWNER", "o1"]),
        int(1)
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "h", "600000", "LIMIT", "5", "SESSION"]),
        int(2)
    );
    let reply = c.call(&["FLOCK.HOLDERS", "h"]);
    // The ttl values move; everything else is exact.
    let ttl_free = |reply: &str| -> String {
        let mut out = Vec::new();
        let mut lines = reply.split("\r\n").peekable();
        while let Some(line) = lines.next() {
            out.push(line.to_string());
            if line == "ttl" {
                let value = lines.next().unwrap();
                assert!(value.starts_with(':'), "{value}");
                let ms: i64 = value[1..].parse().unwrap();
                assert!((500_000..=600_000).contains(&ms), "ttl {ms}");
                out.push(":TTL".into());
            }
        }
        out.join("\r\n")
    };
    let entry = |token: i64, owner: Option<&str>, session: i64, head: &str| {
        let mut s = String::from(head);
        s += &bulk("token");
        s += &int(token);
        s += &bulk("owner");
        s += &owner.map_or(NULL2.to_string(), bulk);
        s += &bulk("ttl");
        s += ":TTL\r\n";
        s += &bulk("holds");
        s += &int(1);
        s += &bulk("mode");
        s += &bulk("limit");
        s += &bulk("limit");
        s += &int(5);
        s += &bulk("session");
        s += &int(session);
        s
    };
    let want2 = format!(
        "*2\r\n{}{}",
        entry(1, Some("o1"), 0, "*14\r\n"),
        entry(2, None, 1, "*14\r\n")
    );
    assert_eq!(ttl_free(&reply), want2);
    let mut c3 = server.raw().resp3();
    let reply = c3.call(&["FLOCK.HOLDERS", "h"]);
    let want3 = format!(
        "*2\r\n{}{}",
        entry(1, Some("o1"), 0, "%7\r\n"),
        entry(2, None, 1, "%7\r\n")
    )
    .replace(NULL2, "_\r\n");
    assert_eq!(ttl_free(&reply), want3);
    // Modes are reported by name, with shared's limit as -1.
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "m", "600000", "SHARED"]), int(1));
    let reply = c.call(&["FLOCK.HOLDERS", "m"]);
    assert!(
        reply.contains("$4\r\nmode\r\n$6\r\nshared\r\n$5\r\nlimit\r\n:-1\r\n"),
        "{reply}"
    );
}

#[test]
fn bad_arguments_get_clear_errors_and_change_nothing() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    let cases: &[(&[&str], &str)] = &[
        (
            &["FLOCK.ACQUIRE", "b", "1000", "LIMIT", "0"],
            "-ERR invalid LIMIT: must be an integer from 1 to 65535\r\n",
        ),
        (
            &["FLOCK.ACQUIRE", "b", "1000", "LIMIT", "65536"],
            "-ERR invalid LIMIT: must be an integer from 1 to 65535\r\n",
        ),
        (
            &["FLOCK.ACQUIRE", "b", "1000", "LIMIT", "x"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            &["FLOCK.ACQUIRE", "b", "1000", "SHARED", "LIMIT", "2"],
            "-ERR SHARED and LIMIT cannot be combined, and each may be given once\r\n",
        ),
        (
            &["FLOCK.ACQUIRE", "b", "1000", "LIMIT", "2", "SHARED"],
            "-ERR SHARED and LIMIT cannot be combined, and each may be given once\r\n",
        ),
        (
            &["FLOCK.ACQUIRE", "b", "1000", "LOCKDELAY", "86400001"],
            "-ERR invalid LOCKDELAY: must be an integer from 0 to 86400000\r\n",
        ),
        (
            &["FLOCK.ACQUIRE", "b", "1000", "SESSION", "SESSION"],
            "-ERR syntax error\r\n",
        ),
        (
            &["FLOCK.ACQUIRE", "b", "1000", "LIMIT"],
            "-ERR syntax error\r\n",
        ),
        (
            &["FLOCK.ACQUIRE", "b", "1000", "READ"],
            "-ERR unknown option 'READ' for 'flock.acquire' (expected SHARED, LIMIT n, WAIT ms, OWNER id, SESSION or LOCKDELAY ms)\r\n",
        ),
        (
            &["FENCE.SET", "k", "1", "v", "LOCKED", "b"],
            "-ERR unknown option 'LOCKED' for 'fence.set' (expected LOCK name)\r\n",
        ),
        (
            &["FENCE.SET", "k", "1", "v", "LOCK"],
            "-ERR syntax error\r\n",
        ),
        (
            &["FENCE.SET", "k", "1", "v", "LOCK", "b", "extra"],
            "-ERR syntax error\r\n",
        ),
        (
            &["FLOCK.HOLDERS"],
            "-ERR wrong number of arguments for 'flock.holders' command\r\n",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(&c.call(args), want, "{args:?}");
    }
    // Nothing was taken or stored, and the connection still works.
    assert_eq!(
        c.call(&["FLOCK.STATUS", "b"]),
        status2("b", None, None, -2, 0, 0, 0, 0, 0, 0)
    );
    assert_eq!(c.call(&["FENCE.GET", "k"]), NULL2);
    // FENCE.SET ... LOCK on a free lock stores nothing.
    assert_eq!(c.call(&["FENCE.SET", "k", "1", "v", "LOCK", "b"]), int(0));
    assert_eq!(c.call(&["FENCE.TOKEN", "k"]), int(0));
    // LIMIT 1 is a plain exclusive lock.
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "b", "60000", "LIMIT", "1"]),
        int(1)
    );
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "b", "60000"]), NULL2);
}

#[test]
fn fence_set_with_lock_refuses_a_stale_holder_before_the_new_one_writes() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "acct", "60000"]), int(1));
    assert_eq!(
        c.call(&["FENCE.SET", "balance", "1", "100", "LOCK", "acct"]),
        int(1)
    );
    // The holder is lost (force-released) and a new one takes over, but has not written yet.
    assert_eq!(c.call(&["FLOCK.FORCERELEASE", "acct"]), int(1));
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "acct", "60000"]), int(2));
    // The stale holder's write is refused although its token is the key's highest so far.
    assert_eq!(
        c.call(&["FENCE.SET", "balance", "1", "50", "lock", "acct"]),
        int(0)
    );
    assert_eq!(c.call(&["FENCE.GET", "balance"]), bulk("100"));
    assert_eq!(
        c.call(&["FENCE.SET", "balance", "2", "75", "LOCK", "acct"]),
        int(1)
    );
    // A token of another lock does not count.
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "other", "60000"]), int(1));
    assert_eq!(
        c.call(&["FENCE.SET", "balance", "2", "1", "LOCK", "other"]),
        int(0)
    );
    // Without LOCK it is the old rule.
    assert_eq!(c.call(&["FENCE.SET", "balance", "2", "80"]), int(1));
    assert_eq!(c.call(&["FENCE.GET", "balance"]), bulk("80"));
}

#[test]
fn lockdelay_closes_the_name_after_a_lost_holder_but_not_after_a_release() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    // Released: no delay.
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "d", "60000", "LOCKDELAY", "60000"]),
        int(1)
    );
    assert_eq!(c.call(&["FLOCK.RELEASE", "d", "1"]), int(1));
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "d", "60000", "LOCKDELAY", "800"]),
        int(2)
    );
    // Force-released: the name grants nothing for the delay, to waiters neither.
    assert_eq!(c.call(&["FLOCK.FORCERELEASE", "d"]), int(1));
    let forced = Instant::now();
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "d", "60000"]), NULL2);
    let delay = field(&status(&mut c, "d"), "delay");
    assert!((1..=800).contains(&delay), "delay {delay}");
    let mut waiter = server.raw();
    let reply = waiter.call(&["FLOCK.ACQUIRE", "d", "60000", "WAIT", "5000"]);
    assert_eq!(reply, int(3));
    assert!(
        forced.elapsed() >= Duration::from_millis(700),
        "granted only after the delay: {:?}",
        forced.elapsed()
    );
    assert_eq!(field(&status(&mut c, "d"), "delay"), 0);
    // Expired: the delay runs from the end of the lease.
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "e", "200", "LOCKDELAY", "600"]),
        int(1)
    );
    let granted = Instant::now();
    let reply = waiter.call(&["FLOCK.ACQUIRE", "e", "60000", "WAIT", "5000"]);
    assert_eq!(reply, int(2));
    assert!(
        granted.elapsed() >= Duration::from_millis(700),
        "lease plus delay: {:?}",
        granted.elapsed()
    );
}

#[test]
fn session_holdings_end_with_their_connection_however_it_closes() {
    let server = TestServer::start(&[]);
    let mut other = server.raw();
    // Closed by the client.
    {
        let mut c = server.raw();
        assert_eq!(
            c.call(&["FLOCK.ACQUIRE", "s1", "600000", "SESSION"]),
            int(1)
        );
        assert_eq!(c.call(&["FLOCK.ACQUIRE", "plain", "600000"]), int(1));
    }
    assert_eq!(
        other.call(&["FLOCK.ACQUIRE", "s1", "600000", "WAIT", "5000"]),
        int(2)
    );
    // Not a session holding: it keeps its lease.
    assert_eq!(other.call(&["FLOCK.ACQUIRE", "plain", "600000"]), NULL2);

    // Killed by the server (CLIENT KILL).
    let mut c = server.raw();
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "s2", "600000", "SESSION"]),
        int(1)
    );
    let id = c.int(&["CLIENT", "ID"]);
    assert_eq!(
        other.call(&["CLIENT", "KILL", "ID", &id.to_string()]),
        int(1)
    );
    assert_eq!(
        other.call(&["FLOCK.ACQUIRE", "s2", "600000", "WAIT", "5000"]),
        int(2)
    );

    // Closed while blocked in another command's WAIT.
    let mut c = server.raw();
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "s3", "600000", "SESSION"]),
        int(1)
    );
    assert_eq!(other.call(&["FLOCK.ACQUIRE", "busy", "600000"]), int(1));
    c.cmd(&[b"FLOCK.ACQUIRE", b"busy", b"600000", b"WAIT", b"60000"]);
    assert_eq!(c.poll_reply(QUIET), None);
    drop(c);
    assert_eq!(
        other.call(&["FLOCK.ACQUIRE", "s3", "600000", "WAIT", "5000"]),
        int(2)
    );
    // The session's reentrant holds and its other holdings all end; others' do not.
    let mut c = server.raw();
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "sem", "600000", "LIMIT", "3", "SESSION"]),
        int(1)
    );
    assert_eq!(
        other.call(&["FLOCK.ACQUIRE", "sem", "600000", "LIMIT", "3"]),
        int(2)
    );
    drop(c);
    wait_until(LIVENESS, "the session holding ended", || {
        field(&status(&mut other, "sem"), "holdings") == 1
    });
    let holders = other.call(&["FLOCK.HOLDERS", "sem"]);
    assert!(holders.contains("$5\r\ntoken\r\n:2\r\n"), "{holders}");
}

#[test]
fn holdings_limits_sessions_and_delays_survive_a_sigkill_and_sessions_end_at_start() {
    let mut server = TestServer::start(DURABLE);
    let mut c = server.raw();
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "r", "600000", "SHARED", "OWNER", "a"]),
        int(1)
    );
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "r", "600000", "SHARED"]), int(2));
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "p", "600000", "LIMIT", "4"]),
        int(1)
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "p", "600000", "LIMIT", "4", "SESSION"]),
        int(2)
    );
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "d", "600000", "LOCKDELAY", "600000"]),
        int(1)
    );
    assert_eq!(c.call(&["FLOCK.FORCERELEASE", "d"]), int(1));
    let before_r = c.call(&["FLOCK.HOLDERS", "r"]);
    server.restart_after_kill9(DURABLE);
    let mut c = server.raw();
    // The shared holdings are back, with their owners and modes (ttl re-armed in full).
    let strip_ttl = |s: &str| {
        s.split("\r\n")
            .filter(|l| !l.starts_with(':') || l.len() < 4)
            .collect::<Vec<_>>()
            .join("|")
    };
    assert_eq!(
        strip_ttl(&c.call(&["FLOCK.HOLDERS", "r"])),
        strip_ttl(&before_r)
    );
    // The permit holding of the dead session ended at start; the other stays, limit 4.
    let s = status(&mut c, "p");
    assert_eq!((field(&s, "holdings"), field(&s, "limit")), (1, 4));
    assert_eq!(
        c.call(&["FLOCK.ACQUIRE", "p", "600000", "LIMIT", "4"]),
        int(3)
    );
    // The lock-delay is still running.
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "d", "600000"]), NULL2);
    assert!(field(&status(&mut c, "d"), "delay") > 500_000);
    // And a rewrite carries all of it.
    assert!(c.call(&["BGREWRITEAOF"]).starts_with('+'));
    wait_until(LIVENESS, "the rewrite finished", || {
        let info = c.call(&["INFO", "persistence"]);
        info.contains("aof_rewrite_in_progress:0")
    });
    server.restart_after_kill9(DURABLE);
    let mut c = server.raw();
    let s = status(&mut c, "p");
    assert_eq!((field(&s, "holdings"), field(&s, "limit")), (2, 4));
    assert_eq!(field(&status(&mut c, "r"), "holdings"), 2);
    assert!(field(&status(&mut c, "d"), "delay") > 500_000);
}
