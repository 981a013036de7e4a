//! `flockd lock NAME -- CMD` with real processes: the real binary against a real server (and a
//! real 3-node cluster), shell commands that report what they see into files, and the lock's
//! state read back with raw RESP. Every process is stopped by pid; every wait is bounded.

use crate::common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::{BIN, TempDir, TestServer, wait_until};

/// A running `flockd lock`, its output collected, killed by pid if the test ends first.
struct LockRun {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl LockRun {
    fn start(url: &str, args: &[&str]) -> LockRun {
        let mut child = Command::new(&*BIN)
            .arg("lock")
            .args(args)
            .env("FLOCKD_URL", url)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn flockd lock");
        let collect = |mut pipe: Box<dyn Read + Send>| {
            let text = Arc::new(Mutex::new(String::new()));
            let sink = text.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    sink.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&chunk[..n]));
                }
            });
            text
        };
        let stdout = collect(Box::new(child.stdout.take().unwrap()));
        let stderr = collect(Box::new(child.stderr.take().unwrap()));
        LockRun {
            child,
            stdout,
            stderr,
        }
    }

    /// Its exit status, waiting at most `timeout` (then it is killed and the test fails).
    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Let the readers drain the pipes.
                std::thread::sleep(Duration::from_millis(50));
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "flockd lock still running after {timeout:?}; stderr: {}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a successful exit (at most 20 s); its stdout.
    fn succeeds(&mut self) -> String {
        let status = self.wait(Duration::from_secs(20));
        assert_eq!(status.code(), Some(0), "{}", self.stderr());
        self.stdout()
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(status.success());
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for LockRun {
    fn drop(&mut self) {
        // CMD dies with it (PR_SET_PDEATHSIG).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A shell line that waits (at most 40 s) until `file` exists.
fn until_exists(file: &Path) -> String {
    format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 400 ]; do sleep 0.1; i=$((i+1)); done",
        file.display()
    )
}

/// Waits (at most 20 s) for a file a CMD writes, and returns its trimmed text.
fn read_when_written(file: &Path) -> String {
    wait_until(Duration::from_secs(20), "CMD writes its file", || {
        std::fs::read_to_string(file).is_ok_and(|text| text.ends_with('\n'))
    });
    std::fs::read_to_string(file).unwrap().trim().to_string()
}

/// `FLOCK.STATUS name` field by field (RESP2 flat array of field/value).
fn status_field(server: &TestServer, name: &str, field: &str) -> String {
    common::status_field(&server.raw().call(&["FLOCK.STATUS", name]), field)
}

#[test]
fn a_shell_command_sees_its_lock_and_its_exit_code_is_flockd_locks() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let mut run = LockRun::start(
        &url,
        &[
            "job",
            "--",
            "sh",
            "-c",
            "echo \"$FLOCK_NAME $FLOCK_TOKEN $FLOCKD_URL\"; exit 7",
        ],
    );
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(7));
    assert_eq!(run.stdout(), format!("job 1 {url}\n"));
    assert_eq!(run.stderr(), "");
    // Released: free, with its counter kept.
    assert_eq!(status_field(&server, "job", "locked"), "0");
    assert_eq!(status_field(&server, "job", "last-token"), "1");
    let mut run = LockRun::start(&url, &["job", "--", "sh", "-c", "echo $FLOCK_TOKEN"]);
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(0));
    assert_eq!(run.stdout(), "2\n");
    // A command that is not there: 127, as a shell says it, and nothing stays held.
    let mut run = LockRun::start(&url, &["job", "--", "/nonexistent/command"]);
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(127));
    assert!(run.stderr().contains("cannot run /nonexistent/command"));
    assert_eq!(status_field(&server, "job", "locked"), "0");
}

#[test]
fn a_second_lock_waits_and_then_runs_with_a_higher_token() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let dir = TempDir::new("lock-wait");
    let (first_token, stop) = (dir.path().join("first"), dir.path().join("stop"));
    let mut first = LockRun::start(
        &url,
        &[
            "queue",
            "--",
            "sh",
            "-c",
            &format!(
                "echo $FLOCK_TOKEN > '{}'; {}",
                first_token.display(),
                until_exists(&stop)
            ),
        ],
    );
    assert_eq!(read_when_written(&first_token), "1");
    let mut second = LockRun::start(
        &url,
        &[
            "queue",
            "--wait",
            "30",
            "--",
            "sh",
            "-c",
            "echo $FLOCK_TOKEN",
        ],
    );
    wait_until(Duration::from_secs(20), "the second is queued", || {
        status_field(&server, "queue", "waiters") == "1"
    });
    assert!(second.running());
    assert_eq!(second.stdout(), "", "ran while the first held the lock");
    std::fs::write(&stop, "").unwrap();
    assert_eq!(first.wait(Duration::from_secs(20)).code(), Some(0));
    assert_eq!(second.wait(Duration::from_secs(20)).code(), Some(0));
    assert_eq!(second.stdout(), "2\n");
    assert_eq!(status_field(&server, "queue", "locked"), "0");
}

#[test]
fn nonblock_and_a_wait_that_runs_out_exit_with_the_conflict_code_without_running_cmd() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let dir = TempDir::new("lock-nonblock");
    let (held, stop, ran) = (
        dir.path().join("held"),
        dir.path().join("stop"),
        dir.path().join("ran"),
    );
    let mut holder = LockRun::start(
        &url,
        &[
            "busy",
            "--",
            "sh",
            "-c",
            &format!("echo > '{}'; {}", held.display(), until_exists(&stop)),
        ],
    );
    read_when_written(&held);
    let touch = format!("touch '{}'", ran.display());
    for (args, code) in [
        (vec!["busy", "--nonblock"], 1),
        (vec!["busy", "-n", "-E", "42"], 42),
        (vec!["busy", "-w", "0.3", "--conflict-exit-code", "9"], 9),
    ] {
        let mut args = args;
        args.extend(["--", "sh", "-c", &touch]);
        let mut run = LockRun::start(&url, &args);
        assert_eq!(
            run.wait(Duration::from_secs(20)).code(),
            Some(code),
            "{args:?}"
        );
        assert_eq!((run.stdout(), run.stderr()), (String::new(), String::new()));
        assert!(!ran.exists(), "CMD ran without the lock: {args:?}");
    }
    std::fs::write(&stop, "").unwrap();
    assert_eq!(holder.wait(Duration::from_secs(20)).code(), Some(0));
}

#[test]
fn a_force_release_ends_the_command_at_once_with_the_lost_code() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let dir = TempDir::new("lock-force");
    let (started, trapped) = (dir.path().join("started"), dir.path().join("trapped"));
    // A 60 s lease is renewed every 20 s: only the force-release event can end CMD soon.
    let mut run = LockRun::start(
        &url,
        &[
            "forced",
            "--lease",
            "60000",
            "--",
            "sh",
            "-c",
            &format!(
                "trap \"echo term > '{}'; exit 0\" TERM; echo > '{}'; {}",
                trapped.display(),
                started.display(),
                until_exists(&dir.path().join("never"))
            ),
        ],
    );
    read_when_written(&started);
    let forced_at = Instant::now();
    assert_eq!(
        server.raw().call(&["FLOCK.FORCERELEASE", "forced"]),
        ":1\r\n"
    );
    let status = run.wait(Duration::from_secs(20));
    let took = forced_at.elapsed();
    println!("force-release to flockd lock's exit: {took:?}");
    assert_eq!(status.code(), Some(75), "stderr: {}", run.stderr());
    assert!(
        took < Duration::from_secs(10),
        "ended only after {took:?}: not by the event"
    );
    assert_eq!(read_when_written(&trapped), "term");
    let stderr = run.stderr();
    assert!(
        stderr.contains("lost the lock 'forced' (token 1): force-released"),
        "{stderr}"
    );
}

#[test]
fn a_command_that_ignores_sigterm_after_a_lost_lock_gets_sigkill() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let dir = TempDir::new("lock-kill");
    let started = dir.path().join("started");
    let mut run = LockRun::start(
        &url,
        &[
            "stubborn",
            "--lease",
            "60000",
            "--kill-after",
            "300",
            "--lost-exit-code",
            "70",
            "--",
            "sh",
            "-c",
            &format!(
                "trap '' TERM; echo > '{}'; {}",
                started.display(),
                until_exists(&dir.path().join("never"))
            ),
        ],
    );
    read_when_written(&started);
    assert_eq!(
        server.raw().call(&["FLOCK.FORCERELEASE", "stubborn"]),
        ":1\r\n"
    );
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(70));
    assert!(run.stderr().contains("SIGKILL"), "{}", run.stderr());
}

#[test]
fn a_killed_or_crashed_command_releases_at_once() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let dir = TempDir::new("lock-crash");
    let pid_file = dir.path().join("pid");
    let mut run = LockRun::start(
        &url,
        &[
            "crash",
            "--lease",
            "60000",
            "--",
            "sh",
            "-c",
            &format!("echo $$ > '{}'; exec sleep 30", pid_file.display()),
        ],
    );
    let pid = read_when_written(&pid_file);
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(128 + 9));
    // The lease had 60 s to go: a grant now means it was released.
    assert_eq!(
        server.raw().call(&["FLOCK.ACQUIRE", "crash", "1000"]),
        ":2\r\n"
    );
    // A crash (SIGSEGV) the same way.
    let mut run = LockRun::start(
        &url,
        &[
            "segv",
            "--lease",
            "60000",
            "--",
            "sh",
            "-c",
            "kill -SEGV $$",
        ],
    );
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(128 + 11));
    assert_eq!(
        server.raw().call(&["FLOCK.ACQUIRE", "segv", "1000"]),
        ":2\r\n"
    );
}

#[test]
fn sigterm_and_sigint_to_flockd_lock_reach_the_command_and_then_release() {
    let server = TestServer::start(&[]);
    let url = server.url();
    for (sig, name) in [("TERM", "term"), ("INT", "int")] {
        let dir = TempDir::new("lock-signal");
        let started = dir.path().join("started");
        let mut run = LockRun::start(
            &url,
            &[
                name,
                "--lease",
                "60000",
                "--",
                "sh",
                "-c",
                &format!(
                    "trap 'echo got-{sig}; exit 3' {sig}; echo > '{}'; {}",
                    started.display(),
                    until_exists(&dir.path().join("never"))
                ),
            ],
        );
        read_when_written(&started);
        // Still held while CMD runs.
        assert_eq!(status_field(&server, name, "locked"), "1");
        run.signal(sig);
        assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(3));
        assert_eq!(run.stdout(), format!("got-{sig}\n"));
        assert_eq!(status_field(&server, name, "locked"), "0", "{sig}");
    }
}

#[test]
fn a_leader_killed_in_a_three_node_cluster_does_not_end_the_command() {
    let mut cluster = Cluster::start(3);
    let leader = cluster.wait_for_leader(Duration::from_secs(20));
    // The leader first: flockd lock's connection is to the node that dies.
    let mut order = vec![leader];
    order.extend((0..3).filter(|i| *i != leader));
    let urls: Vec<String> = order
        .iter()
        .map(|i| format!("redis://{}/", cluster.addr(*i)))
        .collect();
    let dir = TempDir::new("lock-cluster");
    let (token_file, stop) = (dir.path().join("token"), dir.path().join("stop"));
    let lease_ms = 4000;
    let mut run = LockRun::start(
        &urls.join(","),
        &[
            "failover",
            "--lease",
            &lease_ms.to_string(),
            "--",
            "sh",
            "-c",
            &format!(
                "echo $FLOCK_TOKEN > '{}'; {}",
                token_file.display(),
                until_exists(&stop)
            ),
        ],
    );
    let token = read_when_written(&token_file);
    cluster.kill(leader);
    let killed_at = Instant::now();
    let survivor = order[1];
    let new_leader = cluster.wait_for_leader(Duration::from_secs(20));
    println!(
        "new leader: node {} after {:?}",
        new_leader + 1,
        killed_at.elapsed()
    );
    // Past the lease and the new leader's re-arm (lease + the largest election timeout from
    // when it took office): the holding is alive now only because renewals went on.
    std::thread::sleep(Duration::from_millis(lease_ms + 1000 + 2500));
    assert!(
        run.running(),
        "CMD ended after the leader died: {}",
        run.stderr()
    );
    let status = cluster.call(survivor, &["FLOCK.STATUS", "failover"]);
    assert_eq!(
        (
            common::status_field(&status, "locked"),
            common::status_field(&status, "token")
        ),
        ("1".to_string(), token),
        "{status}"
    );
    std::fs::write(&stop, "").unwrap();
    let status = run.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "stderr: {}", run.stderr());
    assert!(!run.stderr().contains("lost"), "{}", run.stderr());
    let ttl = cluster.call(survivor, &["FLOCK.TTL", "failover"]);
    assert_eq!(ttl, ":-2\r\n", "not released");
}

#[test]
fn a_password_in_the_url_logs_in_and_a_wrong_one_is_a_failure_of_its_own() {
    let server = TestServer::start(&["--requirepass", "s3cret"]);
    let good = format!("redis://:s3cret@{}/", server.addr);
    let mut run = LockRun::start(&good, &["auth", "--", "sh", "-c", "echo $FLOCK_TOKEN"]);
    assert_eq!(run.succeeds(), "1\n");
    let bad = format!("redis://:wrong@{}/", server.addr);
    let mut run = LockRun::start(&bad, &["auth", "--", "sh", "-c", "echo ran"]);
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(125));
    assert_eq!(run.stdout(), "");
    // In the tool's own words: which server, and what to check.
    assert!(
        run.stderr().starts_with(&format!(
            "flockd lock: the server at {} refused the login: ",
            server.addr
        )) && run
            .stderr()
            .contains("check the user and password in the URL"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_server_that_stops_answering_gets_cmd_killed_before_the_lease_ends() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let dir = TempDir::new("lock-stall");
    let started = dir.path().join("started");
    let lease = Duration::from_millis(3000);
    // CMD ignores SIGTERM, and --kill-after is far longer than the lease: only the lease's end
    // by flockd lock's clock can bring the SIGKILL this soon.
    let mut run = LockRun::start(
        &url,
        &[
            "stall",
            "--lease",
            &lease.as_millis().to_string(),
            "--kill-after",
            "30000",
            "--",
            "sh",
            "-c",
            &format!(
                "trap '' TERM; echo > '{}'; {}",
                started.display(),
                until_exists(&dir.path().join("never"))
            ),
        ],
    );
    read_when_written(&started);
    // Every renewal sent from now on goes unanswered.
    server.signal("STOP");
    let stopped_at = Instant::now();
    let status = run.wait(Duration::from_secs(25));
    let took = stopped_at.elapsed();
    server.signal("CONT");
    println!("server stopped to CMD killed and flockd lock gone: {took:?}");
    assert_eq!(status.code(), Some(75), "{}", run.stderr());
    let stderr = run.stderr();
    assert!(stderr.contains("the lease is about to run out"), "{stderr}");
    assert!(stderr.contains("SIGKILL"), "{stderr}");
    assert!(
        took < Duration::from_secs(20),
        "waited for --kill-after, not for the lease: {took:?}"
    );
}

#[test]
fn a_node_that_refuses_connections_is_passed_over_for_the_next() {
    let server = TestServer::start(&[]);
    // A port nothing listens on (bound once to be free, then released).
    let dead = common::cluster::free_ports(1)[0];
    let urls = format!("redis://127.0.0.1:{dead}/,{}", server.url());
    let mut run = LockRun::start(&urls, &["next", "--", "sh", "-c", "echo $FLOCK_TOKEN"]);
    assert_eq!(run.succeeds(), "1\n");
    assert_eq!(status_field(&server, "next", "locked"), "0");
    // The dead node alone: a failure of flockd lock's own, CMD never run.
    let mut run = LockRun::start(
        &format!("redis://127.0.0.1:{dead}/"),
        &["next", "--", "sh", "-c", "echo ran"],
    );
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(125));
    assert_eq!(run.stdout(), "");
    assert!(run.stderr().contains("refused"), "{}", run.stderr());
}

#[test]
fn a_node_without_a_leader_answers_clusterdown_and_the_next_node_is_asked() {
    // Node 1 of a 3-node cluster started alone: no leader, so -CLUSTERDOWN after 300 ms.
    let wait_leader = vec!["--cluster-wait-leader-ms".to_string(), "300".to_string()];
    let mut lonely = Cluster::start_with(0, 3, vec![wait_leader]);
    let all: Vec<String> = (0..3).map(|i| lonely.peer(i)).collect();
    lonely.start_node_with(0, &all.join(","));
    let reply = lonely.call(0, &["FLOCK.ACQUIRE", "probe", "1000"]);
    assert!(reply.starts_with("-CLUSTERDOWN"), "{reply}");
    let server = TestServer::start(&[]);
    let urls = format!("redis://{}/,{}", lonely.addr(0), server.url());
    let mut run = LockRun::start(
        &urls,
        &[
            "down",
            "--lease",
            "2000",
            "--",
            "sh",
            "-c",
            "sleep 1; echo $FLOCK_TOKEN",
        ],
    );
    assert_eq!(run.succeeds(), "1\n");
    assert_eq!(status_field(&server, "down", "last-token"), "1");
    assert_eq!(status_field(&server, "down", "locked"), "0");
}

#[test]
fn an_interactive_command_gets_the_terminal() {
    let have_script = Command::new("script")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_script {
        return common::skipping("script(1) (util-linux) is not installed");
    }
    let server = TestServer::start(&[]);
    // script(1) runs flockd lock on a pseudo-terminal, in its foreground. CMD reads that
    // terminal: in a background process group its read would stop it (SIGTTIN) for good.
    let line = format!(
        "FLOCKD_URL={} {bin} lock tty -- sh -c 'read line; echo \"got $line token $FLOCK_TOKEN\"; exit 4'",
        server.url(),
        bin = &*BIN
    );
    let mut child = Command::new("timeout")
        .args(["20", "script", "-qec", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = common::collect_output(child, Duration::from_secs(30));
    assert!(out.stdout.contains("got hello token 1"), "{out:?}");
    // script(1) exits with its command's code: flockd lock's, which is CMD's.
    assert_eq!(out.status.and_then(|s| s.code()), Some(4), "{out:?}");
    assert_eq!(status_field(&server, "tty", "locked"), "0");
}

/// A lock granted after a wait longer than its lease runs CMD with the lock kept: it was
/// declared lost (exit 75) in the same millisecond as the grant when the lease was counted from
/// the blocking acquire's send.
#[test]
fn a_lock_granted_after_a_wait_longer_than_its_lease_is_kept_while_cmd_runs() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let mut first = LockRun::start(&url, &["wj", "--lease", "1500", "--", "sleep", "3"]);
    wait_until(Duration::from_secs(20), "the first holds the lock", || {
        status_field(&server, "wj", "locked") == "1"
    });
    // CMD runs for two renewal periods of its 1.5 s lease.
    let mut second = LockRun::start(
        &url,
        &[
            "wj",
            "--lease",
            "1500",
            "-w",
            "20",
            "--",
            "sh",
            "-c",
            "sleep 1.5; echo $FLOCK_TOKEN",
        ],
    );
    assert_eq!(first.wait(Duration::from_secs(20)).code(), Some(0));
    let status = second.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{}", second.stderr());
    assert_eq!(second.stdout(), "2\n");
    assert!(!second.stderr().contains("lost"), "{}", second.stderr());
}

/// As with flock(1): `--` before CMD is optional, `-w` takes seconds with fractions, and a
/// server that is down at start is tried again while the wait lasts (the address named).
#[test]
fn flock_conventions_cmd_without_dashes_wait_in_seconds_and_a_server_that_comes_up() {
    let server = TestServer::start(&[]);
    let mut run = LockRun::start(&server.url(), &["plain", "-w", "2.5", "echo", "hi", "-n"]);
    assert_eq!(run.succeeds(), "hi -n\n");
    let mut bad = LockRun::start(&server.url(), &["plain", "-w", "ten", "true"]);
    assert_ne!(bad.wait(Duration::from_secs(20)).code(), Some(0));
    assert!(
        bad.stderr().contains("not a number of seconds"),
        "{}",
        bad.stderr()
    );

    // Down at start: tried again until it comes up within the wait.
    let port = common::cluster::free_ports(1)[0];
    let url = format!("redis://127.0.0.1:{port}/");
    let mut run = LockRun::start(
        &url,
        &["later", "-w", "30", "sh", "-c", "echo $FLOCK_TOKEN"],
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(run.running(), "gave up at once: {}", run.stderr());
    let dir = TempDir::new("lock-later");
    let port_text = port.to_string();
    let _late = common::Server::try_spawn(
        dir.path(),
        ["--bind", "127.0.0.1", "--port", &port_text, "--dir"]
            .iter()
            .map(|s| s.to_string())
            .chain([dir.path().display().to_string()])
            .collect(),
        &[],
    )
    .expect("the late server starts");
    assert_eq!(run.succeeds(), "1\n");
    assert!(
        run.stderr()
            .contains(&format!("cannot reach the server at 127.0.0.1:{port}"))
            && run.stderr().contains("trying again while the wait lasts"),
        "{}",
        run.stderr()
    );
    // Down for the whole wait: the tool's own failure, naming the address.
    let dead = common::cluster::free_ports(1)[0];
    let mut run = LockRun::start(
        &format!("redis://127.0.0.1:{dead}/"),
        &["never", "-w", "1", "echo", "ran"],
    );
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(125));
    assert_eq!(run.stdout(), "");
    assert!(
        run.stderr()
            .contains(&format!("cannot reach the server at 127.0.0.1:{dead}")),
        "{}",
        run.stderr()
    );
}

/// A lease the server refuses is reported in the tool's words, CMD not run.
#[test]
fn a_lease_the_server_refuses_is_said_in_the_tools_words() {
    let server = TestServer::start(&[]);
    let mut run = LockRun::start(
        &server.url(),
        &["long", "--lease", "999999999999", "echo", "ran"],
    );
    assert_eq!(run.wait(Duration::from_secs(20)).code(), Some(125));
    assert_eq!(run.stdout(), "");
    assert!(
        run.stderr()
            .starts_with("flockd lock: the server refused the lock request: ERR ")
            && run.stderr().contains("lease-ms"),
        "{}",
        run.stderr()
    );
}
