//! AOF compatibility: `tests/fixtures/v1.aof`, written by the release before the lock table
//! became a state machine (first file format, one applied change per record; see
//! `tests/fixtures/make_v1_aof.sh`), loads into today's binary with the same answers that
//! release gave for it; the start upgrades it to the current format; the upgraded file, a later
//! BGREWRITEAOF and new changes after them all keep those answers across restarts.

use std::time::Duration;

use crate::common::{Raw, Server, TempDir, wait_until};

const FIXTURE: &[u8] = include_bytes!("../fixtures/v1.aof");

/// Flattens a RESP2 reply of scalars into its values (integers as digits, null as "nil").
fn values(reply: &str) -> Vec<String> {
    let mut lines = reply.split("\r\n");
    let head = lines.next().unwrap_or_default();
    let mut out = Vec::new();
    let single = |line: &str, lines: &mut std::str::Split<'_, &str>| {
        if line == "$-1" {
            "nil".to_string()
        } else if let Some(n) = line.strip_prefix(':') {
            n.to_string()
        } else if line.starts_with('$') {
            lines.next().unwrap_or_default().to_string()
        } else {
            line.trim_start_matches('+').to_string()
        }
    };
    if head.starts_with('*') {
        while let Some(line) = lines.next() {
            if line.is_empty() {
                continue;
            }
            let value = single(line, &mut lines);
            out.push(value);
        }
    } else {
        out.push(single(head, &mut lines));
    }
    out
}

/// FLOCK.STATUS without the ttl (it moves), as "field=value" pairs.
fn status(raw: &mut Raw, name: &str) -> String {
    let v = values(&raw.call(&["FLOCK.STATUS", name]));
    v.chunks(2)
        .filter(|kv| kv[0] != "ttl")
        .map(|kv| format!("{}={}", kv[0], kv[1]))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the release that wrote the fixture answered after loading it (recorded with its
/// redis-cli session, ttl left out).
fn expected_status(name: &str) -> String {
    let held = |token: u64, owner: &str, holds: u32| {
        format!(
            "name={name} locked=1 token={token} owner={owner} holds={holds} waiters=0 last-token=112 holdings=1 limit=1 delay=0"
        )
    };
    match name {
        "held" => held(112, "w1", 2),
        "released" => held(112, "nil", 1),
        "partly" => held(112, "me", 1),
        "advanced" => {
            format!(
                "name={name} locked=0 token=nil owner=nil holds=0 waiters=0 last-token=500 holdings=0 limit=0 delay=0"
            )
        }
        _ => format!(
            "name={name} locked=0 token=nil owner=nil holds=0 waiters=0 last-token=112 holdings=0 limit=0 delay=0"
        ),
    }
}

const NAMES: [&str; 9] = [
    "held", "released", "partly", "advanced", "forced", "expired", "idle:1", "idle:12", "never",
];

fn check_fixture_answers(server: &Server) {
    let mut raw = server.raw();
    for name in NAMES {
        assert_eq!(status(&mut raw, name), expected_status(name), "{name}");
    }
    // The held locks kept their hour-long leases (re-armed from the start).
    let ttl: i64 = values(&raw.call(&["FLOCK.TTL", "held"]))[0]
        .parse()
        .unwrap();
    assert!(ttl > 3_500_000, "ttl {ttl}");
    assert_eq!(raw.call(&["FENCE.GET", "fence:a"]), "$6\r\nsecond\r\n");
    assert_eq!(raw.call(&["FENCE.TOKEN", "fence:a"]), ":7\r\n");
    assert_eq!(
        raw.call(&["FENCE.GET", "fence:b"]),
        "$15\r\nbinary\\x00value\r\n"
    );
    assert_eq!(raw.call(&["FENCE.TOKEN", "fence:b"]), ":1\r\n");
    let info = raw.call(&["INFO", "locks"]);
    assert!(info.contains("token_floor:112\r\n"), "{info}");
    assert!(info.contains("locks_held:3\r\n"), "{info}");
    assert!(info.contains("fence_keys:2\r\n"), "{info}");
}

fn header(dir: &TempDir) -> Vec<u8> {
    std::fs::read(dir.path().join("flockd.aof")).unwrap()[..8].to_vec()
}

#[test]
fn a_first_format_file_loads_with_the_same_answers_and_is_upgraded() {
    let dir = TempDir::new("compat");
    std::fs::write(dir.path().join("flockd.aof"), FIXTURE).unwrap();
    assert_eq!(&header(&dir), b"FLOCKAO1");

    let mut server = Server::start_in(dir.path(), &[]);
    assert!(
        server
            .log()
            .contains("upgraded a first-format file to format 2"),
        "{}",
        server.log()
    );
    assert_eq!(&header(&dir), b"FLOCKAO2", "the start rewrote the file");
    check_fixture_answers(&server);

    // The holders of the old file keep their tokens: RENEW works, a stale token does not.
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["FLOCK.RENEW", "held", "111", "3600000"]),
        ":1\r\n"
    );
    assert!(
        raw.call(&["FLOCK.RENEW", "held", "110", "1000"])
            .starts_with("-NOTOWNER")
    );
    drop(raw);

    // Restart on the upgraded file (no second upgrade), same answers.
    server.kill9();
    let mut server = Server::start_in(dir.path(), &[]);
    assert!(!server.log().contains("upgraded"), "{}", server.log());
    check_fixture_answers(&server);

    // A rewrite of the upgraded file, then new changes on top: still the same, plus the new.
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["BGREWRITEAOF"]),
        "+Background append only file rewriting started\r\n"
    );
    wait_until(Duration::from_secs(20), "the rewrite finished", || {
        raw.call(&["INFO", "persistence"])
            .contains("aof_rewrite_in_progress:0")
    });
    // A new name gets a token above the floor; an old one above its own counter.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "new", "60000"]), ":113\r\n");
    assert_eq!(
        raw.call(&["FLOCK.ACQUIRE", "advanced", "60000"]),
        ":501\r\n"
    );
    drop(raw);
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(20)).is_some());
    let server = Server::start_in(dir.path(), &[]);
    let mut raw = server.raw();
    for name in ["held", "released", "partly", "forced", "expired", "never"] {
        assert_eq!(status(&mut raw, name), expected_status(name), "{name}");
    }
    assert!(status(&mut raw, "new").contains("token=113"));
    assert!(status(&mut raw, "advanced").contains("token=501"));
    assert_eq!(raw.call(&["FENCE.TOKEN", "fence:a"]), ":7\r\n");
}
