//! One data directory, one server: a second flockd (or `check-aof --fix`) on a directory in use
//! exits 1 at once, naming the holder's pid, and changes and creates nothing; the lock dies with
//! its process, so a restart after `kill -9` is never blocked. A start refused for any other
//! reason (a bad TLS file, a missing ACL file, a port in use) creates nothing either, and says
//! why once.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::common::cluster::free_ports;
use crate::common::{Server, TempDir, run_flockd};

/// Every file under `dir` with its length and modification time.
fn listing(dir: &Path) -> BTreeMap<String, (u64, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.insert(
                entry.path().display().to_string(),
                (meta.len(), meta.modified().unwrap()),
            );
        }
    }
    out
}

fn refused_in_use(output: &common::RunOutput, pid: u32, dir: &Path) {
    assert_eq!(
        output.status.and_then(|s| s.code()),
        Some(1),
        "exit status; stderr: {}",
        output.stderr
    );
    let wanted = format!("another flockd (pid {pid}) is using {}", dir.display());
    assert!(
        output.stderr.contains(&wanted),
        "wanted {wanted:?} in:\n{}",
        output.stderr
    );
    assert_eq!(
        output.stderr.matches(&wanted).count(),
        1,
        "said once: {}",
        output.stderr
    );
}

#[test]
fn a_second_server_on_the_same_directory_exits_at_once_and_changes_nothing() {
    let dir = TempDir::new("dir-twice");
    let data = dir.path().join("data");
    let mut first = Server::start_in(&data, &[]);
    let mut conn = first.conn();
    let token: i64 = redis::cmd("FLOCK.ACQUIRE")
        .arg("job")
        .arg(60000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(token, 1);
    let before = listing(&data);

    let data_arg = data.display().to_string();
    let second = run_flockd(
        &["--bind", "127.0.0.1", "--port", "0", "--dir", &data_arg],
        &[],
        Duration::from_secs(20),
    );
    refused_in_use(&second, first.pid(), &data);
    assert_eq!(
        listing(&data),
        before,
        "the refused start touched the directory"
    );

    // The first one is untouched: its grant stands and the next token follows it.
    let next: i64 = redis::cmd("FLOCK.ACQUIRE")
        .arg("job2")
        .arg(60000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(next, 1);
    let held: Option<i64> = redis::cmd("FLOCK.ACQUIRE")
        .arg("job")
        .arg(60000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(held, None, "still held by the first grant");

    // The lock dies with the process: a restart after kill -9 starts at once.
    first.kill9();
    let restarted = Server::start_in(&data, &[]);
    let mut conn = restarted.conn();
    let status: Vec<redis::Value> = redis::cmd("FLOCK.STATUS")
        .arg("job")
        .query(&mut conn)
        .unwrap();
    assert!(format!("{status:?}").contains("last-token"), "{status:?}");
    let last: i64 = redis::cmd("FLOCK.TOKEN")
        .arg("job")
        .query(&mut conn)
        .unwrap();
    assert_eq!(last, 1, "one grant on record, not two");
}

#[test]
fn check_aof_fix_refuses_a_directory_in_use() {
    let dir = TempDir::new("dir-check-aof");
    let data = dir.path().join("data");
    let server = Server::start_in(&data, &[]);
    let mut conn = server.conn();
    let _: i64 = redis::cmd("FLOCK.ACQUIRE")
        .arg("a")
        .arg(60000)
        .query(&mut conn)
        .unwrap();
    let aof = data.join("flockd.aof");
    let before = listing(&data);
    let aof_arg = aof.display().to_string();
    let fix = run_flockd(
        &["check-aof", "--fix", &aof_arg],
        &[],
        Duration::from_secs(20),
    );
    refused_in_use(&fix, server.pid(), &data);
    assert_eq!(listing(&data), before);
    // A check without --fix only reads, and may run beside the server.
    let check = run_flockd(&["check-aof", &aof_arg], &[], Duration::from_secs(20));
    assert_eq!(
        check.status.and_then(|s| s.code()),
        Some(0),
        "{}",
        check.stdout
    );
}

#[test]
fn a_cluster_node_keeps_its_directory_to_itself() {
    let dir = TempDir::new("dir-cluster");
    let data = dir.path().join("node");
    let ports = free_ports(4);
    let peers = format!("1=127.0.0.1:{}@{}", ports[0], ports[1]);
    let data_arg = data.display().to_string();
    let node = |port: u16| {
        vec![
            "--bind".to_string(),
            "127.0.0.1".into(),
            "--port".into(),
            port.to_string(),
            "--dir".into(),
            data_arg.clone(),
            "--node-id".into(),
            "1".into(),
            "--cluster-peers".into(),
            peers.clone(),
        ]
    };
    let first = Server::try_spawn(&data, node(ports[0]), &[]).expect("the node starts");
    let before = listing(&data);
    let second_args = node(ports[2]);
    let second_args: Vec<&str> = second_args.iter().map(String::as_str).collect();
    let second = run_flockd(&second_args, &[], Duration::from_secs(20));
    refused_in_use(&second, first.pid(), &data);
    // The running node may write its log meanwhile; the refused one added no file.
    let after = listing(&data);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "files in the node's directory"
    );
}

/// A start refused for a reason found before the directory is needed: nothing is created, and
/// the reason is printed once.
#[test]
fn a_refused_start_creates_nothing_and_says_why_once() {
    let dir = TempDir::new("dir-refused");
    let data = dir.path().join("never");
    let data_arg = data.display().to_string();
    let missing_acl = dir.path().join("users.acl").display().to_string();
    let missing_cert = dir.path().join("server.crt").display().to_string();
    let missing_key = dir.path().join("server.key").display().to_string();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port().to_string();
    let cases: Vec<(Vec<&str>, String, &str)> = vec![
        (
            vec!["--port", "0", "--aclfile", &missing_acl],
            format!("cannot read aclfile {missing_acl}"),
            "a missing ACL file",
        ),
        (
            vec![
                "--port",
                "0",
                "--tls-port",
                "0",
                "--tls-cert-file",
                &missing_cert,
                "--tls-key-file",
                &missing_key,
                "--tls-auth-clients",
                "no",
            ],
            missing_cert.clone(),
            "a missing TLS certificate",
        ),
        (
            vec!["--port", &taken_port],
            format!("cannot listen on 127.0.0.1:{taken_port}"),
            "a port in use",
        ),
    ];
    for (flags, says, what) in cases {
        let mut args = vec!["--bind", "127.0.0.1", "--dir", &data_arg];
        args.extend(flags);
        let out = run_flockd(&args, &[], Duration::from_secs(20));
        assert_eq!(
            out.status.and_then(|s| s.code()),
            Some(1),
            "{what}: exit status; stderr: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains(&says),
            "{what}: wanted {says:?} in:\n{}",
            out.stderr
        );
        let error_lines: Vec<&str> = out.stderr.lines().filter(|l| l.contains(&says)).collect();
        assert_eq!(
            error_lines.len(),
            1,
            "{what}: said once, not:\n{}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("previously active"),
            "{what}: no ACL rules were active: {}",
            out.stderr
        );
        assert!(!data.exists(), "{what}: created {}", data.display());
    }
    drop(taken);
}
