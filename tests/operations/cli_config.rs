//! What the command line and the environment tell a new user: `flockd --help` names each key's
//! default, and a `FLOCKD_*` variable that is no key (a typo such as `FLOCKD_PROT`) is warned
//! about at start, with the likely meant one, while the server still starts.

use std::time::Duration;

use crate::common::{Server, TempDir, run_flockd};

#[test]
fn help_shows_each_keys_default() {
    let out = run_flockd(&["--help"], &[], Duration::from_secs(10));
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.stderr);
    let help = out.stdout.replace('\n', " ");
    for (flag, default) in [
        ("--port", "6390"),
        ("--bind", "127.0.0.1"),
        ("--dir", "./data"),
        ("--appendfsync", "always"),
        ("--cluster-wait-leader-ms", "3000"),
        ("--log-level", "info"),
    ] {
        let at = help
            .find(&format!("{flag} <"))
            .unwrap_or_else(|| panic!("no {flag} in:\n{}", out.stdout));
        // The flag's own entry: up to the next flag.
        let entry = &help[at..];
        let entry = &entry[..entry[2..].find(" --").map_or(entry.len(), |i| i + 2)];
        assert!(
            entry.contains(&format!("[default: {default}]")),
            "{flag}: {entry}"
        );
    }
    // `ping` takes the same flags: its help says the same.
    let out = run_flockd(&["ping", "--help"], &[], Duration::from_secs(10));
    assert!(out.stdout.contains("[default: 6390]"), "{}", out.stdout);
}

#[test]
fn an_unknown_flockd_variable_is_warned_about_and_the_server_starts() {
    let dir = TempDir::new("unknown-env");
    let server = Server::try_start_in_with_env(
        dir.path(),
        &[],
        &[
            ("FLOCKD_PROT", "6395"),
            ("FLOCKD_NOTHING_LIKE_IT", "1"),
            // Read by the tools, tests and examples, not by the server: no warning.
            ("FLOCKD_URL", "redis://127.0.0.1:1"),
            ("FLOCKD_BIN", "/bin/true"),
            ("FLOCKD_FAULT_SEED", "3"),
            // A key's own variable.
            ("FLOCKD_MAXCLIENTS", "100"),
        ],
    )
    .expect("the server starts despite the unknown variable");
    let mut raw = server.raw();
    assert_eq!(raw.call(&["PING"]), "+PONG\r\n");
    let log = server.log();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("environment variable"))
        .collect();
    assert!(
        warned
            .iter()
            .any(|l| l.contains("FLOCKD_PROT") && l.contains("FLOCKD_PORT")),
        "{log}"
    );
    assert!(
        warned
            .iter()
            .any(|l| l.contains("FLOCKD_NOTHING_LIKE_IT") && !l.contains("did you mean")),
        "{log}"
    );
    for quiet in [
        "FLOCKD_URL",
        "FLOCKD_BIN",
        "FLOCKD_FAULT_SEED",
        "FLOCKD_MAXCLIENTS",
    ] {
        assert!(!warned.iter().any(|l| l.contains(quiet)), "{quiet}: {log}");
    }
    assert_eq!(warned.len(), 2, "{log}");
}
