//! Server-wide counters for INFO stats and commandstats, each command's latency histogram
//! (LATENCY HISTOGRAM), the slow log (SLOWLOG), the latency monitor (LATENCY LATEST / HISTORY),
//! the memory sizes of INFO memory, and CONFIG RESETSTAT.
//!
//! Everything a command pays for on every call is a relaxed atomic add; the slow log and the
//! latency monitor take their lock only for a call over their threshold.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use flockd_histogram::Histogram;

use bytes::Bytes;
use parking_lot::Mutex;

use super::clients::ClientHandle;
use crate::config::Config;

#[derive(Default)]
pub struct CommandStat {
    pub calls: AtomicU64,
    pub usec: AtomicU64,
    pub rejected: AtomicU64,
    pub failed: AtomicU64,
    /// The calls by duration, for LATENCY HISTOGRAM.
    pub histogram: LatencyHistogram,
    /// Error replies by error code (their first word), for the metrics port. Locked only when
    /// a call fails.
    pub errors: Mutex<Vec<(Box<str>, u64)>>,
}

/// Distinct error codes kept per command; more (there are fewer in flockd's own errors) count
/// as `OTHER`.
const ERROR_CODES_KEPT: usize = 32;

/// The error codes flockd's own replies start with: the metrics port shows each of them for
/// every command from the start, at zero until it happens.
pub const ERROR_KINDS: &[&str] = &[
    "ERR",
    "NOTOWNER",
    "NOPERM",
    "NOAUTH",
    "WRONGPASS",
    "MISCONF",
    "CLUSTERDOWN",
    "EXECABORT",
    "NOPROTO",
];

impl CommandStat {
    /// Counts an error reply by its code: `text` is the reply's text (`ERR ...`, `NOTOWNER ...`).
    pub fn count_error(&self, text: &str) {
        let code = text.split(' ').next().unwrap_or("ERR");
        let mut errors = self.errors.lock();
        if let Some((_, n)) = errors.iter_mut().find(|(c, _)| &**c == code) {
            *n += 1;
        } else if errors.len() < ERROR_CODES_KEPT {
            errors.push((code.into(), 1));
        } else if let Some((_, n)) = errors.iter_mut().find(|(c, _)| &**c == "OTHER") {
            *n += 1;
        } else {
            errors.push(("OTHER".into(), 1));
        }
    }
}

/// A call that ran and failed: counted, and its error code kept. Returns the reply's text.
pub fn failed(stat: &CommandStat, error: &impl std::fmt::Display) -> String {
    let text = error.to_string();
    bump(&stat.failed, 1);
    stat.count_error(&text);
    text
}

/// A call refused before it ran (arity, syntax, auth, MISCONF).
pub fn rejected(stat: &CommandStat, error: &impl std::fmt::Display) {
    bump(&stat.rejected, 1);
    stat.count_error(&error.to_string());
}

pub struct ServerStats {
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub commands_processed: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    pub unknown_commands: AtomicU64,
    /// Connections closed because a request looked like HTTP (`POST`, `Host:`): a web page
    /// reaching the port through a browser (cross-protocol scripting), as Redis refuses it.
    pub http_requests_refused: AtomicU64,
    /// A known command with a subcommand it does not have (`CLIENT MAINT_NOTIFICATIONS`): as in
    /// Redis an error reply, but no call (not even a rejected one) of any command.
    pub unknown_subcommands: AtomicU64,
    /// Idle lock names forgotten to stay within `max-idle-names`.
    pub names_forgotten: AtomicU64,
    pub commands: Vec<CommandStat>,
    pub slowlog: SlowLog,
    pub latency: LatencyMonitor,
    /// The highest `used_memory` seen (by INFO or the once-a-second sample), in bytes.
    pub memory_peak: AtomicU64,
    /// Queued waits, from the acquire to the grant ...
    pub wait_granted: Histogram,
    /// ... or to the timeout.
    pub wait_timed_out: Histogram,
}

impl ServerStats {
    /// Counters for a table of `commands` commands.
    pub fn new(commands: usize) -> Self {
        ServerStats {
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            commands_processed: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            net_input_bytes: AtomicU64::new(0),
            net_output_bytes: AtomicU64::new(0),
            unknown_commands: AtomicU64::new(0),
            http_requests_refused: AtomicU64::new(0),
            unknown_subcommands: AtomicU64::new(0),
            names_forgotten: AtomicU64::new(0),
            commands: (0..commands).map(|_| CommandStat::default()).collect(),
            slowlog: SlowLog::default(),
            latency: LatencyMonitor::default(),
            memory_peak: AtomicU64::new(0),
            wait_granted: time_histogram(),
            wait_timed_out: time_histogram(),
        }
    }
}

pub fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

pub fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

fn zero(counter: &AtomicU64) {
    counter.store(0, Ordering::Relaxed);
}

/// One call of the command at table index `index` that took `usec`: its commandstats and its
/// histogram. For calls whose time is not the server's doing (a WAIT that waited for the lock),
/// which therefore stay out of the latency monitor and the slow log.
pub fn account(stats: &ServerStats, index: usize, usec: u64) {
    let stat = &stats.commands[index];
    bump(&stat.calls, 1);
    bump(&stat.usec, usec);
    stat.histogram.record(usec);
}

/// The calls one connection answered since it last wrote, by command table index and time:
/// added to commandstats together, when the connection writes their replies (or before it runs
/// a command that reads them). Every call's three counters are shared by every connection, on
/// whatever thread each runs: added call by call, the threads took turns on the counters' cache
/// lines for each call of a pipeline.
#[derive(Default)]
pub struct Tally {
    calls: Vec<(usize, u64)>,
}

impl Tally {
    pub fn add(&mut self, index: usize, usec: u64) {
        self.calls.push((index, usec));
    }

    /// Adds the calls to the shared counters: one addition per run of one command, and per run
    /// of calls in one histogram bucket.
    pub fn settle(&mut self, stats: &ServerStats) {
        let mut calls = self.calls.drain(..).peekable();
        while let Some((index, usec)) = calls.next() {
            let stat = &stats.commands[index];
            let (mut count, mut total) = (1, usec);
            let mut bucket = (bucket_of(usec), 1);
            while let Some(&(next, usec)) = calls.peek() {
                if next != index {
                    break;
                }
                calls.next();
                count += 1;
                total += usec;
                let of = bucket_of(usec);
                if of == bucket.0 {
                    bucket.1 += 1;
                } else {
                    bump(&stat.histogram.0[bucket.0], bucket.1);
                    bucket = (of, 1);
                }
            }
            bump(&stat.histogram.0[bucket.0], bucket.1);
            bump(&stat.calls, count);
            bump(&stat.usec, total);
        }
    }
}

/// CONFIG RESETSTAT: what Redis resets of the server's counters. INFO stats' counters,
/// commandstats and the latency histograms (the lock table's event counters are the machine's). The slow
/// log, the latency monitor and the memory peak are kept, as Redis keeps them.
pub fn reset(s: &ServerStats) {
    for counter in [
        &s.connections_received,
        &s.rejected_connections,
        &s.commands_processed,
        &s.protocol_errors,
        &s.net_input_bytes,
        &s.net_output_bytes,
        &s.unknown_commands,
        &s.http_requests_refused,
        &s.unknown_subcommands,
        &s.names_forgotten,
    ] {
        zero(counter);
    }
    for stat in &s.commands {
        for counter in [&stat.calls, &stat.usec, &stat.rejected, &stat.failed] {
            zero(counter);
        }
        stat.histogram.reset();
        stat.errors.lock().clear();
    }
}

// ----------------------------------------------------------------------------- histograms

/// Buckets of a latency histogram: Redis's reporting levels from 1 µs to 1 s.
pub const HISTOGRAM_BUCKETS: usize = 21;

/// Calls by duration in power-of-two buckets, lock-free. The buckets are the levels Redis 7
/// reports for LATENCY HISTOGRAM: Redis keeps an HdrHistogram of nanoseconds (1 µs to 1 s, two
/// significant digits) and walks it in powers of two from 1024 ns, naming each level by the
/// highest value it holds, in µs: 1, 2, 4, 8, 16, 33, 66, 132, 264, ... A call of `d` µs counts
/// in the first level whose name is at least `d`, exactly as it would in Redis.
#[derive(Default)]
pub struct LatencyHistogram([AtomicU64; HISTOGRAM_BUCKETS]);

/// The highest duration, in ns, that level `i` (1024·2^i ns) of Redis's histogram holds: the
/// level plus the width of its sub-bucket (512 ns below 131072 ns, a 128th of it above) less 1.
fn bucket_bound_ns(i: usize) -> u64 {
    let level = 1024u64 << i;
    let unit = if level < 131_072 { 512 } else { level >> 7 };
    level + unit - 1
}

/// The name of bucket `i` in LATENCY HISTOGRAM replies, in µs.
pub fn bucket_usec(i: usize) -> u64 {
    bucket_bound_ns(i) / 1000
}

fn bucket_of(usec: u64) -> usize {
    // Redis records whole microseconds and clamps them to 1 µs ..= 1 s.
    let ns = usec.clamp(1, 1_000_000) * 1000;
    (0..HISTOGRAM_BUCKETS)
        .find(|&i| ns <= bucket_bound_ns(i))
        .unwrap_or(HISTOGRAM_BUCKETS - 1)
}

impl LatencyHistogram {
    pub fn record(&self, usec: u64) {
        bump(&self.0[bucket_of(usec)], 1);
    }

    /// The calls counted, and the cumulative count up to each bucket that holds any, as
    /// (bucket name in µs, calls that took at most that long).
    pub fn cumulative(&self) -> (u64, Vec<(u64, u64)>) {
        let mut total = 0;
        let mut levels = Vec::new();
        for (i, count) in self.0.iter().enumerate() {
            let count = read(count);
            if count > 0 {
                total += count;
                levels.push((bucket_usec(i), total));
            }
        }
        (total, levels)
    }

    fn reset(&self) {
        self.0.iter().for_each(zero);
    }

    /// The calls in each bucket (not cumulative), bucket `i` holding calls up to
    /// [`bucket_usec`]`(i)` µs, the last one everything slower too (Redis clamps at 1 s).
    pub fn counts(&self) -> [u64; HISTOGRAM_BUCKETS] {
        std::array::from_fn(|i| read(&self.0[i]))
    }
}

/// Upper bounds, in seconds, of the durations of waits and holds: 1 ms to an hour (the
/// longest WAIT flockd allows by default).
pub const TIME_BOUNDS_SECONDS: [f64; 15] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Durations of waits and holds over [`TIME_BOUNDS_SECONDS`] (the last bucket: longer).
pub fn time_histogram() -> Histogram {
    Histogram::of_seconds(&TIME_BOUNDS_SECONDS)
}

// ----------------------------------------------------------------------------- slow log

/// Redis keeps at most this many arguments of a slow command (the last one says how many more
/// there were) ...
const SLOWLOG_MAX_ARGC: usize = 32;
/// ... and at most this many bytes of each.
const SLOWLOG_MAX_STRING: usize = 128;

/// A command's arguments as received, captured before parsing consumes them, as far as the slow
/// log could show them: the first 32 and how many there were.
pub struct SlowArgs {
    argv: Vec<Bytes>,
}

impl SlowArgs {
    /// The request's own arguments, kept as they are (no copy: they are only read should the
    /// call turn out slow); `None` when the slow log is off.
    pub fn capture(config: &Config, argv: Vec<Bytes>) -> Option<SlowArgs> {
        (config.slowlog_log_slower_than >= 0).then_some(SlowArgs { argv })
    }

    /// The arguments as the slow log keeps them, in Redis's words: secrets replaced by
    /// `(redacted)`, more than 32 arguments cut to 31 and `... (N more arguments)`, an argument
    /// over 128 bytes cut to 128 and `... (N more bytes)`. Copied: an entry must not pin a read
    /// buffer.
    fn for_log(&self) -> Vec<Bytes> {
        let argc = self.argv.len();
        let keep = if argc > SLOWLOG_MAX_ARGC {
            SLOWLOG_MAX_ARGC - 1
        } else {
            argc
        };
        let mut args: Vec<Bytes> = self.argv[..keep]
            .iter()
            .enumerate()
            .map(|(i, arg)| {
                if redacted(&self.argv, i) {
                    Bytes::from_static(b"(redacted)")
                } else if arg.len() > SLOWLOG_MAX_STRING {
                    let mut cut = arg[..SLOWLOG_MAX_STRING].to_vec();
                    cut.extend_from_slice(
                        format!("... ({} more bytes)", arg.len() - SLOWLOG_MAX_STRING).as_bytes(),
                    );
                    Bytes::from(cut)
                } else {
                    Bytes::copy_from_slice(arg)
                }
            })
            .collect();
        if keep < argc {
            args.push(Bytes::from(format!("... ({} more arguments)", argc - keep)));
        }
        args
    }
}

/// Whether argument `i` is a secret Redis hides (`redactClientCommandArgument`): AUTH's
/// arguments, the user and password after HELLO's AUTH, and a `requirepass` value given to
/// CONFIG SET.
fn redacted(args: &[Bytes], i: usize) -> bool {
    let is = |j: usize, word: &[u8]| args.get(j).is_some_and(|a| a.eq_ignore_ascii_case(word));
    if is(0, b"auth") {
        return i > 0;
    }
    // ACL SETUSER's rules carry passwords (`>secret`).
    if is(0, b"acl") && is(1, b"setuser") {
        return i >= 3;
    }
    if is(0, b"hello") {
        // HELLO protover [AUTH user pass] [SETNAME name], options in any order.
        let mut j = 2;
        while j < args.len() {
            if is(j, b"auth") && j + 2 < args.len() {
                if i == j + 1 || i == j + 2 {
                    return true;
                }
                j += 3;
            } else if is(j, b"setname") {
                j += 2;
            } else {
                break;
            }
        }
        return false;
    }
    if is(0, b"config") && is(1, b"set") {
        return i >= 3 && i % 2 == 1 && is(i - 1, b"requirepass");
    }
    false
}

/// One slow command, as SLOWLOG GET shows it.
#[derive(Clone, Debug)]
pub struct SlowEntry {
    pub id: u64,
    pub unix_time: u64,
    pub usec: u64,
    pub args: Vec<Bytes>,
    /// Kept as the address and written out by SLOWLOG GET: formatted on every entry logged, it
    /// cost ~1,400 instructions, and a server slower than the threshold logs every command.
    pub client_addr: SocketAddr,
    pub client_name: Bytes,
}

#[derive(Default)]
pub struct SlowLog {
    inner: Mutex<SlowLogInner>,
}

#[derive(Default)]
struct SlowLogInner {
    next_id: u64,
    /// Newest first.
    entries: VecDeque<SlowEntry>,
}

impl SlowLog {
    /// Logs a call of `usec` if it took at least `slower_than` µs (-1: never), keeping at most
    /// `max_len` entries.
    pub fn record(
        &self,
        slower_than: i64,
        max_len: usize,
        usec: u64,
        args: &SlowArgs,
        client: &ClientHandle,
    ) {
        if slower_than < 0 || usec < slower_than as u64 {
            return;
        }
        let mut entry = SlowEntry {
            id: 0,
            unix_time: unix_time(),
            usec,
            args: args.for_log(),
            client_addr: client.addr,
            client_name: client.names.lock().name.clone().unwrap_or_default(),
        };
        let mut inner = self.inner.lock();
        entry.id = inner.next_id;
        inner.next_id += 1;
        inner.entries.push_front(entry);
        inner.entries.truncate(max_len);
    }

    /// The newest `count` entries (all when `None`), newest first; `max_len` is applied first
    /// (it may have been lowered since the entries were logged).
    pub fn get(&self, count: Option<usize>, max_len: usize) -> Vec<SlowEntry> {
        let mut inner = self.inner.lock();
        inner.entries.truncate(max_len);
        let count = count.unwrap_or(usize::MAX);
        inner.entries.iter().take(count).cloned().collect()
    }

    pub fn len(&self, max_len: usize) -> usize {
        let mut inner = self.inner.lock();
        inner.entries.truncate(max_len);
        inner.entries.len()
    }

    /// SLOWLOG RESET: drops the entries; ids keep counting, as in Redis.
    pub fn reset(&self) {
        self.inner.lock().entries.clear();
    }
}

fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

// ----------------------------------------------------------------------------- latency monitor

/// Samples an event keeps, one per second at most (Redis's `LATENCY_TS_LEN`).
const LATENCY_SAMPLES: usize = 160;

/// The events the latency monitor records: a command flagged fast, any other command.
pub const LATENCY_EVENTS: &[&str] = &["command", "fast-command"];

/// Redis's latency monitor: per event, the worst latency of each second it went over
/// `latency-monitor-threshold` (the last 160 such seconds) and its all-time worst.
#[derive(Default)]
pub struct LatencyMonitor {
    /// In the order the events first occurred.
    events: Mutex<Vec<LatencySeries>>,
}

#[derive(Clone)]
pub struct LatencySeries {
    pub event: &'static str,
    /// (unix time, ms), oldest first.
    pub samples: VecDeque<(u64, u64)>,
    pub max_ms: u64,
}

impl LatencyMonitor {
    /// Records `ms` for `event` if the monitor is on (`threshold_ms` > 0) and `ms` reaches it.
    pub fn add_if_needed(&self, threshold_ms: u64, event: &'static str, ms: u64) {
        if threshold_ms == 0 || ms < threshold_ms {
            return;
        }
        let now = unix_time();
        let mut events = self.events.lock();
        let series = match events.iter().position(|s| s.event == event) {
            Some(i) => &mut events[i],
            None => {
                events.push(LatencySeries {
                    event,
                    samples: VecDeque::with_capacity(LATENCY_SAMPLES),
                    max_ms: 0,
                });
                events.last_mut().expect("just pushed")
            }
        };
        series.max_ms = series.max_ms.max(ms);
        match series.samples.back_mut() {
            // One sample per second: its worst latency.
            Some((time, worst)) if *time == now => *worst = (*worst).max(ms),
            _ => {
                if series.samples.len() == LATENCY_SAMPLES {
                    series.samples.pop_front();
                }
                series.samples.push_back((now, ms));
            }
        }
    }

    /// Every event that occurred, with its samples.
    pub fn events(&self) -> Vec<LatencySeries> {
        self.events.lock().clone()
    }

    /// LATENCY RESET: forgets the named events (case-insensitively), or all of them when none is
    /// named; how many were forgotten.
    pub fn reset(&self, names: &[Bytes]) -> usize {
        let mut events = self.events.lock();
        let before = events.len();
        if names.is_empty() {
            events.clear();
        } else {
            events.retain(|s| {
                !names
                    .iter()
                    .any(|n| n.eq_ignore_ascii_case(s.event.as_bytes()))
            });
        }
        before - events.len()
    }
}

// ----------------------------------------------------------------------------- memory

/// The process's memory, for INFO memory.
pub struct Memory {
    /// Bytes the allocator handed out and not got back (jemalloc's `stats.allocated`); the RSS
    /// where that cannot be asked.
    pub used: u64,
    /// Resident set size, from /proc/self/statm.
    pub rss: u64,
    /// The highest `used` seen.
    pub peak: u64,
    /// Physical memory of the machine.
    pub total_system: u64,
}

/// Measures the process's memory now, raising the recorded peak if need be.
pub fn memory(stats: &ServerStats) -> Memory {
    let rss = rss_bytes();
    let used = allocated_bytes().unwrap_or(rss);
    let peak = stats
        .memory_peak
        .fetch_max(used, Ordering::Relaxed)
        .max(used);
    Memory {
        used,
        rss,
        peak,
        total_system: total_system_bytes(),
    }
}

/// jemalloc's count of the bytes the program holds (`stats.allocated`), after moving its
/// statistics epoch on (they are cached per epoch). Both are reads of per-arena counters, not a
/// walk of the heap, and take no lock an allocating thread waits on for long.
fn allocated_bytes() -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    tikv_jemalloc_ctl::stats::allocated::read()
        .ok()
        .map(|bytes| bytes as u64)
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as u64 } else { 4096 }
}

/// Resident pages (the second field of /proc/self/statm) times the page size; 0 off Linux.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page_size())
}

fn total_system_bytes() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    if pages > 0 {
        pages as u64 * page_size()
    } else {
        0
    }
}

/// Redis's `bytesToHuman`: `1023B`, `1.50K`, `12.34M`, `2.00G`, ...
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut scale = 1024f64;
    for unit in UNITS {
        if (n as f64) < scale * 1024.0 {
            return format!("{:.2}{unit}", n as f64 / scale);
        }
        scale *= 1024.0;
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_the_levels_redis_reports() {
        let names: Vec<u64> = (0..HISTOGRAM_BUCKETS).map(bucket_usec).collect();
        assert_eq!(
            &names[..12],
            &[1, 2, 4, 8, 16, 33, 66, 132, 264, 528, 1056, 2113]
        );
        assert_eq!(names[HISTOGRAM_BUCKETS - 1], 1_082_130);
        // A call counts in the first level named at least its duration; 0 µs counts as 1 µs,
        // and anything over a second in the last level.
        for (usec, bucket) in [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (16, 4),
            (17, 5),
            (33, 5),
            (34, 6),
            (132, 7),
            (133, 8),
            (1_000_000, 20),
            (u64::MAX, 20),
        ] {
            assert_eq!(bucket_of(usec), bucket, "{usec} µs");
        }
        let h = LatencyHistogram::default();
        for usec in [0, 1, 1, 2, 7, 40] {
            h.record(usec);
        }
        assert_eq!(h.cumulative(), (6, vec![(1, 3), (2, 4), (8, 5), (66, 6)]));
        h.reset();
        assert_eq!(h.cumulative(), (0, vec![]));
    }

    fn args(list: &[&[u8]]) -> SlowArgs {
        SlowArgs {
            argv: list.iter().map(|a| Bytes::copy_from_slice(a)).collect(),
        }
    }

    fn shown(a: &SlowArgs) -> Vec<String> {
        a.for_log()
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    #[test]
    fn slow_log_arguments_follow_redis_rules() {
        assert_eq!(
            shown(&args(&[b"AUTH", b"alice", b"secret"])),
            ["AUTH", "(redacted)", "(redacted)"]
        );
        assert_eq!(
            shown(&args(&[
                b"hello", b"3", b"SETNAME", b"n", b"auth", b"u", b"pw"
            ])),
            [
                "hello",
                "3",
                "SETNAME",
                "n",
                "auth",
                "(redacted)",
                "(redacted)"
            ]
        );
        assert_eq!(
            shown(&args(&[
                b"CONFIG",
                b"SET",
                b"maxclients",
                b"5",
                b"requirepass",
                b"pw"
            ])),
            [
                "CONFIG",
                "SET",
                "maxclients",
                "5",
                "requirepass",
                "(redacted)"
            ]
        );
        let long = vec![b'x'; 200];
        let cut = shown(&args(&[b"ECHO", &long]));
        assert_eq!(cut[1], format!("{}... (72 more bytes)", "x".repeat(128)));
        let many: Vec<&[u8]> = std::iter::repeat_n(&b"a"[..], 40).collect();
        let cut = shown(&args(&many));
        assert_eq!(cut.len(), 32);
        assert_eq!(cut[31], "... (9 more arguments)");
        assert_eq!(shown(&args(&many[..32])).len(), 32);
    }

    #[test]
    fn latency_monitor_keeps_the_worst_per_second_and_resets_by_name() {
        let m = LatencyMonitor::default();
        m.add_if_needed(0, "command", 500);
        assert!(m.events().is_empty(), "threshold 0 is off");
        m.add_if_needed(10, "command", 5);
        assert!(m.events().is_empty(), "under the threshold");
        m.add_if_needed(10, "command", 20);
        m.add_if_needed(10, "command", 30);
        m.add_if_needed(10, "fast-command", 12);
        let events = m.events();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].event, "command");
        assert_eq!(events[0].max_ms, 30);
        assert!(events[0].samples.len() <= 2);
        assert_eq!(events[0].samples.back().unwrap().1, 30);
        assert_eq!(m.reset(&[Bytes::from_static(b"FAST-COMMAND")]), 1);
        assert_eq!(m.reset(&[]), 1);
        assert!(m.events().is_empty());
    }

    #[test]
    fn human_bytes_reads_like_redis() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.00M");
        assert_eq!(human_bytes(5 << 30), "5.00G");
    }

    #[test]
    fn a_tally_settles_into_the_same_counts_as_calls_one_by_one() {
        let (tallied, one_by_one) = (ServerStats::new(3), ServerStats::new(3));
        let calls = [
            (0, 1),
            (0, 1),
            (0, 900),
            (2, 5),
            (0, 2),
            (0, 2),
            (1, 70_000),
            (2, 5),
        ];
        let mut tally = Tally::default();
        for (index, usec) in calls {
            tally.add(index, usec);
            account(&one_by_one, index, usec);
        }
        assert_eq!(
            read(&tallied.commands[0].calls),
            0,
            "nothing before it settles"
        );
        tally.settle(&tallied);
        for index in 0..3 {
            let (a, b) = (&tallied.commands[index], &one_by_one.commands[index]);
            assert_eq!(read(&a.calls), read(&b.calls), "calls of {index}");
            assert_eq!(read(&a.usec), read(&b.usec), "usec of {index}");
            assert_eq!(a.histogram.cumulative(), b.histogram.cumulative());
        }
        assert_eq!(read(&tallied.commands[0].calls), 5);
        // Settled once: a second settle adds nothing.
        tally.settle(&tallied);
        assert_eq!(read(&tallied.commands[0].usec), 906);
    }

    #[test]
    fn memory_is_measured() {
        let stats = ServerStats::new(1);
        let m = memory(&stats);
        assert!(m.used > 0 && m.rss > 0 && m.total_system > 0);
        assert!(m.peak >= m.used);
    }
}
