//! Pub/sub against the real binary: Redis's exact frames in RESP2 and RESP3 (taken from Redis
//! 7.0.15 by hand: the same commands sent to redis-server over raw bytes), lock events on
//! `__flock__:<name>` and `__flockevent__:<event>`, `notify-flock-events`, channel permissions,
//! a subscriber that never reads disconnected at its limit while publishers go on, and no
//! events for what a restart replays. Also the redis crate's own pub/sub client.

use crate::common;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::common::{Raw, TestServer};

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

/// `message` frame (`*3`, or `>3` in RESP3).
fn message(kind: char, channel: &str, payload: &str) -> String {
    format!(
        "{kind}3\r\n{}{}{}",
        bulk("message"),
        bulk(channel),
        bulk(payload)
    )
}

fn pmessage(kind: char, pattern: &str, channel: &str, payload: &str) -> String {
    format!(
        "{kind}4\r\n{}{}{}{}",
        bulk("pmessage"),
        bulk(pattern),
        bulk(channel),
        bulk(payload)
    )
}

fn frame(kind: char, what: &str, channel: Option<&str>, count: i64) -> String {
    let channel = match (channel, kind) {
        (Some(c), _) => bulk(c),
        (None, '*') => "$-1\r\n".to_string(),
        (None, _) => "_\r\n".to_string(),
    };
    format!("{kind}3\r\n{}{channel}:{count}\r\n", bulk(what))
}

fn next(raw: &mut Raw, what: &str) -> String {
    raw.poll_reply(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no {what} within 5 s"))
}

#[test]
fn resp2_frames_and_subscribed_mode() {
    let s = TestServer::start(&[]);
    let mut raw = s.raw();
    raw.send(b"SUBSCRIBE a b\r\n");
    assert_eq!(raw.read_reply(), frame('*', "subscribe", Some("a"), 1));
    assert_eq!(raw.read_reply(), frame('*', "subscribe", Some("b"), 2));
    // Subscribing again counts nothing twice.
    raw.send(b"SUBSCRIBE a\r\n");
    assert_eq!(raw.read_reply(), frame('*', "subscribe", Some("a"), 2));
    assert_eq!(
        raw.call(&["FLOCK.STATUS", "x"]),
        "-ERR Can't execute 'flock.status': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n"
    );
    assert_eq!(raw.call(&["PING"]), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    assert_eq!(
        raw.call(&["PING", "hi"]),
        "*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"
    );
    raw.send(b"PSUBSCRIBE p*\r\n");
    assert_eq!(raw.read_reply(), frame('*', "psubscribe", Some("p*"), 3));
    raw.send(b"UNSUBSCRIBE\r\n");
    assert_eq!(raw.read_reply(), frame('*', "unsubscribe", Some("a"), 2));
    assert_eq!(raw.read_reply(), frame('*', "unsubscribe", Some("b"), 1));
    raw.send(b"UNSUBSCRIBE\r\n");
    assert_eq!(raw.read_reply(), frame('*', "unsubscribe", None, 1));
    raw.send(b"PUNSUBSCRIBE nothere\r\n");
    assert_eq!(
        raw.read_reply(),
        frame('*', "punsubscribe", Some("nothere"), 1)
    );
    raw.send(b"PUNSUBSCRIBE\r\n");
    assert_eq!(raw.read_reply(), frame('*', "punsubscribe", Some("p*"), 0));
    raw.send(b"PUNSUBSCRIBE\r\n");
    assert_eq!(raw.read_reply(), frame('*', "punsubscribe", None, 0));
    assert_eq!(
        raw.call(&["SUBSCRIBE"]),
        "-ERR wrong number of arguments for 'subscribe' command\r\n"
    );
    // Out of subscribed mode: commands work again.
    assert_eq!(raw.call(&["PING"]), "+PONG\r\n");
    assert_eq!(raw.call(&["FLOCK.TOKEN", "x"]), ":0\r\n");
    // RESET leaves subscribed mode without frames.
    raw.send(b"SUBSCRIBE a\r\n");
    assert_eq!(raw.read_reply(), frame('*', "subscribe", Some("a"), 1));
    assert_eq!(raw.call(&["RESET"]), "+RESET\r\n");
    assert_eq!(
        raw.call(&["PUBSUB", "NUMSUB", "a"]),
        format!("*2\r\n{}:0\r\n", bulk("a"))
    );
    // A transaction cannot subscribe.
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        raw.call(&["SUBSCRIBE", "a"]),
        "-ERR Command not allowed inside a transaction\r\n"
    );
    assert_eq!(raw.call(&["DISCARD"]), "+OK\r\n");
}

#[test]
fn resp3_pushes_and_commands_between_them() {
    let s = TestServer::start(&[]);
    let mut raw = s.raw().resp3();
    raw.send(b"SUBSCRIBE __flock__:r3\r\n");
    assert_eq!(
        raw.read_reply(),
        frame('>', "subscribe", Some("__flock__:r3"), 1)
    );
    // Any command still runs, and PING is a plain PONG.
    assert_eq!(raw.call(&["PING"]), "+PONG\r\n");
    assert_eq!(raw.call(&["FLOCK.TOKEN", "r3"]), ":0\r\n");
    // The event of the connection's own change comes with the reply, in either order.
    raw.send(b"FLOCK.ACQUIRE r3 10000\r\n");
    let mut two = [raw.read_reply(), raw.read_reply()];
    two.sort();
    assert_eq!(
        two,
        [
            ":1\r\n".to_string(),
            message('>', "__flock__:r3", "granted 1")
        ]
    );
    // Events of another connection's change arrive between replies.
    let mut other = s.raw();
    assert_eq!(other.call(&["FLOCK.RELEASE", "r3", "1"]), ":1\r\n");
    assert_eq!(
        next(&mut raw, "released"),
        message('>', "__flock__:r3", "released 1")
    );
    assert_eq!(raw.call(&["FLOCK.TOKEN", "r3"]), ":1\r\n");
    raw.send(b"UNSUBSCRIBE __flock__:r3\r\n");
    assert_eq!(
        raw.read_reply(),
        frame('>', "unsubscribe", Some("__flock__:r3"), 0)
    );
    raw.send(b"UNSUBSCRIBE\r\n");
    assert_eq!(raw.read_reply(), frame('>', "unsubscribe", None, 0));
    raw.send(b"PSUBSCRIBE p* p*\r\n");
    assert_eq!(raw.read_reply(), frame('>', "psubscribe", Some("p*"), 1));
    assert_eq!(raw.read_reply(), frame('>', "psubscribe", Some("p*"), 1));
    assert_eq!(raw.call(&["RESET"]), "+RESET\r\n");
    assert_eq!(raw.call(&["PUBSUB", "NUMPAT"]), ":0\r\n");
}

#[test]
fn every_change_is_published_on_both_channels() {
    let s = TestServer::start(&[]);
    let mut sub = s.raw();
    sub.send(b"SUBSCRIBE __flock__:ev\r\n");
    assert_eq!(
        sub.read_reply(),
        frame('*', "subscribe", Some("__flock__:ev"), 1)
    );
    sub.send(b"PSUBSCRIBE __flockevent__:*\r\n");
    assert_eq!(
        sub.read_reply(),
        frame('*', "psubscribe", Some("__flockevent__:*"), 2)
    );
    let mut c = s.raw();
    let expect = |sub: &mut Raw, event: &str, token: i64| {
        assert_eq!(
            next(sub, event),
            message('*', "__flock__:ev", &format!("{event} {token}"))
        );
        assert_eq!(
            next(sub, event),
            pmessage(
                '*',
                "__flockevent__:*",
                &format!("__flockevent__:{event}"),
                &format!("{token} ev")
            )
        );
    };
    let t = c.int(&["FLOCK.ACQUIRE", "ev", "10000"]);
    expect(&mut sub, "granted", t);
    assert_eq!(
        c.call(&["FLOCK.RENEW", "ev", &t.to_string(), "20000"]),
        ":1\r\n"
    );
    expect(&mut sub, "renewed", t);
    assert_eq!(c.call(&["FLOCK.RELEASE", "ev", &t.to_string()]), ":1\r\n");
    expect(&mut sub, "released", t);
    // A refused change publishes nothing.
    let refused = c.call(&["FLOCK.RELEASE", "ev", &t.to_string()]);
    assert!(refused.starts_with("-NOTOWNER"), "{refused}");
    let t = c.int(&["FLOCK.ACQUIRE", "ev", "100"]);
    expect(&mut sub, "granted", t);
    expect(&mut sub, "expired", t);
    let t = c.int(&["FLOCK.ACQUIRE", "ev", "10000"]);
    expect(&mut sub, "granted", t);
    assert_eq!(c.call(&["FLOCK.FORCERELEASE", "ev"]), ":1\r\n");
    expect(&mut sub, "forcereleased", t);
    // A queued waiter granted on release: released, then granted with the new token.
    let t = c.int(&["FLOCK.ACQUIRE", "ev", "10000"]);
    expect(&mut sub, "granted", t);
    let mut waiter = s.raw();
    waiter.send(b"FLOCK.ACQUIRE ev 10000 WAIT 5000\r\n");
    common::wait_until(Duration::from_secs(5), "the waiter is queued", || {
        c.call(&["FLOCK.STATUS", "ev"]).contains("waiters\r\n:1")
    });
    assert_eq!(c.call(&["FLOCK.RELEASE", "ev", &t.to_string()]), ":1\r\n");
    expect(&mut sub, "released", t);
    expect(&mut sub, "granted", t + 1);
    assert_eq!(waiter.read_reply(), format!(":{}\r\n", t + 1));
    assert_eq!(
        sub.poll_reply(Duration::from_millis(200)),
        None,
        "nothing more"
    );

    assert_eq!(
        c.call(&["PUBSUB", "NUMSUB", "__flock__:ev", "other"]),
        format!(
            "*4\r\n{}:1\r\n{}:0\r\n",
            bulk("__flock__:ev"),
            bulk("other")
        )
    );
    assert_eq!(c.call(&["PUBSUB", "NUMPAT"]), ":1\r\n");
    assert_eq!(
        c.call(&["PUBSUB", "CHANNELS", "__flock__:*"]),
        format!("*1\r\n{}", bulk("__flock__:ev"))
    );
}

#[test]
fn notify_flock_events_off_publishes_nothing() {
    let s = TestServer::start(&["--notify-flock-events", "off"]);
    let mut sub = s.raw();
    sub.send(b"PSUBSCRIBE __flock*\r\n");
    assert_eq!(
        sub.read_reply(),
        frame('*', "psubscribe", Some("__flock*"), 1)
    );
    let mut c = s.raw();
    assert_eq!(
        c.call(&["CONFIG", "GET", "notify-flock-events"]),
        format!("*2\r\n{}{}", bulk("notify-flock-events"), bulk("off"))
    );
    c.int(&["FLOCK.ACQUIRE", "quiet", "10000"]);
    assert_eq!(sub.poll_reply(Duration::from_millis(300)), None);
    assert_eq!(
        c.call(&["CONFIG", "SET", "notify-flock-events", "on"]),
        "+OK\r\n"
    );
    assert_eq!(c.call(&["FLOCK.RELEASE", "quiet", "1"]), ":1\r\n");
    assert_eq!(
        next(&mut sub, "released"),
        pmessage('*', "__flock*", "__flock__:quiet", "released 1")
    );
    assert_eq!(
        c.call(&["CONFIG", "SET", "notify-flock-events", "maybe"]),
        "-ERR CONFIG SET failed (possibly related to argument 'notify-flock-events') - bad value 'maybe' (allowed: on, off)\r\n"
    );
}

#[test]
fn channel_permissions_follow_the_acl() {
    let s = TestServer::start(&[]);
    let mut admin = s.raw();
    assert_eq!(
        admin.call(&[
            "ACL",
            "SETUSER",
            "orders",
            "on",
            ">pw",
            "~orders:*",
            "&orders:*",
            "+@all"
        ]),
        "+OK\r\n"
    );
    let mut raw = s.raw();
    assert_eq!(raw.call(&["AUTH", "orders", "pw"]), "+OK\r\n");
    assert_eq!(
        raw.call(&["SUBSCRIBE", "orders:1", "__flock__:orders:1"]),
        "-NOPERM No permissions to access a channel\r\n"
    );
    // Nothing was subscribed: the connection is not in subscribed mode.
    assert_eq!(raw.call(&["FLOCK.TOKEN", "orders:1"]), ":0\r\n");
    raw.send(b"SUBSCRIBE orders:1\r\n");
    assert_eq!(
        raw.read_reply(),
        frame('*', "subscribe", Some("orders:1"), 1)
    );
    // A pattern must be one the user's patterns name literally, as in Redis.
    assert_eq!(
        raw.call(&["PSUBSCRIBE", "orders:1*"]),
        "-NOPERM No permissions to access a channel\r\n"
    );
    raw.send(b"PSUBSCRIBE orders:*\r\n");
    assert_eq!(
        raw.read_reply(),
        frame('*', "psubscribe", Some("orders:*"), 2)
    );
    let log = admin.call(&["ACL", "LOG", "1"]);
    assert!(
        log.contains("channel") && log.contains("orders:1*"),
        "{log}"
    );
}

/// Sets the socket's receive buffer (after connect it also stops the kernel growing it), so a
/// subscriber that never reads holds little in the kernel and the server's queue fills.
fn shrink_receive_buffer(raw: &Raw, bytes: i32) {
    let fd = raw.stream.as_raw_fd();
    // SAFETY: a valid socket and a pointer to an int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt SO_RCVBUF");
}

#[test]
fn a_subscriber_that_never_reads_is_disconnected_and_publishers_go_on() {
    let s = TestServer::start(&["--client-output-buffer-limit-pubsub", "262144"]);
    let mut slow = s.raw();
    shrink_receive_buffer(&slow, 4096);
    slow.send(b"PSUBSCRIBE __flock*\r\n");
    assert_eq!(
        slow.read_reply(),
        frame('*', "psubscribe", Some("__flock*"), 1)
    );
    // A reader that keeps up, for comparison: it must not be disconnected.
    let mut fast = s.raw();
    fast.send(b"PSUBSCRIBE __flockevent__:granted\r\n");
    assert_eq!(
        fast.read_reply(),
        frame('*', "psubscribe", Some("__flockevent__:granted"), 1)
    );
    let fast_reader = std::thread::spawn(move || {
        let mut seen = 0u64;
        while let Some(reply) = fast.poll_reply(Duration::from_secs(2)) {
            assert!(reply.contains("pmessage"), "{reply}");
            seen += 1;
        }
        (fast, seen)
    });

    // Long names make big messages: each cycle queues about 4 KiB for the slow subscriber.
    let name = "n".repeat(1000);
    let addr = s.addr;
    let publishers: Vec<_> = (0..4)
        .map(|i| {
            let name = format!("{name}{i}");
            std::thread::spawn(move || {
                let mut c = Raw::connect(addr);
                let started = Instant::now();
                let mut cycles = 0;
                while cycles < 2000 && started.elapsed() < Duration::from_secs(60) {
                    let t = c.int(&["FLOCK.ACQUIRE", &name, "10000"]);
                    assert_eq!(c.call(&["FLOCK.RELEASE", &name, &t.to_string()]), ":1\r\n");
                    cycles += 1;
                }
                (cycles, started.elapsed())
            })
        })
        .collect();
    let mut total = 0;
    for p in publishers {
        let (cycles, took) = p.join().expect("publisher");
        assert_eq!(
            cycles, 2000,
            "a publisher was held up: {cycles} cycles in {took:?}"
        );
        total += cycles;
    }
    // The slow one was cut off: its pattern is gone, the fast one's is not, and the log says
    // why.
    let mut c = s.raw();
    common::wait_until(
        Duration::from_secs(10),
        "the slow subscriber is gone",
        || c.call(&["PUBSUB", "NUMPAT"]) == ":1\r\n",
    );
    assert!(
        s.log().contains("client-output-buffer-limit-pubsub"),
        "{}",
        s.log()
    );
    // And its connection is gone from the server (what the kernel still holds for it drains
    // at the pace of its tiny receive window).
    let slow_addr = format!("addr={}", slow.stream.local_addr().unwrap());
    common::wait_until(
        Duration::from_secs(10),
        "the slow connection is closed",
        || !c.call(&["CLIENT", "LIST"]).contains(&slow_addr),
    );
    let (_, seen) = fast_reader.join().expect("fast reader");
    assert_eq!(
        seen, total as u64,
        "the reader that kept up got every grant"
    );
    s.assert_alive();
}

#[test]
fn a_restart_announces_only_new_changes() {
    let mut s = TestServer::start(&[]);
    let mut c = s.raw();
    c.int(&["FLOCK.ACQUIRE", "kept", "60000"]);
    c.int(&["FLOCK.ACQUIRE", "short", "300"]);
    drop(c);
    s.signal("TERM");
    assert!(s.wait_exit(Duration::from_secs(20)).is_some());
    s.restart_after_kill9(&[]);
    let mut sub = s.raw();
    sub.send(b"PSUBSCRIBE __flockevent__:*\r\n");
    assert_eq!(
        sub.read_reply(),
        frame('*', "psubscribe", Some("__flockevent__:*"), 1)
    );
    // The replayed holding of `short` runs out now: that is a new change, and announced.
    assert_eq!(
        next(&mut sub, "the expiry"),
        pmessage('*', "__flockevent__:*", "__flockevent__:expired", "1 short")
    );
    let mut c = s.raw();
    c.int(&["FLOCK.ACQUIRE", "fresh", "60000"]);
    assert_eq!(
        next(&mut sub, "the grant"),
        pmessage('*', "__flockevent__:*", "__flockevent__:granted", "1 fresh")
    );
    assert_eq!(
        sub.poll_reply(Duration::from_millis(300)),
        None,
        "nothing replayed"
    );
}

#[tokio::test]
async fn the_redis_crate_receives_events() {
    use futures_util::StreamExt;
    let s = TestServer::start(&[]);
    let client = s.client();
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub connection");
    pubsub
        .psubscribe("__flockevent__:*")
        .await
        .expect("psubscribe");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let token: u64 = redis::cmd("FLOCK.ACQUIRE")
        .arg("crate")
        .arg(10000)
        .query_async(&mut conn)
        .await
        .expect("acquire");
    let mut messages = pubsub.on_message();
    let msg = tokio::time::timeout(Duration::from_secs(5), messages.next())
        .await
        .expect("a message within 5 s")
        .expect("the stream goes on");
    assert_eq!(msg.get_channel_name(), "__flockevent__:granted");
    assert_eq!(msg.get_pattern::<String>().unwrap(), "__flockevent__:*");
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        format!("{token} crate")
    );
}

/// SSUBSCRIBE (Redis 7's sharded pub/sub) on a single node: its own frames and count, a lock's
/// events as `smessage`, a channel subscribed both ways gets both frames, SUNSUBSCRIBE, PUBSUB's
/// SHARD subcommands, RESET. (On a cluster node, -MOVED and -CROSSSLOT: tests/cluster/slots.rs.)
#[test]
fn ssubscribe_gets_a_locks_events_as_smessage() {
    let s = TestServer::start(&[]);
    let mut sub = s.raw();
    sub.send(b"SSUBSCRIBE __flock__:a {x}one {y}two\r\n");
    assert_eq!(
        sub.read_reply(),
        frame('*', "ssubscribe", Some("__flock__:a"), 1)
    );
    assert_eq!(
        sub.read_reply(),
        frame('*', "ssubscribe", Some("{x}one"), 2)
    );
    // Any slots on a single node: no cluster, no CROSSSLOT.
    assert_eq!(
        sub.read_reply(),
        frame('*', "ssubscribe", Some("{y}two"), 3)
    );
    // Channel and shard channel counts are kept apart, as Redis keeps them.
    sub.send(b"SUBSCRIBE __flock__:a\r\n");
    assert_eq!(
        sub.read_reply(),
        frame('*', "subscribe", Some("__flock__:a"), 1)
    );
    assert!(
        sub.call(&["FLOCK.TOKEN", "a"])
            .starts_with("-ERR Can't execute")
    );

    let mut c = s.raw();
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "a", "30000"]), ":1\r\n");
    let mut got = vec![next(&mut sub, "a message"), next(&mut sub, "a message")];
    got.sort();
    let smessage = format!(
        "*3\r\n{}{}{}",
        bulk("smessage"),
        bulk("__flock__:a"),
        bulk("granted 1")
    );
    assert_eq!(got, [message('*', "__flock__:a", "granted 1"), smessage]);
    assert_eq!(
        c.call(&["PUBSUB", "SHARDCHANNELS", "__flock__*"]),
        format!("*1\r\n{}", bulk("__flock__:a"))
    );
    assert_eq!(
        c.call(&["PUBSUB", "SHARDNUMSUB", "{x}one", "none"]),
        format!("*4\r\n{}:1\r\n{}:0\r\n", bulk("{x}one"), bulk("none"))
    );
    assert_eq!(
        c.call(&["PUBSUB", "NUMSUB", "{x}one"]),
        format!("*2\r\n{}:0\r\n", bulk("{x}one"))
    );

    sub.send(b"SUNSUBSCRIBE {x}one\r\n");
    assert_eq!(
        sub.read_reply(),
        frame('*', "sunsubscribe", Some("{x}one"), 2)
    );
    sub.send(b"UNSUBSCRIBE\r\n");
    assert_eq!(
        sub.read_reply(),
        frame('*', "unsubscribe", Some("__flock__:a"), 0)
    );
    // Still subscribed to shard channels: still in subscribed mode.
    assert!(
        sub.call(&["FLOCK.TOKEN", "a"])
            .starts_with("-ERR Can't execute")
    );
    assert_eq!(c.call(&["FLOCK.RELEASE", "a", "1"]), ":1\r\n");
    let smessage = format!(
        "*3\r\n{}{}{}",
        bulk("smessage"),
        bulk("__flock__:a"),
        bulk("released 1")
    );
    assert_eq!(next(&mut sub, "the release"), smessage);
    sub.send(b"SUNSUBSCRIBE\r\n");
    let mut left = vec![sub.read_reply(), sub.read_reply()];
    left.sort();
    assert_eq!(
        left,
        [
            frame('*', "sunsubscribe", Some("__flock__:a"), 1),
            frame('*', "sunsubscribe", Some("{y}two"), 0),
        ]
    );
    sub.send(b"SUNSUBSCRIBE\r\n");
    assert_eq!(sub.read_reply(), frame('*', "sunsubscribe", None, 0));
    assert_eq!(sub.call(&["FLOCK.TOKEN", "a"]), ":1\r\n");
    // RESET leaves shard channels too.
    sub.send(b"SSUBSCRIBE z\r\n");
    assert_eq!(sub.read_reply(), frame('*', "ssubscribe", Some("z"), 1));
    assert_eq!(sub.call(&["RESET"]), "+RESET\r\n");
    assert_eq!(
        c.call(&["PUBSUB", "SHARDNUMSUB", "z"]),
        format!("*2\r\n{}:0\r\n", bulk("z"))
    );
    assert_eq!(
        c.call(&["SSUBSCRIBE"]),
        "-ERR wrong number of arguments for 'ssubscribe' command\r\n"
    );
    assert_eq!(c.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        c.call(&["SSUBSCRIBE", "z"]),
        "-ERR Command not allowed inside a transaction\r\n"
    );
    assert_eq!(c.call(&["DISCARD"]), "+OK\r\n");
}
