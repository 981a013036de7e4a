//! FLOCK.SCAN against the real binary: exact RESP2 and RESP3 bytes, a whole walk through the
//! redis crate with names coming and going, MATCH and HELD, and bad arguments.

use crate::common;

use std::collections::HashMap;

use crate::common::TestServer;

fn walk(
    conn: &mut redis::Connection,
    options: &[&str],
    between: impl FnMut(&mut redis::Connection),
) -> HashMap<String, usize> {
    common::scan_walk(conn, "FLOCK.SCAN", options, between).0
}

#[test]
fn exact_replies_in_resp2_and_resp3() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    assert_eq!(c.call(&["FLOCK.SCAN", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
    assert_eq!(c.call(&["FLOCK.ACQUIRE", "only", "60000"]), ":1\r\n");
    assert_eq!(
        c.call(&["FLOCK.SCAN", "0"]),
        "*2\r\n$1\r\n0\r\n*1\r\n$4\r\nonly\r\n"
    );
    let mut r3 = server.raw().resp3();
    assert_eq!(
        r3.call(&["FLOCK.SCAN", "0", "HELD", "COUNT", "5"]),
        "*2\r\n$1\r\n0\r\n*1\r\n$4\r\nonly\r\n"
    );
    assert_eq!(
        r3.call(&["FLOCK.SCAN", "0", "MATCH", "x*"]),
        "*2\r\n$1\r\n0\r\n*0\r\n"
    );
}

#[test]
fn a_walk_returns_every_name_that_stays_while_others_come_and_go() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    for i in 0..300 {
        let _: Option<u64> = redis::cmd("FLOCK.ACQUIRE")
            .arg(format!("user:{i}"))
            .arg(600_000)
            .query(&mut conn)
            .unwrap();
        let _: u64 = redis::cmd("FLOCK.ADVANCE")
            .arg(format!("order:{i}"))
            .arg(5)
            .query(&mut conn)
            .unwrap();
    }
    let mut extra = 0;
    let seen = walk(&mut conn, &["COUNT", "7"], |conn| {
        for _ in 0..5 {
            let _: u64 = redis::cmd("FLOCK.ADVANCE")
                .arg(format!("new:{extra}"))
                .arg(5)
                .query(conn)
                .unwrap();
            extra += 1;
        }
    });
    for i in 0..300 {
        assert_eq!(seen.get(&format!("user:{i}")), Some(&1), "user:{i}");
        assert_eq!(seen.get(&format!("order:{i}")), Some(&1), "order:{i}");
    }
    assert!(seen.values().all(|&n| n == 1), "a name came twice");

    let users = walk(&mut conn, &["MATCH", "user:*", "COUNT", "50"], |_| {});
    assert_eq!(users.len(), 300);
    let held = walk(&mut conn, &["HELD", "COUNT", "1000"], |_| {});
    assert_eq!(held.len(), 300);
    assert!(held.keys().all(|n| n.starts_with("user:")));
}

#[test]
fn bad_arguments_get_clear_errors() {
    let server = TestServer::start(&[]);
    let mut c = server.raw();
    let cases: &[(&[&str], &str)] = &[
        (&["FLOCK.SCAN", "abc"], "-ERR invalid cursor\r\n"),
        (&["FLOCK.SCAN", "-1"], "-ERR invalid cursor\r\n"),
        (
            &["FLOCK.SCAN", "18446744073709551616"],
            "-ERR invalid cursor\r\n",
        ),
        (
            &["FLOCK.SCAN", "0", "COUNT", "0"],
            "-ERR invalid COUNT: must be an integer from 1 to 100000\r\n",
        ),
        (&["FLOCK.SCAN", "0", "COUNT"], "-ERR syntax error\r\n"),
        (&["FLOCK.SCAN", "0", "MATCH"], "-ERR syntax error\r\n"),
        (
            &["FLOCK.SCAN", "0", "TYPE", "lock"],
            "-ERR syntax error\r\n",
        ),
        (
            &["FLOCK.SCAN"],
            "-ERR wrong number of arguments for 'flock.scan' command\r\n",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(&c.call(args), want, "{args:?}");
    }
    assert_eq!(
        c.call(&["FLOCK.SCAN", "18446744073709551615"]),
        "*2\r\n$1\r\n0\r\n*0\r\n"
    );
}
