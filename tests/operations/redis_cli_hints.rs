//! The real redis-cli, in a pseudo-terminal (tmux), shows flockd's argument hints: it builds
//! them from `COMMAND DOCS` `arguments`, which flockd derives from each command's syntax. Typing
//! `FLOCK.ACQUIRE ` must show `name lease-ms [SHARED|LIMIT n] [WAIT ms] ...` after the cursor.
//!
//! Needs `tmux` and `redis-cli` (CI installs both); without them it prints a NOTICE and passes (and fails under CI=true).

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::TestServer;

/// One tmux server on its own socket, killed when dropped (also when the test panics).
struct Tmux {
    socket: String,
    /// The socket file, removed after the server is killed (tmux leaves it behind).
    socket_path: Option<String>,
}

impl Tmux {
    fn start(socket: String, width: u16, command: &str) -> Tmux {
        let mut tmux = Tmux {
            socket,
            socket_path: None,
        };
        let out = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "hints",
            "-x",
            &width.to_string(),
            "-y",
            "20",
            command,
        ]);
        assert!(
            out.status.success(),
            "tmux new-session failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = tmux.run(&["display-message", "-p", "-t", "hints", "#{socket_path}"]);
        let path = String::from_utf8_lossy(&path.stdout).trim().to_string();
        tmux.socket_path = (!path.is_empty()).then_some(path);
        tmux
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .output()
            .expect("run tmux")
    }

    /// Types `text` literally (no key names).
    fn type_text(&self, text: &str) {
        let out = self.run(&["send-keys", "-t", "hints", "-l", text]);
        assert!(out.status.success(), "tmux send-keys failed");
    }

    fn key(&self, key: &str) {
        let out = self.run(&["send-keys", "-t", "hints", key]);
        assert!(out.status.success(), "tmux send-keys {key} failed");
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "hints"]).stdout)
            .into_owned()
    }

    /// Polls the screen (at most 200 times, 10 s) until a line satisfies `want`; that line.
    fn wait_line(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut screen = String::new();
        for _ in 0..200 {
            screen = self.screen();
            if let Some(line) = screen.lines().find(|l| want(l.trim_end())) {
                return line.trim_end().to_string();
            }
            if Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-cli never showed {what}; the screen:\n{screen}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
        if let Some(path) = &self.socket_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn available(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn redis_cli_shows_argument_hints() {
    for (program, arg) in [("tmux", "-V"), ("redis-cli", "--version")] {
        if !available(program, arg) {
            common::skipping(&format!(
                "{program} is not installed; skipping the redis-cli hints test"
            ));
            return;
        }
    }
    let server = TestServer::start(&[]);
    let port = server.addr.port();
    let prompt = format!("{}:{port}>", server.addr.ip());
    // No history or rc file of the user's: redis-cli reads and writes both under $HOME.
    let cli = format!(
        "env REDISCLI_HISTFILE=/dev/null REDISCLI_RCFILE=/dev/null redis-cli -h {} -p {port}",
        server.addr.ip()
    );
    let tmux = Tmux::start(format!("flockd-test-{}", std::process::id()), 200, &cli);
    tmux.wait_line("its prompt", |l| l == prompt);

    // What the user types, and what the line shows then: the typed text plus the hint.
    let cases = [
        (
            "FLOCK.ACQUIRE ",
            "FLOCK.ACQUIRE name lease-ms [SHARED|LIMIT n] [WAIT ms] [OWNER id] [SESSION] [LOCKDELAY ms]",
        ),
        // Typed arguments leave the hint, as redis-cli drops them from it.
        (
            "FLOCK.ACQUIRE order:1 30000 ",
            "FLOCK.ACQUIRE order:1 30000 [SHARED|LIMIT n] [WAIT ms] [OWNER id] [SESSION] [LOCKDELAY ms]",
        ),
        ("fence.set ", "fence.set key token value [LOCK name]"),
        (
            "FLOCK.ACQUIREALL ",
            "FLOCK.ACQUIREALL numnames name [name ...] lease-ms [WAIT ms] [OWNER id] [SESSION]",
        ),
        (
            "FLOCK.SCAN ",
            "FLOCK.SCAN cursor [MATCH pattern] [COUNT count] [HELD]",
        ),
        // Subcommands get their hints from the container's syntax.
        ("CONFIG GET ", "CONFIG GET parameter [parameter ...]"),
        (
            "CONFIG SET ",
            "CONFIG SET parameter value [parameter value ...]",
        ),
        (
            "COMMAND GETKEYS ",
            "COMMAND GETKEYS command [arg [arg ...]]",
        ),
    ];
    for (typed, shown) in cases {
        tmux.key("C-u");
        tmux.type_text(typed);
        let want = format!("{prompt} {shown}");
        tmux.wait_line(&format!("{want:?}"), |l| l == want);
    }

    // The hint is only shown: the command typed runs as typed.
    tmux.key("C-u");
    tmux.type_text("FLOCK.ACQUIRE hints-lock 30000");
    tmux.key("Enter");
    tmux.wait_line("the acquire's reply", |l| l == "(integer) 1");
    drop(tmux);
}
