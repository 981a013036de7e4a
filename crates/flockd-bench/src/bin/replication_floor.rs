//! The floor under a replicated write on this machine, without flockd: what one connection's
//! op costs when the server only appends a record and syncs it (a single node's least work),
//! against a leader that sends the record to two followers, appends and syncs its own copy
//! meanwhile, and answers once one follower has synced and answered too (a majority of three,
//! flockd's commit rule with broadcast on append). Each member is a process of its own with its
//! own file on the same disk, the space written and synced ahead (as flockd's logs are), and
//! every message is one `write` on loopback TCP with Nagle off.
//!
//!     cargo run --release -p flockd-bench --bin replication_floor -- [--ops 1000] [--rounds 3]
//!
//! Prints, per round and as medians of the rounds: the client's time per op for the single
//! server and the replicated one, each with and without the sync (`--no-sync` parts show what
//! the messages and wake-ups alone cost), and how long the servers' own append + sync took
//! (a lone sync, and the leader's while its followers sync at the same time).

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REQUEST: usize = 64;
const ENTRY: usize = 128;
const ACK: usize = 16;
/// Space written ahead and synced before the first op; records wrap around in it.
const AHEAD: u64 = 4 << 20;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("serve-single") => serve_single(&args[2..]),
        Some("serve-follower") => serve_follower(&args[2..]),
        Some("serve-leader") => serve_leader(&args[2..]),
        _ => compare(&args[1..]),
    };
    if let Err(e) = result {
        eprintln!("replication_floor: {e}");
        std::process::exit(1);
    }
}

struct Options {
    ops: usize,
    rounds: usize,
    dir: PathBuf,
}

fn options(args: &[String]) -> io::Result<Options> {
    let mut o = Options {
        ops: 1000,
        rounds: 3,
        dir: std::env::temp_dir(),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| io::Error::other(format!("{flag} needs a value")))?;
        let number = || {
            value
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=1_000_000).contains(n))
                .ok_or_else(|| io::Error::other(format!("{flag}: a number from 1 to 1000000")))
        };
        match flag.as_str() {
            "--ops" => o.ops = number()?,
            "--rounds" => o.rounds = number()?,
            "--dir" => o.dir = PathBuf::from(value),
            _ => return Err(io::Error::other(format!("unknown option {flag}"))),
        }
    }
    Ok(o)
}

/// One member's file: space written with zeros and synced, so that a sync after a record
/// writes the record's block and not the file's size.
struct Log {
    file: File,
    path: PathBuf,
    at: u64,
    sync: bool,
    syncs: Vec<Duration>,
    /// The process's CPU once its space was written: the ops' CPU is counted from here.
    cpu_ready: f64,
}

impl Log {
    fn open(dir: &str, role: &str, sync: bool) -> io::Result<Log> {
        let path = PathBuf::from(dir).join(format!("floor-{role}-{}", std::process::id()));
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        let zeros = vec![0u8; 1 << 16];
        let mut at = 0;
        while at < AHEAD {
            file.write_all_at(&zeros, at)?;
            at += zeros.len() as u64;
        }
        file.sync_all()?;
        Ok(Log {
            file,
            path,
            at: 0,
            sync,
            syncs: Vec::new(),
            cpu_ready: cpu_us(),
        })
    }

    fn append(&mut self, record: &[u8]) -> io::Result<()> {
        let started = Instant::now();
        self.file.write_all_at(record, self.at)?;
        if self.sync {
            self.file.sync_data()?;
        }
        self.at = (self.at + record.len() as u64) % (AHEAD - record.len() as u64);
        self.syncs.push(started.elapsed());
        Ok(())
    }

    /// Says the median append (+ sync) and this process's CPU per op, in µs, on stdout for the
    /// parent.
    fn report(mut self) -> io::Result<()> {
        let ops = self.syncs.len().max(1) as f64;
        let cpu = cpu_us() - self.cpu_ready;
        println!("{:.1} {:.1}", median_us(&mut self.syncs), cpu / ops);
        io::stdout().flush()
    }
}

impl Drop for Log {
    /// The file goes with the process, also when it ends on an error.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// This process's CPU time so far (user + system), in µs.
fn cpu_us() -> f64 {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a live `rusage` for the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

fn median_us(d: &mut [Duration]) -> f64 {
    if d.is_empty() {
        return 0.0;
    }
    d.sort_unstable();
    d[d.len() / 2].as_secs_f64() * 1e6
}

/// Binds a loopback port, says it on stdout and takes one connection.
fn listen_once() -> io::Result<TcpStream> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("{}", listener.local_addr()?.port());
    io::stdout().flush()?;
    let (stream, _) = listener.accept()?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn connect(port: &str) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port.parse::<u16>().map_err(io::Error::other)?))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Reads exactly `buf.len()` bytes; `false` at the end of the stream (a leader that ends with
/// the slower follower's last acknowledgement unread resets the connection: an end too).
fn read_whole(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<bool> {
    match stream.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// `serve-single DIR SYNC`: append and sync each request, then answer.
fn serve_single(args: &[String]) -> io::Result<()> {
    let mut log = Log::open(&args[0], "single", args[1] == "sync")?;
    let mut client = listen_once()?;
    let mut request = [0u8; REQUEST];
    let record = [7u8; ENTRY];
    while read_whole(&mut client, &mut request)? {
        log.append(&record)?;
        client.write_all(&[1u8; ACK])?;
    }
    log.report()
}

/// `serve-follower DIR SYNC`: append and sync each entry, then acknowledge it with its number.
fn serve_follower(args: &[String]) -> io::Result<()> {
    let mut log = Log::open(&args[0], "follower", args[1] == "sync")?;
    let mut leader = listen_once()?;
    let mut entry = [0u8; ENTRY];
    while read_whole(&mut leader, &mut entry)? {
        log.append(&entry)?;
        let mut ack = [0u8; ACK];
        ack[..8].copy_from_slice(&entry[..8]);
        leader.write_all(&ack)?;
    }
    log.report()
}

/// `serve-leader DIR SYNC PORT1 PORT2`: sends each request's entry to both followers, appends
/// and syncs its own copy meanwhile, and answers once a follower acknowledged it too.
fn serve_leader(args: &[String]) -> io::Result<()> {
    let mut log = Log::open(&args[0], "leader", args[1] == "sync")?;
    let mut followers = [connect(&args[2])?, connect(&args[3])?];
    let mut client = listen_once()?;
    let mut request = [0u8; REQUEST];
    let mut entry = [7u8; ENTRY];
    // The highest entry number each follower acknowledged so far.
    let mut acked = [0u64; 2];
    let mut number = 0u64;
    while read_whole(&mut client, &mut request)? {
        number += 1;
        entry[..8].copy_from_slice(&number.to_le_bytes());
        for f in &mut followers {
            f.write_all(&entry)?;
        }
        log.append(&entry)?;
        while acked.iter().all(|&a| a < number) {
            wait_for_ack(&mut followers, &mut acked)?;
        }
        client.write_all(&[1u8; ACK])?;
    }
    log.report()
}

/// Waits until a follower's socket has an acknowledgement and reads it (both, when both do).
fn wait_for_ack(followers: &mut [TcpStream; 2], acked: &mut [u64; 2]) -> io::Result<()> {
    let mut fds = [
        libc::pollfd {
            fd: followers[0].as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: followers[1].as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` is a live array of two pollfd for the call's length; a 5 s bound.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, 5000) };
    if ready <= 0 {
        return Err(io::Error::other("no follower answered within 5 s"));
    }
    for (i, fd) in fds.iter().enumerate() {
        if fd.revents != 0 {
            let mut ack = [0u8; ACK];
            followers[i].read_exact(&mut ack)?;
            acked[i] = u64::from_le_bytes(ack[..8].try_into().expect("8 bytes"));
        }
    }
    Ok(())
}

/// A server process of this binary, waited for (or stopped by its pid) when dropped.
struct Server {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Server {
    fn start(args: &[&str]) -> io::Result<Server> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let out = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Server { child, out })
    }

    fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        self.out.read_line(&mut line)?;
        Ok(line.trim().to_owned())
    }
}

impl Drop for Server {
    /// A server ends on its own once its client is gone (and removes its file); one that has
    /// not within 2 s is killed.
    fn drop(&mut self) {
        for _ in 0..200 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one run measured: the client's median per op, and each server's median append (+ sync)
/// and CPU per op.
struct Run {
    op_us: f64,
    append_us: Vec<f64>,
    cpu_us: Vec<f64>,
}

/// A server's last line: its median append (+ sync) and its CPU per op.
fn parse_report(line: &str) -> io::Result<(f64, f64)> {
    let mut parts = line.split(' ').map(str::parse::<f64>);
    match (parts.next(), parts.next()) {
        (Some(Ok(append)), Some(Ok(cpu))) => Ok((append, cpu)),
        _ => Err(io::Error::other(format!("a server said {line:?}"))),
    }
}

fn drive(port: &str, ops: usize) -> io::Result<f64> {
    let mut stream = connect(port)?;
    let mut reply = [0u8; ACK];
    let mut times = Vec::with_capacity(ops);
    for _ in 0..ops {
        let started = Instant::now();
        stream.write_all(&[2u8; REQUEST])?;
        if !read_whole(&mut stream, &mut reply)? {
            return Err(io::Error::other("the server closed the connection"));
        }
        times.push(started.elapsed());
    }
    Ok(median_us(&mut times))
}

fn run_single(dir: &str, sync: &str, ops: usize) -> io::Result<Run> {
    let mut server = Server::start(&["serve-single", dir, sync])?;
    let port = server.line()?;
    let op_us = drive(&port, ops)?;
    let (append, cpu) = parse_report(&server.line()?)?;
    Ok(Run {
        op_us,
        append_us: vec![append],
        cpu_us: vec![cpu],
    })
}

fn run_replicated(dir: &str, sync: &str, ops: usize) -> io::Result<Run> {
    let mut f1 = Server::start(&["serve-follower", dir, sync])?;
    let mut f2 = Server::start(&["serve-follower", dir, sync])?;
    let (p1, p2) = (f1.line()?, f2.line()?);
    let mut leader = Server::start(&["serve-leader", dir, sync, &p1, &p2])?;
    let port = leader.line()?;
    let op_us = drive(&port, ops)?;
    let (mut append_us, mut cpu_us) = (Vec::new(), Vec::new());
    for s in [&mut leader, &mut f1, &mut f2] {
        let (append, cpu) = parse_report(&s.line()?)?;
        append_us.push(append);
        cpu_us.push(cpu);
    }
    Ok(Run {
        op_us,
        append_us,
        cpu_us,
    })
}

fn compare(args: &[String]) -> io::Result<()> {
    let o = options(args)?;
    let dir = o.dir.to_string_lossy().into_owned();
    // single sync, replicated sync, single no-sync, replicated no-sync: per round
    let mut rows: Vec<[Run; 4]> = Vec::new();
    for round in 0..o.rounds {
        let mut runs: [Option<Run>; 4] = [None, None, None, None];
        let order: [usize; 4] = if round % 2 == 0 {
            [0, 1, 2, 3]
        } else {
            [1, 0, 3, 2]
        };
        for i in order {
            let sync = if i < 2 { "sync" } else { "no-sync" };
            runs[i] = Some(if i % 2 == 0 {
                run_single(&dir, sync, o.ops)?
            } else {
                run_replicated(&dir, sync, o.ops)?
            });
        }
        let runs = runs.map(|r| r.expect("every run ran"));
        eprintln!(
            "round {}: single {:.1} µs (append+sync {:.1}), replicated {:.1} µs (leader's {:.1}, followers' {:.1} / {:.1}), ratio {:.2}; without syncs {:.1} / {:.1} µs",
            round + 1,
            runs[0].op_us,
            runs[0].append_us[0],
            runs[1].op_us,
            runs[1].append_us[0],
            runs[1].append_us[1],
            runs[1].append_us[2],
            runs[1].op_us / runs[0].op_us,
            runs[2].op_us,
            runs[3].op_us
        );
        rows.push(runs);
    }
    let med = |f: &dyn Fn(&[Run; 4]) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "| {} ops x {} rounds, medians | single server | leader + 2 followers | ratio |",
        o.ops, o.rounds
    );
    println!("|---|--:|--:|--:|");
    println!(
        "| one op, append + sync (µs) | {:.1} | {:.1} | {:.2} |",
        med(&|r| r[0].op_us),
        med(&|r| r[1].op_us),
        med(&|r| r[1].op_us / r[0].op_us)
    );
    println!(
        "| one op, append without sync (µs) | {:.1} | {:.1} | {:.2} |",
        med(&|r| r[2].op_us),
        med(&|r| r[3].op_us),
        med(&|r| r[3].op_us / r[2].op_us)
    );
    println!(
        "| a server's append + sync (µs): alone; the leader's, its followers syncing too | {:.1} | {:.1} | {:.2} |",
        med(&|r| r[0].append_us[0]),
        med(&|r| r[1].append_us[0]),
        med(&|r| r[1].append_us[0] / r[0].append_us[0])
    );
    println!(
        "| a follower's append + sync (µs) | | {:.1} | |",
        med(&|r| (r[1].append_us[1] + r[1].append_us[2]) / 2.0)
    );
    let total = |r: &Run| r.cpu_us.iter().sum::<f64>();
    println!(
        "| server CPU per op, all members, with syncs (µs) | {:.1} | {:.1} | {:.2} |",
        med(&|r| total(&r[0])),
        med(&|r| total(&r[1])),
        med(&|r| total(&r[1]) / total(&r[0]))
    );
    println!(
        "| server CPU per op, all members, without syncs (µs) | {:.1} | {:.1} | {:.2} |",
        med(&|r| total(&r[2])),
        med(&|r| total(&r[3])),
        med(&|r| total(&r[3]) / total(&r[2]))
    );
    Ok(())
}
