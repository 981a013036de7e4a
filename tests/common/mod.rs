//! Test harness: starts the real `flockd` binary on 127.0.0.1 with port 0 and a fresh data
//! directory, finds its address from the "ready to accept connections on ADDR" log line, and
//! stops it by pid when dropped. Also a raw-bytes client for exact reply checks.

#![allow(dead_code)]

pub mod cluster;
pub mod load;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The binary under test: the one cargo built, or `FLOCKD_TEST_BIN` to run a suite against
/// another build (an older commit's, to see that a new test fails there).
pub static BIN: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    std::env::var("FLOCKD_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_flockd").to_owned())
});

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "flockd-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub dir: PathBuf,
    /// Everything the server logged so far (stderr).
    pub log: Arc<Mutex<String>>,
    pub args: Vec<String>,
}

impl Server {
    /// Starts flockd on a free port with `dir` as its data directory and extra flags.
    pub fn start_in(dir: &Path, extra: &[&str]) -> Server {
        Self::try_start_in(dir, extra)
            .unwrap_or_else(|log| panic!("flockd did not become ready:\n{log}"))
    }

    /// Like `start_in`, but returns the log if the process exits before it is ready.
    pub fn try_start_in(dir: &Path, extra: &[&str]) -> Result<Server, String> {
        Self::try_start_in_with_env(dir, extra, &[])
    }

    /// Like `try_start_in`, with extra environment variables (e.g. `FLOCKD_*`) for the process.
    pub fn try_start_in_with_env(
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let mut args: Vec<String> = vec![
            "--bind".into(),
            "127.0.0.1".into(),
            "--port".into(),
            "0".into(),
        ];
        args.push("--dir".into());
        args.push(dir.display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::try_spawn(dir, args, env)
    }

    /// Spawns flockd with exactly `args` (nothing added: no `--port 0`, no `--dir`) and extra
    /// environment variables, and waits for its ready line. `dir` is only recorded.
    pub fn try_spawn(
        dir: &Path,
        args: Vec<String>,
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let mut command = Command::new(&*BIN);
        command
            .args(&args)
            .env_remove("RUST_LOG")
            .env("FLOCKD_LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn flockd");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let log_writer = log.clone();
        // Keep draining stderr for the whole life of the process, so logging never blocks it.
        std::thread::spawn(move || {
            let reader = BufReader::new(stderr);
            for line in reader.lines() {
                let Ok(line) = line else { break };
                // Log the line before announcing readiness, so `log()` always has the ready line.
                {
                    let mut log = log_writer.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
                if let Some(addr) = ready_addr(&line) {
                    let _ = ready_tx.send(addr);
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(addr) = ready_rx.recv_timeout(Duration::from_millis(50)) {
                let addr = addr.parse().expect("ready line names an address");
                return Ok(Server {
                    child,
                    addr,
                    dir: dir.to_owned(),
                    log,
                    args,
                });
            }
            if let Ok(Some(_)) = child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                return Err(log.lock().unwrap().clone());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "timed out waiting for ready\n{}",
                    log.lock().unwrap()
                ));
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("connect")
    }

    pub fn raw(&self) -> Raw {
        Raw::connect(self.addr)
    }

    /// Sends a signal (e.g. "TERM", "KILL", "STOP", "CONT") to the server process by pid.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Waits for the process to exit, up to `timeout`; returns its exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The metrics port's address, from the `metrics on http://...` line of its log.
    pub fn metrics_addr(&self) -> SocketAddr {
        let log = self.log();
        let line = log
            .lines()
            .find(|l| l.contains("metrics on http://"))
            .unwrap_or_else(|| panic!("no metrics line in:\n{log}"));
        let rest = &line[line.find("http://").unwrap() + 7..];
        rest[..rest.find('/').unwrap()].parse().unwrap()
    }

    /// Resident memory of the server process, in KiB, from /proc.
    pub fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// The server answers PING on a fresh connection.
    pub fn assert_alive(&self) {
        let mut raw = self.raw();
        raw.send(b"PING\r\n");
        assert_eq!(
            raw.read_reply(),
            "+PONG\r\n",
            "server stopped answering; log:\n{}",
            self.log()
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A server with its own temporary data directory.
pub struct TestServer {
    pub server: Server,
    pub dir: TempDir,
}

impl std::ops::Deref for TestServer {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.server
    }
}

impl std::ops::DerefMut for TestServer {
    fn deref_mut(&mut self) -> &mut Server {
        &mut self.server
    }
}

impl TestServer {
    pub fn start(extra: &[&str]) -> TestServer {
        let dir = TempDir::new("srv");
        let server = Server::start_in(dir.path(), extra);
        TestServer { server, dir }
    }

    /// Stops the running process (SIGKILL) and starts a new one on the same data directory.
    pub fn restart_after_kill9(&mut self, extra: &[&str]) {
        self.server.kill9();
        self.server = Server::start_in(self.dir.path(), extra);
    }
}

/// The address named by a "ready to accept connections on ADDR" log line, text or JSON.
pub fn ready_addr(line: &str) -> Option<String> {
    const READY: &str = "ready to accept connections on ";
    let pos = line.find(READY)?;
    let addr: String = line[pos + READY.len()..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']' | '%'))
        .collect();
    (!addr.is_empty()).then_some(addr)
}

/// What a bounded run of the flockd binary produced.
#[derive(Debug)]
pub struct RunOutput {
    /// `None`: it was still running at the timeout (and has been killed).
    pub status: Option<std::process::ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `flockd args...` with extra environment and no stdin, for at most `timeout` (then it is
/// killed); for flags like `--version` and configuration errors that exit at once.
pub fn run_flockd(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> RunOutput {
    let mut command = Command::new(&*BIN);
    command
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.spawn().expect("spawn flockd");
    collect_output(child, timeout)
}

/// Waits for `child` (with piped stdout and stderr) to exit, at most `timeout`, then kills it
/// (by its pid); what it printed, and its status if it exited.
pub fn collect_output(mut child: std::process::Child, timeout: Duration) -> RunOutput {
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    RunOutput {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// A raw TCP client: send exact bytes, read exact replies.
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Sends a command as a multibulk request.
    pub fn cmd(&mut self, args: &[&[u8]]) {
        self.send(&encode_request(args));
    }

    /// Sends a command and reads one reply, as text.
    pub fn call(&mut self, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd(&args);
        self.read_reply()
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match self.stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                panic!(
                    "timed out waiting for a reply; got so far: {:?}",
                    String::from_utf8_lossy(&self.buf)
                )
            }
            Err(_) => false,
        }
    }

    /// Reads exactly one complete RESP2/RESP3 reply and returns its bytes as text.
    pub fn read_reply(&mut self) -> String {
        loop {
            if let Some(len) = reply_len(&self.buf) {
                let reply: Vec<u8> = self.buf.drain(..len).collect();
                return String::from_utf8_lossy(&reply).into_owned();
            }
            if !self.fill() {
                panic!(
                    "connection closed; got so far: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
            }
        }
    }

    /// Like `read_reply`, but `None` when the connection closes first (or is reset).
    pub fn try_read_reply(&mut self) -> Option<String> {
        loop {
            if let Some(len) = reply_len(&self.buf) {
                let reply: Vec<u8> = self.buf.drain(..len).collect();
                return Some(String::from_utf8_lossy(&reply).into_owned());
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// Sends a command and reads one reply as text; `None` when the server closed instead.
    pub fn try_call(&mut self, args: &[&str]) -> Option<String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        if self.stream.write_all(&encode_request(&args)).is_err() {
            return None;
        }
        self.try_read_reply()
    }

    /// Reads until the server closes the connection; returns everything that came.
    pub fn read_to_close(&mut self) -> String {
        while self.fill() {}
        String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned()
    }

    /// True when the server has closed the connection (reads EOF within the timeout).
    pub fn is_closed(&mut self, within: Duration) -> bool {
        self.stream.set_read_timeout(Some(within)).unwrap();
        let mut byte = [0u8; 1];
        let closed = matches!(self.stream.read(&mut byte), Ok(0) | Err(_))
            && !matches!(self.stream.read(&mut byte), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock);
        self.stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        closed
    }
}

pub fn encode_request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Length of the first complete reply in `buf`, if it is all there.
pub fn reply_len(buf: &[u8]) -> Option<usize> {
    fn line_end(buf: &[u8], from: usize) -> Option<usize> {
        buf.get(from..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p)
    }
    fn one(buf: &[u8], at: usize) -> Option<usize> {
        let kind = *buf.get(at)?;
        let end = line_end(buf, at)?;
        let header = std::str::from_utf8(&buf[at + 1..end]).ok()?;
        let after = end + 2;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after),
            b'$' | b'=' | b'!' => {
                let n: i64 = header.parse().ok()?;
                if n < 0 {
                    return Some(after);
                }
                let total = after + n as usize + 2;
                (buf.len() >= total).then_some(total)
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n: i64 = header.parse().ok()?;
                let items = if kind == b'%' || kind == b'|' {
                    n * 2
                } else {
                    n
                };
                let mut pos = after;
                for _ in 0..items.max(0) {
                    pos = one(buf, pos)?;
                }
                Some(pos)
            }
            _ => Some(after),
        }
    }
    one(buf, 0)
}

// ---- Additive helpers (lock-semantics tests) ----

impl Raw {
    /// Switches this connection to RESP3 (HELLO 3) and discards the HELLO reply.
    pub fn resp3(mut self) -> Raw {
        self.cmd(&[b"HELLO", b"3"]);
        let hello = self.read_reply();
        assert!(hello.starts_with('%'), "HELLO 3 reply: {hello:?}");
        self
    }

    /// Waits up to `within` for one complete reply; `None` if none arrived (the connection
    /// stays usable, and a reply that arrives later is read by the next call).
    pub fn poll_reply(&mut self, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(len) = reply_len(&self.buf) {
                let reply: Vec<u8> = self.buf.drain(..len).collect();
                return Some(String::from_utf8_lossy(&reply).into_owned());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            let mut chunk = [0u8; 65536];
            let read = self.stream.read(&mut chunk);
            self.stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            match read {
                Ok(0) => panic!(
                    "connection closed; got so far: {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return None;
                }
                Err(e) => panic!("read failed: {e}"),
            }
        }
    }

    /// Sets how long `read_reply` waits before it fails the test.
    pub fn set_reply_timeout(&mut self, timeout: Duration) {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
    }

    /// Sends a command and parses an integer reply (`:N`); panics on anything else.
    pub fn int(&mut self, args: &[&str]) -> i64 {
        let reply = self.call(args);
        parse_int_reply(&reply)
            .unwrap_or_else(|| panic!("{args:?}: expected an integer reply, got {reply:?}"))
    }
}

/// `:N\r\n` → N.
pub fn parse_int_reply(reply: &str) -> Option<i64> {
    reply.strip_prefix(':')?.strip_suffix("\r\n")?.parse().ok()
}

/// One `field:value` line of `INFO section`, as an integer.
pub fn info_int(raw: &mut Raw, section: &str, field: &str) -> i64 {
    let reply = raw.call(&["INFO", section]);
    let prefix = format!("{field}:");
    reply
        .split("\r\n")
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no integer field {field}: {reply:?}"))
}

/// Polls `cond` every 10 ms until it holds, up to `timeout`; panics with `what` otherwise.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A test that needs a tool this machine lacks: a NOTICE on a developer's machine, a failure
/// under CI=true (CI installs every tool, so a skip there would hide a lost check).
pub fn skipping(why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true, and this check cannot run: {why}");
    }
    println!("NOTICE: skipping: {why}");
}

/// A whole walk of a SCAN-style `command` (SCAN, FLOCK.SCAN) with `options`, calling `between`
/// after each call: every name with how often it came back, and the cursors given.
pub fn scan_walk(
    conn: &mut redis::Connection,
    command: &str,
    options: &[&str],
    mut between: impl FnMut(&mut redis::Connection),
) -> (std::collections::HashMap<String, usize>, Vec<u64>) {
    let mut seen = std::collections::HashMap::new();
    let mut cursors = vec![];
    let mut cursor = "0".to_string();
    for _ in 0..100_000 {
        let (next, names): (String, Vec<String>) = redis::cmd(command)
            .arg(&cursor)
            .arg(options)
            .query(conn)
            .unwrap();
        for n in names {
            *seen.entry(n).or_insert(0) += 1;
        }
        if next == "0" {
            return (seen, cursors);
        }
        cursors.push(next.parse().expect("a cursor fits in 64 bits"));
        cursor = next;
        between(conn);
    }
    panic!("the {command} walk never ended");
}

/// One field of a raw RESP2 `FLOCK.STATUS` reply: the value after the field's name (a bulk
/// string's text, an integer's digits, `$-1` for null).
pub fn status_field(reply: &str, field: &str) -> String {
    let lines: Vec<&str> = reply.split("\r\n").collect();
    let at = lines
        .iter()
        .position(|l| *l == field)
        .unwrap_or_else(|| panic!("no {field} in {reply:?}"));
    // The value's line is after the field's (a bulk string has its `$n` line first).
    let value = lines[at + 1];
    if value.starts_with('$') && value != "$-1" {
        lines[at + 2].to_string()
    } else {
        value.trim_start_matches(':').to_string()
    }
}
