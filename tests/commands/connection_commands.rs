//! Connection and server commands against the real binary, compared byte for byte in RESP2 and
//! (after `HELLO 3`) in RESP3: PING, ECHO, HELLO, AUTH, CLIENT, SELECT, QUIT, RESET, COMMAND,
//! INFO, CONFIG, TIME, BGREWRITEAOF, error texts, inline commands, pipelining, requirepass with
//! its pre-auth limits, and stopping by SHUTDOWN, SIGTERM and SIGINT.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::{Raw, TestServer, encode_request};

/// `$<len>\r\n<text>\r\n`
fn bulk(text: &str) -> String {
    format!("${}\r\n{}\r\n", text.len(), text)
}

/// The HELLO reply for connection `id` speaking `proto`, as a RESP2 flat array or RESP3 map.
fn hello_reply(proto: u8, id: i64) -> String {
    let head = if proto == 3 { "%8\r\n" } else { "*16\r\n" };
    format!(
        "{head}{}{}{}{}{}:{proto}\r\n{}:{id}\r\n{}{}{}{}{}*0\r\n{}{}",
        bulk("server"),
        bulk("flockd"),
        bulk("version"),
        bulk("7.2.0"),
        bulk("proto"),
        bulk("id"),
        bulk("mode"),
        bulk("standalone"),
        bulk("role"),
        bulk("master"),
        bulk("modules"),
        bulk("flockd_version"),
        bulk(env!("CARGO_PKG_VERSION")),
    )
}

fn client_id(raw: &mut Raw) -> i64 {
    let reply = raw.call(&["CLIENT", "ID"]);
    reply
        .strip_prefix(':')
        .and_then(|r| r.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("CLIENT ID replied {reply:?}"))
}

/// The payload of a RESP2 bulk (`$n\r\n...\r\n`) or RESP3 verbatim (`=n\r\ntxt:...\r\n`) reply.
fn text_payload(reply: &str) -> String {
    let (header, rest) = reply.split_once("\r\n").expect("header line");
    let len: usize = header[1..].parse().expect("length");
    let body = &rest[..len];
    assert_eq!(&rest[len..], "\r\n", "reply {reply:?}");
    match header.as_bytes()[0] {
        b'$' => body.to_string(),
        b'=' => body
            .strip_prefix("txt:")
            .expect("verbatim txt: format")
            .to_string(),
        _ => panic!("not a bulk or verbatim reply: {reply:?}"),
    }
}

/// Sends `request`, expects exactly `expected` back, then checks the connection still answers.
fn expect(raw: &mut Raw, request: &[&str], expected: &str) {
    assert_eq!(raw.call(request), expected, "reply to {request:?}");
}

fn assert_pong(raw: &mut Raw) {
    assert_eq!(
        raw.call(&["PING"]),
        "+PONG\r\n",
        "connection must stay usable"
    );
}

/// Runs `f` once in RESP2 and once on a connection switched to RESP3 with `HELLO 3`.
fn both_protocols(server: &TestServer, mut f: impl FnMut(&mut Raw, u8)) {
    for proto in [2u8, 3] {
        let mut raw = server.raw();
        if proto == 3 {
            let id = client_id(&mut raw);
            expect(&mut raw, &["HELLO", "3"], &hello_reply(3, id));
        }
        f(&mut raw, proto);
    }
}

#[test]
fn ping_and_echo_in_both_protocols() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, _| {
        expect(raw, &["PING"], "+PONG\r\n");
        expect(raw, &["PING", "hello world"], "$11\r\nhello world\r\n");
        expect(raw, &["PING", ""], "$0\r\n\r\n");
        expect(raw, &["ECHO", "x"], "$1\r\nx\r\n");
        expect(raw, &["ECHO", ""], "$0\r\n\r\n");
        // Binary-safe.
        raw.cmd(&[b"ECHO", b"a\r\nb\x00c"]);
        assert_eq!(raw.read_reply(), "$6\r\na\r\nb\x00c\r\n");
        expect(
            raw,
            &["PING", "a", "b"],
            "-ERR wrong number of arguments for 'ping' command\r\n",
        );
        assert_pong(raw);
    });
}

#[test]
fn hello_switches_protocols_and_refuses_others() {
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    let id = client_id(&mut raw);
    // HELLO with no version describes the server in the current protocol.
    expect(&mut raw, &["HELLO"], &hello_reply(2, id));
    expect(&mut raw, &["HELLO", "2"], &hello_reply(2, id));
    expect(&mut raw, &["HELLO", "3"], &hello_reply(3, id));
    // Now RESP3: nulls are `_`.
    expect(&mut raw, &["CLIENT", "GETNAME"], "_\r\n");
    expect(
        &mut raw,
        &["HELLO", "4"],
        "-NOPROTO unsupported protocol version\r\n",
    );
    expect(
        &mut raw,
        &["HELLO", "1"],
        "-NOPROTO unsupported protocol version\r\n",
    );
    expect(
        &mut raw,
        &["HELLO", "three"],
        "-ERR Protocol version is not an integer or out of range\r\n",
    );
    // A refused HELLO leaves the protocol as it was (still RESP3).
    expect(&mut raw, &["CLIENT", "GETNAME"], "_\r\n");
    expect(&mut raw, &["HELLO", "2"], &hello_reply(2, id));
    expect(&mut raw, &["CLIENT", "GETNAME"], "$-1\r\n");
    expect(
        &mut raw,
        &["HELLO", "3", "BOGUS"],
        "-ERR Syntax error in HELLO option 'BOGUS'\r\n",
    );
    assert_pong(&mut raw);
}

#[test]
fn hello_setname_names_the_connection() {
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    let id = client_id(&mut raw);
    expect(
        &mut raw,
        &["HELLO", "3", "SETNAME", "worker-1"],
        &hello_reply(3, id),
    );
    expect(&mut raw, &["CLIENT", "GETNAME"], "$8\r\nworker-1\r\n");
    expect(
        &mut raw,
        &["HELLO", "3", "SETNAME", "bad name"],
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
    );
    expect(&mut raw, &["CLIENT", "GETNAME"], "$8\r\nworker-1\r\n");
}

#[test]
fn auth_without_a_password_configured() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, _| {
        expect(
            raw,
            &["AUTH", "secret"],
            "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n",
        );
        // With a username, Redis checks the (passwordless) default user: any password works.
        expect(raw, &["AUTH", "default", "anything"], "+OK\r\n");
        expect(
            raw,
            &["AUTH", "alice", "x"],
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
        );
        assert_pong(raw);
    });
}

#[test]
fn client_subcommands() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, proto| {
        let id = client_id(raw);
        assert!(id > 0);
        let null = if proto == 3 { "_\r\n" } else { "$-1\r\n" };
        expect(raw, &["CLIENT", "GETNAME"], null);
        expect(raw, &["CLIENT", "SETNAME", "conn-a"], "+OK\r\n");
        expect(raw, &["CLIENT", "GETNAME"], "$6\r\nconn-a\r\n");
        expect(
            raw,
            &["CLIENT", "SETNAME", "has space"],
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
        );
        expect(raw, &["CLIENT", "SETINFO", "LIB-NAME", "mylib"], "+OK\r\n");
        expect(raw, &["CLIENT", "SETINFO", "LIB-VER", "1.2.3"], "+OK\r\n");
        expect(
            raw,
            &["CLIENT", "SETINFO", "LIB-COLOR", "red"],
            "-ERR Unrecognized option 'LIB-COLOR'\r\n",
        );
        expect(raw, &["client", "id"], &format!(":{id}\r\n"));

        let info = raw.call(&["CLIENT", "INFO"]);
        let first = if proto == 3 { "=" } else { "$" };
        assert!(info.starts_with(first), "{info:?}");
        let info = text_payload(&info);
        assert!(
            info.ends_with('\n') && info.lines().count() == 1,
            "{info:?}"
        );
        for field in [
            format!("id={id} "),
            " name=conn-a ".to_string(),
            " db=0 ".to_string(),
            " cmd=client ".to_string(),
            format!(" resp={proto} "),
            " lib-name=mylib ".to_string(),
            " lib-ver=1.2.3\n".to_string(),
        ] {
            assert!(
                info.contains(&field),
                "CLIENT INFO lacks {field:?}: {info:?}"
            );
        }
        assert!(
            info.starts_with(&format!("id={id} addr=127.0.0.1:")),
            "{info:?}"
        );
        assert!(
            info.contains(&format!("laddr={} ", server.addr)),
            "{info:?}"
        );

        // CLIENT LIST shows this connection and another one.
        let mut other = server.raw();
        let other_id = client_id(&mut other);
        expect(&mut other, &["CLIENT", "SETNAME", "the-other"], "+OK\r\n");
        let list = text_payload(&raw.call(&["CLIENT", "LIST"]));
        let mine = list
            .lines()
            .find(|l| l.starts_with(&format!("id={id} ")))
            .expect("own line");
        assert!(mine.contains(" name=conn-a "), "{mine}");
        let theirs = list
            .lines()
            .find(|l| l.starts_with(&format!("id={other_id} ")))
            .expect("other line");
        assert!(theirs.contains(" name=the-other "), "{theirs}");
        let only = text_payload(&raw.call(&["CLIENT", "LIST", "ID", &other_id.to_string()]));
        assert_eq!(only.lines().count(), 1, "{only}");
        assert!(only.starts_with(&format!("id={other_id} ")));

        // CLIENT KILL ID closes the other connection, not this one.
        expect(
            raw,
            &["CLIENT", "KILL", "ID", &other_id.to_string()],
            ":1\r\n",
        );
        assert!(
            other.is_closed(Duration::from_secs(10)),
            "killed connection must be closed"
        );
        expect(
            raw,
            &["CLIENT", "KILL", "ID", &other_id.to_string()],
            ":0\r\n",
        );
        expect(
            raw,
            &["CLIENT", "KILL", "ID", "0"],
            "-ERR client-id should be greater than 0\r\n",
        );
        // SKIPME is on by default: killing yourself by id does nothing.
        expect(raw, &["CLIENT", "KILL", "ID", &id.to_string()], ":0\r\n");

        let help = raw.call(&["CLIENT", "HELP"]);
        assert!(
            help.starts_with(
                "*11\r\n+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
            ),
            "{help:?}"
        );
        assert!(help.ends_with("+HELP -- Print this help.\r\n"), "{help:?}");
        expect(
            raw,
            &["CLIENT", "FROB"],
            "-ERR unknown subcommand 'FROB'. Try CLIENT HELP.\r\n",
        );
        expect(
            raw,
            &["CLIENT"],
            "-ERR wrong number of arguments for 'client' command\r\n",
        );
        expect(
            raw,
            &["CLIENT", "ID", "x"],
            "-ERR wrong number of arguments for 'client|id' command\r\n",
        );
        assert_pong(raw);
    });
}

#[test]
fn select_quit_and_reset() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, _| {
        expect(raw, &["SELECT", "0"], "+OK\r\n");
        expect(raw, &["SELECT", "1"], "-ERR DB index is out of range\r\n");
        expect(
            raw,
            &["SELECT", "x"],
            "-ERR value is not an integer or out of range\r\n",
        );
        assert_pong(raw);
        // RESET: +RESET, back to RESP2, name cleared.
        expect(raw, &["CLIENT", "SETNAME", "n"], "+OK\r\n");
        expect(raw, &["RESET"], "+RESET\r\n");
        expect(raw, &["CLIENT", "GETNAME"], "$-1\r\n");
        let id = client_id(raw);
        expect(raw, &["HELLO"], &hello_reply(2, id));
        // QUIT: +OK and the server closes.
        expect(raw, &["QUIT"], "+OK\r\n");
        assert!(raw.is_closed(Duration::from_secs(10)));
    });
    // Pipelined after QUIT: nothing more is answered.
    let mut raw = server.raw();
    raw.send(b"PING\r\nQUIT\r\nPING\r\n");
    assert_eq!(raw.read_to_close(), "+PONG\r\n+OK\r\n");
}

#[test]
fn command_introspection() {
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    let count = raw.call(&["COMMAND", "COUNT"]);
    let count: usize = count
        .trim_start_matches(':')
        .trim_end()
        .parse()
        .expect("COMMAND COUNT integer");
    let list = raw.call(&["COMMAND", "LIST"]);
    assert!(
        list.starts_with(&format!("*{count}\r\n")),
        "COMMAND LIST has COUNT names: {list:?}"
    );
    let expected_names = [
        "ping",
        "echo",
        "hello",
        "auth",
        "client",
        "select",
        "quit",
        "reset",
        "command",
        "info",
        "config",
        "time",
        "bgrewriteaof",
        "shutdown",
        "flock.acquire",
        "flock.acquireall",
        "flock.scan",
        "flock.renew",
        "flock.release",
        "flock.status",
        "flock.holders",
        "flock.token",
        "flock.ttl",
        "flock.forcerelease",
        "flock.hot",
        "flock.advance",
        "fence.set",
        "fence.get",
        "fence.token",
        "monitor",
        "multi",
        "exec",
        "discard",
        "watch",
        "unwatch",
        "slowlog",
        "latency",
        "dbsize",
        "scan",
        "type",
        "acl",
        "subscribe",
        "psubscribe",
        "unsubscribe",
        "punsubscribe",
        "pubsub",
        "role",
        "sentinel",
        "flock.cluster",
        "cluster",
        "readonly",
        "readwrite",
        "asking",
        "ssubscribe",
        "sunsubscribe",
    ];
    for name in expected_names {
        assert!(
            list.contains(&bulk(name)),
            "COMMAND LIST lacks {name}: {list:?}"
        );
    }
    assert_eq!(count, expected_names.len());
    let all = raw.call(&["COMMAND"]);
    assert!(all.starts_with(&format!("*{count}\r\n*10\r\n")), "{all:?}");

    let acquire_info = concat!(
        "*1\r\n*10\r\n$13\r\nflock.acquire\r\n:-3\r\n*3\r\n+write\r\n+blocking\r\n+fast\r\n",
        ":1\r\n:1\r\n:1\r\n*3\r\n+@write\r\n+@fast\r\n+@blocking\r\n*0\r\n",
        "*1\r\n*6\r\n$5\r\nflags\r\n*1\r\n+RW\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n",
        "$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n",
        "$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n*0\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "INFO", "flock.acquire"],
        acquire_info,
    );
    expect(
        &mut raw,
        &["COMMAND", "INFO", "FLOCK.ACQUIRE"],
        acquire_info,
    );
    expect(&mut raw, &["COMMAND", "INFO", "nosuch"], "*1\r\n*-1\r\n");
    // COMMAND DOCS as Redis 7 has it: `arguments` (what redis-cli builds its hints from),
    // derived from each command's syntax string.
    let ping_docs_fields = concat!(
        "$7\r\nsummary\r\n$29\r\nReturns PONG, or the message.\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n",
        "$5\r\ngroup\r\n$10\r\nconnection\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n",
        "$9\r\narguments\r\n",
    );
    let ping_args2 = concat!(
        "*1\r\n*6\r\n$4\r\nname\r\n$7\r\nmessage\r\n$4\r\ntype\r\n$6\r\nstring\r\n",
        "$5\r\nflags\r\n*1\r\n+optional\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "DOCS", "ping"],
        &format!("*2\r\n$4\r\nping\r\n*10\r\n{ping_docs_fields}{ping_args2}"),
    );
    // FLOCK.ACQUIRE name lease-ms [SHARED | LIMIT n] [WAIT ms] [OWNER id] [SESSION]
    // [LOCKDELAY ms]: the lock name is the key (key spec 0), integers, a choice with its
    // alternatives, and options as optional arguments with a token, field order as Redis.
    let acquire_docs_fields = concat!(
        "$7\r\nsummary\r\n$82\r\n",
        "Acquires a lock with a lease and returns its fencing token, or null if it is held.\r\n",
        "$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$5\r\nflock\r\n",
        "$10\r\ncomplexity\r\n$4\r\nO(1)\r\n$9\r\narguments\r\n*7\r\n",
    );
    let acquire_args = [
        "$4\r\nname\r\n$4\r\nname\r\n$4\r\ntype\r\n$3\r\nkey\r\n$14\r\nkey_spec_index\r\n:0\r\n",
        "$4\r\nname\r\n$8\r\nlease-ms\r\n$4\r\ntype\r\n$7\r\ninteger\r\n",
        "$4\r\nname\r\n$2\r\nms\r\n$4\r\ntype\r\n$7\r\ninteger\r\n$5\r\ntoken\r\n$4\r\nWAIT\r\n",
        "$4\r\nname\r\n$2\r\nid\r\n$4\r\ntype\r\n$6\r\nstring\r\n$5\r\ntoken\r\n$5\r\nOWNER\r\n",
        "$4\r\nname\r\n$7\r\nsession\r\n$4\r\ntype\r\n$10\r\npure-token\r\n$5\r\ntoken\r\n$7\r\nSESSION\r\n",
        "$4\r\nname\r\n$2\r\nms\r\n$4\r\ntype\r\n$7\r\ninteger\r\n$5\r\ntoken\r\n$9\r\nLOCKDELAY\r\n",
        "$4\r\nname\r\n$6\r\nshared\r\n$4\r\ntype\r\n$10\r\npure-token\r\n$5\r\ntoken\r\n$6\r\nSHARED\r\n",
        "$4\r\nname\r\n$1\r\nn\r\n$4\r\ntype\r\n$7\r\ninteger\r\n$5\r\ntoken\r\n$5\r\nLIMIT\r\n",
    ];
    let acquire_docs = |proto: u8| {
        let (map, set) = if proto == 3 { ("%", "~") } else { ("*", "*") };
        let pairs = |n: usize| if proto == 3 { n } else { 2 * n };
        let optional = format!("$5\r\nflags\r\n{set}1\r\n+optional\r\n");
        let choice = format!(
            "{map}{}\r\n$4\r\nname\r\n$8\r\nshared_n\r\n$4\r\ntype\r\n$5\r\noneof\r\n\
             {optional}$9\r\narguments\r\n*2\r\n{map}{}\r\n{}{map}{}\r\n{}",
            pairs(4),
            pairs(3),
            acquire_args[6],
            pairs(3),
            acquire_args[7],
        );
        let option = |arg: &str| format!("{map}{}\r\n{arg}{optional}", pairs(4));
        format!(
            "{map}{}\r\n$13\r\nflock.acquire\r\n{map}{}\r\n{acquire_docs_fields}\
             {map}{}\r\n{}{map}{}\r\n{}{choice}{}{}{}{}",
            pairs(1),
            pairs(5),
            pairs(3),
            acquire_args[0],
            pairs(2),
            acquire_args[1],
            option(acquire_args[2]),
            option(acquire_args[3]),
            option(acquire_args[4]),
            option(acquire_args[5]),
        )
    };
    expect(
        &mut raw,
        &["COMMAND", "DOCS", "flock.acquire"],
        &acquire_docs(2),
    );
    // A container's subcommands carry the arguments (redis-cli hints `CONFIG GET `).
    let config_docs = raw.call(&["COMMAND", "DOCS", "config"]);
    assert!(
        config_docs.contains("$10\r\nconfig|get\r\n*10\r\n$7\r\nsummary\r\n")
            && config_docs.contains(concat!(
                "$9\r\narguments\r\n*1\r\n*6\r\n$4\r\nname\r\n$9\r\nparameter\r\n",
                "$4\r\ntype\r\n$6\r\nstring\r\n$5\r\nflags\r\n*1\r\n+multiple\r\n",
            )),
        "{config_docs:?}"
    );

    // COMMAND GETKEYS / GETKEYSANDFLAGS from the command table's key positions, with Redis's
    // error texts.
    expect(
        &mut raw,
        &[
            "COMMAND",
            "GETKEYS",
            "FLOCK.ACQUIRE",
            "order:1",
            "30000",
            "WAIT",
            "10",
        ],
        "*1\r\n$7\r\norder:1\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "GETKEYS", "fence.set", "k", "1", "v"],
        "*1\r\n$1\r\nk\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "GETKEYS", "watch", "a", "b", "c"],
        "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "GETKEYSANDFLAGS", "flock.release", "l", "7"],
        "*1\r\n*2\r\n$1\r\nl\r\n*1\r\n+RW\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "GETKEYS", "ping", "x"],
        "-ERR The command has no key arguments\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "GETKEYS", "nosuch", "x"],
        "-ERR Invalid command specified\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "GETKEYS", "flock.acquire", "x"],
        "-ERR Invalid number of arguments specified for command\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "GETKEYS"],
        "-ERR wrong number of arguments for 'command|getkeys' command\r\n",
    );
    expect(
        &mut raw,
        &["COMMAND", "GETKEYSANDFLAGS"],
        "-ERR wrong number of arguments for 'command|getkeysandflags' command\r\n",
    );
    let help = raw.call(&["COMMAND", "HELP"]);
    assert!(
        help.contains("\r\n+GETKEYS <full-command> -- ")
            && help.contains("\r\n+GETKEYSANDFLAGS <full-command> -- "),
        "{help:?}"
    );
    expect(
        &mut raw,
        &["COMMAND", "FOO"],
        "-ERR unknown subcommand 'FOO'. Try COMMAND HELP.\r\n",
    );

    // RESP3: maps and sets.
    let id = client_id(&mut raw);
    expect(&mut raw, &["HELLO", "3"], &hello_reply(3, id));
    expect(
        &mut raw,
        &["COMMAND", "DOCS", "ping"],
        &format!(
            "%1\r\n$4\r\nping\r\n%5\r\n{ping_docs_fields}\
             *1\r\n%3\r\n$4\r\nname\r\n$7\r\nmessage\r\n$4\r\ntype\r\n$6\r\nstring\r\n\
             $5\r\nflags\r\n~1\r\n+optional\r\n"
        ),
    );
    expect(
        &mut raw,
        &["COMMAND", "DOCS", "flock.acquire"],
        &acquire_docs(3),
    );
    expect(
        &mut raw,
        &["COMMAND", "GETKEYSANDFLAGS", "flock.status", "l"],
        "*1\r\n*2\r\n$1\r\nl\r\n~1\r\n+RO\r\n",
    );
    let info3 = raw.call(&["COMMAND", "INFO", "flock.acquire"]);
    assert!(
        info3.starts_with(
            "*1\r\n*10\r\n$13\r\nflock.acquire\r\n:-3\r\n~3\r\n+write\r\n+blocking\r\n+fast\r\n"
        ),
        "{info3:?}"
    );
    expect(&mut raw, &["COMMAND", "COUNT"], &format!(":{count}\r\n"));
    expect(&mut raw, &["COMMAND", "INFO", "nosuch"], "*1\r\n_\r\n");
    assert_pong(&mut raw);
}

#[test]
fn info_sections_and_commandstats() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, proto| {
        let reply = raw.call(&["INFO"]);
        assert!(
            reply.starts_with(if proto == 3 { "=" } else { "$" }),
            "{reply:?}"
        );
        let info = text_payload(&reply);
        for needle in [
            "# Server\r\n",
            "redis_version:",
            "# Clients\r\n",
            "# Stats\r\n",
            "# Persistence\r\n",
            "# Locks\r\n",
        ] {
            assert!(info.contains(needle), "INFO lacks {needle:?}:\n{info}");
        }
        assert!(
            info.contains(&format!("\r\ntcp_port:{}\r\n", server.addr.port())),
            "{info}"
        );
        assert!(
            info.contains(&format!("\r\nprocess_id:{}\r\n", server.pid())),
            "{info}"
        );
        assert!(
            !info.contains("# Commandstats"),
            "commandstats is not a default section"
        );
        // Every line is a header, `field:value`, or the blank line between sections.
        for line in info.split("\r\n") {
            assert!(
                line.is_empty() || line.starts_with("# ") || line.contains(':'),
                "bad INFO line {line:?}"
            );
        }
        let clients = text_payload(&raw.call(&["INFO", "clients"]));
        assert!(
            clients.starts_with("# Clients\r\nconnected_clients:"),
            "{clients}"
        );
        assert!(!clients.contains("# Server"));
    });

    // commandstats on a fresh connection's known commands.
    let mut raw = server.raw();
    for _ in 0..3 {
        expect(&mut raw, &["ECHO", "x"], "$1\r\nx\r\n");
    }
    expect(
        &mut raw,
        &["ECHO"],
        "-ERR wrong number of arguments for 'echo' command\r\n",
    );
    expect(&mut raw, &["FLOCK.ACQUIRE", "stats-lock", "1000"], ":1\r\n");
    let stats = text_payload(&raw.call(&["INFO", "commandstats"]));
    assert!(stats.starts_with("# Commandstats\r\n"), "{stats}");
    // ECHO is used only on this connection: 3 calls, 1 rejected for its arity.
    let echo = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_echo:"))
        .expect("cmdstat_echo");
    assert!(
        echo.starts_with("cmdstat_echo:calls=3,") && echo.contains(",rejected_calls=1,"),
        "{echo}"
    );
    let acquire = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_flock.acquire:"))
        .expect("acquire stats");
    assert!(
        acquire.starts_with("cmdstat_flock.acquire:calls=1,"),
        "{acquire}"
    );
    assert!(
        !stats.contains("cmdstat_fence.get"),
        "unused commands are not listed: {stats}"
    );
    let all = text_payload(&raw.call(&["INFO", "all"]));
    assert!(
        all.contains("# Commandstats") && all.contains("# Locks"),
        "{all}"
    );
}

#[test]
fn config_get_and_set() {
    let server = TestServer::start(&["--maxclients", "1234"]);
    let port = server.addr.port().to_string();
    let mut raw = server.raw();
    // The real port, even though it was started with --port 0.
    expect(
        &mut raw,
        &["CONFIG", "GET", "port"],
        &format!("*2\r\n{}{}", bulk("port"), bulk(&port)),
    );
    expect(
        &mut raw,
        &["CONFIG", "GET", "maxclients"],
        &format!("*2\r\n{}{}", bulk("maxclients"), bulk("1234")),
    );
    expect(
        &mut raw,
        &["CONFIG", "GET", "MAXCLIENTS"],
        &format!("*2\r\n{}{}", bulk("maxclients"), bulk("1234")),
    );
    expect(&mut raw, &["CONFIG", "GET", "nosuchkey"], "*0\r\n");
    let all = raw.call(&["CONFIG", "GET", "*"]);
    let n: usize = all[1..all.find("\r\n").unwrap()].parse().unwrap();
    assert!(
        n >= 20 && n.is_multiple_of(2),
        "flat array of pairs: {all:?}"
    );
    for key in [
        "bind",
        "port",
        "dir",
        "appendfsync",
        "maxclients",
        "max-name-bytes",
        "max-lease-ms",
    ] {
        assert!(all.contains(&bulk(key)), "CONFIG GET * lacks {key}");
    }
    // CONFIG SET (tests/commands/config_set.rs covers its effects): refused ones change nothing.
    expect(
        &mut raw,
        &["CONFIG", "SET", "maxclients", "1", "port", "1"],
        "-ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config\r\n",
    );
    expect(
        &mut raw,
        &["CONFIG", "GET", "maxclients"],
        &format!("*2\r\n{}{}", bulk("maxclients"), bulk("1234")),
    );
    expect(
        &mut raw,
        &["CONFIG", "SET", "maxclients", "1235"],
        "+OK\r\n",
    );
    expect(
        &mut raw,
        &["CONFIG", "SET", "maxclients", "1234"],
        "+OK\r\n",
    );
    expect(
        &mut raw,
        &["CONFIG", "GET"],
        "-ERR wrong number of arguments for 'config|get' command\r\n",
    );
    // RESP3: a map.
    let id = client_id(&mut raw);
    expect(&mut raw, &["HELLO", "3"], &hello_reply(3, id));
    expect(
        &mut raw,
        &["CONFIG", "GET", "maxclients"],
        &format!("%1\r\n{}{}", bulk("maxclients"), bulk("1234")),
    );
    let all3 = raw.call(&["CONFIG", "GET", "*"]);
    assert_eq!(
        all3[..all3.find("\r\n").unwrap()],
        format!("%{}", n / 2),
        "{all3:?}"
    );
    expect(
        &mut raw,
        &["CONFIG", "SET", "nosuch", "1"],
        "-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'\r\n",
    );
    assert_pong(&mut raw);
}

#[test]
fn time_and_bgrewriteaof() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, _| {
        let reply = raw.call(&["TIME"]);
        let parts: Vec<&str> = reply.split("\r\n").collect();
        assert_eq!(parts.len(), 6, "{reply:?}");
        assert_eq!(parts[0], "*2");
        assert_eq!(parts[1], format!("${}", parts[2].len()));
        assert_eq!(parts[3], format!("${}", parts[4].len()));
        let secs: u64 = parts[2].parse().expect("seconds");
        let micros: u64 = parts[4].parse().expect("microseconds");
        assert!(micros < 1_000_000);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(secs.abs_diff(now) <= 5, "TIME {secs} vs now {now}");
        expect(
            raw,
            &["TIME", "x"],
            "-ERR wrong number of arguments for 'time' command\r\n",
        );
    });
    let mut raw = server.raw();
    expect(
        &mut raw,
        &["FLOCK.ACQUIRE", "rewrite-me", "60000"],
        ":1\r\n",
    );
    // A rewrite may still be running from an earlier one; wait until a new one starts.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let reply = raw.call(&["BGREWRITEAOF"]);
        if reply == "+Background append only file rewriting started\r\n" {
            break;
        }
        assert_eq!(
            reply,
            "-ERR Background append only file rewriting already in progress\r\n"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "rewrite never finished"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_pong(&mut raw);
    expect(&mut raw, &["FLOCK.TOKEN", "rewrite-me"], ":1\r\n");
    assert!(server.dir.path().join("flockd.aof").exists());
}

#[test]
fn error_texts_keep_the_connection_open() {
    let server = TestServer::start(&[]);
    both_protocols(&server, |raw, _| {
        expect(
            raw,
            &["foo", "bar"],
            "-ERR unknown command 'foo', with args beginning with: 'bar' \r\n",
        );
        expect(
            raw,
            &["foo"],
            "-ERR unknown command 'foo', with args beginning with: \r\n",
        );
        assert_pong(raw);
        expect(
            raw,
            &["echo"],
            "-ERR wrong number of arguments for 'echo' command\r\n",
        );
        assert_pong(raw);
        expect(
            raw,
            &["ECHO", "a", "b"],
            "-ERR wrong number of arguments for 'echo' command\r\n",
        );
        assert_pong(raw);
        expect(
            raw,
            &["FLOCK.ACQUIRE", "n", "soon"],
            "-ERR value is not an integer or out of range\r\n",
        );
        assert_pong(raw);
        expect(
            raw,
            &["FLOCK.ACQUIRE", "n", "1.5"],
            "-ERR value is not an integer or out of range\r\n",
        );
        assert_pong(raw);
        expect(
            raw,
            &["FLOCK.ACQUIRE", "n"],
            "-ERR wrong number of arguments for 'flock.acquire' command\r\n",
        );
        assert_pong(raw);
        // Case-insensitive command names.
        expect(raw, &["pInG"], "+PONG\r\n");
        expect(raw, &["echo", "Case"], "$4\r\nCase\r\n");
        expect(raw, &["Flock.Token", "n"], ":0\r\n");
        let count = raw.call(&["COMMAND", "COUNT"]);
        expect(raw, &["command", "count"], &count);
    });
}

#[test]
fn inline_commands() {
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    raw.send(b"PING\r\n");
    assert_eq!(raw.read_reply(), "+PONG\r\n");
    raw.send(b"ECHO \"hello world\"\r\n");
    assert_eq!(raw.read_reply(), "$11\r\nhello world\r\n");
    raw.send(b"FLOCK.ACQUIRE a 1000\r\n");
    assert_eq!(raw.read_reply(), ":1\r\n");
    raw.send(b"flock.acquire a 1000\r\n");
    assert_eq!(raw.read_reply(), "$-1\r\n");
    // A bare \n ends a line too, quotes and escapes work like redis-cli's, blank lines are skipped.
    raw.send(b"\r\n\nECHO 'single quoted' \n");
    assert_eq!(raw.read_reply(), "$13\r\nsingle quoted\r\n");
    raw.send(b"ECHO \"tab\\there\\x41\"\r\n");
    assert_eq!(raw.read_reply(), "$9\r\ntab\thereA\r\n");
    raw.send(b"nosuch arg\r\n");
    assert_eq!(
        raw.read_reply(),
        "-ERR unknown command 'nosuch', with args beginning with: 'arg' \r\n"
    );
    // Inline and multibulk mixed in one write.
    let mut mixed = b"PING\r\n".to_vec();
    mixed.extend(encode_request(&[b"ECHO", b"mb"]));
    mixed.extend(b"ECHO inline\r\n");
    raw.send(&mixed);
    assert_eq!(raw.read_reply(), "+PONG\r\n");
    assert_eq!(raw.read_reply(), "$2\r\nmb\r\n");
    assert_eq!(raw.read_reply(), "$6\r\ninline\r\n");
    // Unbalanced quotes are a protocol error that closes the connection.
    raw.send(b"ECHO \"open\r\n");
    assert_eq!(
        raw.read_to_close(),
        "-ERR Protocol error: unbalanced quotes in request\r\n"
    );
    server.assert_alive();
}

#[test]
fn ten_thousand_pipelined_commands_in_one_write() {
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    const N: usize = 10_000;
    let mut batch = Vec::new();
    for i in 0..N {
        let arg = i.to_string();
        batch.extend(encode_request(&[b"ECHO", arg.as_bytes()]));
    }
    // Write from another thread so a full socket buffer can never deadlock the test.
    let mut writer = raw.stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&batch));
    for i in 0..N {
        let arg = i.to_string();
        assert_eq!(raw.read_reply(), bulk(&arg), "reply {i} out of order");
    }
    sender
        .join()
        .unwrap()
        .expect("one write of the whole batch");
    assert_pong(&mut raw);
}

#[test]
fn requirepass_gates_every_command_but_auth_hello_and_quit() {
    let server = TestServer::start(&["--requirepass", "secret"]);
    let noauth = "-NOAUTH Authentication required.\r\n";
    let wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    let mut raw = server.raw();
    for cmd in [
        &["PING"][..],
        &["ECHO", "x"],
        &["CLIENT", "ID"],
        &["SELECT", "0"],
        &["INFO"],
        &["COMMAND", "COUNT"],
        &["CONFIG", "GET", "port"],
        &["TIME"],
        &["FLOCK.ACQUIRE", "a", "1000"],
        &["FLOCK.TOKEN", "a"],
        &["FENCE.SET", "k", "1", "v"],
        &["SHUTDOWN"],
        &["nosuchcommand", "x"],
    ] {
        expect(&mut raw, cmd, noauth);
    }
    expect(
        &mut raw,
        &["HELLO", "3"],
        "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n",
    );
    expect(&mut raw, &["AUTH", "wrong"], wrongpass);
    expect(&mut raw, &["AUTH", "default", "wrong"], wrongpass);
    expect(&mut raw, &["AUTH", "alice", "secret"], wrongpass);
    expect(
        &mut raw,
        &["HELLO", "3", "AUTH", "default", "wrong"],
        wrongpass,
    );
    expect(&mut raw, &["PING"], noauth);
    expect(&mut raw, &["AUTH", "secret"], "+OK\r\n");
    expect(&mut raw, &["PING"], "+PONG\r\n");
    expect(&mut raw, &["FLOCK.ACQUIRE", "a", "60000"], ":1\r\n");
    // RESET de-authenticates (and goes back to RESP2).
    expect(&mut raw, &["RESET"], "+RESET\r\n");
    expect(&mut raw, &["PING"], noauth);
    expect(&mut raw, &["FLOCK.TOKEN", "a"], noauth);
    expect(&mut raw, &["AUTH", "default", "secret"], "+OK\r\n");
    expect(&mut raw, &["FLOCK.TOKEN", "a"], ":1\r\n");
    expect(&mut raw, &["QUIT"], "+OK\r\n");
    assert!(raw.is_closed(Duration::from_secs(10)));

    // HELLO 3 AUTH in one go.
    let mut raw = server.raw();
    expect(&mut raw, &["QUIT", "extra"], "+OK\r\n");
    let mut raw = server.raw();
    let hello = raw.call(&[
        "HELLO", "3", "AUTH", "default", "secret", "SETNAME", "authed",
    ]);
    assert!(
        hello.starts_with("%8\r\n$6\r\nserver\r\n$6\r\nflockd\r\n"),
        "{hello:?}"
    );
    let id = client_id(&mut raw);
    assert_eq!(hello, hello_reply(3, id));
    expect(&mut raw, &["CLIENT", "GETNAME"], "$6\r\nauthed\r\n");
    expect(&mut raw, &["FLOCK.ACQUIRE", "a", "1000"], "_\r\n");
    expect(&mut raw, &["RESET"], "+RESET\r\n");
    expect(&mut raw, &["PING"], noauth);
}

#[test]
fn pre_auth_input_limits_close_the_connection() {
    let server = TestServer::start(&["--requirepass", "secret"]);
    // 11 arguments before AUTH.
    let args: Vec<&[u8]> = std::iter::once(&b"AUTH"[..])
        .chain(std::iter::repeat_n(&b"x"[..], 10))
        .collect();
    let mut raw = server.raw();
    raw.send(&encode_request(&args));
    assert_eq!(
        raw.read_to_close(),
        "-ERR Protocol error: invalid multibulk length\r\n"
    );
    // 10 arguments are still a request (AUTH's syntax error, not a protocol error).
    let mut raw = server.raw();
    raw.send(&encode_request(&args[..10]));
    assert_eq!(raw.read_reply(), "-ERR syntax error\r\n");
    // A 17 KiB bulk before AUTH.
    let big = vec![b'a'; 17 * 1024];
    let mut raw = server.raw();
    let mut writer = raw.stream.try_clone().unwrap();
    let request = encode_request(&[b"AUTH", &big]);
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(&request);
    });
    assert_eq!(
        raw.read_to_close(),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
    let _ = sender.join();
    // After AUTH the same sizes are fine.
    let mut raw = server.raw();
    expect(&mut raw, &["AUTH", "secret"], "+OK\r\n");
    raw.cmd(&[b"ECHO", &big]);
    assert_eq!(
        raw.read_reply(),
        format!("${}\r\n{}\r\n", big.len(), "a".repeat(big.len()))
    );
    let eleven: Vec<&str> = std::iter::once("CLIENT")
        .chain(std::iter::repeat_n("x", 10))
        .collect();
    expect(
        &mut raw,
        &eleven,
        // As Redis 7.2 quotes it: the subcommand as sent.
        "-ERR unknown subcommand 'x'. Try CLIENT HELP.\r\n",
    );
    server.assert_alive_with_auth("secret");
}

trait AliveWithAuth {
    fn assert_alive_with_auth(&self, password: &str);
}

impl AliveWithAuth for TestServer {
    fn assert_alive_with_auth(&self, password: &str) {
        let mut raw = self.raw();
        expect(&mut raw, &["AUTH", password], "+OK\r\n");
        assert_pong(&mut raw);
    }
}

#[test]
fn shutdown_command_exits_zero_with_the_aof_on_disk() {
    let mut server = TestServer::start(&[]);
    let mut raw = server.raw();
    expect(&mut raw, &["FLOCK.ACQUIRE", "kept", "60000"], ":1\r\n");
    raw.send(&encode_request(&[b"SHUTDOWN"]));
    // Redis closes without a reply.
    assert_eq!(raw.read_to_close(), "");
    let status = server
        .wait_exit(Duration::from_secs(30))
        .expect("flockd exits after SHUTDOWN");
    assert_eq!(status.code(), Some(0), "log:\n{}", server.log());
    let aof = server.dir.path().join("flockd.aof");
    assert!(
        aof.exists() && std::fs::metadata(&aof).unwrap().len() > 0,
        "AOF must exist"
    );
    let log = server.log();
    assert!(log.contains("SHUTDOWN requested by a client"), "{log}");
    assert!(log.contains("AOF flushed and synced; bye"), "{log}");
}

fn stops_cleanly_on(signal: &str) {
    let mut server = TestServer::start(&[]);
    let mut raw = server.raw();
    expect(&mut raw, &["FLOCK.ACQUIRE", "kept", "60000"], ":1\r\n");
    server.signal(signal);
    let status = server
        .wait_exit(Duration::from_secs(30))
        .expect("flockd exits on the signal");
    assert_eq!(
        status.code(),
        Some(0),
        "exit status; log:\n{}",
        server.log()
    );
    // The open connection was closed by the shutdown.
    assert!(raw.is_closed(Duration::from_secs(10)));
    let log = server.log();
    for line in [
        format!("received SIG{signal}"),
        "shutting down: waiting for".to_string(),
        "AOF flushed and synced; bye".to_string(),
    ] {
        assert!(log.contains(&line), "log lacks {line:?}:\n{log}");
    }
    assert!(server.dir.path().join("flockd.aof").exists());
}

#[test]
fn sigterm_exits_zero_and_logs_the_shutdown() {
    stops_cleanly_on("TERM");
}

#[test]
fn sigint_exits_zero_and_logs_the_shutdown() {
    stops_cleanly_on("INT");
}

/// A subcommand's own arity is checked (as Redis does) before it runs: `CLIENT KILL` with no
/// filter once killed every other connection and answered 0. Filters flockd cannot tell apart
/// never widen a kill: `TYPE pubsub` matches no connection, `USER` and `MAXAGE` filter.
#[test]
fn client_kill_without_a_filter_is_an_arity_error_and_kills_nobody() {
    let server = TestServer::start(&[]);
    let mut killer = server.raw();
    let mut bystander = server.raw();
    assert_eq!(bystander.call(&["PING"]), "+PONG\r\n");
    assert_eq!(
        killer.call(&["CLIENT", "KILL"]),
        "-ERR wrong number of arguments for 'client|kill' command\r\n"
    );
    assert_eq!(
        killer.call(&["CONFIG"]),
        "-ERR wrong number of arguments for 'config' command\r\n"
    );
    for (filter, killed) in [
        (&["TYPE", "pubsub"][..], ":0\r\n"),
        (&["TYPE", "replica"][..], ":0\r\n"),
        (&["USER", "nobody"][..], ":0\r\n"),
        (&["MAXAGE", "3600"][..], ":0\r\n"),
    ] {
        let mut args = vec!["CLIENT", "KILL"];
        args.extend_from_slice(filter);
        assert_eq!(killer.call(&args), killed, "{args:?}");
    }
    assert_eq!(
        killer.call(&["CLIENT", "KILL", "TYPE", "bogus"]),
        "-ERR Unknown client type 'bogus'\r\n"
    );
    assert_eq!(
        killer.call(&["CLIENT", "KILL", "MAXAGE", "soon"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        bystander.call(&["PING"]),
        "+PONG\r\n",
        "the bystander lives"
    );
    // The filters that do match: the default user's other connection, then nobody left.
    assert_eq!(
        killer.call(&["CLIENT", "KILL", "USER", "default"]),
        ":1\r\n"
    );
    assert!(
        bystander.try_call(&["PING"]).is_none(),
        "killed by USER default"
    );
    assert_eq!(killer.call(&["PING"]), "+PONG\r\n", "SKIPME yes by default");
}
