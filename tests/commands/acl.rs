//! ACL users against the real binary: the contract's example user is refused other names,
//! admin commands and other commands with Redis's exact texts (each logged in ACL LOG), wrong
//! passwords are logged without the password, passwords never show in replies, MONITOR or the
//! slow log, ACL SAVE / restart keeps users, and a deleted user's connections end.

use crate::common;

use std::time::Duration;

use crate::common::{Raw, Server, TempDir, TestServer, wait_until};

fn ok(raw: &mut Raw, args: &[&str]) {
    assert_eq!(raw.call(args), "+OK\r\n", "{args:?}");
}

const ALICE: &[&str] = &[
    "ACL",
    "SETUSER",
    "alice",
    "on",
    ">secret",
    "~orders:*",
    "&__flock__:orders:*",
    "+@flock",
    "-@admin",
];

#[test]
fn a_limited_user_is_refused_with_redis_texts_and_changes_nothing() {
    let server = TestServer::start(&[]);
    let mut admin = server.raw();
    ok(&mut admin, ALICE);
    let mut alice = server.raw();
    ok(&mut alice, &["AUTH", "alice", "secret"]);
    assert_eq!(
        alice.call(&["FLOCK.ACQUIRE", "orders:1042", "60000"]),
        ":1\r\n"
    );
    for (args, refusal) in [
        (
            &["FLOCK.ACQUIRE", "invoices:7", "60000"][..],
            "-NOPERM No permissions to access a key\r\n",
        ),
        (
            &["FLOCK.FORCERELEASE", "orders:1042"][..],
            "-NOPERM User alice has no permissions to run the 'flock.forcerelease' command\r\n",
        ),
        (
            &["FENCE.SET", "orders:1042", "1", "v"][..],
            "-NOPERM User alice has no permissions to run the 'fence.set' command\r\n",
        ),
        (
            &["CONFIG", "GET", "maxclients"][..],
            "-NOPERM User alice has no permissions to run the 'config|get' command\r\n",
        ),
        (
            &["ACL", "LIST"][..],
            "-NOPERM User alice has no permissions to run the 'acl|list' command\r\n",
        ),
        (
            &["PING"][..],
            "-NOPERM User alice has no permissions to run the 'ping' command\r\n",
        ),
    ] {
        assert_eq!(alice.call(args), refusal, "{args:?}");
    }
    // Nothing was changed by a refusal.
    assert_eq!(admin.call(&["FLOCK.TOKEN", "invoices:7"]), ":0\r\n");
    assert_eq!(admin.call(&["FLOCK.TOKEN", "orders:1042"]), ":1\r\n");
    // Alice has no @connection: PING needs its own rule, and so does ACL WHOAMI.
    ok(
        &mut admin,
        &["ACL", "SETUSER", "alice", "+acl|whoami", "+ping"],
    );
    assert_eq!(
        alice.call(&["PING"]),
        "+PONG\r\n",
        "a change applies to open connections"
    );
    assert_eq!(alice.call(&["ACL", "WHOAMI"]), "$5\r\nalice\r\n");

    // ACL LOG: newest first, Redis's fields.
    let log = admin.call(&["ACL", "LOG"]);
    assert!(log.starts_with("*6\r\n*20\r\n$5\r\ncount\r\n:1\r\n$6\r\nreason\r\n$7\r\ncommand\r\n$7\r\ncontext\r\n$8\r\ntoplevel\r\n$6\r\nobject\r\n$4\r\nping\r\n$8\r\nusername\r\n$5\r\nalice\r\n"), "{log}");
    assert!(
        log.contains(
            "$3\r\nkey\r\n$7\r\ncontext\r\n$8\r\ntoplevel\r\n$6\r\nobject\r\n$10\r\ninvoices:7\r\n"
        ),
        "{log}"
    );
    assert!(
        log.contains("age-seconds")
            && log.contains("client-info")
            && log.contains("timestamp-last-updated"),
        "{log}"
    );
    assert_eq!(admin.call(&["ACL", "LOG", "1"]).lines().next(), Some("*1"));
    ok(&mut admin, &["ACL", "LOG", "RESET"]);
    assert_eq!(admin.call(&["ACL", "LOG"]), "*0\r\n");

    // GETUSER and LIST show digests, never the password.
    let user = admin.call(&["ACL", "GETUSER", "alice"]);
    assert!(user.contains("$5\r\nflags\r\n*1\r\n$2\r\non\r\n"), "{user}");
    assert!(
        user.contains("$8\r\ncommands\r\n$39\r\n-@all +@flock -@admin +acl|whoami +ping\r\n"),
        "{user}"
    );
    assert!(user.contains("$4\r\nkeys\r\n$9\r\n~orders:*\r\n"), "{user}");
    let list = admin.call(&["ACL", "LIST"]);
    assert!(
        list.contains("user default on nopass ~* &* +@all"),
        "{list}"
    );
    assert!(list.contains("user alice on #2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b ~orders:* &__flock__:orders:* -@all +@flock -@admin +acl|whoami +ping"), "{list}");
    for text in [user, list] {
        assert!(!text.contains("secret"), "{text}");
    }
    assert_eq!(admin.call(&["ACL", "GETUSER", "nobody"]), "$-1\r\n");
    assert_eq!(
        admin.call(&["ACL", "USERS"]),
        "*2\r\n$5\r\nalice\r\n$7\r\ndefault\r\n"
    );
    // Categories.
    let cats = admin.call(&["ACL", "CAT"]);
    for c in [
        "flock",
        "fence",
        "admin",
        "read",
        "write",
        "dangerous",
        "blocking",
        "connection",
    ] {
        assert!(cats.contains(&format!("\r\n{c}\r\n")), "{c} in {cats}");
    }
    let flock = admin.call(&["ACL", "CAT", "flock"]);
    assert!(
        flock.contains("flock.acquire") && !flock.contains("fence.set"),
        "{flock}"
    );
    let admin_cat = admin.call(&["ACL", "CAT", "admin"]);
    assert!(
        admin_cat.contains("client|kill")
            && admin_cat.contains("flock.forcerelease")
            && !admin_cat.contains("acl|whoami"),
        "{admin_cat}"
    );
    assert_eq!(
        admin.call(&["ACL", "CAT", "nosuch"]),
        "-ERR Unknown category 'nosuch'\r\n"
    );
    for (args, error) in [
        (
            &["ACL", "SETUSER", "bob", "on", "+nosuch"][..],
            "-ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL\r\n",
        ),
        (
            &["ACL", "SETUSER", "bob", "bogus"][..],
            "-ERR Error in ACL SETUSER modifier 'bogus': Syntax error\r\n",
        ),
        (
            &["ACL", "DELUSER", "default"][..],
            "-ERR The 'default' user cannot be removed\r\n",
        ),
        (
            &["ACL", "SAVE"][..],
            "-ERR This flockd is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a config file set) in order to store users in the config file.\r\n",
        ),
    ] {
        assert_eq!(admin.call(args), error, "{args:?}");
    }
    assert_eq!(
        admin.call(&["ACL", "USERS"]),
        "*2\r\n$5\r\nalice\r\n$7\r\ndefault\r\n",
        "a bad SETUSER creates nobody"
    );
}

#[test]
fn wrong_passwords_are_logged_and_secrets_never_shown() {
    let server = TestServer::start(&["--slowlog-log-slower-than", "0"]);
    let mut admin = server.raw();
    let mut monitor = server.raw();
    assert_eq!(monitor.call(&["MONITOR"]), "+OK\r\n");
    ok(&mut admin, ALICE);
    let mut guess = server.raw();
    assert_eq!(
        guess.call(&["AUTH", "alice", "hunter2"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    ok(&mut admin, &["ACL", "SETUSER", "alice", "off"]);
    assert_eq!(
        guess.call(&["AUTH", "alice", "secret"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
        "an off user cannot log in"
    );
    let log = admin.call(&["ACL", "LOG"]);
    assert!(
        log.contains("$6\r\nreason\r\n$4\r\nauth\r\n")
            && log.contains("$6\r\nobject\r\n$4\r\nAUTH\r\n$8\r\nusername\r\n$5\r\nalice\r\n"),
        "{log}"
    );
    assert!(
        log.contains("$5\r\ncount\r\n:2\r\n"),
        "two failures, one entry: {log}"
    );
    wait_until(
        Duration::from_secs(5),
        "the failure is in the server log",
        || server.log().contains("AUTH failed"),
    );
    let slowlog = admin.call(&["SLOWLOG", "GET", "-1"]);
    let mut fed = String::new();
    while let Some(line) = monitor.poll_reply(Duration::from_millis(300)) {
        fed.push_str(&line);
    }
    assert!(
        fed.contains("\"ACL\" \"SETUSER\" \"alice\" \"(redacted)\""),
        "{fed}"
    );
    for (what, text) in [
        ("server log", server.log()),
        ("slow log", slowlog),
        ("MONITOR", fed),
    ] {
        for secret in ["secret", "hunter2"] {
            assert!(!text.contains(secret), "{secret} in the {what}: {text}");
        }
    }
}

#[test]
fn acl_save_and_a_restart_keep_users_and_a_deleted_users_connections_end() {
    let dir = TempDir::new("acl");
    let file = dir.path().join("users.acl");
    std::fs::write(
        &file,
        "# flockd users\nuser default on nopass ~* &* +@all\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let file_arg = file.display().to_string();
    let mut server = Server::start_in(&data, &["--aclfile", &file_arg]);
    let mut admin = server.raw();
    ok(&mut admin, ALICE);
    ok(&mut admin, &["ACL", "SAVE"]);
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(
        saved.lines().any(|l| l.starts_with("user alice on #")),
        "{saved}"
    );
    assert!(!saved.contains("secret"), "{saved}");
    server.kill9();

    let server = Server::start_in(&data, &["--aclfile", &file_arg]);
    let mut alice = server.raw();
    ok(&mut alice, &["AUTH", "alice", "secret"]);
    assert_eq!(
        alice.call(&["FLOCK.ACQUIRE", "orders:1", "60000"]),
        ":1\r\n"
    );
    // A bad file: ACL LOAD refuses it whole, and the users in force stay.
    let mut admin = server.raw();
    std::fs::write(
        &file,
        "user default on nopass ~* &* +@all\nuser bob on +nosuch\n",
    )
    .unwrap();
    let reply = admin.call(&["ACL", "LOAD"]);
    assert!(
        reply.starts_with(&format!(
            "-ERR {file_arg}:2: Error in applying operation '+nosuch'"
        )),
        "{reply}"
    );
    assert_eq!(alice.call(&["FLOCK.TOKEN", "orders:1"]), ":1\r\n");
    // Deleting alice ends her connection.
    assert_eq!(admin.call(&["ACL", "DELUSER", "alice", "nobody"]), ":1\r\n");
    alice.send(&common::encode_request(&[b"FLOCK.TOKEN", b"orders:1"]));
    assert_eq!(
        alice.read_to_close(),
        "-ERR the user of this connection was deleted\r\n"
    );
    server.assert_alive();
}

#[test]
fn requirepass_is_the_default_users_password() {
    let server = TestServer::start(&["--requirepass", "pw"]);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["FLOCK.TOKEN", "x"]),
        "-NOAUTH Authentication required.\r\n"
    );
    ok(&mut raw, &["AUTH", "default", "pw"]);
    assert_eq!(raw.call(&["ACL", "WHOAMI"]), "$7\r\ndefault\r\n");
    let list = raw.call(&["ACL", "LIST"]);
    assert!(
        list.contains("user default on #") && !list.contains("pw "),
        "{list}"
    );
    assert_eq!(
        raw.call(&["CONFIG", "GET", "requirepass"]),
        "*2\r\n$11\r\nrequirepass\r\n$10\r\n(redacted)\r\n"
    );
    ok(&mut raw, &["CONFIG", "SET", "requirepass", "new"]);
    let mut other = server.raw();
    assert_eq!(
        other.call(&["AUTH", "pw"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    ok(&mut other, &["AUTH", "new"]);
    // CLIENT LIST names the user.
    ok(
        &mut raw,
        &["ACL", "SETUSER", "ops", "on", ">o", "+@all", "~*"],
    );
    ok(&mut other, &["AUTH", "ops", "o"]);
    let list = raw.call(&["CLIENT", "LIST"]);
    assert!(
        list.contains(" user=ops ") && list.contains(" user=default "),
        "{list}"
    );
}
