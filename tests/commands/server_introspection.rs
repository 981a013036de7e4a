//! Server introspection as Redis tools expect it, against the real binary, in RESP2 and RESP3:
//! INFO memory (and `redis-cli --stat` reading it), CONFIG RESETSTAT, SLOWLOG, LATENCY, DBSIZE,
//! the CLIENT subcommands clients send on connect (redis-py's MAINT_NOTIFICATIONS), the new
//! config keys, and `flockd ping` showing a whole unexpected reply. Bad arguments get clear
//! errors and leave the connection usable.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Raw, TestServer, encode_request, info_int, run_flockd};

/// `$<len>\r\n<text>\r\n`
fn bulk(text: &str) -> String {
    format!("${}\r\n{}\r\n", text.len(), text)
}

fn expect(raw: &mut Raw, args: &[&str], reply: &str) {
    assert_eq!(raw.call(args), reply, "{args:?}");
}

/// The connection still answers after an error.
fn still_usable(raw: &mut Raw) {
    expect(raw, &["PING"], "+PONG\r\n");
}

/// Runs `check` on a RESP2 connection and on a RESP3 one (after `HELLO 3`).
fn both_protocols(server: &TestServer, mut check: impl FnMut(&mut Raw, u8)) {
    check(&mut server.raw(), 2);
    check(&mut server.raw().resp3(), 3);
}

/// The text of a RESP2 bulk or RESP3 verbatim reply.
fn text_payload(reply: &str) -> String {
    let (header, rest) = reply.split_once("\r\n").expect("header line");
    let len: usize = header[1..].parse().expect("length");
    let body = &rest[..len];
    match header.as_bytes()[0] {
        b'$' => body.to_string(),
        b'=' => body.strip_prefix("txt:").expect("txt:").to_string(),
        _ => panic!("not a bulk or verbatim reply: {reply:?}"),
    }
}

/// A parsed reply, for checking shapes whose numbers vary (times, durations).
#[derive(Debug, Clone, PartialEq)]
enum V {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(String),
    Null,
    /// Arrays, sets and (flattened key, value, ...) maps alike; `map` tells which it was.
    Agg {
        map: bool,
        items: Vec<V>,
    },
}

impl V {
    fn items(&self) -> &[V] {
        match self {
            V::Agg { items, .. } => items,
            other => panic!("not an aggregate: {other:?}"),
        }
    }
    fn int(&self) -> i64 {
        match self {
            V::Int(n) => *n,
            other => panic!("not an integer: {other:?}"),
        }
    }
    fn text(&self) -> &str {
        match self {
            V::Bulk(s) | V::Simple(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }
    /// Key-value pairs of a map (RESP3) or of a flat RESP2 array.
    fn pairs(&self) -> Vec<(&V, &V)> {
        let items = self.items();
        assert!(items.len().is_multiple_of(2), "odd map {self:?}");
        items.chunks(2).map(|c| (&c[0], &c[1])).collect()
    }
}

fn parse(reply: &str) -> V {
    fn line<'a>(s: &'a str, at: &mut usize) -> &'a str {
        let end = s[*at..].find("\r\n").expect("CRLF") + *at;
        let text = &s[*at..end];
        *at = end + 2;
        text
    }
    fn one(s: &str, at: &mut usize) -> V {
        let kind = s.as_bytes()[*at];
        *at += 1;
        let head = line(s, at);
        match kind {
            b'+' => V::Simple(head.into()),
            b'-' => V::Error(head.into()),
            b':' => V::Int(head.parse().expect("integer")),
            b'_' => V::Null,
            b'$' | b'=' => {
                let n: i64 = head.parse().expect("length");
                if n < 0 {
                    return V::Null;
                }
                let body = &s[*at..*at + n as usize];
                *at += n as usize + 2;
                V::Bulk(body.strip_prefix("txt:").unwrap_or(body).into())
            }
            b'*' | b'~' | b'%' => {
                let n: i64 = head.parse().expect("count");
                if n < 0 {
                    return V::Null;
                }
                let count = if kind == b'%' { 2 * n } else { n };
                V::Agg {
                    map: kind == b'%',
                    items: (0..count).map(|_| one(s, at)).collect(),
                }
            }
            other => panic!("unexpected reply type {:?} in {s:?}", other as char),
        }
    }
    let mut at = 0;
    let value = one(reply, &mut at);
    assert_eq!(at, reply.len(), "one reply: {reply:?}");
    value
}

fn info_field(info: &str, field: &str) -> String {
    let prefix = format!("{field}:");
    info.split("\r\n")
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("INFO lacks {field}: {info}"))
        .to_string()
}

/// Sends many FLOCK.ACQUIREs in one write and reads their replies: the first ones wait for the
/// whole pipeline's admission and log write, so they take a while (for the latency monitor).
fn pipeline_acquires(raw: &mut Raw, prefix: &str, n: usize) {
    let mut bytes = Vec::new();
    for i in 0..n {
        bytes.extend(encode_request(&[
            b"FLOCK.ACQUIRE",
            format!("{prefix}{i}").as_bytes(),
            b"60000",
        ]));
    }
    raw.send(&bytes);
    for _ in 0..n {
        assert_eq!(raw.read_reply(), ":1\r\n");
    }
}

// ------------------------------------------------------------------------------- INFO memory

#[test]
fn info_memory_reports_real_numbers_in_redis_section_order() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, proto| {
        let reply = raw.call(&["INFO", "memory"]);
        assert!(
            reply.starts_with(if proto == 3 { "=" } else { "$" }),
            "{reply:?}"
        );
        let info = text_payload(&reply);
        assert!(info.starts_with("# Memory\r\nused_memory:"), "{info}");
        let num = |f: &str| -> u64 {
            info_field(&info, f)
                .parse()
                .unwrap_or_else(|_| panic!("{f} is not a number: {info}"))
        };
        let (used, rss, peak) = (
            num("used_memory"),
            num("used_memory_rss"),
            num("used_memory_peak"),
        );
        assert!(used > 0 && rss > 0, "{info}");
        assert!(peak >= used, "{info}");
        // The RSS is the process's own: /proc agrees within a few pages of growth.
        let proc_rss = server.rss_kib() * 1024;
        assert!(
            rss / 2 < proc_rss && proc_rss < rss * 2,
            "{rss} vs {proc_rss}"
        );
        for (field, value) in [
            ("maxmemory", "0"),
            ("maxmemory_human", "0B"),
            ("maxmemory_policy", "noeviction"),
            ("mem_allocator", "libc"),
        ] {
            assert_eq!(info_field(&info, field), value, "{info}");
        }
        let human = info_field(&info, "used_memory_human");
        assert!(
            human.ends_with(['B', 'K', 'M', 'G']) && !human.starts_with('-'),
            "{human}"
        );
        assert!(info_field(&info, "used_memory_rss_human").ends_with(['K', 'M', 'G']));
        assert!(info_field(&info, "used_memory_peak_perc").ends_with('%'));
        assert!(num("total_system_memory") > rss);
        assert_eq!(num("flock_table_bytes"), 0, "an empty table");
    });

    // The lock table's estimate: 100 bytes a name, 200 more a held lock, 80 a fence key.
    let mut raw = server.raw();
    for name in ["m1", "m2", "m3"] {
        expect(&mut raw, &["FLOCK.ACQUIRE", name, "60000"], ":1\r\n");
    }
    expect(&mut raw, &["FLOCK.RELEASE", "m3", "1"], ":1\r\n");
    expect(&mut raw, &["FENCE.SET", "f1", "1", "v"], ":1\r\n");
    let info = text_payload(&raw.call(&["INFO", "memory"]));
    assert_eq!(
        info_field(&info, "flock_table_bytes"),
        (3 * 100 + 2 * 200 + 80).to_string(),
        "{info}"
    );

    // Redis's section order, in INFO, INFO all and INFO everything; the keyspace line counts
    // lock names (held ones have a lease: `expires`).
    for args in [
        &["INFO"][..],
        &["INFO", "all"],
        &["INFO", "everything"],
        &["INFO", "default"],
    ] {
        let info = text_payload(&raw.call(args));
        let at = |header: &str| {
            info.find(header)
                .unwrap_or_else(|| panic!("{args:?} lacks {header}: {info}"))
        };
        let order = [
            at("# Server\r\n"),
            at("# Clients\r\n"),
            at("# Memory\r\n"),
            at("# Persistence\r\n"),
            at("# Stats\r\n"),
            at("# Locks\r\n"),
            at("# Keyspace\r\n"),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{args:?}: {info}");
        assert!(
            info.contains("# Keyspace\r\ndb0:keys=3,expires=2,avg_ttl=0\r\n"),
            "{info}"
        );
        assert_eq!(
            info.contains("# Commandstats\r\n"),
            args.len() == 2 && args[1] != "default",
            "{args:?}"
        );
    }
}

#[test]
fn redis_cli_stat_prints_real_numbers() {
    if Command::new("redis-cli").arg("--version").output().is_err() {
        common::skipping("skipping redis_cli_stat_prints_real_numbers: no redis-cli");
        return;
    }
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    for name in ["s1", "s2"] {
        expect(&mut raw, &["FLOCK.ACQUIRE", name, "60000"], ":1\r\n");
    }
    // redis-cli buffers a pipe: stdbuf makes it write each line as it prints it.
    let mut child = Command::new("stdbuf")
        .args(["-oL", "redis-cli", "-h", "127.0.0.1"])
        .args(["-p", &server.addr.port().to_string(), "--stat", "-i", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-cli");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut rows = Vec::new();
    while rows.len() < 2 {
        let line = lines.next().expect("a line").expect("text");
        if line.starts_with('-') || line.starts_with("keys") {
            continue;
        }
        rows.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    for row in rows {
        // keys mem clients blocked requests (+n) connections
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[0], "2", "keys are the lock names: {row:?}");
        let mem = cols[1];
        assert!(
            !mem.starts_with('-') && mem.ends_with(['B', 'K', 'M', 'G']),
            "mem: {row:?}"
        );
        let number: f64 = mem[..mem.len() - 1].parse().expect("mem number");
        assert!(number > 0.0, "{row:?}");
        assert!(cols[2].parse::<u64>().unwrap() >= 2, "clients: {row:?}");
        assert_eq!(cols[3], "0", "blocked: {row:?}");
    }
}

// ------------------------------------------------------------------------------- RESETSTAT

#[test]
fn config_resetstat_resets_what_redis_resets() {
    let server = TestServer::start(&[
        "--slowlog-log-slower-than",
        "0",
        "--latency-monitor-threshold",
        "1",
    ]);
    let mut raw = server.raw();
    expect(&mut raw, &["FLOCK.ACQUIRE", "r", "60000"], ":1\r\n");
    expect(&mut raw, &["FLOCK.ACQUIRE", "r", "60000"], "$-1\r\n");
    expect(&mut raw, &["FLOCK.RELEASE", "r", "1"], ":1\r\n");
    expect(&mut raw, &["FLOCK.ACQUIRE", "held", "60000"], ":1\r\n");
    expect(&mut raw, &["FENCE.SET", "k", "1", "v"], ":1\r\n");
    assert!(
        raw.call(&["FLOCK.RENEW", "r", "9", "1000"])
            .starts_with('-')
    );
    let _ = raw.call(&["NOSUCH"]);
    // Something for the latency monitor, which RESETSTAT keeps.
    for round in 0.. {
        pipeline_acquires(&mut raw, &format!("lat{round}-"), 3000);
        if raw.call(&["LATENCY", "LATEST"]) != "*0\r\n" {
            break;
        }
        assert!(round < 10, "no command took 1 ms");
    }
    let latest = raw.call(&["LATENCY", "LATEST"]);
    let slow_before = raw.int(&["SLOWLOG", "LEN"]);
    assert!(slow_before > 5);
    assert!(info_int(&mut raw, "stats", "total_connections_received") >= 1);
    assert!(info_int(&mut raw, "locks", "grants") >= 2);

    expect(&mut raw, &["CONFIG", "RESETSTAT"], "+OK\r\n");

    let stats = text_payload(&raw.call(&["INFO", "commandstats"]));
    assert!(
        stats.starts_with("# Commandstats\r\ncmdstat_config:calls=1,usec="),
        "only the RESETSTAT itself: {stats}"
    );
    assert_eq!(stats.matches("cmdstat_").count(), 1, "{stats}");
    let info = text_payload(&raw.call(&["INFO", "stats"]));
    for (field, value) in [
        ("total_connections_received", "0"),
        // INFO commandstats and this INFO.
        ("total_commands_processed", "2"),
        ("rejected_connections", "0"),
        ("total_error_replies", "0"),
        ("unknown_commands", "0"),
    ] {
        assert_eq!(info_field(&info, field), value, "{field}: {info}");
    }
    let locks = text_payload(&raw.call(&["INFO", "locks"]));
    for (field, value) in [
        ("grants", "0"),
        ("releases", "0"),
        ("tokens_issued", "0"),
        ("notowner_rejections", "0"),
        ("fence_writes_accepted", "0"),
        // Gauges are state, not statistics.
        ("fence_keys", "1"),
    ] {
        assert_eq!(info_field(&locks, field), value, "{field}: {locks}");
    }
    assert!(info_field(&locks, "locks_held").parse::<u64>().unwrap() >= 2);
    // LATENCY HISTOGRAM starts over too: only what ran since.
    let histogram = parse(&raw.call(&["LATENCY", "HISTOGRAM"]));
    let names: Vec<&str> = histogram.pairs().iter().map(|(k, _)| k.text()).collect();
    assert_eq!(names, ["info", "config"], "{histogram:?}");
    // Redis keeps the slow log and the latency monitor.
    assert!(raw.int(&["SLOWLOG", "LEN"]) >= slow_before);
    // (At least as many events: on a loaded machine a command since may have been slow too.)
    assert!(parse(&raw.call(&["LATENCY", "LATEST"])).items().len() >= parse(&latest).items().len());
    // And the connection counter counts again.
    drop(server.raw());
    wait_for(|| info_int(&mut raw, "stats", "total_connections_received") == 1);
}

fn wait_for(mut cond: impl FnMut() -> bool) {
    common::wait_until(Duration::from_secs(5), "the condition holds", &mut cond);
}

// ------------------------------------------------------------------------------- SLOWLOG

#[test]
fn slowlog_records_in_redis_shape_and_hides_secrets() {
    let server = TestServer::start(&["--slowlog-log-slower-than", "0"]);
    let mut raw = server.raw();
    expect(&mut raw, &["CLIENT", "SETNAME", "slow-tester"], "+OK\r\n");
    let long = "x".repeat(200);
    expect(&mut raw, &["ECHO", &long], &bulk(&long));
    let mut many = vec!["CLIENT", "LIST", "ID"];
    let ids: Vec<String> = (1..=40).map(|i| i.to_string()).collect();
    many.extend(ids.iter().map(String::as_str));
    let _ = raw.call(&many);
    let _ = raw.call(&["AUTH", "alice", "secret-pass"]);
    let _ = raw.call(&["HELLO", "2", "AUTH", "default", "other-secret"]);
    expect(&mut raw, &["FLOCK.ACQUIRE", "slow-lock", "60000"], ":1\r\n");

    let addr = raw.stream.local_addr().unwrap().to_string();
    both_protocols(&server, |other, _| {
        // Newest first: FLOCK.ACQUIRE (a state command: logged from its result), HELLO, AUTH, ...
        // (the entries of this connection's own commands left out).
        let reply = other.call(&["SLOWLOG", "GET", "-1"]);
        assert!(!reply.contains("secret"), "{reply}");
        let all = parse(&reply);
        let entries: Vec<&V> = all
            .items()
            .iter()
            .filter(|e| e.items()[4].text() == addr)
            .collect();
        assert_eq!(entries.len(), 6);
        let args = |e: &V| -> Vec<String> {
            e.items()[3]
                .items()
                .iter()
                .map(|a| a.text().to_string())
                .collect()
        };
        for (i, e) in entries.iter().enumerate() {
            let fields = e.items();
            assert_eq!(fields.len(), 6, "{e:?}");
            if i > 0 {
                assert_eq!(
                    fields[0].int(),
                    entries[i - 1].items()[0].int() - 1,
                    "ids count down"
                );
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            assert!((now - fields[1].int()).abs() < 60, "unix time {e:?}");
            assert!(fields[2].int() >= 0);
            assert_eq!(fields[4].text(), addr);
            assert_eq!(fields[5].text(), "slow-tester");
        }
        let args = |i: usize| args(entries[i]);
        assert_eq!(args(0), ["FLOCK.ACQUIRE", "slow-lock", "60000"]);
        assert_eq!(args(1), ["HELLO", "2", "AUTH", "(redacted)", "(redacted)"]);
        assert_eq!(args(2), ["AUTH", "(redacted)", "(redacted)"]);
        let listed = args(3);
        assert_eq!(listed.len(), 32);
        assert_eq!(&listed[..4], ["CLIENT", "LIST", "ID", "1"]);
        assert_eq!(listed[31], "... (12 more arguments)");
        assert_eq!(
            args(4),
            [
                "ECHO".to_string(),
                format!("{}... (72 more bytes)", "x".repeat(128))
            ]
        );
        assert_eq!(args(5), ["CLIENT", "SETNAME", "slow-tester"]);
    });

    // Exact bytes of one entry, its id, time and duration aside.
    expect(&mut raw, &["CLIENT", "SETNAME", "exact"], "+OK\r\n");
    let reply = raw.call(&["SLOWLOG", "GET", "1"]);
    let entry = parse(&reply);
    let e = entry.items()[0].items();
    assert_eq!(
        reply,
        format!(
            "*1\r\n*6\r\n:{}\r\n:{}\r\n:{}\r\n*3\r\n{}{}{}{}{}",
            e[0].int(),
            e[1].int(),
            e[2].int(),
            bulk("CLIENT"),
            bulk("SETNAME"),
            bulk("exact"),
            bulk(&addr),
            bulk("exact")
        )
    );

    let len = raw.int(&["SLOWLOG", "LEN"]);
    assert!(len >= 10, "{len}");
    assert_eq!(
        parse(&raw.call(&["SLOWLOG", "GET", "-1"])).items().len() as i64,
        len + 1,
        "-1 is every entry (the LEN itself was logged)"
    );
    expect(&mut raw, &["SLOWLOG", "GET", "0"], "*0\r\n");
    let default = parse(&raw.call(&["SLOWLOG", "GET"]));
    assert_eq!(default.items().len(), 10, "the default count");
    expect(&mut raw, &["SLOWLOG", "RESET"], "+OK\r\n");
    // Only the RESET itself, logged once it ran.
    expect(&mut raw, &["SLOWLOG", "LEN"], ":1\r\n");

    // Bad arguments: Redis's errors, and the connection goes on.
    both_protocols(&server, |raw, _| {
        for (args, error) in [
            (
                &["SLOWLOG", "GET", "-5"][..],
                "-ERR count should be greater than or equal to -1\r\n",
            ),
            (
                &["SLOWLOG", "GET", "x"],
                "-ERR count should be greater than or equal to -1\r\n",
            ),
            (
                &["SLOWLOG", "GET", "1", "2"],
                "-ERR unknown subcommand or wrong number of arguments for 'GET'. Try SLOWLOG HELP.\r\n",
            ),
            (
                &["SLOWLOG", "LEN", "x"],
                "-ERR wrong number of arguments for 'slowlog|len' command\r\n",
            ),
            (
                &["SLOWLOG", "RESET", "x"],
                "-ERR wrong number of arguments for 'slowlog|reset' command\r\n",
            ),
            (
                &["slowlog", "nope"],
                "-ERR unknown subcommand 'nope'. Try SLOWLOG HELP.\r\n",
            ),
            (
                &["SLOWLOG"],
                "-ERR wrong number of arguments for 'slowlog' command\r\n",
            ),
        ] {
            expect(raw, args, error);
            still_usable(raw);
        }
        let help = raw.call(&["SLOWLOG", "HELP"]);
        assert!(
            help.starts_with(
                "*12\r\n+SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n+GET [<count>]\r\n"
            ),
            "{help:?}"
        );
        assert!(
            help.ends_with("+HELP\r\n+    Prints this help.\r\n"),
            "{help:?}"
        );
    });
}

#[test]
fn slowlog_threshold_and_max_len_are_config_keys() {
    // -1 turns it off.
    let off = TestServer::start(&["--slowlog-log-slower-than", "-1"]);
    let mut raw = off.raw();
    for _ in 0..5 {
        still_usable(&mut raw);
    }
    expect(&mut raw, &["FLOCK.ACQUIRE", "x", "1000"], ":1\r\n");
    expect(&mut raw, &["SLOWLOG", "LEN"], ":0\r\n");
    expect(&mut raw, &["SLOWLOG", "GET"], "*0\r\n");
    expect(
        &mut raw,
        &["CONFIG", "GET", "slowlog-log-slower-than"],
        &format!("*2\r\n{}{}", bulk("slowlog-log-slower-than"), bulk("-1")),
    );

    // The environment sets them too; the log keeps the newest max-len entries.
    let dir = common::TempDir::new("slowlog-env");
    let server = common::Server::try_start_in_with_env(
        dir.path(),
        &[],
        &[
            ("FLOCKD_SLOWLOG_LOG_SLOWER_THAN", "0"),
            ("FLOCKD_SLOWLOG_MAX_LEN", "3"),
        ],
    )
    .expect("start");
    let mut raw = server.raw();
    for i in 0..10 {
        expect(&mut raw, &["ECHO", &i.to_string()], &bulk(&i.to_string()));
    }
    expect(&mut raw, &["SLOWLOG", "LEN"], ":3\r\n");
    let entries = parse(&raw.call(&["SLOWLOG", "GET", "-1"]));
    let shown: Vec<Vec<&str>> = entries
        .items()
        .iter()
        .map(|e| e.items()[3].items().iter().map(V::text).collect())
        .collect();
    assert_eq!(
        shown,
        [vec!["SLOWLOG", "LEN"], vec!["ECHO", "9"], vec!["ECHO", "8"]]
    );
    assert_eq!(
        entries.items()[0].items()[0].int(),
        10,
        "ids go on past the dropped"
    );
    expect(
        &mut raw,
        &["CONFIG", "GET", "slowlog-max-len"],
        &format!("*2\r\n{}{}", bulk("slowlog-max-len"), bulk("3")),
    );
    expect(
        &mut raw,
        &["CONFIG", "GET", "latency-monitor-threshold"],
        &format!("*2\r\n{}{}", bulk("latency-monitor-threshold"), bulk("0")),
    );

    // Bad values stop the start with the key and what is allowed.
    let dir = common::TempDir::new("slowlog-bad");
    let dir = dir.path().display().to_string();
    for (flag, value) in [
        ("--slowlog-log-slower-than", "-2"),
        ("--slowlog-max-len", "2000000"),
        ("--latency-monitor-threshold", "x"),
    ] {
        let args = ["--port", "0", "--dir", &dir, flag, value];
        let out = run_flockd(&args, &[], Duration::from_secs(10));
        assert!(
            out.status.is_some_and(|s| !s.success()),
            "{flag} {value}: {out:?}"
        );
        let key = &flag[2..];
        assert!(
            out.stderr.contains(key) && out.stderr.contains(value),
            "{flag} {value}: {}",
            out.stderr
        );
    }
}

// ------------------------------------------------------------------------------- LATENCY

#[test]
fn latency_commands_answer_in_redis_shape() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, proto| {
        // The monitor is off by default (threshold 0), as in Redis.
        expect(raw, &["LATENCY", "LATEST"], "*0\r\n");
        expect(raw, &["LATENCY", "HISTORY", "command"], "*0\r\n");
        // An event only Redis has: empty, as Redis answers an event without samples.
        expect(raw, &["LATENCY", "HISTORY", "aof-fsync-always"], "*0\r\n");
        expect(raw, &["LATENCY", "RESET"], ":0\r\n");
        expect(raw, &["LATENCY", "RESET", "command", "nosuch"], ":0\r\n");
        let doctor = text_payload(&raw.call(&["LATENCY", "DOCTOR"]));
        assert!(
            doctor.starts_with("I'm sorry, Dave, I can't do that. Latency monitoring is disabled"),
            "{doctor}"
        );
        let help = raw.call(&["LATENCY", "HELP"]);
        assert!(
            help.starts_with("*15\r\n+LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n+DOCTOR\r\n"),
            "{help:?}"
        );
        // Bad arguments.
        for (args, error) in [
            (
                &["LATENCY", "HISTORY", "nosuch"][..],
                "-ERR unknown latency event 'nosuch': flockd records 'command' and 'fast-command' (see LATENCY LATEST)\r\n",
            ),
            (
                &["LATENCY", "HISTORY"],
                "-ERR wrong number of arguments for 'latency|history' command\r\n",
            ),
            (
                &["LATENCY", "LATEST", "x"],
                "-ERR wrong number of arguments for 'latency|latest' command\r\n",
            ),
            (
                &["LATENCY", "nope"],
                "-ERR unknown subcommand 'nope'. Try LATENCY HELP.\r\n",
            ),
            (
                &["LATENCY"],
                "-ERR wrong number of arguments for 'latency' command\r\n",
            ),
        ] {
            expect(raw, args, error);
            still_usable(raw);
        }
        // Histograms: commands unknown or never called are left out.
        let empty = if proto == 3 { "%0\r\n" } else { "*0\r\n" };
        expect(raw, &["LATENCY", "HISTOGRAM", "nosuch", "time"], empty);
    });

    // Per-command histograms in Redis 7's shape: calls, and cumulative counts by bucket.
    let mut raw = server.raw();
    for _ in 0..4 {
        assert!(raw.call(&["TIME"]).starts_with("*2\r\n$10\r\n"));
    }
    let reply = raw.call(&["LATENCY", "HISTOGRAM", "time", "TIME", "nosuch"]);
    assert!(
        reply.starts_with(
            "*2\r\n$4\r\ntime\r\n*4\r\n$5\r\ncalls\r\n:4\r\n$14\r\nhistogram_usec\r\n*"
        ),
        "{reply:?}"
    );
    check_histogram(&parse(&reply), "time", 4);
    let mut raw3 = server.raw().resp3();
    let reply = raw3.call(&["LATENCY", "HISTOGRAM", "time"]);
    assert!(
        reply.starts_with(
            "%1\r\n$4\r\ntime\r\n%2\r\n$5\r\ncalls\r\n:4\r\n$14\r\nhistogram_usec\r\n%"
        ),
        "{reply:?}"
    );
    check_histogram(&parse(&reply), "time", 4);
    // All commands with calls, LATENCY's own included.
    let all = parse(&raw3.call(&["LATENCY", "HISTOGRAM"]));
    let names: Vec<&str> = all.pairs().iter().map(|(k, _)| k.text()).collect();
    assert!(
        names.contains(&"time") && names.contains(&"latency") && names.contains(&"hello"),
        "{names:?}"
    );
    assert!(!names.contains(&"flock.acquire"));
}

const REDIS_LEVELS: &[i64] = &[
    1, 2, 4, 8, 16, 33, 66, 132, 264, 528, 1056, 2113, 4227, 8454, 16908, 33816, 67633, 135266,
    270532, 541065, 1082130,
];

fn check_histogram(reply: &V, command: &str, calls: i64) {
    let pairs = reply.pairs();
    let (_, body) = pairs
        .iter()
        .find(|(k, _)| k.text() == command)
        .unwrap_or_else(|| panic!("no {command} in {reply:?}"));
    let fields = body.pairs();
    assert_eq!(fields[0].0.text(), "calls");
    assert_eq!(fields[0].1.int(), calls);
    assert_eq!(fields[1].0.text(), "histogram_usec");
    let buckets = fields[1].1.pairs();
    assert!(!buckets.is_empty());
    let mut last = 0;
    for (level, count) in buckets {
        assert!(REDIS_LEVELS.contains(&level.int()), "{level:?}");
        assert!(count.int() > last, "cumulative, listed where it grows");
        last = count.int();
    }
    assert_eq!(last, calls);
}

#[test]
fn latency_monitor_records_slow_commands_when_on() {
    let server = TestServer::start(&["--latency-monitor-threshold", "1"]);
    let mut raw = server.raw();
    let doctor = text_payload(&raw.call(&["LATENCY", "DOCTOR"]));
    assert!(
        doctor.starts_with("Dave, no latency spike was observed"),
        "{doctor}"
    );
    for round in 0.. {
        pipeline_acquires(&mut raw, &format!("m{round}-"), 3000);
        if raw.call(&["LATENCY", "LATEST"]) != "*0\r\n" {
            break;
        }
        assert!(round < 10, "no command took 1 ms");
    }
    both_protocols(&server, |raw, _| {
        let latest = parse(&raw.call(&["LATENCY", "LATEST"]));
        let events = latest.items();
        assert!(!events.is_empty());
        for e in events {
            let f = e.items();
            assert_eq!(f.len(), 4, "{e:?}");
            assert!(["command", "fast-command"].contains(&f[0].text()), "{e:?}");
            assert!(f[1].int() > 1_600_000_000, "unix time {e:?}");
            assert!(f[2].int() >= 1 && f[3].int() >= f[2].int(), "{e:?}");
            let history = parse(&raw.call(&["LATENCY", "HISTORY", f[0].text()]));
            let samples = history.items();
            assert!(!samples.is_empty());
            for s in samples {
                assert_eq!(s.items().len(), 2, "{s:?}");
                assert!(s.items()[1].int() >= 1);
            }
            assert_eq!(samples.last().unwrap().items()[0].int(), f[1].int());
        }
        let doctor = text_payload(&raw.call(&["LATENCY", "DOCTOR"]));
        assert!(
            doctor.starts_with("Dave, I have observed latency spikes in this flockd instance.")
                && doctor.contains("latency spikes (average "),
            "{doctor}"
        );
    });
    let events = parse(&raw.call(&["LATENCY", "LATEST"])).items().len() as i64;
    expect(&mut raw, &["LATENCY", "RESET"], &format!(":{events}\r\n"));
    expect(&mut raw, &["LATENCY", "LATEST"], "*0\r\n");
}

// ------------------------------------------------------------------------------- DBSIZE

#[test]
fn dbsize_counts_lock_names() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, _| {
        let before = raw.int(&["DBSIZE"]);
        expect(
            raw,
            &["DBSIZE", "extra"],
            "-ERR wrong number of arguments for 'dbsize' command\r\n",
        );
        still_usable(raw);
        let name = format!("db-{before}");
        expect(raw, &["FLOCK.ACQUIRE", &name, "60000"], ":1\r\n");
        expect(raw, &["FLOCK.RELEASE", &name, "1"], ":1\r\n");
        // A free name keeps its counter, so it is still kept; fence keys are not names.
        expect(raw, &["FENCE.SET", "fence-key", "1", "v"], ":1\r\n");
        expect(raw, &["DBSIZE"], &format!(":{}\r\n", before + 1));
        assert_eq!(info_int(raw, "locks", "lock_names"), before + 1);
    });
}

// ------------------------------------------------------------------------------- CLIENT

#[test]
fn client_subcommands_sent_on_connect_answer_as_redis_7_2() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, proto| {
        // What redis-py 8 sends after HELLO 3, answered as Redis 7.2 does (it has no such
        // subcommand), with the name as sent.
        expect(
            raw,
            &[
                "CLIENT",
                "MAINT_NOTIFICATIONS",
                "ON",
                "moving-endpoint-type",
                "internal-fqdn",
            ],
            "-ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.\r\n",
        );
        expect(
            raw,
            &["client", "maint_notifications", "on"],
            "-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.\r\n",
        );
        still_usable(raw);
        expect(
            raw,
            &["CLIENT", "SETINFO", "LIB-NAME", "redis-py"],
            "+OK\r\n",
        );
        expect(raw, &["CLIENT", "SETINFO", "LIB-VER", "8.1.0"], "+OK\r\n");
        // Client tracking is off, and says so as Redis does for a client not tracking.
        expect(raw, &["CLIENT", "GETREDIR"], ":-1\r\n");
        let info = raw.call(&["CLIENT", "TRACKINGINFO"]);
        let expected = if proto == 3 {
            "%3\r\n$5\r\nflags\r\n~1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"
        } else {
            "*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"
        };
        assert_eq!(info, expected);
        expect(
            raw,
            &["CLIENT", "CACHING", "yes"],
            "-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n",
        );
        expect(
            raw,
            &["CLIENT", "TRACKING", "on"],
            "-ERR CLIENT TRACKING is not supported by flockd: it sends no invalidations, so a client-side cache would serve stale lock state\r\n",
        );
        expect(
            raw,
            &["CLIENT", "TRACKINGINFO", "x"],
            "-ERR wrong number of arguments for 'client|trackinginfo' command\r\n",
        );
        still_usable(raw);
    });
    // An unknown subcommand is no call of CLIENT, not even a rejected one (as in Redis), but
    // still an error reply.
    let mut raw = server.raw();
    let stats = text_payload(&raw.call(&["INFO", "commandstats"]));
    let client = stats
        .split("\r\n")
        .find(|l| l.starts_with("cmdstat_client:"))
        .expect("cmdstat_client");
    // Per connection: SETINFO x2, GETREDIR, TRACKINGINFO, CACHING, TRACKING ran (the last two
    // failed, as in Redis); TRACKINGINFO x was rejected for its arity.
    assert!(
        client.starts_with("cmdstat_client:calls=12,")
            && client.ends_with(",rejected_calls=2,failed_calls=4"),
        "{client}"
    );
    let errors = info_int(&mut raw, "stats", "total_error_replies");
    assert_eq!(
        errors,
        2 * (2 + 3),
        "MAINT_NOTIFICATIONS x2, CACHING, TRACKING, arity"
    );
}

#[test]
fn redis_py_connects_without_rejected_calls() {
    let ok = Command::new("python3")
        .args(["-c", "import redis"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        common::skipping("skipping redis_py_connects_without_rejected_calls: no redis-py");
        return;
    }
    let server = TestServer::start(&[]);
    let script = format!(
        "import redis\n\
         r = redis.Redis(host='127.0.0.1', port={}, protocol=3)\n\
         assert r.ping()\n\
         print(r.execute_command('FLOCK.ACQUIRE', 'py', 10000))\n",
        server.addr.port()
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    // HELLO 3, CLIENT MAINT_NOTIFICATIONS (no call), CLIENT SETINFO x2, PING, FLOCK.ACQUIRE.
    let mut raw = server.raw();
    let stats = text_payload(&raw.call(&["INFO", "commandstats"]));
    let client = stats
        .split("\r\n")
        .find(|l| l.starts_with("cmdstat_client:"))
        .expect("cmdstat_client");
    assert!(
        client.starts_with("cmdstat_client:calls=2,")
            && client.ends_with(",rejected_calls=0,failed_calls=0"),
        "{stats}"
    );
    assert!(!stats.contains("rejected_calls=1"), "{stats}");
}

// ------------------------------------------------------------------------------- flockd ping

#[test]
fn flockd_ping_shows_the_whole_unexpected_reply() {
    let server = TestServer::start(&["--requirepass", "right"]);
    let port = server.addr.port().to_string();
    let ping = |extra: &[&str]| {
        let mut args = vec!["--bind", "127.0.0.1", "--port", &port];
        args.extend_from_slice(extra);
        args.push("ping");
        run_flockd(&args, &[], Duration::from_secs(10))
    };
    let out = ping(&["--requirepass", "right"]);
    assert!(out.status.is_some_and(|s| s.success()), "{out:?}");
    assert_eq!(out.stdout, "PONG\n");

    let out = ping(&["--requirepass", "wrong"]);
    assert!(out.status.is_some_and(|s| !s.success()), "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "unexpected reply to AUTH from {}: \"-WRONGPASS invalid username-password pair or user is disabled.\"",
            server.addr
        )),
        "{}",
        out.stderr
    );
    let out = ping(&[]);
    assert!(out.status.is_some_and(|s| !s.success()), "{out:?}");
    assert!(
        out.stderr.contains("unexpected reply to PING from")
            && out.stderr.contains("\"-NOAUTH Authentication required.\""),
        "{}",
        out.stderr
    );
}
