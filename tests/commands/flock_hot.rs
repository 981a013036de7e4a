//! FLOCK.HOT against the real binary: contended names come out most waits first with their
//! counts, in RESP2 and RESP3, and a flood of cold names beyond `hot-locks-capacity` does not
//! push out a hot one.

use crate::common::TestServer;

fn entry(name: &str, waits: u64, wait_ms_at_least: u64, expiries: u64, busy: u64) -> impl Fn(&str) {
    let name = name.to_string();
    move |reply: &str| {
        let lines: Vec<&str> = reply.split("\r\n").collect();
        assert_eq!(lines[0], "*10", "{reply:?}");
        assert_eq!(
            &lines[1..5],
            &["$4", "name", &format!("${}", name.len()), &name[..]]
        );
        assert_eq!(&lines[5..7], &["$5", "waits"]);
        assert_eq!(lines[7], format!(":{waits}"));
        assert_eq!(&lines[8..10], &["$7", "wait-ms"]);
        let wait_ms: u64 = lines[10][1..].parse().unwrap();
        assert!(
            wait_ms >= wait_ms_at_least,
            "wait-ms {wait_ms} in {reply:?}"
        );
        assert_eq!(&lines[11..13], &["$8", "expiries"]);
        assert_eq!(lines[13], format!(":{expiries}"));
        assert_eq!(&lines[14..16], &["$4", "busy"]);
        assert_eq!(lines[16], format!(":{busy}"));
    }
}

/// Splits a top-level array reply of flat arrays into its elements' texts.
fn elements(reply: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lines: Vec<&str> = reply.split("\r\n").collect();
    let n: usize = lines[0][1..].parse().unwrap();
    let mut i = 1;
    for _ in 0..n {
        // Each element: *10 then 10 items of bulk name (2 lines) + bulk/int value.
        let start = i;
        i += 1;
        for field in 0..5 {
            i += 2; // the field name
            if field == 0 {
                i += 2; // the lock name is a bulk string
            } else {
                i += 1;
            }
        }
        out.push(lines[start..i].join("\r\n") + "\r\n");
    }
    out
}

#[test]
fn the_most_contended_names_come_first() {
    let server = TestServer::start(&[]);
    let mut holder = server.raw();
    let mut other = server.raw();
    assert_eq!(holder.call(&["FLOCK.HOT"]), "*0\r\n");
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "hot", "60000"]), ":1\r\n");
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "warm", "60000"]), ":1\r\n");
    for _ in 0..3 {
        assert_eq!(other.call(&["FLOCK.ACQUIRE", "hot", "1000"]), "$-1\r\n");
    }
    for _ in 0..2 {
        assert_eq!(
            other.call(&["FLOCK.ACQUIRE", "hot", "1000", "WAIT", "30"]),
            "$-1\r\n"
        );
    }
    assert_eq!(other.call(&["FLOCK.ACQUIRE", "warm", "1000"]), "$-1\r\n");
    // Uncontended names are not listed.
    assert_eq!(other.call(&["FLOCK.ACQUIRE", "cold", "1000"]), ":1\r\n");

    let reply = other.call(&["FLOCK.HOT"]);
    let top = elements(&reply);
    assert_eq!(top.len(), 2, "{reply:?}");
    entry("hot", 2, 60, 0, 3)(&top[0]);
    entry("warm", 0, 0, 0, 1)(&top[1]);
    let one = other.call(&["FLOCK.HOT", "count", "1"]);
    assert_eq!(elements(&one).len(), 1);
    entry("hot", 2, 60, 0, 3)(&elements(&one)[0]);

    // RESP3: maps.
    let mut resp3 = server.raw().resp3();
    let reply = resp3.call(&["FLOCK.HOT", "COUNT", "1"]);
    assert!(
        reply.starts_with("*1\r\n%5\r\n$4\r\nname\r\n$3\r\nhot\r\n"),
        "{reply:?}"
    );

    for (args, error) in [
        (&["FLOCK.HOT", "COUNT"][..], "-ERR syntax error\r\n"),
        (
            &["FLOCK.HOT", "COUNT", "0"][..],
            "-ERR invalid COUNT: must be an integer from 1 to 10000\r\n",
        ),
        (
            &["FLOCK.HOT", "COUNT", "1", "COUNT", "2"][..],
            "-ERR syntax error\r\n",
        ),
        (&["FLOCK.HOT", "LIMIT", "2"][..], "-ERR syntax error\r\n"),
    ] {
        assert_eq!(other.call(args), error, "{args:?}");
    }
    other.call(&["PING"]);
}

#[test]
fn a_flood_of_cold_names_does_not_push_out_a_hot_one() {
    let server = TestServer::start(&["--hot-locks-capacity", "16"]);
    let mut holder = server.raw();
    let mut other = server.raw();
    assert_eq!(holder.call(&["FLOCK.ACQUIRE", "hot", "60000"]), ":1\r\n");
    for _ in 0..50 {
        assert_eq!(other.call(&["FLOCK.ACQUIRE", "hot", "1000"]), "$-1\r\n");
    }
    // 500 other names, each held and then asked for once.
    for i in 0..500 {
        let name = format!("cold:{i}");
        assert_eq!(holder.call(&["FLOCK.ACQUIRE", &name, "60000"]), ":1\r\n");
        assert_eq!(other.call(&["FLOCK.ACQUIRE", &name, "1000"]), "$-1\r\n");
    }
    let reply = other.call(&["FLOCK.HOT", "COUNT", "1"]);
    entry("hot", 0, 0, 0, 50)(&elements(&reply)[0]);
    let all = other.call(&["FLOCK.HOT", "COUNT", "10000"]);
    assert!(elements(&all).len() <= 16 * 6, "{}", elements(&all).len());
}
