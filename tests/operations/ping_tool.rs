//! `flockd ping`, the health check: it takes the daemon's connection flags after the
//! subcommand as well as before it, and its help lists them.

use std::time::Duration;

use crate::common::{TestServer, run_flockd};

#[test]
fn ping_takes_the_connection_flags_after_the_subcommand() {
    let server = TestServer::start(&["--requirepass", "s3cret"]);
    let port = server.addr.port().to_string();
    for args in [
        vec!["ping", "--port", &port, "--requirepass", "s3cret"],
        vec!["--port", &port, "ping", "--requirepass", "s3cret"],
        vec!["--port", &port, "--requirepass", "s3cret", "ping"],
    ] {
        let out = run_flockd(&args, &[], Duration::from_secs(20));
        assert_eq!(
            out.status.and_then(|s| s.code()),
            Some(0),
            "{args:?}: {}",
            out.stderr
        );
        assert_eq!(out.stdout.trim(), "PONG", "{args:?}");
    }
    let out = run_flockd(
        &["ping", "--port", &port, "--requirepass", "wrong"],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.and_then(|s| s.code()), Some(1));
    assert!(out.stderr.contains("WRONGPASS"), "{}", out.stderr);
}

#[test]
fn ping_help_lists_the_connection_flags() {
    let out = run_flockd(&["ping", "--help"], &[], Duration::from_secs(20));
    assert_eq!(out.status.and_then(|s| s.code()), Some(0), "{}", out.stderr);
    for flag in [
        "--port",
        "--bind",
        "--requirepass",
        "--config",
        "--tls-port",
        "--tls-cert-file",
    ] {
        assert!(
            out.stdout.contains(flag),
            "{flag} missing from:\n{}",
            out.stdout
        );
    }
}
