//! Hostile and broken clients against one server: malformed frames, absurd declared lengths,
//! junk, endless inline lines, clients that never read, slowloris, the query-buffer limit, and
//! bad command arguments. After each: another client still gets PONG, and the server's memory
//! has not grown by more than a few MiB.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{Raw, TestServer, encode_request};

/// Most a single bad client may add to the server's RSS over the warmed-up baseline.
const RSS_SLACK_KIB: u64 = 16 * 1024;

/// Writes `chunks` from another thread, stopping at the first error (the server closed).
/// Returns the bytes written.
fn send_in_background(
    stream: &TcpStream,
    chunks: impl Iterator<Item = Vec<u8>> + Send + 'static,
) -> JoinHandle<u64> {
    let mut writer = stream.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::thread::spawn(move || {
        let mut sent = 0u64;
        for chunk in chunks {
            if writer.write_all(&chunk).is_err() {
                break;
            }
            sent += chunk.len() as u64;
        }
        sent
    })
}

/// Everything the server sends until it closes the connection (a reset counts as closed).
fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!(
                    "server did not close the connection; got {:?}",
                    String::from_utf8_lossy(&got)
                )
            }
            Err(_) => return got,
        }
    }
}

/// Sends `chunks` on a fresh connection and returns what came back before the server closed it.
fn bad_client(
    server: &TestServer,
    chunks: impl Iterator<Item = Vec<u8>> + Send + 'static,
) -> (String, u64) {
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let sender = send_in_background(&stream, chunks);
    let got = read_until_closed(&mut stream, Duration::from_secs(30));
    drop(stream);
    let sent = sender.join().unwrap();
    (String::from_utf8_lossy(&got).into_owned(), sent)
}

/// A small seeded PRNG (xorshift64*), so the junk is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

struct Checker<'a> {
    server: &'a TestServer,
    baseline: u64,
}

impl Checker<'_> {
    /// Another client still gets PONG, and memory stayed within the slack of the baseline.
    fn after(&self, case: &str) {
        self.server.assert_alive();
        let rss = self.server.rss_kib();
        eprintln!(
            "bad_input: after {case}: RSS {rss} KiB (baseline {} KiB, +{} KiB)",
            self.baseline,
            rss.saturating_sub(self.baseline)
        );
        assert!(
            rss < self.baseline + RSS_SLACK_KIB,
            "{case}: RSS {rss} KiB grew more than {RSS_SLACK_KIB} KiB over the baseline {} KiB",
            self.baseline
        );
    }
}

fn warm_up(server: &TestServer) {
    // Exercise the usual paths (connections, pipelines, a protocol error) so allocator arenas
    // and buffers exist before the baseline is taken.
    let mut clients: Vec<Raw> = (0..50).map(|_| server.raw()).collect();
    for (i, raw) in clients.iter_mut().enumerate() {
        let mut batch = Vec::new();
        for j in 0..200 {
            batch.extend(encode_request(&[b"ECHO", format!("{i}-{j}").as_bytes()]));
        }
        batch.extend(b"COMMAND DOCS\r\nINFO\r\n");
        raw.send(&batch);
        for _ in 0..202 {
            raw.read_reply();
        }
    }
    drop(clients);
    let (reply, _) = bad_client(server, std::iter::once(b"*1\r\n*1\r\n".to_vec()));
    assert_eq!(reply, "-ERR Protocol error: expected '$', got '*'\r\n");
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn malformed_and_hostile_clients_never_hurt_the_server() {
    let server = TestServer::start(&[]);
    warm_up(&server);
    let baseline = server.rss_kib();
    assert!(baseline > 0);
    let check = Checker {
        server: &server,
        baseline,
    };

    // `*1\r\n` nested 100,000 deep.
    let (reply, _) = bad_client(&server, std::iter::once(b"*1\r\n".repeat(100_000)));
    assert_eq!(reply, "-ERR Protocol error: expected '$', got '*'\r\n");
    check.after("*1 nested 100000 deep");

    // A bulk length of almost a terabyte inside a multibulk.
    let (reply, _) = bad_client(
        &server,
        std::iter::once(b"*2\r\n$4\r\nECHO\r\n$999999999999\r\n".to_vec()),
    );
    assert_eq!(reply, "-ERR Protocol error: invalid bulk length\r\n");
    check.after("$999999999999");

    // Two billion arguments declared.
    let (reply, _) = bad_client(&server, std::iter::once(b"*2000000000\r\n".to_vec()));
    assert_eq!(reply, "-ERR Protocol error: invalid multibulk length\r\n");
    check.after("*2000000000");

    // Just below the declared-arguments limit, with nothing following: nothing is reserved for
    // the declared count, the connection just waits for data (then we hang up).
    let mut raw = server.raw();
    raw.send(b"*1000000\r\n$4\r\nPING\r\n");
    assert!(
        !raw.is_closed(Duration::from_millis(300)),
        "a valid header is not an error"
    );
    drop(raw);
    check.after("*1000000 then silence");

    // Several MB of seeded random junk: replies are errors, the last a protocol error, then close.
    let mut rng = Rng(0x5EED_F10C_D000_0001);
    let chunks = (0..64).map(move |_| {
        let mut chunk = vec![0u8; 64 * 1024];
        rng.fill(&mut chunk);
        chunk
    });
    let (reply, sent) = bad_client(&server, chunks);
    let errors: Vec<&str> = reply.split_terminator("\r\n").collect();
    assert!(
        !errors.is_empty(),
        "junk gets an error reply before the close"
    );
    for line in &errors {
        assert!(
            line.starts_with("-ERR "),
            "junk got a non-error reply {line:?} (of {} replies)",
            errors.len()
        );
    }
    assert!(
        errors.last().unwrap().starts_with("-ERR Protocol error: "),
        "{:?}",
        errors.last()
    );
    eprintln!(
        "bad_input: junk: {sent} bytes sent, {} error replies before the close",
        errors.len()
    );
    check.after("4 MiB random junk");

    // A 256 MiB inline line with no newline, generated in chunks: refused after ~64 KiB.
    let chunks = (0..4096).map(|_| vec![b'a'; 64 * 1024]);
    let (reply, sent) = bad_client(&server, chunks);
    assert_eq!(reply, "-ERR Protocol error: too big inline request\r\n");
    assert!(
        sent < 256 * 1024 * 1024,
        "the server must close long before 256 MiB ({sent} bytes sent)"
    );
    eprintln!("bad_input: endless inline line: closed after {sent} bytes sent");
    check.after("256 MiB inline line");

    // A huge multibulk header line and a huge bulk header line.
    let (reply, _) = bad_client(
        &server,
        (0..64).map(|i| {
            if i == 0 {
                b"*1".to_vec()
            } else {
                vec![b'1'; 4096]
            }
        }),
    );
    assert_eq!(reply, "-ERR Protocol error: too big mbulk count string\r\n");
    let (reply, _) = bad_client(
        &server,
        (0..64).map(|i| {
            if i == 0 {
                b"*1\r\n$1".to_vec()
            } else {
                vec![b'1'; 4096]
            }
        }),
    );
    assert_eq!(reply, "-ERR Protocol error: too big bulk count string\r\n");
    // A bulk whose payload is not followed by CRLF.
    let (reply, _) = bad_client(&server, std::iter::once(b"*1\r\n$4\r\nPINGxx".to_vec()));
    assert_eq!(
        reply,
        "-ERR Protocol error: expected CRLF after bulk string data\r\n"
    );
    check.after("header and CRLF errors");
}

#[test]
fn clients_that_never_read_are_throttled_not_buffered() {
    let server = TestServer::start(&[]);
    warm_up(&server);
    let baseline = server.rss_kib();
    let check = Checker {
        server: &server,
        baseline,
    };

    // 200k pipelined PINGs in one go, replies never read.
    let pings = TcpStream::connect(server.addr).unwrap();
    let sender = send_in_background(&pings, std::iter::once(b"PING\r\n".repeat(200_000)));
    std::thread::sleep(Duration::from_millis(500));
    check.after("200k PINGs, never read (while connected)");

    // Commands with big replies (7 KiB for 14 request bytes), never read: the server must stop
    // reading (TCP backpressure) instead of buffering replies. Four such clients at once.
    let mut stuck = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(server.addr).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let chunk = b"COMMAND DOCS\r\n".repeat(4096);
        let mut sent = 0usize;
        let blocked = loop {
            match stream.write(&chunk) {
                Ok(n) => sent += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break true;
                }
                Err(e) => panic!("server closed a client that only pipelined valid commands: {e}"),
            }
            if sent > 256 * 1024 * 1024 {
                break false;
            }
        };
        assert!(
            blocked,
            "the server kept reading {sent} bytes from a client that never reads its replies"
        );
        eprintln!("bad_input: non-reading client blocked after {sent} bytes sent");
        stuck.push(stream);
    }
    std::thread::sleep(Duration::from_millis(300));
    check.after("4 clients pipelining COMMAND DOCS, never reading");
    // Lock commands from others still work while those clients are stuck.
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["FLOCK.ACQUIRE", "while-stuck", "1000"]),
        ":1\r\n"
    );
    drop(stuck);
    drop(pings);
    let _ = sender.join();
    std::thread::sleep(Duration::from_millis(300));
    check.after("non-reading clients gone");
    // The server notices the closed clients (only `raw` is left).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !raw
        .call(&["INFO", "clients"])
        .contains("connected_clients:1\r\n")
    {
        assert!(Instant::now() < deadline, "closed clients still counted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn slowloris_does_not_block_others() {
    let server = TestServer::start(&[]);
    let mut slow = TcpStream::connect(server.addr).unwrap();
    slow.set_nodelay(true).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = b"*2\r\n$4\r\nECHO\r\n$4\r\nslow\r\n";
    let started = Instant::now();
    for (i, byte) in request.iter().enumerate() {
        slow.write_all(&[*byte]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        // Meanwhile everybody else is served.
        if i % 4 == 0 {
            let mut other = server.raw();
            assert_eq!(
                other.call(&["ECHO", &i.to_string()]),
                format!("${}\r\n{i}\r\n", i.to_string().len())
            );
        }
    }
    let mut reply = [0u8; 10];
    slow.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"$4\r\nslow\r\n");
    assert!(started.elapsed() >= Duration::from_millis(100) * request.len() as u32);
    server.assert_alive();
}

#[test]
fn query_buffer_limit_refuses_a_bulk_larger_than_it() {
    let server = TestServer::start(&[
        "--client-query-buffer-limit",
        "1048576",
        "--proto-max-bulk-len",
        "4194304",
    ]);
    let before = server.rss_kib();
    // 512 KiB fits.
    let mut raw = server.raw();
    let half = vec![b'h'; 512 * 1024];
    raw.cmd(&[b"ECHO", &half]);
    let reply = raw.read_reply();
    assert!(reply.starts_with("$524288\r\nhhh") && reply.len() == 524288 + 11);
    // 2 MiB is within proto-max-bulk-len but not within the query buffer.
    let header = b"*2\r\n$4\r\nECHO\r\n$2097152\r\n".to_vec();
    let chunks = std::iter::once(header)
        .chain((0..32).map(|_| vec![b'x'; 64 * 1024]))
        .chain(std::iter::once(b"\r\n".to_vec()));
    let (reply, sent) = bad_client(&server, chunks);
    assert_eq!(
        reply,
        "-ERR Protocol error: client query buffer limit reached\r\n"
    );
    eprintln!("bad_input: 2 MiB bulk refused after {sent} bytes sent");
    // A bulk over proto-max-bulk-len is refused at its header.
    let (reply, _) = bad_client(
        &server,
        std::iter::once(b"*2\r\n$4\r\nECHO\r\n$4194305\r\n".to_vec()),
    );
    assert_eq!(reply, "-ERR Protocol error: invalid bulk length\r\n");
    server.assert_alive();
    let after = server.rss_kib();
    eprintln!("bad_input: query buffer case: RSS {before} -> {after} KiB");
    assert!(
        after < before + RSS_SLACK_KIB,
        "RSS {before} -> {after} KiB"
    );
}

#[test]
fn bad_lock_arguments_get_clear_errors_and_change_nothing() {
    let server = TestServer::start(&["--max-name-bytes", "16"]);
    let mut raw = server.raw();
    let name_err = "-ERR invalid lock name: must be 1 to 16 bytes\r\n";
    let lease_err = "-ERR invalid lease-ms: must be an integer from 1 to 86400000\r\n";
    let wait_err = "-ERR invalid WAIT: must be an integer from 0 to 3600000\r\n";
    let token_err = "-ERR invalid token: must be an integer from 1 to 9223372036854775807\r\n";
    let not_int = "-ERR value is not an integer or out of range\r\n";
    let long = "n".repeat(17);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["FLOCK.ACQUIRE", "", "1000"], name_err),
        (vec!["FLOCK.ACQUIRE", &long, "1000"], name_err),
        (vec!["FLOCK.ACQUIRE", "lk", "0"], lease_err),
        (vec!["FLOCK.ACQUIRE", "lk", "-1"], lease_err),
        (vec!["FLOCK.ACQUIRE", "lk", "86400001"], lease_err),
        (
            vec!["FLOCK.ACQUIRE", "lk", "99999999999999999999"],
            lease_err,
        ),
        (vec!["FLOCK.ACQUIRE", "lk", "1e3"], not_int),
        (
            vec!["FLOCK.ACQUIRE", "lk", "1000", "WAIT", "3600001"],
            wait_err,
        ),
        (vec!["FLOCK.ACQUIRE", "lk", "1000", "WAIT", "-1"], wait_err),
        (
            vec!["FLOCK.ACQUIRE", "lk", "1000", "WAIT", "1", "WAIT", "2"],
            "-ERR syntax error\r\n",
        ),
        (
            vec!["FLOCK.ACQUIRE", "lk", "1000", "OWNER", "a", "OWNER", "b"],
            "-ERR syntax error\r\n",
        ),
        (
            vec!["FLOCK.ACQUIRE", "lk", "1000", "OWNER", ""],
            "-ERR invalid OWNER id: must be 1 to 16 bytes\r\n",
        ),
        (
            vec!["FLOCK.ACQUIRE", "lk", "1000", "WAIT"],
            "-ERR syntax error\r\n",
        ),
        (
            vec!["FLOCK.ACQUIRE", "lk", "1000", "FOREVER"],
            "-ERR unknown option 'FOREVER' for 'flock.acquire' (expected SHARED, LIMIT n, WAIT ms, OWNER id, SESSION or LOCKDELAY ms)\r\n",
        ),
        (vec!["FLOCK.RENEW", "lk", "0", "1000"], token_err),
        (
            vec!["FLOCK.RENEW", "lk", "9223372036854775808", "1000"],
            token_err,
        ),
        (vec!["FLOCK.RENEW", "lk", "1", "0"], lease_err),
        (vec!["FLOCK.RELEASE", "lk", "0"], token_err),
        (vec!["FLOCK.RELEASE", "lk", "-3"], token_err),
        (
            vec!["FLOCK.RELEASE", "lk", "9223372036854775808"],
            token_err,
        ),
        (
            vec!["FLOCK.RELEASE", "lk", "1", "extra"],
            "-ERR wrong number of arguments for 'flock.release' command\r\n",
        ),
        (
            vec!["FLOCK.TOKEN", "lk", "extra"],
            "-ERR wrong number of arguments for 'flock.token' command\r\n",
        ),
        (vec!["FLOCK.ADVANCE", "lk", "0"], token_err),
        (vec!["FLOCK.ADVANCE", "lk", "x"], not_int),
        (vec!["FLOCK.FORCERELEASE", ""], name_err),
        (vec!["FENCE.SET", "lk", "0", "v"], token_err),
        (
            vec!["FENCE.SET", "lk", "9223372036854775808", "v"],
            token_err,
        ),
        (
            vec!["FENCE.SET", "", "1", "v"],
            "-ERR invalid fence key: must be 1 to 16 bytes\r\n",
        ),
    ];
    for (request, expected) in &cases {
        assert_eq!(raw.call(request), *expected, "reply to {request:?}");
        assert_eq!(
            raw.call(&["PING"]),
            "+PONG\r\n",
            "connection stays open after {request:?}"
        );
        for name in ["lk", &long[..16]] {
            assert_eq!(
                raw.call(&["FLOCK.TOKEN", name]),
                ":0\r\n",
                "{request:?} changed {name}"
            );
        }
        assert_eq!(
            raw.call(&["FENCE.TOKEN", "lk"]),
            ":0\r\n",
            "{request:?} changed the fence"
        );
    }
    // The limits themselves are accepted.
    assert_eq!(
        raw.call(&[
            "FLOCK.ACQUIRE",
            &long[..16],
            "86400000",
            "WAIT",
            "0",
            "OWNER",
            &long[..16]
        ]),
        ":1\r\n"
    );
    assert_eq!(raw.call(&["FLOCK.RENEW", &long[..16], "1", "1"]), ":1\r\n");
    assert_eq!(
        raw.call(&["FENCE.SET", "lk", "9223372036854775807", "v"]),
        ":1\r\n"
    );
    let info = raw.call(&["INFO", "stats"]);
    assert!(!info.contains("\r\ntotal_error_replies:0\r\n"), "{info}");
}

/// Runs curl with `args` (bounded by `timeout 20`); its exit code. curl is Debian's package.
fn curl(args: &[&str]) -> Option<i32> {
    let status = std::process::Command::new("timeout")
        .arg("20")
        .arg("curl")
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    status.code()
}

/// An HTTP request on the RESP port runs nothing (a web page in a browser on the host can send
/// one): a real HTTP client's POST whose body is a command leaves the lock held, the connection
/// is closed without a reply, and the refusal is counted and logged, as Redis does.
#[test]
fn an_http_request_on_the_resp_port_runs_nothing() {
    if curl(&["--version"]) != Some(0) {
        return common::skipping("curl is not installed");
    }
    let server = TestServer::start(&[]);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "victim", "60000"]), ":1\r\n");

    let url = format!("http://{}/", server.addr);
    // curl gets no HTTP answer: its exit code says so (52: empty reply, 56: connection reset).
    let code = curl(&[
        "-X",
        "POST",
        "--data-binary",
        "\r\nFLOCK.FORCERELEASE victim\r\nFLOCK.ACQUIRE victim2 60000\r\n",
        &url,
    ]);
    assert!(matches!(code, Some(52 | 56)), "curl exit {code:?}");
    assert_eq!(raw.call(&["FLOCK.TOKEN", "victim"]), ":1\r\n");
    assert_ne!(raw.call(&["FLOCK.TTL", "victim"]), ":-2\r\n");
    assert_eq!(raw.call(&["FLOCK.TOKEN", "victim2"]), ":0\r\n");

    // A GET with its headers: the request line is an unknown command, `Host:` closes before the
    // body's command runs.
    let mut get = server.raw();
    get.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nFLOCK.FORCERELEASE victim\r\n");
    let got = get.read_to_close();
    assert!(got.starts_with("-ERR unknown command 'GET'"), "{got:?}");
    assert_eq!(got.matches("\r\n").count(), 1, "{got:?}");

    // Pipelined behind a command that runs: that one is answered, nothing after POST is.
    let mut piped = server.raw();
    piped.send(b"PING\r\nPOST / HTTP/1.1\r\nFLOCK.FORCERELEASE victim\r\n");
    assert_eq!(piped.read_to_close(), "+PONG\r\n");
    // The same in RESP's own framing, the command named in any case.
    let mut framed = server.raw();
    framed.send(&encode_request(&[b"host:", b"x"]));
    framed.send(&encode_request(&[b"FLOCK.FORCERELEASE", b"victim"]));
    assert_eq!(framed.read_to_close(), "");

    assert_ne!(raw.call(&["FLOCK.TTL", "victim"]), ":-2\r\n");
    assert_eq!(
        common::info_int(&mut raw, "stats", "http_requests_refused"),
        4
    );
    // Logged once (a page that keeps trying cannot flood the log).
    let log = server.log();
    assert_eq!(log.matches("possible security attack").count(), 1, "{log}");
    assert_eq!(raw.call(&["PING"]), "+PONG\r\n");
}
