//! The users file of docs/operations.md, as written there, against the real binary: every
//! command of every category is checked both ways for each user. A service user written
//! `+@flock +@fence` runs what its categories hold and nothing else; above all it can never
//! break or rewrite a lock (FLOCK.FORCERELEASE, FLOCK.ADVANCE, FLOCK.CLUSTER ADD / REMOVE /
//! LEADER are `@admin @dangerous` and in no category but `@slow` besides).

use std::collections::BTreeSet;

use crate::common::{Raw, Server, TempDir};

/// The fenced block under "## Users per service (ACL)" in docs/operations.md.
fn documented_users_file() -> String {
    let docs = include_str!("../../docs/operations.md");
    let section = docs
        .split("## Users per service (ACL)")
        .nth(1)
        .expect("docs/operations.md has the ACL section");
    let block = section
        .split("```")
        .nth(1)
        .expect("the ACL section has a fenced users file");
    block.trim_start_matches(|c| c != '\n').trim().to_owned() + "\n"
}

/// The documented password of each user (`>secret` in its line).
fn password_of(file: &str, user: &str) -> String {
    let line = file
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(user))
        .unwrap_or_else(|| panic!("no user {user} in\n{file}"));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix('>'))
        .unwrap_or_else(|| panic!("no >password for {user}"))
        .to_owned()
}

/// A RESP array of bulk strings, as `Raw::call` returns it whole.
fn bulk_items(reply: &str) -> Vec<String> {
    assert!(reply.starts_with('*'), "not an array: {reply:?}");
    let mut lines = reply.split("\r\n").skip(1);
    let mut out = Vec::new();
    while let Some(header) = lines.next() {
        if header.starts_with('$') {
            out.push(lines.next().expect("bulk body").to_owned());
        }
    }
    out
}

fn login(server: &Server, user: &str, password: &str) -> Raw {
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["AUTH", user, password]),
        "+OK\r\n",
        "AUTH {user}"
    );
    raw
}

/// `name` (`command` or `command|sub`) as the words to send: no further arguments, so every
/// command that passes the permission check stops at its arity or argument check and changes
/// nothing. SHUTDOWN alone would stop the server: it gets an argument it refuses instead.
fn words(name: &str) -> Vec<String> {
    let mut words: Vec<String> = name.split('|').map(str::to_uppercase).collect();
    if words == ["SHUTDOWN"] {
        words.push("NOT-AN-OPTION".into());
    }
    words
}

fn refused_for_the_command(reply: &str, user: &str, name: &str) -> bool {
    reply == format!("-NOPERM User {user} has no permissions to run the '{name}' command\r\n")
}

/// What each documented user is given, by its `+` rules (the file has no `-` rules; the test
/// checks that, so it stays this simple).
struct Grants {
    categories: BTreeSet<String>,
    commands: BTreeSet<String>,
    all: bool,
}

fn grants(file: &str, user: &str) -> Grants {
    let line = file
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(user))
        .unwrap();
    let mut grants = Grants {
        categories: BTreeSet::new(),
        commands: BTreeSet::new(),
        all: false,
    };
    for word in line.split_whitespace() {
        assert!(
            !word.starts_with('-'),
            "the docs' users file has a '-' rule ({word}): teach this test its order"
        );
        match word.strip_prefix('+') {
            Some("@all") => grants.all = true,
            Some(rule) => match rule.strip_prefix('@') {
                Some(category) => {
                    grants.categories.insert(category.to_owned());
                }
                None => {
                    grants.commands.insert(rule.to_owned());
                }
            },
            None => {}
        }
    }
    grants
}

/// A server whose aclfile is the docs' users file: the file's text, its directory (removed when
/// dropped) and the server.
fn start_with_documented_users(tag: &str) -> (String, TempDir, Server) {
    let file = documented_users_file();
    let dir = TempDir::new(tag);
    let acl_path = dir.path().join("users.acl");
    std::fs::write(&acl_path, &file).unwrap();
    let acl_arg = acl_path.display().to_string();
    let server = Server::start_in(&dir.path().join("data"), &["--aclfile", &acl_arg]);
    (file, dir, server)
}

/// Commands allowed before AUTH are not subject to rules, as in Redis (RESET is no-auth there too).
const NO_AUTH: &[&str] = &["auth", "hello", "quit", "reset"];

/// What breaks or rewrites locks, by the operations contract: `@admin` and `@dangerous`, and
/// no other category but `@slow`.
const BREAKS_LOCKS: &[&str] = &[
    "flock.forcerelease",
    "flock.advance",
    "flock.cluster|add",
    "flock.cluster|remove",
    "flock.cluster|leader",
];

#[test]
fn the_documented_users_run_every_command_of_their_categories_and_nothing_else() {
    let (file, _dir, server) = start_with_documented_users("acl-categories");
    let users: Vec<&str> = file
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|u| *u != "default")
        .collect();
    assert!(users.len() >= 3, "users in the docs: {users:?}");
    let ops_user = users
        .iter()
        .copied()
        .find(|u| grants(&file, u).all)
        .expect("the docs name an operator with +@all");
    let mut ops = login(&server, ops_user, &password_of(&file, ops_user));

    // The categories and what each holds, as the server says.
    let categories = bulk_items(&ops.call(&["ACL", "CAT"]));
    let mut holds = std::collections::BTreeMap::new();
    for category in &categories {
        let commands: BTreeSet<String> = bulk_items(&ops.call(&["ACL", "CAT", category]))
            .into_iter()
            .collect();
        holds.insert(category.clone(), commands);
    }
    for name in BREAKS_LOCKS {
        let within: Vec<&String> = holds
            .iter()
            .filter(|(_, commands)| commands.contains(*name))
            .map(|(category, _)| category)
            .collect();
        assert_eq!(
            within,
            ["admin", "dangerous", "slow"].iter().collect::<Vec<_>>(),
            "{name} belongs to @admin @dangerous @slow only"
        );
    }
    for name in &holds["admin"] {
        for category in [
            "flock",
            "fence",
            "read",
            "write",
            "pubsub",
            "connection",
            "fast",
        ] {
            assert!(
                !holds[category].contains(name),
                "@admin's {name} is also in @{category}"
            );
        }
    }
    let every: BTreeSet<&String> = holds.values().flatten().collect();

    for user in &users {
        let granted = grants(&file, user);
        let password = password_of(&file, user);
        let mut checked = 0;
        for name in &every {
            let allowed = granted.all
                || NO_AUTH.contains(&name.as_str())
                || granted.commands.contains(name.as_str())
                || granted
                    .categories
                    .iter()
                    .any(|c| holds.get(c).is_some_and(|cmds| cmds.contains(*name)));
            // A fresh connection each: a command that passes may change the connection's mode
            // (MULTI, MONITOR, SUBSCRIBE, QUIT), never another check's.
            let mut conn = login(&server, user, &password);
            let words = words(name);
            let args: Vec<&str> = words.iter().map(String::as_str).collect();
            let reply = conn.try_call(&args).unwrap_or_default();
            let refused = refused_for_the_command(&reply, user, name);
            assert_eq!(
                !refused, allowed,
                "user {user}, {name}: allowed by the docs' rules: {allowed}; the server said {reply:?}"
            );
            checked += 1;
        }
        assert!(checked > 40, "{user}: only {checked} commands checked");
    }
    // Nothing the checks sent took effect: the server is still up and answers.
    assert_eq!(ops.call(&["PING"]), "+PONG\r\n");
}

#[test]
fn a_service_user_cannot_break_or_rewrite_a_lock() {
    let (file, _dir, server) = start_with_documented_users("acl-break");
    let mut orders = login(&server, "orders", &password_of(&file, "orders"));
    assert_eq!(
        orders.call(&["FLOCK.ACQUIRE", "orders:fr", "60000"]),
        ":1\r\n"
    );
    for (args, name) in [
        (
            &["FLOCK.FORCERELEASE", "orders:fr"][..],
            "flock.forcerelease",
        ),
        (&["FLOCK.ADVANCE", "orders:fr", "500"][..], "flock.advance"),
        (
            &["FLOCK.CLUSTER", "ADD", "4", "127.0.0.1:7000"][..],
            "flock.cluster|add",
        ),
        (
            &["FLOCK.CLUSTER", "REMOVE", "2"][..],
            "flock.cluster|remove",
        ),
        (
            &["FLOCK.CLUSTER", "LEADER", "2"][..],
            "flock.cluster|leader",
        ),
    ] {
        let reply = orders.call(args);
        assert!(
            refused_for_the_command(&reply, "orders", name),
            "{args:?}: {reply:?}"
        );
    }
    // Unchanged: still held with its token, the counter where the grant left it.
    assert_eq!(orders.call(&["FLOCK.TOKEN", "orders:fr"]), ":1\r\n");
    assert_eq!(orders.call(&["FLOCK.RELEASE", "orders:fr", "1"]), ":1\r\n");
    let mut ops = login(&server, "ops", &password_of(&file, "ops"));
    assert_eq!(ops.call(&["FLOCK.ADVANCE", "orders:fr", "500"]), ":500\r\n");
}
