//! Starting and stopping the two servers. Every process is owned by a [`ServerGuard`], whose
//! `Drop` stops it by pid (SIGTERM, then SIGKILL after a grace period) and removes its data
//! directory: on success, on error and on panic alike.

use std::fs::{self, File};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_rustls::TlsConnector;

use crate::resp::{Arg, Conn, Reply};

/// Redisson `RedissonFencedLock.tryLockInnerAsync`, except that it returns the token on a
/// grant and nil when the lock is held (Redisson returns `{-1, token}` / `{pttl, -1}`).
/// KEYS[1] = lock hash, KEYS[2] = token counter; ARGV[1] = lease ms, ARGV[2] = holder id.
pub const ACQUIRE_LUA: &str = "\
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
  local token = redis.call('incr', KEYS[2]); \
  redis.call('hincrby', KEYS[1], ARGV[2], 1); \
  redis.call('pexpire', KEYS[1], ARGV[1]); \
  return token; \
end; \
return nil;";

/// Redisson `RedissonLock.unlockInnerAsync` without the pub/sub notification (the clients here
/// spin instead of subscribing). KEYS[1] = lock hash; ARGV[1] = lease ms, ARGV[2] = holder id.
/// nil: not the holder; 0: a reentrant hold remains; 1: released.
pub const RELEASE_LUA: &str = "\
if (redis.call('hexists', KEYS[1], ARGV[2]) == 0) then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); \
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[1]); return 0; end; \
redis.call('del', KEYS[1]); \
return 1;";

/// Redisson `RedissonReadLock.tryLockInnerAsync`'s algorithm: a hash of holders with a `mode`
/// field, one expiring key per hold. nil: granted (Redisson's read lock gives no token); an
/// integer: the ms left of a writer's lease. KEYS[1] = lock hash, KEYS[2] = this holder's
/// timeout-key prefix (`{name}:<holder>:rwlock_timeout`); ARGV[1] = lease ms, ARGV[2] = holder
/// id, ARGV[3] = the holder's write-lock id.
pub const READ_ACQUIRE_LUA: &str = "\
local mode = redis.call('hget', KEYS[1], 'mode'); \
if mode == false then \
  redis.call('hset', KEYS[1], 'mode', 'read'); \
  redis.call('hset', KEYS[1], ARGV[2], 1); \
  redis.call('set', KEYS[2] .. ':1', 1); \
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); \
  redis.call('pexpire', KEYS[1], ARGV[1]); \
  return nil; \
end; \
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then \
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1); \
  local key = KEYS[2] .. ':' .. n; \
  redis.call('set', key, 1); \
  redis.call('pexpire', key, ARGV[1]); \
  local left = redis.call('pttl', KEYS[1]); \
  redis.call('pexpire', KEYS[1], math.max(left, ARGV[1])); \
  return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson `RedissonReadLock.unlockInnerAsync`'s algorithm without the pub/sub notification:
/// drop one hold, then, while other holders remain, find the longest hold left by reading the
/// ttl of every hold of every holder. KEYS[1] = lock hash, KEYS[2] = this holder's timeout-key
/// prefix, KEYS[3] = the lock's key prefix (`{name}`); ARGV[1] = holder id. nil: not a holder;
/// 0: released, others still hold; 1: released, the lock is free.
pub const READ_RELEASE_LUA: &str = "\
local mode = redis.call('hget', KEYS[1], 'mode'); \
if mode == false then return 1; end; \
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil; end; \
local n = redis.call('hincrby', KEYS[1], ARGV[1], -1); \
if n == 0 then redis.call('hdel', KEYS[1], ARGV[1]); end; \
redis.call('del', KEYS[2] .. ':' .. (n + 1)); \
if redis.call('hlen', KEYS[1]) > 1 then \
  local longest = -3; \
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do \
    local holds = tonumber(redis.call('hget', KEYS[1], field)); \
    if type(holds) == 'number' then \
      for i = holds, 1, -1 do \
        longest = math.max(longest, redis.call('pttl', KEYS[3] .. ':' .. field .. ':rwlock_timeout:' .. i)); \
      end; \
    end; \
  end; \
  if longest > 0 then redis.call('pexpire', KEYS[1], longest); return 0; end; \
  if mode == 'write' then return 0; end; \
end; \
redis.call('del', KEYS[1]); \
return 1;";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Flockd,
    Redis,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Flockd => "flockd",
            Kind::Redis => "Redis+Lua",
        }
    }
}

/// What the workload code needs to talk to a running server.
#[derive(Clone)]
pub struct Target {
    pub kind: Kind,
    pub addr: SocketAddr,
    pub acquire_sha: Vec<u8>,
    pub release_sha: Vec<u8>,
    pub read_acquire_sha: Vec<u8>,
    pub read_release_sha: Vec<u8>,
    /// Set when `addr` is a TLS port.
    pub tls: Option<TlsConnector>,
}

impl Target {
    /// A flockd at `addr`, plain text.
    pub fn flockd(addr: SocketAddr) -> Target {
        Target {
            kind: Kind::Flockd,
            addr,
            acquire_sha: Vec::new(),
            release_sha: Vec::new(),
            read_acquire_sha: Vec::new(),
            read_release_sha: Vec::new(),
            tls: None,
        }
    }
}

pub struct ServerGuard {
    pub target: Target,
    child: Option<Child>,
    dir: PathBuf,
    log: PathBuf,
}

impl ServerGuard {
    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The pid, or an error naming the server that is not running.
    pub fn running_pid(&self) -> Result<u32, String> {
        self.pid()
            .ok_or_else(|| format!("the {} server is not running", self.target.kind.label()))
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(None) = child.try_wait() {
            // SIGTERM first: both servers flush and fsync their AOF and exit.
            if let Ok(pid) = i32::try_from(child.id()) {
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = child.kill(); // SIGKILL, this pid only
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }

    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// A free loopback port: bind port 0, read the port, release it.
pub fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

static DIR_SEQ: AtomicU64 = AtomicU64::new(0);

fn fresh_dir(kind: Kind) -> std::io::Result<PathBuf> {
    let n = DIR_SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "flockd-bench-{}-{}-{n}",
        std::process::id(),
        match kind {
            Kind::Flockd => "flockd",
            Kind::Redis => "redis",
        }
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Starts one server with the given fsync policy on a free loopback port, waits until it
/// answers PING, and (Redis) loads the scripts.
pub async fn start(kind: Kind, binary: &Path, fsync: &str) -> Result<ServerGuard, String> {
    start_with(kind, binary, fsync, &[]).await
}

/// [`start`], with `extra` arguments after the usual ones.
pub async fn start_with(
    kind: Kind,
    binary: &Path,
    fsync: &str,
    extra: &[String],
) -> Result<ServerGuard, String> {
    let dir = fresh_dir(kind).map_err(|e| format!("cannot create a data directory: {e}"))?;
    let port = free_port().map_err(|e| format!("cannot pick a free port: {e}"))?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let log = dir.join("server.log");
    let out = File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(binary);
    match kind {
        Kind::Flockd => {
            cmd.arg("--bind")
                .arg("127.0.0.1")
                .arg("--port")
                .arg(port.to_string())
                .arg("--dir")
                .arg(&dir)
                .arg("--appendfsync")
                .arg(fsync);
        }
        Kind::Redis => {
            cmd.arg("--bind")
                .arg("127.0.0.1")
                .arg("--port")
                .arg(port.to_string())
                .arg("--save")
                .arg("")
                .arg("--appendonly")
                .arg("yes")
                .arg("--appendfsync")
                .arg(fsync)
                .arg("--dir")
                .arg(&dir)
                .arg("--daemonize")
                .arg("no")
                .arg("--logfile")
                .arg("");
        }
    }
    cmd.args(extra).stdin(Stdio::null()).stdout(out).stderr(err);
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let mut guard = ServerGuard {
        target: Target {
            kind,
            ..Target::flockd(addr)
        },
        child: Some(child),
        dir,
        log,
    };

    // Wait until it answers PING (10 s at most), noticing an early exit.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conn = loop {
        if let Some(child) = guard.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            return Err(format!(
                "{} exited during start-up ({status}); its log:\n{}",
                binary.display(),
                guard.log_tail()
            ));
        }
        if let Ok(mut conn) = Conn::connect(addr).await
            && let Ok(Reply::Status(s)) = conn.call(&[Arg::B(b"PING")]).await
            && s == "PONG"
        {
            break conn;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} did not answer PING on {addr} within 10 s; its log:\n{}",
                binary.display(),
                guard.log_tail()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    if kind == Kind::Redis {
        for (script, slot) in [
            (ACQUIRE_LUA, 0),
            (RELEASE_LUA, 1),
            (READ_ACQUIRE_LUA, 2),
            (READ_RELEASE_LUA, 3),
        ] {
            let reply = conn
                .call(&[
                    Arg::B(b"SCRIPT"),
                    Arg::B(b"LOAD"),
                    Arg::B(script.as_bytes()),
                ])
                .await
                .map_err(|e| format!("SCRIPT LOAD: {e}"))?;
            let Reply::Bulk(sha) = reply else {
                return Err(format!("SCRIPT LOAD replied {reply}"));
            };
            let target = &mut guard.target;
            *match slot {
                0 => &mut target.acquire_sha,
                1 => &mut target.release_sha,
                2 => &mut target.read_acquire_sha,
                _ => &mut target.read_release_sha,
            } = sha;
        }
    }
    Ok(guard)
}

/// `binary --version` (first line), for the report.
pub fn version_of(binary: &Path) -> String {
    Command::new(binary)
        .arg("--version")
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// Clock ticks per second, the unit of `/proc`'s CPU times.
fn ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64
}

/// The whole machine's busy CPU time so far in ms, over all cores, from `/proc/stat`: with
/// other processes' time, and softirq work (on loopback, much of TCP's) whether or not the
/// kernel charged it to the process it ran in.
pub fn machine_busy_ms() -> u64 {
    let Ok(stat) = fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(cpu) = stat.lines().next() else {
        return 0;
    };
    // user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
    let ticks: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|t| t.parse().ok())
        .collect();
    let busy: u64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    busy * 1000 / ticks_per_s()
}

/// CPU time (user + system) the processes `pids` have used so far, in milliseconds; from
/// `/proc/<pid>/stat`, so in clock ticks (10 ms here): runs of seconds make it exact enough.
pub fn cpu_ms(pids: &[u32]) -> u64 {
    let ticks_per_s = ticks_per_s();
    pids.iter()
        .filter_map(|pid| fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name (which may hold spaces) start after its `)`.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) * 1000 / ticks_per_s)
        })
        .sum()
}
