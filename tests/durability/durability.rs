//! Durability of the append-only file, driven through the real `flockd` binary on real files:
//! restarts after SIGKILL and SIGTERM, torn tails and damaged middles (and `check-aof`),
//! BGREWRITEAOF under load, automatic rewrites, the order of fsync and reply under
//! `appendfsync always` (checked with strace), INFO persistence and group commit, replay speed,
//! and a full disk (a tiny tmpfs) with MISCONF and recovery.
//!
//! Numbers are printed (run with `--nocapture`), never asserted as speeds.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{BIN, Raw, Server, TempDir, TestServer, encode_request};

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn aof_path(dir: &Path) -> PathBuf {
    dir.join("flockd.aof")
}

/// A parsed RESP2 reply (enough for these tests).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Val {
    Int(i64),
    Str(String),
    Null,
    Err(String),
    Arr(Vec<Val>),
}

fn parse_at(s: &[u8], at: usize) -> (Val, usize) {
    let end = at + s[at..].windows(2).position(|w| w == b"\r\n").expect("CRLF");
    let head = std::str::from_utf8(&s[at + 1..end]).expect("utf8 header");
    let after = end + 2;
    match s[at] {
        b':' => (Val::Int(head.parse().expect("int")), after),
        b'+' => (Val::Str(head.to_string()), after),
        b'-' => (Val::Err(head.to_string()), after),
        b'_' => (Val::Null, after),
        b'$' => {
            let n: i64 = head.parse().expect("len");
            if n < 0 {
                return (Val::Null, after);
            }
            let n = n as usize;
            (
                Val::Str(String::from_utf8_lossy(&s[after..after + n]).into_owned()),
                after + n + 2,
            )
        }
        b'*' => {
            let n: i64 = head.parse().expect("len");
            if n < 0 {
                return (Val::Null, after);
            }
            let mut pos = after;
            let mut items = Vec::new();
            for _ in 0..n {
                let (v, p) = parse_at(s, pos);
                items.push(v);
                pos = p;
            }
            (Val::Arr(items), pos)
        }
        k => panic!("unexpected reply type {:?}", k as char),
    }
}

fn parse(reply: &str) -> Val {
    parse_at(reply.as_bytes(), 0).0
}

fn int(reply: &str) -> i64 {
    match parse(reply) {
        Val::Int(n) => n,
        other => panic!("expected an integer, got {other:?} ({reply:?})"),
    }
}

/// FLOCK.STATUS as a field map.
fn status(raw: &mut Raw, name: &str) -> HashMap<String, Val> {
    let Val::Arr(items) = parse(&raw.call(&["FLOCK.STATUS", name])) else {
        panic!("FLOCK.STATUS is an array")
    };
    items
        .chunks(2)
        .map(|kv| match &kv[0] {
            Val::Str(k) => (k.clone(), kv[1].clone()),
            other => panic!("field name {other:?}"),
        })
        .collect()
}

fn field_int(status: &HashMap<String, Val>, field: &str) -> i64 {
    match status.get(field) {
        Some(Val::Int(n)) => *n,
        other => panic!("{field}: {other:?} in {status:?}"),
    }
}

fn info(server: &Server) -> HashMap<String, String> {
    let mut raw = server.raw();
    let Val::Str(text) = parse(&raw.call(&["INFO", "persistence"])) else {
        panic!("INFO is a bulk string")
    };
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn info_u64(server: &Server, field: &str) -> u64 {
    let i = info(server);
    i.get(field)
        .unwrap_or_else(|| panic!("INFO persistence has no {field}: {i:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{field} is not a number: {i:?}"))
}

/// Polls `f` every 20 ms until it is true or `timeout` passes.
fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends every command in one write, then reads one reply per command.
fn pipeline(raw: &mut Raw, cmds: &[Vec<String>]) -> Vec<String> {
    let mut buf = Vec::new();
    for c in cmds {
        let args: Vec<&[u8]> = c.iter().map(|a| a.as_bytes()).collect();
        buf.extend_from_slice(&encode_request(&args));
    }
    raw.send(&buf);
    cmds.iter().map(|_| raw.read_reply()).collect()
}

fn cmd(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// Runs the binary to completion (bounded by `timeout`; killed and reported if it is still
/// running): (exit success, exit code, stdout, stderr).
fn run_flockd(args: &[&str], timeout: Duration) -> (bool, Option<i32>, String, String) {
    let mut child = Command::new(&*BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .env("FLOCKD_LOG_LEVEL", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flockd");
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "flockd {args:?} still running after {timeout:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.success(),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// (offset, total length) of every record in a valid file, parsed independently of the server.
fn record_spans(path: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(path).expect("read AOF");
    assert_eq!(
        &bytes[..8],
        b"FLOCKAO2",
        "file header (format 2: one log entry per record)"
    );
    let mut spans = Vec::new();
    let mut pos = 8usize;
    while pos < bytes.len() {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        assert!(
            pos + 8 + len <= bytes.len(),
            "record at {pos} runs past the end"
        );
        spans.push((pos as u64, (8 + len) as u64));
        pos += 8 + len;
    }
    spans
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat AOF").len()
}

/// Checks that the AOF on disk holds `records` bytes of records (INFO's `aof_current_size`) and
/// after them nothing but zeros: what a running server writes ahead under `always`.
fn assert_records_then_zeros(path: &Path, records: u64) {
    let on_disk = std::fs::read(path).expect("read AOF");
    assert!(
        on_disk.len() as u64 >= records,
        "{} bytes on disk, {records} of records",
        on_disk.len()
    );
    assert!(
        on_disk[records as usize..].iter().all(|&b| b == 0),
        "something other than zeros after the records"
    );
}

fn truncate_file(path: &Path, len: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open AOF");
    f.set_len(len).expect("truncate");
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).expect("read AOF");
    bytes[offset as usize] ^= 0x5A;
    std::fs::write(path, bytes).expect("write AOF");
}

fn stop_term(server: &mut Server) {
    server.signal("TERM");
    let status = server
        .wait_exit(Duration::from_secs(30))
        .expect("flockd exits on SIGTERM");
    assert!(
        status.success(),
        "exit status after SIGTERM: {status:?}; log:\n{}",
        server.log()
    );
}

/// Everything observable about `names` and `keys` except lease times: compared across restarts.
fn observable_state(server: &Server, names: &[String], keys: &[String]) -> Vec<String> {
    let mut raw = server.raw();
    let mut out = Vec::new();
    for n in names {
        let mut s = status(&mut raw, n);
        s.remove("ttl");
        let mut fields: Vec<_> = s.into_iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        fields.sort();
        out.push(format!("lock {n}: {}", fields.join(" ")));
    }
    for k in keys {
        let t = raw.call(&["FENCE.TOKEN", k]);
        let v = raw.call(&["FENCE.GET", k]);
        out.push(format!("fence {k}: token {t:?} value {v:?}"));
    }
    out
}

fn assert_same_state(before: &[String], after: &[String]) {
    assert_eq!(before.len(), after.len());
    let diffs: Vec<_> = before
        .iter()
        .zip(after)
        .filter(|(b, a)| b != a)
        .map(|(b, a)| format!("before: {b}\n after: {a}"))
        .collect();
    assert!(
        diffs.is_empty(),
        "{} difference(s) after restart:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Live leases and fences across restarts

fn lease_and_fence_survive(kill: bool) {
    let mut srv = TestServer::start(&[]);
    let mut raw = srv.raw();
    let t = int(&raw.call(&["FLOCK.ACQUIRE", "res", "60000"]));
    assert!(t >= 1);
    let ts = t.to_string();
    assert_eq!(
        raw.call(&["FENCE.SET", "fence", &ts, "written-with-t"]),
        ":1\r\n"
    );
    // A second lock, owned and reentrant, renewed to a longer lease: its latest lease length
    // (90 s, from the renew) is what a restart re-arms.
    let o1 = int(&raw.call(&["FLOCK.ACQUIRE", "owned", "30000", "OWNER", "me"]));
    let o2 = int(&raw.call(&["FLOCK.ACQUIRE", "owned", "30000", "OWNER", "me"]));
    assert!(o2 > o1);
    assert_eq!(
        raw.call(&["FLOCK.RENEW", "owned", &o1.to_string(), "90000"]),
        ":1\r\n"
    );
    std::thread::sleep(Duration::from_millis(1000));
    let ttl_before = int(&raw.call(&["FLOCK.TTL", "res"]));
    assert!(ttl_before <= 59_100, "ttl before the stop {ttl_before}");
    drop(raw);

    if kill {
        srv.server.kill9();
    } else {
        stop_term(&mut srv.server);
        assert!(
            srv.log().contains("AOF flushed and synced"),
            "log:\n{}",
            srv.log()
        );
    }
    // Under `always` (the default) a running server keeps zeros written ahead of its records:
    // a crash leaves them after the last record, a clean stop cuts them off.
    let path = aof_path(srv.dir.path()).display().to_string();
    let (ok, _, out, err) = run_flockd(&["check-aof", &path], Duration::from_secs(30));
    assert!(ok && out.contains("AOF is valid"), "{out}{err}");
    assert_eq!(out.contains("bytes of zeros"), kill, "{out}");
    srv.server = Server::start_in(srv.dir.path(), &[]);
    let log = srv.log();
    assert!(!log.contains("damaged tail"), "{log}");
    assert_eq!(
        log.contains("cut the zeros after the last record"),
        kill,
        "{log}"
    );
    let mut raw = srv.raw();
    let s = status(&mut raw, "res");
    assert_eq!(field_int(&s, "locked"), 1, "{s:?}");
    assert_eq!(field_int(&s, "token"), t, "{s:?}");
    assert_eq!(field_int(&s, "holds"), 1, "{s:?}");
    let ttl = field_int(&s, "ttl");
    // Re-armed with the full lease from the start: longer than what was left before the stop.
    assert!(
        ttl > ttl_before && ttl <= 60_000,
        "ttl after restart {ttl}, before the stop {ttl_before}"
    );
    assert!(ttl > 55_000, "ttl after restart {ttl}");
    let s = status(&mut raw, "owned");
    assert_eq!(field_int(&s, "token"), o2, "{s:?}");
    assert_eq!(field_int(&s, "holds"), 2, "{s:?}");
    assert_eq!(s.get("owner"), Some(&Val::Str("me".into())), "{s:?}");
    let ttl = field_int(&s, "ttl");
    assert!(
        ttl > 85_000 && ttl <= 90_000,
        "owned: ttl after restart {ttl}, expected the renewed 90 s lease"
    );
    assert_eq!(raw.call(&["FENCE.TOKEN", "fence"]), format!(":{t}\r\n"));
    assert_eq!(
        raw.call(&["FENCE.GET", "fence"]),
        "$14\r\nwritten-with-t\r\n"
    );
    // The old holder still owns it.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "res", "1000"]), "$-1\r\n");
    assert_eq!(raw.call(&["FLOCK.RENEW", "res", &ts, "60000"]), ":1\r\n");
    assert_eq!(raw.call(&["FLOCK.RELEASE", "res", &ts]), ":1\r\n");
    assert_eq!(
        raw.call(&["FLOCK.RELEASE", "owned", &o1.to_string()]),
        ":0\r\n"
    );
    assert_eq!(
        raw.call(&["FLOCK.RELEASE", "owned", &o2.to_string()]),
        ":1\r\n"
    );
    let next = int(&raw.call(&["FLOCK.ACQUIRE", "res", "1000"]));
    assert!(next > t, "next token {next} after {t}");
    if t > 1 {
        let stale = raw.call(&["FENCE.SET", "fence", &(t - 1).to_string(), "stale"]);
        assert_eq!(
            stale, ":0\r\n",
            "a stale fence write is refused after the restart"
        );
    }
    assert_eq!(
        raw.call(&["FENCE.SET", "fence", &next.to_string(), "newer"]),
        ":1\r\n"
    );
}

#[test]
fn live_lease_and_fence_survive_sigkill() {
    lease_and_fence_survive(true);
}

#[test]
fn live_lease_and_fence_survive_sigterm() {
    lease_and_fence_survive(false);
}

// ---------------------------------------------------------------------------------------------
// Torn tails, damaged middles, check-aof

/// Writes a few records and stops the server cleanly; the last record is a fence write of
/// `last-value` (token 3) over `before-last` (token 2).
fn make_small_aof(dir: &Path) -> (u64, u64) {
    let mut server = Server::start_in(dir, &[]);
    let mut raw = server.raw();
    let a = int(&raw.call(&["FLOCK.ACQUIRE", "a", "60000"]));
    let b = int(&raw.call(&["FLOCK.ACQUIRE", "b", "60000"]));
    assert_eq!(raw.call(&["FLOCK.RELEASE", "b", &b.to_string()]), ":1\r\n");
    assert_eq!(int(&raw.call(&["FLOCK.ADVANCE", "c", "500"])), 500);
    assert_eq!(raw.call(&["FENCE.SET", "f", "2", "before-last"]), ":1\r\n");
    assert_eq!(
        raw.call(&["FENCE.SET", "f", "3", "last-value-with-some-bytes"]),
        ":1\r\n"
    );
    drop(raw);
    stop_term(&mut server);
    (a as u64, b as u64)
}

fn check_state_without_last(server: &Server, a: u64, b: u64) {
    let mut raw = server.raw();
    let s = status(&mut raw, "a");
    assert_eq!(field_int(&s, "locked"), 1, "{s:?}");
    assert_eq!(field_int(&s, "token") as u64, a, "{s:?}");
    let s = status(&mut raw, "b");
    assert_eq!(field_int(&s, "locked"), 0, "{s:?}");
    assert!(field_int(&s, "last-token") as u64 >= b, "{s:?}");
    assert_eq!(int(&raw.call(&["FLOCK.TOKEN", "c"])), 500);
    assert_eq!(raw.call(&["FENCE.TOKEN", "f"]), ":2\r\n");
    assert_eq!(raw.call(&["FENCE.GET", "f"]), "$11\r\nbefore-last\r\n");
}

#[test]
fn torn_tail_is_cut_with_a_warning_and_every_full_record_is_kept() {
    let origin = TempDir::new("torn-origin");
    let (a, b) = make_small_aof(origin.path());
    let original = std::fs::read(aof_path(origin.path())).unwrap();
    let spans = record_spans(&aof_path(origin.path()));
    assert!(spans.len() >= 6, "records: {spans:?}");
    let (last_off, last_len) = *spans.last().unwrap();
    assert_eq!(last_off + last_len, original.len() as u64);

    // Cut inside the last record at several places: one byte short, half, only the frame
    // header, a piece of the frame header, all but one byte.
    let mut cuts = vec![1, 2, last_len / 2, last_len - 8, last_len - 3, last_len - 1];
    cuts.dedup();
    for cut in cuts {
        let dir = TempDir::new("torn");
        let path = aof_path(dir.path());
        std::fs::write(&path, &original).unwrap();
        truncate_file(&path, original.len() as u64 - cut);
        let mut server = Server::try_start_in(dir.path(), &[])
            .unwrap_or_else(|log| panic!("cut {cut}: the start failed on a torn tail:\n{log}"));
        let log = server.log();
        let warning = log
            .lines()
            .find(|l| l.contains("damaged tail"))
            .unwrap_or_else(|| panic!("cut {cut}: no warning about the damaged tail:\n{log}"));
        assert!(
            warning.contains("WARN"),
            "cut {cut}: not a warning: {warning}"
        );
        assert!(
            warning.contains(&path.display().to_string()),
            "cut {cut}: the warning names no file: {warning}"
        );
        assert!(
            warning.contains(&format!("byte offset {last_off}")),
            "cut {cut}: the warning names no offset {last_off}: {warning}"
        );
        assert_eq!(
            file_len(&path),
            last_off,
            "cut {cut}: the file was cut back to the last full record"
        );
        check_state_without_last(&server, a, b);
        // The file keeps working: a change after the repair survives a restart, without warning.
        let mut raw = server.raw();
        assert_eq!(raw.call(&["FENCE.SET", "f", "4", "after-repair"]), ":1\r\n");
        drop(raw);
        server.kill9();
        let server = Server::start_in(dir.path(), &[]);
        assert!(
            !server.log().contains("damaged tail"),
            "cut {cut}: a second warning:\n{}",
            server.log()
        );
        assert_eq!(
            server.raw().call(&["FENCE.GET", "f"]),
            "$12\r\nafter-repair\r\n"
        );
    }

    // A last record whose bytes are garbled (not cut) with nothing valid after it: also a tail.
    let dir = TempDir::new("torn-garbled");
    let path = aof_path(dir.path());
    std::fs::write(&path, &original).unwrap();
    flip_byte(&path, last_off + last_len - 2);
    let server =
        Server::try_start_in(dir.path(), &[]).unwrap_or_else(|log| panic!("garbled tail:\n{log}"));
    assert!(
        server.log().contains(&format!("byte offset {last_off}")),
        "log:\n{}",
        server.log()
    );
    check_state_without_last(&server, a, b);
}

#[test]
fn damaged_middle_stops_the_start_and_check_aof_refuses_to_fix_it() {
    let dir = TempDir::new("middle");
    make_small_aof(dir.path());
    let path = aof_path(dir.path());
    let spans = record_spans(&path);
    // Flip a byte in the payload of the second record; the ones after it stay valid.
    let (off, len) = spans[1];
    flip_byte(&path, off + len - 1);
    let damaged = std::fs::read(&path).unwrap();
    let path_s = path.display().to_string();
    let dir_s = dir.path().display().to_string();

    let (ok, code, _out, err) = run_flockd(
        &["--bind", "127.0.0.1", "--port", "0", "--dir", &dir_s],
        Duration::from_secs(30),
    );
    assert!(
        !ok && code.is_some_and(|c| c != 0),
        "the start must fail; exit {code:?}; stderr:\n{err}"
    );
    assert!(err.contains(&path_s), "the error names no file:\n{err}");
    assert!(
        err.contains(&off.to_string()),
        "the error names no offset {off}:\n{err}"
    );
    assert!(!err.contains("ready to accept connections"), "{err}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        damaged,
        "a failed start changed the file"
    );

    let (ok, _, out, err) = run_flockd(&["check-aof", &path_s], Duration::from_secs(30));
    assert!(!ok, "check-aof must exit non-zero on damage:\n{out}{err}");
    assert!(
        out.contains(&format!("byte offset {off}")),
        "check-aof names no offset {off}:\n{out}{err}"
    );
    assert!(out.contains("bad record followed by valid ones"), "{out}");
    assert!(out.contains("1 valid record(s)"), "{out}");

    let (ok, _, out, err) = run_flockd(&["check-aof", "--fix", &path_s], Duration::from_secs(30));
    assert!(
        !ok,
        "check-aof --fix must refuse a damaged middle:\n{out}{err}"
    );
    assert!(err.contains("refusing to repair"), "{out}{err}");
    assert!(err.contains(&off.to_string()), "{err}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        damaged,
        "--fix changed a file it refused to repair"
    );
}

#[test]
fn check_aof_reports_a_torn_tail_and_fix_cuts_it() {
    let dir = TempDir::new("checkfix");
    let (a, b) = make_small_aof(dir.path());
    let path = aof_path(dir.path());
    let path_s = path.display().to_string();
    let (ok, _, out, err) = run_flockd(&["check-aof", &path_s], Duration::from_secs(30));
    assert!(ok, "a clean file checks ok:\n{out}{err}");
    assert!(out.contains("AOF is valid"), "{out}");

    let spans = record_spans(&path);
    let (last_off, last_len) = *spans.last().unwrap();
    truncate_file(&path, last_off + last_len - 5);
    let (ok, _, out, err) = run_flockd(&["check-aof", &path_s], Duration::from_secs(30));
    assert!(!ok, "check-aof exits non-zero on a torn tail:\n{out}{err}");
    assert!(
        out.contains(&format!("damaged tail at byte offset {last_off}")),
        "{out}"
    );
    assert_eq!(
        file_len(&path),
        last_off + last_len - 5,
        "check-aof without --fix changed the file"
    );

    let (ok, _, out, err) = run_flockd(&["check-aof", "--fix", &path_s], Duration::from_secs(30));
    assert!(ok, "--fix cuts a torn tail:\n{out}{err}");
    assert_eq!(file_len(&path), last_off);
    let (ok, _, out, _) = run_flockd(&["check-aof", &path_s], Duration::from_secs(30));
    assert!(ok && out.contains("AOF is valid"), "{out}");

    let server = Server::start_in(dir.path(), &[]);
    assert!(!server.log().contains("damaged tail"), "{}", server.log());
    check_state_without_last(&server, a, b);
}

// ---------------------------------------------------------------------------------------------
// Rewrites

/// `cycles` acquire/fence/release cycles over `names`, pipelined a round of names at a time.
fn churn(raw: &mut Raw, names: &[String], cycles: usize, fence_prefix: &str) {
    let mut done = 0;
    let mut round = 0u64;
    while done < cycles {
        let batch = &names[..names.len().min(cycles - done)];
        let acq: Vec<_> = batch
            .iter()
            .map(|n| cmd(&["FLOCK.ACQUIRE", n, "60000"]))
            .collect();
        let tokens: Vec<i64> = pipeline(raw, &acq).iter().map(|r| int(r)).collect();
        let mut rel = Vec::new();
        for (i, (n, t)) in batch.iter().zip(&tokens).enumerate() {
            let ts = t.to_string();
            rel.push(cmd(&[
                "FENCE.SET",
                &format!("{fence_prefix}{i}"),
                &ts,
                &format!("v{round}-{ts}"),
            ]));
            rel.push(cmd(&["FLOCK.RELEASE", n, &ts]));
        }
        for r in pipeline(raw, &rel) {
            assert_eq!(r, ":1\r\n");
        }
        done += batch.len();
        round += 1;
    }
}

fn load_thread(addr: std::net::SocketAddr, t: usize, stop: Arc<AtomicBool>) -> u64 {
    let mut raw = Raw::connect(addr);
    let mut ops = 0;
    for i in 0..1_000_000u64 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let name = format!("load-{t}-{}", i % 5);
        let tok = int(&raw.call(&["FLOCK.ACQUIRE", &name, "60000"]));
        let ts = tok.to_string();
        assert_eq!(
            raw.call(&[
                "FENCE.SET",
                &format!("loadfence-{t}"),
                &ts,
                &format!("x{i}")
            ]),
            ":1\r\n"
        );
        assert_eq!(raw.call(&["FLOCK.RELEASE", &name, &ts]), ":1\r\n");
        // Also churn the shared names that are not held (base-50 .. base-99).
        let base = format!("base-{}", 50 + (i as usize * 4 + t) % 50);
        if let Val::Int(bt) = parse(&raw.call(&["FLOCK.ACQUIRE", &base, "60000"])) {
            assert_eq!(
                raw.call(&["FLOCK.RELEASE", &base, &bt.to_string()]),
                ":1\r\n"
            );
        }
        ops += 5;
    }
    ops
}

#[test]
fn bgrewriteaof_under_load_keeps_every_counter_holding_and_fence() {
    let cycles = 20_000;
    let mut srv = TestServer::start(&["--auto-aof-rewrite-percentage", "0"]);
    let mut raw = srv.raw();
    let names: Vec<String> = (0..100).map(|i| format!("base-{i}")).collect();
    let started = Instant::now();
    churn(&mut raw, &names, cycles, "basefence-");
    // Live holdings: plain ones, reentrant owned ones, and advanced counters.
    for name in &names[..20] {
        int(&raw.call(&["FLOCK.ACQUIRE", name, "600000"]));
    }
    for (i, name) in names.iter().enumerate().take(30).skip(20) {
        let owner = format!("owner-{i}");
        int(&raw.call(&["FLOCK.ACQUIRE", name, "600000", "OWNER", &owner]));
        int(&raw.call(&["FLOCK.ACQUIRE", name, "600000", "OWNER", &owner]));
    }
    for (i, name) in names.iter().enumerate().take(45).skip(40) {
        int(&raw.call(&["FLOCK.ADVANCE", name, &(1_000_000 + i).to_string()]));
    }
    int(&raw.call(&["FLOCK.FORCERELEASE", &names[0]]));
    let size_before = info_u64(&srv, "aof_current_size");
    assert_records_then_zeros(&aof_path(srv.dir.path()), size_before);
    println!(
        "generated {cycles} cycles in {:?}; AOF {size_before} bytes",
        started.elapsed()
    );
    assert_eq!(
        info_u64(&srv, "aof_rewrites"),
        0,
        "no automatic rewrite with percentage 0"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = (0..4)
        .map(|t| {
            let (addr, stop) = (srv.addr, stop.clone());
            std::thread::spawn(move || load_thread(addr, t, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        raw.call(&["BGREWRITEAOF"]),
        "+Background append only file rewriting started\r\n"
    );
    let done = wait_until(Duration::from_secs(60), || {
        let i = info(&srv);
        i["aof_rewrite_in_progress"] == "0" && i["aof_rewrites"] == "1"
    });
    assert!(done, "the rewrite did not finish: {:?}", info(&srv));
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let ops: u64 = loaders
        .into_iter()
        .map(|h| h.join().expect("load thread"))
        .sum();
    let i = info(&srv);
    assert_eq!(i["aof_last_bgrewrite_status"], "ok", "{i:?}");
    assert_eq!(i["aof_last_write_status"], "ok", "{i:?}");
    let size_after: u64 = i["aof_current_size"].parse().unwrap();
    let base_after: u64 = i["aof_base_size"].parse().unwrap();
    assert_records_then_zeros(&aof_path(srv.dir.path()), size_after);
    println!(
        "BGREWRITEAOF under load ({ops} ops from 4 threads): AOF {size_before} bytes before, {base_after} bytes \
         right after the rewrite, {size_after} bytes after the load"
    );
    assert!(
        size_after < size_before / 4,
        "the file did not shrink: {size_before} -> {size_after}"
    );

    let mut all_names = names.clone();
    all_names.extend((0..4).flat_map(|t| (0..5).map(move |k| format!("load-{t}-{k}"))));
    let mut keys: Vec<String> = (0..100).map(|i| format!("basefence-{i}")).collect();
    keys.extend((0..4).map(|t| format!("loadfence-{t}")));
    let before = observable_state(&srv, &all_names, &keys);
    drop(raw);
    srv.server.kill9();
    srv.server = Server::start_in(srv.dir.path(), &["--auto-aof-rewrite-percentage", "0"]);
    let after = observable_state(&srv, &all_names, &keys);
    assert_same_state(&before, &after);
    // And every counter goes on from where it was.
    let mut raw = srv.raw();
    for n in &names[30..] {
        let counter = int(&raw.call(&["FLOCK.TOKEN", n]));
        let t = int(&raw.call(&["FLOCK.ACQUIRE", n, "1000"]));
        assert!(t > counter, "{n}: token {t} after counter {counter}");
    }
    let (ok, _, out, err) = run_flockd(
        &["check-aof", &aof_path(srv.dir.path()).display().to_string()],
        Duration::from_secs(30),
    );
    assert!(ok, "the rewritten file checks ok:\n{out}{err}");
}

#[test]
fn a_second_bgrewriteaof_while_one_runs_is_refused() {
    // Two 16 MiB fence values make the rewrite write and sync 32 MiB: the second command,
    // pipelined right behind the first, is run microseconds later, long before it can finish.
    let mut srv = TestServer::start(&["--auto-aof-rewrite-percentage", "0"]);
    let mut raw = srv.raw();
    let big = "x".repeat(16 << 20);
    for k in ["big1", "big2"] {
        raw.cmd(&[b"FENCE.SET", k.as_bytes(), b"1", big.as_bytes()]);
        assert_eq!(raw.read_reply(), ":1\r\n");
    }
    let replies = pipeline(&mut raw, &[cmd(&["BGREWRITEAOF"]), cmd(&["BGREWRITEAOF"])]);
    assert_eq!(
        replies[0],
        "+Background append only file rewriting started\r\n"
    );
    assert_eq!(
        replies[1],
        "-ERR Background append only file rewriting already in progress\r\n"
    );
    assert!(
        wait_until(
            Duration::from_secs(60),
            || info(&srv)["aof_rewrite_in_progress"] == "0"
        ),
        "the rewrite did not finish"
    );
    assert_eq!(info_u64(&srv, "aof_rewrites"), 1);
    // Once done, a new one may start.
    assert_eq!(
        raw.call(&["BGREWRITEAOF"]),
        "+Background append only file rewriting started\r\n"
    );
    assert!(wait_until(Duration::from_secs(60), || info_u64(
        &srv,
        "aof_rewrites"
    ) == 2));
    drop(raw);
    srv.restart_after_kill9(&[]);
    let mut raw = srv.raw();
    for k in ["big1", "big2"] {
        let v = raw.call(&["FENCE.GET", k]);
        assert!(
            v.starts_with(&format!("${}\r\nxxxx", 16 << 20)),
            "{k}: {}",
            &v[..v.len().min(40)]
        );
    }
}

#[test]
fn automatic_rewrite_runs_and_keeps_the_state() {
    let flags = [
        "--auto-aof-rewrite-min-size",
        "65536",
        "--auto-aof-rewrite-percentage",
        "100",
    ];
    let mut srv = TestServer::start(&flags);
    let mut raw = srv.raw();
    let names: Vec<String> = (0..20).map(|i| format!("auto-{i}")).collect();
    let value = "v".repeat(100);
    let mut token = 0u64;
    for _ in 0..30 {
        churn(&mut raw, &names, 20, "autofence-");
        let sets: Vec<_> = (0..50)
            .map(|k| {
                token += 1;
                cmd(&[
                    "FENCE.SET",
                    &format!("auto-big-{k}"),
                    &token.to_string(),
                    &format!("{value}{token}"),
                ])
            })
            .collect();
        for r in pipeline(&mut raw, &sets) {
            assert_eq!(r, ":1\r\n");
        }
        if info_u64(&srv, "aof_rewrites") >= 1 {
            break;
        }
    }
    for n in &names[..5] {
        int(&raw.call(&["FLOCK.ACQUIRE", n, "600000"]));
    }
    assert!(
        wait_until(Duration::from_secs(30), || {
            let i = info(&srv);
            i["aof_rewrites"] != "0" && i["aof_rewrite_in_progress"] == "0"
        }),
        "no automatic rewrite: {:?}",
        info(&srv)
    );
    let i = info(&srv);
    println!(
        "automatic rewrite: aof_rewrites {}, aof_base_size {}, aof_current_size {}",
        i["aof_rewrites"], i["aof_base_size"], i["aof_current_size"]
    );
    assert!(i["aof_base_size"].parse::<u64>().unwrap() < 65536, "{i:?}");
    let mut keys: Vec<String> = (0..20).map(|i| format!("autofence-{i}")).collect();
    keys.extend((0..50).map(|k| format!("auto-big-{k}")));
    let before = observable_state(&srv, &names, &keys);
    drop(raw);
    srv.server.kill9();
    srv.server = Server::start_in(srv.dir.path(), &flags);
    assert_same_state(&before, &observable_state(&srv, &names, &keys));
}

// ---------------------------------------------------------------------------------------------
// The reply waits for the sync (strace)

fn strace_available() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn aof_fd(pid: u32, path: &Path) -> String {
    let canonical = std::fs::canonicalize(path).unwrap();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        if std::fs::read_link(entry.path()).is_ok_and(|target| target == canonical) {
            return entry.file_name().to_string_lossy().into_owned();
        }
    }
    panic!("the server has no open fd on {}", path.display());
}

/// Attaches strace to every thread of the server, sends one FLOCK.ACQUIRE, and returns the
/// trace lines, the AOF's fd and the reply.
fn trace_one_acquire(fsync: &str) -> (Vec<String>, String, String) {
    let srv = TestServer::start(&["--appendfsync", fsync]);
    let fd = aof_fd(srv.pid(), &aof_path(srv.dir.path()));
    let out = srv.dir.path().join("strace.out");
    let err = srv.dir.path().join("strace.err");
    let mut strace = Command::new("strace")
        .args([
            "-f",
            "-ttt",
            "-s",
            "64",
            "-e",
            "trace=fdatasync,fsync,write,sendto,writev",
            "-o",
        ])
        .arg(&out)
        .args(["-p", &srv.pid().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawn strace");
    let attached = wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&err).is_ok_and(|e| e.contains("attached"))
    });
    assert!(
        attached,
        "strace did not attach: {}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut raw = srv.raw();
    let reply = raw.call(&["FLOCK.ACQUIRE", "traced-lock", "60000"]);
    assert!(reply.starts_with(':'), "{reply:?}");
    std::thread::sleep(Duration::from_millis(200));
    // SIGINT makes strace detach cleanly and flush its output.
    let _ = Command::new("kill")
        .args(["-INT", &strace.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while strace.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = strace.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = strace.wait();
    srv.assert_alive();
    let lines = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (lines, fd, reply)
}

fn ts(line: &str) -> f64 {
    line.split_whitespace()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no timestamp: {line}"))
}

fn pid_of(line: &str) -> &str {
    line.split_whitespace().next().unwrap()
}

/// Index of the line where the reply write to the client starts.
fn reply_write(lines: &[String], fd: &str, reply: &str) -> usize {
    let escaped = reply.replace('\r', "\\r").replace('\n', "\\n");
    lines
        .iter()
        .position(|l| {
            (l.contains(" write(") || l.contains(" sendto(") || l.contains(" writev("))
                && l.contains(&format!("\"{escaped}\""))
                && !l.contains(&format!("({fd},"))
        })
        .unwrap_or_else(|| {
            panic!(
                "no reply write of {escaped} in the trace:\n{}",
                lines.join("\n")
            )
        })
}

#[test]
fn always_replies_only_after_fdatasync_of_the_aof() {
    if !strace_available() {
        common::skipping("strace is not on PATH; skipping the fsync-before-reply check");
        return;
    }
    let (lines, fd, reply) = trace_one_acquire("always");
    let r = reply_write(&lines, &fd, &reply);
    let w = lines[..r]
        .iter()
        .rposition(|l| l.contains(&format!(" write({fd},")))
        .unwrap_or_else(|| panic!("no AOF write before the reply:\n{}", lines.join("\n")));
    let sync_start = lines[w..r]
        .iter()
        .position(|l| {
            l.contains(&format!(" fdatasync({fd}")) || l.contains(&format!(" fsync({fd}"))
        })
        .map(|i| i + w)
        .unwrap_or_else(|| {
            panic!(
                "no fdatasync of fd {fd} between the AOF write and the reply:\n{}",
                lines.join("\n")
            )
        });
    // Completed before the reply: either on the same line, or its "resumed" line comes first.
    let sync_done = if lines[sync_start].contains("= 0") {
        sync_start
    } else {
        let pid = pid_of(&lines[sync_start]);
        lines[sync_start..r]
            .iter()
            .position(|l| pid_of(l) == pid && l.contains("resumed>") && l.contains("sync"))
            .map(|i| i + sync_start)
            .unwrap_or_else(|| {
                panic!(
                    "the fdatasync did not complete before the reply:\n{}",
                    lines.join("\n")
                )
            })
    };
    assert!(
        lines[sync_done].trim_end().ends_with("= 0"),
        "fdatasync failed: {}",
        lines[sync_done]
    );
    assert!(
        ts(&lines[sync_done]) <= ts(&lines[r]),
        "timestamps: {} / {}",
        lines[sync_done],
        lines[r]
    );
    println!(
        "strace (always): AOF write, then fdatasync done, then the reply:\n  {}\n  {}\n  {}",
        lines[w], lines[sync_done], lines[r]
    );
}

#[test]
fn appendfsync_no_replies_without_a_sync() {
    if !strace_available() {
        common::skipping("strace is not on PATH; skipping the appendfsync-no trace check");
        return;
    }
    let (lines, fd, reply) = trace_one_acquire("no");
    let r = reply_write(&lines, &fd, &reply);
    let w = lines[..r]
        .iter()
        .rposition(|l| l.contains(&format!(" write({fd},")));
    assert!(
        w.is_some(),
        "the record is written (not synced) before the reply:\n{}",
        lines.join("\n")
    );
    let syncs: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("fdatasync(") || l.contains("fsync("))
        .collect();
    assert!(syncs.is_empty(), "appendfsync no synced: {syncs:?}");
    println!(
        "strace (no): AOF write then reply, no sync:\n  {}\n  {}",
        lines[w.unwrap()],
        lines[r]
    );
}

// ---------------------------------------------------------------------------------------------
// INFO persistence, group commit, throughput

/// `threads` clients, each `cycles` acquire/release cycles on its own lock: (ops, elapsed).
fn cycles_load(server: &Server, threads: usize, cycles: usize) -> (u64, Duration) {
    let addr = server.addr;
    let barrier = Arc::new(std::sync::Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut raw = Raw::connect(addr);
                let name = format!("gc-{t}");
                barrier.wait();
                for _ in 0..cycles {
                    let tok = int(&raw.call(&["FLOCK.ACQUIRE", &name, "10000"]));
                    assert_eq!(
                        raw.call(&["FLOCK.RELEASE", &name, &tok.to_string()]),
                        ":1\r\n"
                    );
                }
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    for h in handles {
        h.join().expect("load thread");
    }
    ((threads * cycles * 2) as u64, started.elapsed())
}

#[test]
fn info_persistence_moves_and_group_commit_shares_fsyncs() {
    let cycles = if ci() { 20 } else { 50 };
    let always = TestServer::start(&["--appendfsync", "always"]);
    let before = info(&always);
    for f in [
        "aof_current_size",
        "aof_base_size",
        "aof_rewrite_in_progress",
        "aof_rewrites",
        "aof_fsyncs",
        "aof_acks_per_fsync",
        "aof_records_written",
        "aof_last_write_status",
        "aof_last_bgrewrite_status",
        "aof_fsync",
        "aof_batches",
    ] {
        assert!(
            before.contains_key(f),
            "INFO persistence lacks {f}: {before:?}"
        );
    }
    assert_eq!(before["aof_last_write_status"], "ok");
    assert_eq!(before["aof_rewrite_in_progress"], "0");
    assert_eq!(before["aof_fsync"], "always");
    let (ops_always, took_always) = cycles_load(&always, 64, cycles);
    let after = info(&always);
    let n = |m: &HashMap<String, String>, f: &str| m[f].parse::<f64>().unwrap();
    let records = n(&after, "aof_records_written") - n(&before, "aof_records_written");
    let fsyncs = n(&after, "aof_fsyncs") - n(&before, "aof_fsyncs");
    assert_eq!(
        records as u64, ops_always,
        "one record per acquire and per release"
    );
    assert!(n(&after, "aof_current_size") > n(&before, "aof_current_size"));
    assert!(fsyncs >= 1.0 && n(&after, "aof_batches") > n(&before, "aof_batches"));
    let acks_per_fsync = records / fsyncs;
    assert!(acks_per_fsync >= 1.0, "{acks_per_fsync}");

    let no = TestServer::start(&["--appendfsync", "no"]);
    let (ops_no, took_no) = cycles_load(&no, 64, cycles);
    let info_no = info(&no);
    assert_eq!(
        info_no["aof_fsyncs"], "0",
        "appendfsync no never syncs under load: {info_no:?}"
    );
    let rate_always = ops_always as f64 / took_always.as_secs_f64();
    let rate_no = ops_no as f64 / took_no.as_secs_f64();
    println!(
        "group commit, 64 clients x {cycles} acquire/release cycles: {records} records, {fsyncs} fsyncs, \
         {acks_per_fsync:.1} acks per fsync (INFO aof_acks_per_fsync: {})",
        after["aof_acks_per_fsync"]
    );
    println!(
        "throughput, same load: always {rate_always:.0} ops/s ({took_always:?}), no {rate_no:.0} ops/s \
         ({took_no:?}), no/always = {:.2}",
        rate_no / rate_always
    );
}

// ---------------------------------------------------------------------------------------------
// Replay speed

#[test]
fn replay_speed() {
    let target: u64 = if ci() { 100_000 } else { 500_000 };
    let dir = TempDir::new("replay");
    let mut server = Server::start_in(
        dir.path(),
        &["--appendfsync", "no", "--auto-aof-rewrite-percentage", "0"],
    );
    let mut raw = server.raw();
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < target {
        let chunk: Vec<_> = (0..5000u64)
            .map(|i| {
                let n = sent + i + 1;
                if n.is_multiple_of(2) {
                    cmd(&[
                        "FENCE.SET",
                        &format!("rk-{}", n % 1000),
                        &n.to_string(),
                        "value-of-some-length",
                    ])
                } else {
                    cmd(&["FLOCK.ADVANCE", &format!("rl-{}", n % 1000), &n.to_string()])
                }
            })
            .collect();
        for r in pipeline(&mut raw, &chunk) {
            assert!(r.starts_with(':'), "{r:?}");
        }
        sent += chunk.len() as u64;
    }
    let written = info_u64(&server, "aof_records_written");
    let size = info_u64(&server, "aof_current_size");
    println!(
        "generated {written} records ({size} bytes) in {:?}",
        started.elapsed()
    );
    // One read's pipelined commands go to the log as one entry (one record of several ops), so
    // there are fewer records than commands; what matters is that each came back (the
    // counters checked below) and every record was replayed.
    assert!(
        written > 0 && written <= target,
        "{written} records for {target} commands"
    );
    drop(raw);
    stop_term(&mut server);
    let server = Server::start_in(dir.path(), &[]);
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains("AOF loaded"))
        .unwrap_or_else(|| panic!("no AOF loaded line:\n{log}"));
    let field = |name: &str| -> u64 {
        let at = line
            .find(&format!("{name}="))
            .unwrap_or_else(|| panic!("no {name}= in {line}"))
            + name.len()
            + 1;
        line[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (records, ms) = (field("records"), field("ms"));
    assert_eq!(
        records, written,
        "every record written was replayed: {line}"
    );
    assert_eq!(info_u64(&server, "aof_loaded_records"), records);
    println!(
        "replay: {records} records, {size} bytes in {ms} ms = {:.0} records/s (debug build: {})",
        records as f64 / (ms.max(1) as f64 / 1000.0),
        cfg!(debug_assertions)
    );
    // The counters are back.
    let mut raw = server.raw();
    let last_odd = if target.is_multiple_of(2) {
        target - 1
    } else {
        target
    };
    assert_eq!(
        int(&raw.call(&["FLOCK.TOKEN", &format!("rl-{}", last_odd % 1000)])) as u64,
        last_odd
    );
}

// ---------------------------------------------------------------------------------------------
// A full disk: MISCONF, reads go on, recovery by rewrite

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn full_disk_refuses_writes_with_misconf_and_recovers() {
    let mnt = TempDir::new("tmpfs");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(mnt.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        common::skipping("cannot mount a tmpfs here (needs root); skipping the full-disk test");
        return;
    }
    let guard = Mount(mnt.path().to_owned());
    let data = mnt.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut server = Server::start_in(&data, &[]);
    let mut raw = server.raw();
    let t1 = int(&raw.call(&["FLOCK.ACQUIRE", "disk-lock", "600000"]));
    assert_eq!(
        raw.call(&["FENCE.SET", "disk-fence", &t1.to_string(), "acked"]),
        ":1\r\n"
    );

    // Fill the filesystem.
    let filler = mnt.path().join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        for _ in 0..64 {
            if f.write_all(&chunk).is_err() {
                break;
            }
        }
    }
    // The AOF's last page may still have room: write until a write fails.
    let value = "y".repeat(600);
    let mut misconf = None;
    for i in 0..200 {
        let r = raw.call(&["FENCE.SET", "fill", &(i + 1).to_string(), &value]);
        if r.starts_with("-MISCONF") {
            misconf = Some(r);
            break;
        }
        assert_eq!(r, ":1\r\n");
    }
    let misconf = misconf.expect("no MISCONF on a full disk");
    println!("full disk: {}", misconf.trim_end());
    let i = info(&server);
    assert_eq!(i["aof_last_write_status"], "err", "{i:?}");
    // Later writes are refused at once; reads go on.
    let r = raw.call(&["FLOCK.ACQUIRE", "other", "1000"]);
    assert!(r.starts_with("-MISCONF"), "{r:?}");
    let r = raw.call(&["FLOCK.RELEASE", "disk-lock", &t1.to_string()]);
    assert!(r.starts_with("-MISCONF"), "{r:?}");
    assert_eq!(raw.call(&["PING"]), "+PONG\r\n");
    assert_eq!(raw.call(&["FENCE.GET", "disk-fence"]), "$5\r\nacked\r\n");
    assert_eq!(int(&raw.call(&["FLOCK.TOKEN", "disk-lock"])), t1);
    let s = status(&mut raw, "disk-lock");
    assert_eq!(field_int(&s, "token"), t1);

    // Free space: the writer recovers by a rewrite (retried every second).
    std::fs::remove_file(&filler).unwrap();
    assert!(
        wait_until(
            Duration::from_secs(20),
            || info(&server)["aof_last_write_status"] == "ok"
        ),
        "no recovery after freeing space: {:?}\n{}",
        info(&server),
        server.log()
    );
    assert_eq!(
        raw.call(&["FLOCK.RELEASE", "disk-lock", &t1.to_string()]),
        ":1\r\n"
    );
    let t2 = int(&raw.call(&["FLOCK.ACQUIRE", "disk-lock", "600000"]));
    assert!(t2 > t1);
    let fill_token = int(&raw.call(&["FENCE.TOKEN", "fill"]));
    drop(raw);
    server.kill9();
    let server = Server::start_in(&data, &[]);
    let mut raw = server.raw();
    let s = status(&mut raw, "disk-lock");
    assert_eq!(field_int(&s, "token"), t2, "{s:?}");
    assert_eq!(raw.call(&["FENCE.GET", "disk-fence"]), "$5\r\nacked\r\n");
    // Whatever memory held when it recovered (even the write answered MISCONF) is on disk now.
    assert_eq!(int(&raw.call(&["FENCE.TOKEN", "fill"])), fill_token);
    drop(raw);
    drop(server);
    drop(guard);
}

/// The restore procedure of docs/operations.md: a backup copy of the AOF is older than tokens
/// handed out since; starting from it with `--bump-tokens N` makes every later token higher
/// than all of them, for names the backup knew and for names it did not.
#[test]
fn restoring_a_backup_with_bump_tokens_never_reissues_a_token() {
    let dir = TempDir::new("restore");
    let mut server = Server::start_in(dir.path(), &[]);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "a", "60000"]), ":1\r\n");
    assert_eq!(raw.call(&["FLOCK.RELEASE", "a", "1"]), ":1\r\n");
    stop_term(&mut server);
    let backup = dir.path().join("backup.aof");
    std::fs::copy(aof_path(dir.path()), &backup).unwrap();

    // After the backup: more grants on `a`, and a name the backup never saw.
    let mut server = Server::start_in(dir.path(), &[]);
    let mut raw = server.raw();
    for token in 2..=6 {
        assert_eq!(
            raw.call(&["FLOCK.ACQUIRE", "a", "60000"]),
            format!(":{token}\r\n")
        );
        assert_eq!(
            raw.call(&["FLOCK.RELEASE", "a", &token.to_string()]),
            ":1\r\n"
        );
    }
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "new", "60000"]), ":1\r\n");
    stop_term(&mut server);

    // Disaster: the backup comes back. Without a bump, `a` would hand out 2 again.
    std::fs::copy(&backup, aof_path(dir.path())).unwrap();
    let mut server = Server::start_in(dir.path(), &["--bump-tokens", "1000"]);
    assert!(
        server.log().contains("--bump-tokens"),
        "the bump is logged:\n{}",
        server.log()
    );
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "a", "60000"]), ":1002\r\n");
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "new", "60000"]), ":1001\r\n");
    // The bump is in the AOF: a plain restart does not undo it (nor repeat it).
    stop_term(&mut server);
    let server = Server::start_in(dir.path(), &[]);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FLOCK.TOKEN", "a"]), ":1002\r\n");
    assert_eq!(raw.call(&["FLOCK.TOKEN", "unknown"]), ":1000\r\n");
}
