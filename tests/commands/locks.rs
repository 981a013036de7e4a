//! Lock and fence semantics of the contract (spec/commands.md, "Names and values", "Lock
//! commands", "Resource-side fencing"), driven against the real `flockd` binary over TCP with
//! exact raw replies in RESP2 and RESP3.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{Raw, TestServer, info_int, parse_int_reply, wait_until};

const NULL2: &str = "$-1\r\n";
const NULL3: &str = "_\r\n";
/// Generous bound for "this happens eventually" on a shared, noisy machine.
const LIVENESS: Duration = Duration::from_secs(10);
/// How long we watch for a reply that must NOT come (yet).
const QUIET: Duration = Duration::from_millis(300);

fn int(n: i64) -> String {
    format!(":{n}\r\n")
}

/// Parses a flat RESP2 array or RESP3 map of scalars (bulk, integer, null) into (field, value)
/// pairs; values are shown as text, integers as digits, null as "nil".
fn pairs(reply: &str) -> Vec<(String, String)> {
    let (kind, rest) = reply.split_at(1);
    let (count, mut rest) = rest.split_once("\r\n").expect("header");
    let count: usize = count.parse().expect("count");
    let items = if kind == "%" { count * 2 } else { count };
    assert!(kind == "%" || kind == "*", "not an array or map: {reply:?}");
    let mut values = Vec::new();
    for _ in 0..items {
        let (head, after) = rest.split_once("\r\n").expect("item");
        let value;
        if head == "$-1" || head == "_" {
            value = "nil".to_string();
            rest = after;
        } else if let Some(n) = head.strip_prefix(':') {
            value = n.to_string();
            rest = after;
        } else if let Some(len) = head.strip_prefix('$') {
            let len: usize = len.parse().unwrap();
            value = after[..len].to_string();
            rest = &after[len + 2..];
        } else {
            panic!("unexpected item {head:?} in {reply:?}");
        }
        values.push(value);
    }
    assert!(rest.is_empty(), "trailing bytes in {reply:?}");
    values
        .chunks(2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect()
}

fn status(raw: &mut Raw, name: &str) -> Vec<(String, String)> {
    pairs(&raw.call(&["FLOCK.STATUS", name]))
}

fn field(status: &[(String, String)], name: &str) -> String {
    status
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no field {name}"))
        .1
        .clone()
}

fn waiters(raw: &mut Raw, name: &str) -> i64 {
    field(&status(raw, name), "waiters").parse().unwrap()
}

/// Sends a blocking acquire on `raw` and waits until the server shows `expect` waiters on `name`,
/// so that queue order is known.
fn queue(raw: &mut Raw, admin: &mut Raw, name: &str, args: &[&str], expect: i64) {
    let mut full = vec!["FLOCK.ACQUIRE", name];
    full.extend_from_slice(args);
    let bytes: Vec<&[u8]> = full.iter().map(|a| a.as_bytes()).collect();
    raw.cmd(&bytes);
    wait_until(LIVENESS, &format!("{expect} waiters on {name}"), || {
        waiters(admin, name) == expect
    });
}

fn assert_notowner(reply: &str, name: &str) {
    assert!(
        reply.starts_with("-NOTOWNER "),
        "expected -NOTOWNER, got {reply:?}"
    );
    assert!(
        reply.contains(&format!("'{name}'")),
        "-NOTOWNER must name the lock {name}: {reply:?}"
    );
}

// ---------------------------------------------------------------- acquire, tokens, null

#[test]
fn free_lock_is_granted_token_one_and_held_lock_replies_null_at_once() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let mut b = server.raw();
    let mut b3 = server.raw().resp3();
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "l", "10000"]), int(1));
    for (conn, null) in [(&mut b, NULL2), (&mut b3, NULL3)] {
        let started = Instant::now();
        assert_eq!(conn.call(&["FLOCK.ACQUIRE", "l", "10000"]), null);
        assert_eq!(
            conn.call(&["FLOCK.ACQUIRE", "l", "10000", "WAIT", "0"]),
            null
        );
        assert_eq!(
            conn.call(&["FLOCK.ACQUIRE", "l", "10000", "OWNER", "other"]),
            null
        );
        // "at once": no wait is involved (bound is liveness only, not speed).
        assert!(started.elapsed() < LIVENESS);
    }
    // The holder itself without OWNER is not reentrant either.
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "l", "10000"]), NULL2);
    // Names are independent, binary-safe, and command names are case-insensitive.
    assert_eq!(a.call(&["flock.acquire", "other", "10000"]), int(1));
    a.cmd(&[b"Flock.Acquire", b"bin\x00\xff\r\n", b"10000"]);
    assert_eq!(a.read_reply(), int(1));
    a.cmd(&[b"FLOCK.TOKEN", b"bin\x00\xff\r\n"]);
    assert_eq!(a.read_reply(), int(1));
    a.cmd(&[b"FLOCK.TOKEN", b"bin\x00\xff"]);
    assert_eq!(a.read_reply(), int(0));
}

#[test]
fn tokens_strictly_increase_across_release_expiry_and_force_release() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    assert_eq!(a.call(&["FLOCK.TOKEN", "t"]), int(0));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "t", "10000"]), int(1));
    assert_eq!(a.call(&["FLOCK.RELEASE", "t", "1"]), int(1));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "t", "10000"]), int(2));
    assert_eq!(a.call(&["FLOCK.FORCERELEASE", "t"]), int(1));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "t", "150"]), int(3));
    wait_until(LIVENESS, "lease expired", || {
        a.call(&["FLOCK.TTL", "t"]) == int(-2)
    });
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "t", "10000", "OWNER", "o"]),
        int(4)
    );
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "t", "10000", "OWNER", "o"]),
        int(5)
    );
    assert_eq!(a.call(&["FLOCK.RELEASE", "t", "4"]), int(0));
    assert_eq!(a.call(&["FLOCK.RELEASE", "t", "5"]), int(1));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "t", "10000"]), int(6));
    assert_eq!(a.call(&["FLOCK.TOKEN", "t"]), int(6));
    // A fresh connection sees the same counter; another name has its own.
    assert_eq!(server.raw().call(&["FLOCK.TOKEN", "t"]), int(6));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "u", "10000"]), int(1));
}

// ---------------------------------------------------------------- STATUS format

#[test]
fn status_is_a_flat_array_in_resp2_and_a_map_in_resp3_in_contract_order() {
    let server = TestServer::start(&[]);
    let mut r2 = server.raw();
    let mut r3 = server.raw().resp3();
    let free_body = "$4\r\nname\r\n$1\r\ns\r\n$6\r\nlocked\r\n:0\r\n$5\r\ntoken\r\n{NULL}$5\r\nowner\r\n{NULL}\
                     $3\r\nttl\r\n:-2\r\n$5\r\nholds\r\n:0\r\n$7\r\nwaiters\r\n:0\r\n$10\r\nlast-token\r\n:0\r\n\
                     $8\r\nholdings\r\n:0\r\n$5\r\nlimit\r\n:0\r\n$5\r\ndelay\r\n:0\r\n";
    assert_eq!(
        r2.call(&["FLOCK.STATUS", "s"]),
        format!("*22\r\n{}", free_body.replace("{NULL}", NULL2))
    );
    assert_eq!(
        r3.call(&["FLOCK.STATUS", "s"]),
        format!("%11\r\n{}", free_body.replace("{NULL}", NULL3))
    );

    assert_eq!(
        r2.call(&["FLOCK.ACQUIRE", "s", "60000", "OWNER", "worker-1"]),
        int(1)
    );
    assert_eq!(
        r2.call(&["FLOCK.ACQUIRE", "s", "60000", "OWNER", "worker-1"]),
        int(2)
    );
    let mut waiter = server.raw();
    queue(&mut waiter, &mut r2, "s", &["60000", "WAIT", "30000"], 1);
    for (conn, header) in [(&mut r2, "*22\r\n"), (&mut r3, "%11\r\n")] {
        let reply = conn.call(&["FLOCK.STATUS", "s"]);
        // The TTL is the only moving part: read it, check its range, and compare the rest exactly.
        let ttl: i64 = field(&pairs(&reply), "ttl").parse().unwrap();
        assert!(ttl > 0 && ttl <= 60000, "ttl {ttl}");
        let expected = format!(
            "{header}$4\r\nname\r\n$1\r\ns\r\n$6\r\nlocked\r\n:1\r\n$5\r\ntoken\r\n:2\r\n$5\r\nowner\r\n$8\r\nworker-1\r\n\
             $3\r\nttl\r\n:{ttl}\r\n$5\r\nholds\r\n:2\r\n$7\r\nwaiters\r\n:1\r\n$10\r\nlast-token\r\n:2\r\n\
             $8\r\nholdings\r\n:1\r\n$5\r\nlimit\r\n:1\r\n$5\r\ndelay\r\n:0\r\n"
        );
        assert_eq!(reply, expected);
    }
    // Without OWNER the owner field is null.
    assert_eq!(r2.call(&["FLOCK.ACQUIRE", "n", "60000"]), int(1));
    assert_eq!(field(&status(&mut r2, "n"), "owner"), "nil");
    assert!(
        r3.call(&["FLOCK.STATUS", "n"])
            .contains("$5\r\nowner\r\n_\r\n")
    );
}

// ---------------------------------------------------------------- WAIT

#[test]
fn waiter_is_granted_when_the_holder_releases() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    let mut waiter = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "w", "30000"]), int(1));
    queue(
        &mut waiter,
        &mut holder,
        "w",
        &["30000", "WAIT", "30000"],
        1,
    );
    assert_eq!(
        waiter.poll_reply(QUIET),
        None,
        "waiter must block while the lock is held"
    );
    assert_eq!(holder.call(&["FLOCK.RELEASE", "w", "1"]), int(1));
    assert_eq!(waiter.read_reply(), int(2));
    let st = status(&mut holder, "w");
    assert_eq!(field(&st, "token"), "2");
    assert_eq!(field(&st, "waiters"), "0");
    assert_eq!(waiter.call(&["FLOCK.RELEASE", "w", "2"]), int(1));
}

#[test]
fn waiter_is_granted_on_force_release() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    let mut waiter = server.raw().resp3();
    let mut admin = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "f", "30000"]), int(1));
    queue(&mut waiter, &mut admin, "f", &["30000", "WAIT", "30000"], 1);
    assert_eq!(waiter.poll_reply(QUIET), None);
    assert_eq!(admin.call(&["FLOCK.FORCERELEASE", "f"]), int(1));
    assert_eq!(waiter.read_reply(), int(2));
    // The force-released holder lost its lock and is told so.
    assert_notowner(&holder.call(&["FLOCK.RELEASE", "f", "1"]), "f");
    assert_notowner(&holder.call(&["FLOCK.RENEW", "f", "1", "1000"]), "f");
    assert_eq!(admin.call(&["FLOCK.FORCERELEASE", "f"]), int(1));
    assert_eq!(admin.call(&["FLOCK.FORCERELEASE", "f"]), int(0));
    assert_eq!(admin.call(&["FLOCK.FORCERELEASE", "never-held"]), int(0));
}

#[test]
fn waiter_is_granted_on_lease_expiry_without_anyone_calling_anything() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    let mut waiter = server.raw();
    let lease = Duration::from_millis(700);
    let sent = Instant::now();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "e", "700"]), int(1));
    // The waiter queues; from now on nobody sends anything: expiry must be proactive.
    waiter.send(&common::encode_request(&[
        b"FLOCK.ACQUIRE",
        b"e",
        b"30000",
        b"WAIT",
        b"30000",
    ]));
    assert_eq!(waiter.read_reply(), int(2));
    let elapsed = sent.elapsed();
    // Never granted before the lease ran out (the lease started after `sent`).
    assert!(
        elapsed >= lease - Duration::from_millis(20),
        "granted after {elapsed:?}, before the lease ended"
    );
    assert_eq!(holder.call(&["FLOCK.TOKEN", "e"]), int(2));
    assert_notowner(&holder.call(&["FLOCK.RELEASE", "e", "1"]), "e");
}

#[test]
fn wait_deadline_replies_null_and_leaves_the_queue() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "d", "60000"]), int(1));
    for (mut conn, null) in [(server.raw(), NULL2), (server.raw().resp3(), NULL3)] {
        let started = Instant::now();
        assert_eq!(
            conn.call(&["FLOCK.ACQUIRE", "d", "1000", "WAIT", "300"]),
            null
        );
        assert!(
            started.elapsed() >= Duration::from_millis(290),
            "gave up early: {:?}",
            started.elapsed()
        );
        // The connection is usable after the timeout.
        assert_eq!(conn.call(&["PING"]), "+PONG\r\n");
    }
    assert_eq!(waiters(&mut holder, "d"), 0);
    // The timed-out waiters are never granted later.
    assert_eq!(holder.call(&["FLOCK.RELEASE", "d", "1"]), int(1));
    assert_eq!(field(&status(&mut holder, "d"), "locked"), "0");
    assert_eq!(holder.call(&["FLOCK.TOKEN", "d"]), int(1));
}

#[test]
fn five_waiters_are_served_in_fifo_order() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    let mut admin = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "q", "60000"]), int(1));
    let mut waiters_: Vec<Raw> = (0..5).map(|_| server.raw()).collect();
    for (i, w) in waiters_.iter_mut().enumerate() {
        queue(
            w,
            &mut admin,
            "q",
            &["60000", "WAIT", "60000"],
            i as i64 + 1,
        );
    }
    assert_eq!(holder.call(&["FLOCK.RELEASE", "q", "1"]), int(1));
    for i in 0..5 {
        let token = 2 + i as i64;
        assert_eq!(
            waiters_[i].read_reply(),
            int(token),
            "waiter {i} must be granted next"
        );
        for later in waiters_.iter_mut().skip(i + 1) {
            assert_eq!(
                later.poll_reply(Duration::from_millis(50)),
                None,
                "a later waiter jumped the queue"
            );
        }
        assert_eq!(waiters(&mut admin, "q"), 4 - i as i64);
        assert_eq!(
            waiters_[i].call(&["FLOCK.RELEASE", "q", &token.to_string()]),
            int(1)
        );
    }
    assert_eq!(admin.call(&["FLOCK.TTL", "q"]), int(-2));
}

#[test]
fn a_waiter_whose_connection_closes_is_never_granted() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    let mut admin = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "c", "60000"]), int(1));
    let mut gone = server.raw();
    queue(&mut gone, &mut admin, "c", &["60000", "WAIT", "60000"], 1);
    let mut next = server.raw();
    queue(&mut next, &mut admin, "c", &["60000", "WAIT", "60000"], 2);
    drop(gone);
    wait_until(LIVENESS, "the closed waiter left the queue", || {
        waiters(&mut admin, "c") == 1
    });
    assert_eq!(holder.call(&["FLOCK.RELEASE", "c", "1"]), int(1));
    // The next live waiter gets the lock, and no token was spent on the closed one.
    assert_eq!(next.read_reply(), int(2));
    let st = status(&mut admin, "c");
    assert_eq!(field(&st, "token"), "2");
    assert_eq!(field(&st, "waiters"), "0");
    assert_eq!(field(&st, "last-token"), "2");

    // Closed while it is the only waiter: the lock becomes free on release.
    let mut lone = server.raw();
    queue(&mut lone, &mut admin, "c", &["60000", "WAIT", "60000"], 1);
    drop(lone);
    wait_until(LIVENESS, "the lone waiter left", || {
        waiters(&mut admin, "c") == 0
    });
    assert_eq!(next.call(&["FLOCK.RELEASE", "c", "2"]), int(1));
    assert_eq!(admin.call(&["FLOCK.TTL", "c"]), int(-2));
    assert_eq!(admin.call(&["FLOCK.TOKEN", "c"]), int(2));
    assert_eq!(info_int(&mut admin, "locks", "lock_waiters"), 0);
}

#[test]
fn a_pipelined_command_behind_a_blocked_acquire_waits_its_turn() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    let mut conn = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "x", "60000"]), int(1));
    // Granted case.
    let mut batch = common::encode_request(&[b"FLOCK.ACQUIRE", b"x", b"1000", b"WAIT", b"2000"]);
    batch.extend_from_slice(&common::encode_request(&[b"PING"]));
    conn.send(&batch);
    assert_eq!(
        conn.poll_reply(Duration::from_millis(200)),
        None,
        "PING must not overtake the blocked acquire"
    );
    assert_eq!(holder.call(&["FLOCK.RELEASE", "x", "1"]), int(1));
    assert_eq!(conn.read_reply(), int(2));
    assert_eq!(conn.read_reply(), "+PONG\r\n");
    // Timed-out case: null first, then the PING.
    let mut batch = common::encode_request(&[b"FLOCK.ACQUIRE", b"x", b"1000", b"WAIT", b"300"]);
    batch.extend_from_slice(b"PING\r\n");
    holder.send(&batch);
    assert_eq!(holder.read_reply(), NULL2);
    assert_eq!(holder.read_reply(), "+PONG\r\n");
}

// ---------------------------------------------------------------- OWNER reentrancy

#[test]
fn same_owner_reentry_issues_a_higher_token_counts_holds_and_resets_the_lease() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let mut other = server.raw();
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "r", "5000", "OWNER", "w1"]),
        int(1)
    );
    // From another connection too: ownership is by OWNER id, not by connection.
    assert_eq!(
        other.call(&["FLOCK.ACQUIRE", "r", "60000", "OWNER", "w1"]),
        int(2)
    );
    let st = status(&mut a, "r");
    assert_eq!(field(&st, "holds"), "2");
    assert_eq!(field(&st, "token"), "2");
    assert_eq!(field(&st, "owner"), "w1");
    let ttl: i64 = field(&st, "ttl").parse().unwrap();
    assert!(
        ttl > 5000 && ttl <= 60000,
        "lease must be reset to 60000 from now, ttl {ttl}"
    );
    // A different owner, or none, is refused.
    assert_eq!(
        other.call(&["FLOCK.ACQUIRE", "r", "60000", "OWNER", "w2"]),
        NULL2
    );
    assert_eq!(other.call(&["FLOCK.ACQUIRE", "r", "60000"]), NULL2);
    // A shorter lease on reentry also resets (the lease is set, not extended).
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "r", "3000", "OWNER", "w1"]),
        int(3)
    );
    let ttl = a.int(&["FLOCK.TTL", "r"]);
    assert!(ttl > 0 && ttl <= 3000, "ttl {ttl}");
    // RELEASE: 0 while holds remain, 1 when free; any token of the holding works.
    assert_eq!(a.call(&["FLOCK.RELEASE", "r", "1"]), int(0));
    assert_eq!(field(&status(&mut a, "r"), "holds"), "2");
    assert_eq!(a.call(&["FLOCK.RELEASE", "r", "3"]), int(0));
    assert_eq!(a.call(&["FLOCK.RELEASE", "r", "3"]), int(1));
    assert_eq!(field(&status(&mut a, "r"), "locked"), "0");
    assert_notowner(&a.call(&["FLOCK.RELEASE", "r", "2"]), "r");
    // A new holding by the same owner starts at holds 1 with a new token.
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "r", "5000", "OWNER", "w1"]),
        int(4)
    );
    assert_notowner(&a.call(&["FLOCK.RELEASE", "r", "3"]), "r");
    assert_eq!(field(&status(&mut a, "r"), "holds"), "1");
}

#[test]
fn a_reentrant_acquire_never_queues_even_with_waiters() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let mut admin = server.raw();
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "rq", "60000", "OWNER", "me"]),
        int(1)
    );
    let mut w = server.raw();
    queue(
        &mut w,
        &mut admin,
        "rq",
        &["60000", "WAIT", "60000", "OWNER", "you"],
        1,
    );
    // No WAIT: granted at once, not null, despite the queued waiter.
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "rq", "60000", "OWNER", "me"]),
        int(2)
    );
    // With WAIT: also granted at once.
    assert_eq!(
        a.call(&[
            "FLOCK.ACQUIRE",
            "rq",
            "60000",
            "WAIT",
            "60000",
            "OWNER",
            "me"
        ]),
        int(3)
    );
    assert_eq!(field(&status(&mut admin, "rq"), "holds"), "3");
    assert_eq!(w.poll_reply(Duration::from_millis(100)), None);
    for t in ["1", "2"] {
        assert_eq!(a.call(&["FLOCK.RELEASE", "rq", t]), int(0));
    }
    assert_eq!(a.call(&["FLOCK.RELEASE", "rq", "3"]), int(1));
    assert_eq!(w.read_reply(), int(4));
}

#[test]
fn a_queued_waiter_with_the_new_holders_owner_is_granted_at_once() {
    let server = TestServer::start(&[]);
    let mut h = server.raw();
    let mut admin = server.raw();
    assert_eq!(
        h.call(&["FLOCK.ACQUIRE", "so", "60000", "OWNER", "h"]),
        int(1)
    );
    let mut o1 = server.raw();
    let mut p = server.raw();
    let mut o2 = server.raw();
    queue(
        &mut o1,
        &mut admin,
        "so",
        &["60000", "WAIT", "60000", "OWNER", "o"],
        1,
    );
    queue(
        &mut p,
        &mut admin,
        "so",
        &["60000", "WAIT", "60000", "OWNER", "p"],
        2,
    );
    queue(
        &mut o2,
        &mut admin,
        "so",
        &["60000", "WAIT", "60000", "OWNER", "o"],
        3,
    );
    assert_eq!(h.call(&["FLOCK.RELEASE", "so", "1"]), int(1));
    // o1 is first in line; o2 shares its OWNER, so it is granted reentrantly at once although
    // p is queued ahead of it.
    assert_eq!(o1.read_reply(), int(2));
    assert_eq!(o2.read_reply(), int(3));
    assert_eq!(p.poll_reply(Duration::from_millis(100)), None);
    let st = status(&mut admin, "so");
    assert_eq!(field(&st, "owner"), "o");
    assert_eq!(field(&st, "holds"), "2");
    assert_eq!(field(&st, "waiters"), "1");
    assert_eq!(o2.call(&["FLOCK.RELEASE", "so", "3"]), int(0));
    assert_eq!(o1.call(&["FLOCK.RELEASE", "so", "2"]), int(1));
    assert_eq!(p.read_reply(), int(4));
}

#[test]
fn without_owner_a_lock_is_not_reentrant() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "nr", "60000"]), int(1));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "nr", "60000"]), NULL2);
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "nr", "60000", "OWNER", "x"]),
        NULL2
    );
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "nr", "60000", "WAIT", "200"]),
        NULL2
    );
    let st = status(&mut a, "nr");
    assert_eq!(field(&st, "holds"), "1");
    assert_eq!(field(&st, "waiters"), "0");
    // A holder with OWNER is not re-entered by a request without one.
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "nr2", "60000", "OWNER", "x"]),
        int(1)
    );
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "nr2", "60000"]), NULL2);
}

// ---------------------------------------------------------------- RENEW / RELEASE ownership

#[test]
fn renew_accepts_any_token_of_the_holding_from_any_connection() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let mut b = server.raw();
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "n", "2000", "OWNER", "o"]),
        int(1)
    );
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "n", "2000", "OWNER", "o"]),
        int(2)
    );
    assert_eq!(b.call(&["FLOCK.RENEW", "n", "1", "60000"]), int(1));
    let ttl = b.int(&["FLOCK.TTL", "n"]);
    assert!(ttl > 2000 && ttl <= 60000, "renewed ttl {ttl}");
    assert_eq!(b.call(&["FLOCK.RENEW", "n", "2", "1000"]), int(1));
    let ttl = b.int(&["FLOCK.TTL", "n"]);
    assert!(ttl > 0 && ttl <= 1000, "renew sets the lease, ttl {ttl}");
    // RESP3 reply is the same integer.
    let mut r3 = server.raw().resp3();
    assert_eq!(r3.call(&["FLOCK.RENEW", "n", "2", "60000"]), int(1));
}

#[test]
fn renew_and_release_with_a_foreign_or_stale_token_get_notowner() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let mut r3 = server.raw().resp3();
    // Never held.
    assert_notowner(&a.call(&["FLOCK.RENEW", "never", "1", "1000"]), "never");
    assert_notowner(&a.call(&["FLOCK.RELEASE", "never", "1"]), "never");
    assert_notowner(&r3.call(&["FLOCK.RELEASE", "never", "1"]), "never");
    // Token that was never issued while the lock is held.
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "o", "60000"]), int(1));
    assert_notowner(&a.call(&["FLOCK.RENEW", "o", "2", "1000"]), "o");
    assert_notowner(&a.call(&["FLOCK.RELEASE", "o", "2"]), "o");
    // After release.
    assert_eq!(a.call(&["FLOCK.RELEASE", "o", "1"]), int(1));
    assert_notowner(&a.call(&["FLOCK.RENEW", "o", "1", "1000"]), "o");
    assert_notowner(&a.call(&["FLOCK.RELEASE", "o", "1"]), "o");
    // Stale token while someone else holds it: the newer holding is untouched.
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "o", "60000"]), int(2));
    assert_notowner(&a.call(&["FLOCK.RENEW", "o", "1", "1"]), "o");
    assert_notowner(&a.call(&["FLOCK.RELEASE", "o", "1"]), "o");
    let st = status(&mut a, "o");
    assert_eq!(field(&st, "locked"), "1");
    assert_eq!(field(&st, "token"), "2");
    assert!(
        a.int(&["FLOCK.TTL", "o"]) > 1000,
        "a stale renew must not change the lease"
    );
    // After expiry (and without any waiter or other call in between).
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "exp", "150"]), int(1));
    std::thread::sleep(Duration::from_millis(400));
    assert_notowner(&a.call(&["FLOCK.RENEW", "exp", "1", "60000"]), "exp");
    assert_notowner(&a.call(&["FLOCK.RELEASE", "exp", "1"]), "exp");
    assert_eq!(a.call(&["FLOCK.TTL", "exp"]), int(-2));
}

#[test]
fn a_late_release_with_an_old_token_never_releases_the_new_holder() {
    let server = TestServer::start(&[]);
    let mut old = server.raw();
    let mut new = server.raw();
    assert_eq!(old.call(&["FLOCK.ACQUIRE", "late", "200"]), int(1));
    // The old holder's lease runs out while a new holder waits for it.
    assert_eq!(
        new.call(&["FLOCK.ACQUIRE", "late", "60000", "WAIT", "30000"]),
        int(2)
    );
    for _ in 0..3 {
        assert_notowner(&old.call(&["FLOCK.RELEASE", "late", "1"]), "late");
    }
    let st = status(&mut old, "late");
    assert_eq!(field(&st, "locked"), "1");
    assert_eq!(field(&st, "token"), "2");
    assert_eq!(field(&st, "holds"), "1");
    assert_eq!(new.call(&["FLOCK.RELEASE", "late", "2"]), int(1));
}

// ---------------------------------------------------------------- TTL, TOKEN, ADVANCE

#[test]
fn ttl_runs_from_apply_and_token_reports_the_counter() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let mut r3 = server.raw().resp3();
    assert_eq!(a.call(&["FLOCK.TTL", "tt"]), int(-2));
    assert_eq!(r3.call(&["FLOCK.TTL", "tt"]), int(-2));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "tt", "5000"]), int(1));
    let ttl = a.int(&["FLOCK.TTL", "tt"]);
    // The lease counts from when the server applied the grant: right after the reply almost all
    // of it is left (slack for a slow machine only).
    assert!(ttl <= 5000 && ttl > 4000, "ttl right after acquire: {ttl}");
    assert_eq!(a.call(&["FLOCK.TOKEN", "tt"]), int(1));
    assert_eq!(a.call(&["FLOCK.RELEASE", "tt", "1"]), int(1));
    assert_eq!(a.call(&["FLOCK.TTL", "tt"]), int(-2));
    assert_eq!(a.call(&["FLOCK.TOKEN", "tt"]), int(1));
    assert_eq!(a.call(&["FLOCK.TOKEN", "unknown"]), int(0));
}

#[test]
fn advance_raises_the_counter_never_lowers_it_and_later_grants_are_greater() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    assert_eq!(a.call(&["FLOCK.ADVANCE", "adv", "100"]), int(100));
    assert_eq!(a.call(&["FLOCK.ADVANCE", "adv", "50"]), int(100));
    assert_eq!(a.call(&["FLOCK.TOKEN", "adv"]), int(100));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "adv", "60000"]), int(101));
    // Advancing while held leaves the holding alone; the next grant is above the advance.
    assert_eq!(a.call(&["FLOCK.ADVANCE", "adv", "200"]), int(200));
    assert_eq!(a.call(&["FLOCK.ADVANCE", "adv", "101"]), int(200));
    let st = status(&mut a, "adv");
    assert_eq!(field(&st, "token"), "101");
    assert_eq!(field(&st, "last-token"), "200");
    assert_eq!(a.call(&["FLOCK.RELEASE", "adv", "101"]), int(1));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "adv", "60000"]), int(201));
    // Below the counter of a name that has tokens: unchanged.
    assert_eq!(a.call(&["FLOCK.ADVANCE", "adv", "1"]), int(201));
}

#[test]
fn an_exhausted_counter_grants_nothing_and_never_wraps() {
    // Ambiguity documented in docs/commands.md: at 2^63-1 no further token can be issued, so the
    // lock can never be granted again (null, like a held lock), and the counter stays put.
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let max = i64::MAX.to_string();
    assert_eq!(
        a.call(&["FLOCK.ADVANCE", "ex", &(i64::MAX - 1).to_string()]),
        int(i64::MAX - 1)
    );
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "ex", "60000"]), int(i64::MAX));
    assert_eq!(a.call(&["FLOCK.RELEASE", "ex", &max]), int(1));
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "ex", "60000"]), NULL2);
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "ex", "60000", "WAIT", "100"]),
        NULL2
    );
    assert_eq!(a.call(&["FLOCK.TOKEN", "ex"]), int(i64::MAX));
    assert_eq!(a.call(&["FLOCK.ADVANCE", "ex", &max]), int(i64::MAX));
    assert_eq!(a.call(&["FLOCK.TTL", "ex"]), int(-2));
}

// ---------------------------------------------------------------- FENCE.*

#[test]
fn fence_set_accepts_equal_or_higher_tokens_and_refuses_lower_ones() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let mut r3 = server.raw().resp3();
    assert_eq!(a.call(&["FENCE.GET", "k"]), NULL2);
    assert_eq!(r3.call(&["FENCE.GET", "k"]), NULL3);
    assert_eq!(a.call(&["FENCE.TOKEN", "k"]), int(0));
    assert_eq!(a.call(&["FENCE.SET", "k", "5", "v1"]), int(1));
    assert_eq!(a.call(&["FENCE.GET", "k"]), "$2\r\nv1\r\n");
    assert_eq!(
        a.call(&["FENCE.SET", "k", "5", "v2"]),
        int(1),
        "an equal token is accepted"
    );
    assert_eq!(
        a.call(&["FENCE.SET", "k", "4", "old"]),
        int(0),
        "a lower token is refused"
    );
    assert_eq!(
        a.call(&["FENCE.GET", "k"]),
        "$2\r\nv2\r\n",
        "a refused write changes nothing"
    );
    assert_eq!(a.call(&["FENCE.TOKEN", "k"]), int(5));
    assert_eq!(a.call(&["FENCE.SET", "k", "7", ""]), int(1));
    assert_eq!(a.call(&["FENCE.GET", "k"]), "$0\r\n\r\n");
    assert_eq!(r3.call(&["FENCE.GET", "k"]), "$0\r\n\r\n");
    assert_eq!(a.call(&["FENCE.SET", "k", "6", "x"]), int(0));
    assert_eq!(a.call(&["FENCE.TOKEN", "k"]), int(7));
    // Binary-safe values; keys are independent of lock names and of each other.
    a.cmd(&[b"FENCE.SET", b"bin", b"1", b"\x00\r\n\xff"]);
    assert_eq!(a.read_reply(), int(1));
    assert_eq!(a.call(&["FENCE.GET", "bin"]), "$4\r\n\x00\r\n\u{fffd}\r\n");
    assert_eq!(a.call(&["FENCE.TOKEN", "other"]), int(0));
    assert_eq!(a.call(&["FLOCK.TOKEN", "k"]), int(0));
    assert_eq!(
        a.call(&["FENCE.SET", "max", &i64::MAX.to_string(), "m"]),
        int(1)
    );
    assert_eq!(
        a.call(&["FENCE.SET", "max", &(i64::MAX - 1).to_string(), "n"]),
        int(0)
    );
}

// ---------------------------------------------------------------- INFO

#[test]
fn info_locks_counters_move() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let mut w = server.raw();
    let get = |a: &mut Raw, f: &str| info_int(a, "locks", f);
    for f in [
        "grants",
        "releases",
        "expirations",
        "force_releases",
        "notowner_rejections",
        "locks_held",
    ] {
        assert_eq!(get(&mut a, f), 0, "{f} on a fresh server");
    }
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "i", "60000"]), int(1));
    assert_eq!(get(&mut a, "grants"), 1);
    assert_eq!(get(&mut a, "locks_held"), 1);
    assert_eq!(get(&mut a, "tokens_issued"), 1);
    queue(&mut w, &mut a, "i", &["150", "WAIT", "60000"], 1);
    assert_eq!(get(&mut a, "lock_waiters"), 1);
    assert_eq!(a.call(&["FLOCK.RELEASE", "i", "1"]), int(1));
    assert_eq!(w.read_reply(), int(2));
    assert_eq!(get(&mut a, "releases"), 1);
    assert_eq!(get(&mut a, "grants"), 2);
    assert_eq!(get(&mut a, "lock_waiters"), 0);
    wait_until(LIVENESS, "expiration counted", || {
        get(&mut a, "expirations") == 1
    });
    assert_eq!(get(&mut a, "locks_held"), 0);
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "i", "60000"]), int(3));
    assert_eq!(a.call(&["FLOCK.FORCERELEASE", "i"]), int(1));
    assert_eq!(get(&mut a, "force_releases"), 1);
    assert_notowner(&a.call(&["FLOCK.RELEASE", "i", "3"]), "i");
    assert_notowner(&a.call(&["FLOCK.RENEW", "i", "3", "100"]), "i");
    assert_eq!(get(&mut a, "notowner_rejections"), 2);
    assert_eq!(a.call(&["FENCE.SET", "f", "2", "a"]), int(1));
    assert_eq!(a.call(&["FENCE.SET", "f", "3", "b"]), int(1));
    assert_eq!(a.call(&["FENCE.SET", "f", "1", "c"]), int(0));
    assert_eq!(get(&mut a, "fence_writes_accepted"), 2);
    assert_eq!(get(&mut a, "fence_writes_refused"), 1);
    assert_eq!(get(&mut a, "fence_keys"), 1);
    // The whole INFO has the section too.
    assert!(a.call(&["INFO"]).contains("# Locks\r\n"));
}

// ---------------------------------------------------------------- Names and values

#[test]
fn arguments_out_of_range_are_named_and_the_connection_stays_open() {
    let server = TestServer::start(&[]);
    let mut a = server.raw();
    let lease = "-ERR invalid lease-ms: must be an integer from 1 to 86400000\r\n";
    let wait = "-ERR invalid WAIT: must be an integer from 0 to 3600000\r\n";
    let token = "-ERR invalid token: must be an integer from 1 to 9223372036854775807\r\n";
    let notint = "-ERR value is not an integer or out of range\r\n";
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "v", "0"]), lease);
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "v", "86400001"]), lease);
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "v", "-1"]), lease);
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "v", "1.5"]), notint);
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "v", "abc"]), notint);
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "v", "100", "WAIT", "3600001"]),
        wait
    );
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "v", "100", "WAIT", "-1"]), wait);
    assert_eq!(a.call(&["FLOCK.RENEW", "v", "0", "100"]), token);
    assert_eq!(a.call(&["FLOCK.RENEW", "v", "1", "0"]), lease);
    assert_eq!(a.call(&["FLOCK.RELEASE", "v", "0"]), token);
    assert_eq!(a.call(&["FLOCK.RELEASE", "v", "x"]), notint);
    assert_eq!(a.call(&["FLOCK.ADVANCE", "v", "0"]), token);
    assert_eq!(a.call(&["FENCE.SET", "v", "0", "x"]), token);
    assert_eq!(a.call(&["FENCE.SET", "v", "-5", "x"]), token);
    // Beyond i64 is still an integer, out of the token's range: named.
    assert_eq!(
        a.call(&["FENCE.SET", "v", "9223372036854775808", "x"]),
        token
    );
    let name_err = "-ERR invalid lock name: must be 1 to 1024 bytes\r\n";
    assert_eq!(a.call(&["FLOCK.ACQUIRE", "", "100"]), name_err);
    let long = "n".repeat(1025);
    assert_eq!(a.call(&["FLOCK.ACQUIRE", &long, "100"]), name_err);
    let max = "n".repeat(1024);
    assert_eq!(a.call(&["FLOCK.ACQUIRE", &max, "100"]), int(1));
    assert!(
        a.call(&["FLOCK.ACQUIRE", "v", "100", "OWNER", ""])
            .starts_with("-ERR invalid OWNER id")
    );
    assert!(
        a.call(&["FENCE.SET", "", "1", "x"])
            .starts_with("-ERR invalid fence key")
    );
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "v"]),
        "-ERR wrong number of arguments for 'flock.acquire' command\r\n"
    );
    assert!(
        a.call(&["FLOCK.ACQUIRE", "v", "100", "NOPE", "1"])
            .starts_with("-ERR unknown option 'NOPE'")
    );
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "v", "100", "WAIT", "1", "WAIT", "2"]),
        "-ERR syntax error\r\n"
    );
    // Limits are the contract's defaults: the extremes are accepted.
    assert_eq!(
        a.call(&["FLOCK.ACQUIRE", "v", "86400000", "WAIT", "3600000"]),
        int(1)
    );
    assert_eq!(
        a.call(&["FLOCK.ADVANCE", "w", "9223372036854775807"]),
        int(i64::MAX)
    );
    assert_eq!(a.call(&["PING"]), "+PONG\r\n");
    // None of the refused commands touched a lock.
    assert_eq!(a.call(&["FLOCK.TOKEN", "v"]), int(1));
}

// ---------------------------------------------------------------- hand-over delay (measured)

fn median_and_max(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], *samples.last().unwrap())
}

/// Measures how long a queued waiter waits for its grant after RELEASE is sent, and after the
/// lease deadline for expiry. Printed, never asserted beyond a liveness bound.
#[test]
fn handover_delay_is_measured() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    let mut waiter = server.raw();
    let mut admin = server.raw();
    const SAMPLES: usize = 20;

    let mut release = Vec::new();
    for _ in 0..SAMPLES {
        let token = holder.int(&["FLOCK.ACQUIRE", "h", "60000"]);
        queue(&mut waiter, &mut admin, "h", &["60000", "WAIT", "30000"], 1);
        let sent = Instant::now();
        holder.cmd(&[b"FLOCK.RELEASE", b"h", token.to_string().as_bytes()]);
        let granted = waiter.read_reply();
        release.push(sent.elapsed());
        assert_eq!(holder.read_reply(), int(1));
        let got = parse_int_reply(&granted).expect("token");
        assert_eq!(got, token + 1);
        assert_eq!(
            waiter.call(&["FLOCK.RELEASE", "h", &got.to_string()]),
            int(1)
        );
    }

    // Expiry: the lease starts when the server applies the grant, between sending the acquire and
    // receiving its reply. Delay from the reply + lease is a lower-ish estimate, from the send +
    // lease an upper one (it includes the acquire's round trip).
    let lease_ms = 200u64;
    let lease = Duration::from_millis(lease_ms);
    let (mut expiry_hi, mut expiry_lo) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let sent = Instant::now();
        let token = holder.int(&["FLOCK.ACQUIRE", "h", &lease_ms.to_string()]);
        let replied = Instant::now();
        waiter.cmd(&[b"FLOCK.ACQUIRE", b"h", b"60000", b"WAIT", b"30000"]);
        let granted = waiter.read_reply();
        let now = Instant::now();
        expiry_hi.push(now.saturating_duration_since(sent + lease));
        expiry_lo.push(now.saturating_duration_since(replied + lease));
        assert!(
            now >= sent + lease - Duration::from_millis(20),
            "granted before the lease ended"
        );
        let got = parse_int_reply(&granted).expect("token");
        assert_eq!(got, token + 1);
        assert_eq!(
            waiter.call(&["FLOCK.RELEASE", "h", &got.to_string()]),
            int(1)
        );
    }
    let (rm, rx) = median_and_max(release);
    let (eh_m, eh_x) = median_and_max(expiry_hi);
    let (el_m, el_x) = median_and_max(expiry_lo);
    eprintln!(
        "handover delay, release -> waiter reply ({SAMPLES} samples): median {rm:?}, max {rx:?}"
    );
    eprintln!(
        "handover delay, lease deadline -> waiter reply ({SAMPLES} samples): \
         median {el_m:?}..{eh_m:?}, max {el_x:?}..{eh_x:?} (deadline taken from acquire reply..send)"
    );
    assert!(rx < LIVENESS && eh_x < LIVENESS);
}
