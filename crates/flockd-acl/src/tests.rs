use super::*;

fn known(name: &str) -> bool {
    matches!(
        name,
        "flock.acquire"
            | "flock.forcerelease"
            | "fence.set"
            | "client"
            | "client|kill"
            | "@flock"
            | "@admin"
            | "@read"
            | "@write"
            | "@fence"
    )
}

fn rules(words: &str) -> Vec<String> {
    words.split_whitespace().map(String::from).collect()
}

const ACQUIRE: CommandInfo = CommandInfo {
    name: "flock.acquire",
    categories: &["flock", "write", "fast"],
};
const FORCE: CommandInfo = CommandInfo {
    name: "flock.forcerelease",
    categories: &["flock", "write", "admin", "dangerous"],
};
const KILL: CommandInfo = CommandInfo {
    name: "client|kill",
    categories: &["admin", "connection", "dangerous"],
};
const CLIENT_ID: CommandInfo = CommandInfo {
    name: "client|id",
    categories: &["connection"],
};

#[test]
fn the_contract_example_user() {
    let mut acl = Acl::new(None);
    acl.set_user(
        "alice",
        &rules("on >secret ~orders:* &__flock__:orders:* +@flock -@admin"),
        &known,
    )
    .unwrap();
    let alice = acl.authenticate("alice", b"secret").expect("logs in");
    assert!(acl.authenticate("alice", b"wrong").is_none());
    assert!(alice.can_run(ACQUIRE));
    assert!(!alice.can_run(FORCE), "-@admin after +@flock wins");
    assert!(alice.can_access_key(b"orders:1042"));
    assert!(!alice.can_access_key(b"invoices:1"));
    assert!(alice.can_access_channel(b"__flock__:orders:1"));
    assert!(!alice.can_access_channel(b"__flock__:invoices:1"));
    let line = alice.describe();
    assert!(line.starts_with("user alice on #"), "{line}");
    assert!(
        line.ends_with(" ~orders:* &__flock__:orders:* -@all +@flock -@admin"),
        "{line}"
    );
    assert!(!line.contains("secret"), "{line}");
}

#[test]
fn rules_apply_in_order_and_subcommands_are_their_own() {
    let mut acl = Acl::new(None);
    acl.set_user("ops", &rules("on nopass +client -client|kill"), &known)
        .unwrap();
    let ops = acl.user("ops").unwrap();
    assert!(ops.can_run(CLIENT_ID));
    assert!(!ops.can_run(KILL));
    acl.set_user("ops", &rules("+client|kill"), &known).unwrap();
    assert!(acl.user("ops").unwrap().can_run(KILL));
    acl.set_user("ops", &rules("nocommands"), &known).unwrap();
    assert!(!acl.user("ops").unwrap().can_run(CLIENT_ID));
    // Off users cannot log in, even with nopass.
    acl.set_user("ops", &rules("off"), &known).unwrap();
    assert!(acl.authenticate("ops", b"").is_none());
}

#[test]
fn a_bad_rule_changes_nothing() {
    let mut acl = Acl::new(None);
    acl.set_user("bob", &rules("on >pw ~a:*"), &known).unwrap();
    let before = acl.user("bob").unwrap();
    for (rule, text) in [
        (
            "+nosuch",
            "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL",
        ),
        (
            "+@nosuch",
            "Error in ACL SETUSER modifier '+@nosuch': Unknown command or category name in ACL",
        ),
        (
            "bogus",
            "Error in ACL SETUSER modifier 'bogus': Syntax error",
        ),
        (
            "#abc",
            "Error in ACL SETUSER modifier '#abc': The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
        ),
    ] {
        let e = acl
            .set_user("bob", &rules(&format!("off ~b:* {rule}")), &known)
            .unwrap_err();
        assert_eq!(e.to_string(), text);
        assert_eq!(acl.user("bob").unwrap(), before);
    }
    assert_eq!(
        acl.delete(&["default".into()]).unwrap_err().to_string(),
        "The 'default' user cannot be removed"
    );
    assert_eq!(acl.delete(&["bob".into(), "nobody".into()]), Ok(1));
}

#[test]
fn the_default_user_follows_requirepass() {
    let mut acl = Acl::new(None);
    assert!(acl.authenticate("default", b"anything").is_some());
    assert_eq!(acl.describe(), vec!["user default on nopass ~* &* +@all"]);
    acl.set_default_password(Some("s3cret"));
    assert!(acl.authenticate("default", b"anything").is_none());
    assert!(acl.authenticate("default", b"s3cret").is_some());
    let hash = hash_password(b"s3cret");
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        acl.describe(),
        vec![format!("user default on #{hex} ~* &* +@all")]
    );
}

#[test]
fn an_aclfile_round_trips_and_bad_lines_are_named() {
    let mut acl = Acl::new(None);
    acl.set_user(
        "alice",
        &rules("on >secret ~orders:* +@flock -@admin"),
        &known,
    )
    .unwrap();
    let text = acl.describe().join("\n") + "\n";
    let path = Path::new("/etc/flockd/users.acl");
    let back = Acl::parse_file(&text, path, None, &known).unwrap();
    assert_eq!(back.describe(), acl.describe());
    assert!(back.authenticate("alice", b"secret").is_some());
    let bad = "# users\nuser alice on >x\nuser bob on +nosuch\n";
    assert_eq!(
        Acl::parse_file(bad, path, None, &known)
            .unwrap_err()
            .to_string(),
        "/etc/flockd/users.acl:3: Error in applying operation '+nosuch': Unknown command or category name in ACL"
    );
    let dup = "user a on\nuser a off\n";
    assert!(
        Acl::parse_file(dup, path, None, &known)
            .unwrap_err()
            .to_string()
            .contains(":2: Duplicate user 'a' found")
    );
}

#[test]
fn the_log_groups_repeats_and_keeps_the_newest() {
    let mut log = AclLog::default();
    log.max_len = 2;
    log.record(
        Denial::Command,
        "toplevel",
        "flock.forcerelease",
        "alice",
        "id=1".into(),
        1000,
    );
    log.record(
        Denial::Command,
        "toplevel",
        "flock.forcerelease",
        "alice",
        "id=1".into(),
        2000,
    );
    log.record(
        Denial::Key,
        "toplevel",
        "invoices:1",
        "alice",
        "id=1".into(),
        3000,
    );
    log.record(Denial::Auth, "toplevel", "AUTH", "bob", "id=2".into(), 4000);
    let entries = log.newest(None);
    assert_eq!(entries.len(), 2);
    assert_eq!((entries[0].reason, entries[0].entry_id), (Denial::Auth, 2));
    assert_eq!((entries[1].reason, entries[1].count), (Denial::Key, 1));
    // A minute later the same refusal is a new entry.
    log.record(
        Denial::Auth,
        "toplevel",
        "AUTH",
        "bob",
        "id=2".into(),
        70_000,
    );
    assert_eq!(log.newest(Some(1))[0].entry_id, 3);
    log.reset();
    assert!(log.newest(None).is_empty());
}

/// The admission step's fast path: only a user whose last command rule allows everything and
/// who may touch every key skips the per-command checks.
#[test]
fn only_a_user_allowed_everything_skips_the_checks() {
    let mut acl = Acl::new(None);
    assert!(acl.user("default").unwrap().may_run_everything());
    for (name, words, everything) in [
        ("all", "on nopass ~* +@all", true),
        ("allkeys", "on nopass allkeys +@all", true),
        ("no-keys", "on nopass +@all", false),
        ("some-keys", "on nopass ~orders:* +@all", false),
        ("then-deny", "on nopass ~* +@all -@admin", false),
        ("then-allow", "on nopass ~* +@all +flock.acquire", false),
        ("flock-only", "on nopass ~* +@flock", false),
    ] {
        acl.set_user(name, &rules(words), &known).unwrap();
        assert_eq!(
            acl.user(name).unwrap().may_run_everything(),
            everything,
            "{name}: {words}"
        );
    }
}
