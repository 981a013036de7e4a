//! `flockd lock NAME [options] [--] CMD [ARGS...]`: runs a command while holding a flockd lock,
//! as `flock(1)`, `etcdctl lock` and `consul lock` do for theirs. As with flock(1), `-w` is in
//! seconds (fractions allowed), `-n` does not wait, `-E` sets the conflict exit code, and `--`
//! before CMD is optional. Unlike flock(1), the lock has a lease (`--lease`, in ms, as the
//! server's lease-ms) that is renewed while CMD runs. The lock is taken (waiting
//! if asked), CMD runs in a process group of its own with `FLOCK_NAME`, `FLOCK_TOKEN`,
//! `FLOCK_LEASE_MS` and `FLOCKD_URL` in its environment, the lease is renewed at a third of its
//! length (crates/flockd-client's watchdog, across a cluster's nodes), and the lock is released
//! once CMD is gone; the exit code is CMD's.
//!
//! The lock is never held while CMD runs on without it, and CMD never runs on after its lease
//! has surely ended: once the lock is lost (a renewal refused, a force-release or expiry
//! event, or no renewal back before the lease, counted from when the last good one was sent,
//! is about to end) CMD's group gets SIGTERM at once and SIGKILL after `--kill-after`, and
//! never later than the lease's end by this process's clock. CMD dies with this process too
//! (`PR_SET_PDEATHSIG`), should it be killed outright.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ExitCode, ExitStatus};
use std::time::Duration;

use clap::Args;
use flockd_client::{Client, LockGuard, Lost};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::{Instant, sleep, sleep_until};

/// Exit code when flockd lock itself fails (cannot connect, a server error): as `timeout(1)`
/// and `env(1)`, so it is not taken for CMD's.
const OWN_FAILURE: u8 = 125;
/// CMD could not be started (as a shell: 126 found but not runnable, 127 not found).
const CANNOT_RUN: u8 = 126;
const NOT_FOUND: u8 = 127;
/// Without --wait or --nonblock the wait has no end; it is asked in rounds of the server's
/// default `max-wait-ms`.
const WAIT_ROUND: Duration = Duration::from_millis(3_600_000);
/// How often the child is looked at besides SIGCHLD (which can coalesce, never vanish: this is
/// a second line only).
const CHILD_POLL: Duration = Duration::from_millis(500);

/// `flockd lock`'s flags.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's name.
    pub name: String,
    /// The lease in ms; renewed at a third of it while CMD runs.
    #[arg(long, value_name = "MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub lease: u64,
    /// Wait up to SECS for the lock, fractions allowed (default: as long as it takes, like
    /// flock(1)). A server that cannot be reached at start is tried again meanwhile (without
    /// --wait it is a failure at once).
    #[arg(short, long, visible_alias = "timeout", value_name = "SECS",
          value_parser = parse_seconds, conflicts_with = "nonblock")]
    pub wait: Option<Duration>,
    /// Do not wait: exit with the conflict code at once if the lock is held.
    #[arg(short, long)]
    pub nonblock: bool,
    /// Take a shared (read) holding.
    #[arg(short, long, conflicts_with = "limit")]
    pub shared: bool,
    /// Take one of N permits (a semaphore).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub limit: Option<u16>,
    /// Owner id: acquires with the same owner are reentrant holds of one holding.
    #[arg(long, value_name = "ID")]
    pub owner: Option<String>,
    /// Exit code when the lock was not acquired (held, or --wait ran out); CMD is not run.
    #[arg(short = 'E', long, value_name = "N", default_value_t = 1)]
    pub conflict_exit_code: u8,
    /// Exit code when the lock was lost while CMD ran (CMD was terminated).
    #[arg(long, value_name = "N", default_value_t = 75)]
    pub lost_exit_code: u8,
    /// After a lost lock, SIGKILL CMD's process group this many ms after its SIGTERM (sooner
    /// if the lease ends sooner).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub kill_after: u64,
    /// The server: redis://[user:pass@]host:port, rediss:// for TLS. Several (repeated or
    /// comma-separated): the nodes of a cluster, tried in turn.
    #[arg(
        long,
        env = "FLOCKD_URL",
        value_name = "URL",
        value_delimiter = ',',
        default_value = "redis://127.0.0.1:6390"
    )]
    pub url: Vec<String>,
    /// TLS: this client's certificate (for servers with tls-auth-clients yes).
    #[arg(
        long,
        env = "FLOCKD_TLS_CERT_FILE",
        value_name = "FILE",
        requires = "tls_key_file"
    )]
    pub tls_cert_file: Option<PathBuf>,
    /// TLS: the key of --tls-cert-file.
    #[arg(
        long,
        env = "FLOCKD_TLS_KEY_FILE",
        value_name = "FILE",
        requires = "tls_cert_file"
    )]
    pub tls_key_file: Option<PathBuf>,
    /// TLS: the CA the server's certificate is checked against (default: the system's).
    #[arg(long, env = "FLOCKD_TLS_CA_CERT_FILE", value_name = "FILE")]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// The command and its arguments (after `--` when CMD itself starts with `-`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// `--wait`'s seconds, as flock(1) takes them: `10`, `2.5`, `0`.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds (e.g. 10 or 2.5)"))?;
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| format!("'{text}' is not a number of seconds from 0 up"))
}

#[derive(Debug, thiserror::Error)]
pub enum LockToolError {
    #[error("{0}")]
    Client(#[from] flockd_client::Error),
    /// No server answered (for as long as the wait allowed).
    #[error("cannot reach the server at {addrs}: {reason}")]
    Unreachable { addrs: String, reason: String },
    #[error(
        "the server at {addrs} refused the login: {reason} (check the user and password in the URL)"
    )]
    Login { addrs: String, reason: String },
    #[error("the server refused the lock request: {0}")]
    Refused(String),
    #[error("bad server URL {url}: {source}")]
    Url {
        url: String,
        source: redis::RedisError,
    },
    #[error("cannot read {flag} {path}: {source}", path = path.display())]
    TlsFile {
        flag: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot run {command}: {source}")]
    Spawn { command: String, source: io::Error },
    #[error("cannot handle signals: {0}")]
    Signals(io::Error),
    #[error("cannot wait for the command: {0}")]
    Wait(io::Error),
}

impl LockToolError {
    fn exit_code(&self) -> u8 {
        match self {
            LockToolError::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                NOT_FOUND
            }
            LockToolError::Spawn { .. } => CANNOT_RUN,
            _ => OWN_FAILURE,
        }
    }
}

pub fn run(args: LockArgs) -> ExitCode {
    // One thread: CMD is forked from it, and PR_SET_PDEATHSIG follows the forking thread.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("flockd lock: cannot start the runtime: {e}");
            return ExitCode::from(OWN_FAILURE);
        }
    };
    match runtime.block_on(lock_and_run(&args)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("flockd lock: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

async fn lock_and_run(args: &LockArgs) -> Result<u8, LockToolError> {
    let servers = clients(args)?;
    let addrs = servers
        .iter()
        .map(|c| c.get_connection_info().addr().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let wait_until = wait(args).map(|w| Instant::now() + w);
    let client = connect(servers, &addrs, wait_until).await?;
    let acquired = acquire(&client, args)
        .await
        .map_err(|e| in_own_words(e, &addrs))?;
    let Some(guard) = acquired else {
        return Ok(args.conflict_exit_code);
    };
    // Installed before CMD exists, so no SIGCHLD or forwarded signal can slip past.
    let mut signals = Signals::new().map_err(LockToolError::Signals)?;
    let terminal = owns_terminal();
    let child = match spawn(args, &guard, terminal) {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            return Err(e);
        }
    };
    let code = supervise(args, guard, child, &mut signals).await;
    if terminal {
        take_terminal_back();
    }
    code
}

/// Whether a shell ran this process in the foreground of the terminal on stdin: then CMD gets
/// the terminal (an interactive CMD in a background group would be stopped by SIGTTIN on its
/// first read, with the lock held for as long as nobody notices).
fn owns_terminal() -> bool {
    // SAFETY: plain queries of the terminal on fd 0.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// The terminal back to this process's group once CMD is gone, as a shell does after a job.
fn take_terminal_back() {
    // SAFETY: a background group's tcsetpgrp raises SIGTTOU unless it is ignored meanwhile.
    unsafe {
        let before = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(0, libc::getpgrp());
        libc::signal(libc::SIGTTOU, before);
    }
}

/// One redis client per URL, with the TLS files for `rediss://` ones.
fn clients(args: &LockArgs) -> Result<Vec<redis::Client>, LockToolError> {
    let read = |flag: &'static str, path: &Option<PathBuf>| {
        path.as_ref()
            .map(|path| {
                std::fs::read(path).map_err(|source| LockToolError::TlsFile {
                    flag,
                    path: path.clone(),
                    source,
                })
            })
            .transpose()
    };
    let cert = read("--tls-cert-file", &args.tls_cert_file)?;
    let key = read("--tls-key-file", &args.tls_key_file)?;
    let ca = read("--tls-ca-cert-file", &args.tls_ca_cert_file)?;
    args.url
        .iter()
        .map(|url| {
            let url = url.trim();
            let client = if url.starts_with("rediss://") && (cert.is_some() || ca.is_some()) {
                redis::Client::build_with_tls(
                    url,
                    redis::TlsCertificates {
                        client_tls: cert.clone().zip(key.clone()).map(
                            |(client_cert, client_key)| redis::ClientTlsConfig {
                                client_cert,
                                client_key,
                            },
                        ),
                        root_cert: ca.clone(),
                    },
                )
            } else {
                redis::Client::open(url)
            };
            client.map_err(|source| LockToolError::Url {
                url: url.to_string(),
                source,
            })
        })
        .collect()
}

/// How long to wait for the lock: none with --nonblock, --wait's, or `None` for no end.
fn wait(args: &LockArgs) -> Option<Duration> {
    if args.nonblock {
        Some(Duration::ZERO)
    } else {
        args.wait
    }
}

/// How often a server that cannot be reached at start is tried again while the wait lasts.
const CONNECT_RETRY: Duration = Duration::from_millis(500);

/// Connects to the first server that answers, trying again until `wait_until`: a lock that
/// may be waited for may also be waited for while its server restarts. Without --wait (no end)
/// a server down at start is a failure at once: a job must not hang for ever, unseen, on a
/// wrong address.
async fn connect(
    servers: Vec<redis::Client>,
    addrs: &str,
    wait_until: Option<Instant>,
) -> Result<Client, LockToolError> {
    let mut told = false;
    loop {
        let error = match Client::from_clients(servers.clone()).await {
            Ok(client) => return Ok(client),
            Err(e) => in_own_words(e.into(), addrs),
        };
        let retry = matches!(error, LockToolError::Unreachable { .. })
            && wait_until.is_some_and(|until| Instant::now() + CONNECT_RETRY < until);
        if !retry {
            return Err(error);
        }
        if !told {
            eprintln!("flockd lock: {error}; trying again while the wait lasts");
            told = true;
        }
        sleep(CONNECT_RETRY).await;
    }
}

/// A client library error as this tool says it: which server, and what to do.
fn in_own_words(error: LockToolError, addrs: &str) -> LockToolError {
    let LockToolError::Client(flockd_client::Error::Redis(e)) = &error else {
        return error;
    };
    let reason = match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.detail().unwrap_or("").to_string(),
    };
    let reason = if reason.is_empty() {
        e.to_string()
    } else {
        reason
    };
    if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
    {
        LockToolError::Login {
            addrs: addrs.to_string(),
            reason,
        }
    } else if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || matches!(e.code(), Some("CLUSTERDOWN" | "LOADING"))
    {
        LockToolError::Unreachable {
            addrs: addrs.to_string(),
            reason: e.to_string(),
        }
    } else {
        LockToolError::Refused(reason)
    }
}

/// The lock, or `None` when it stayed held (at once with --nonblock, or for all of --wait).
async fn acquire(client: &Client, args: &LockArgs) -> Result<Option<LockGuard>, LockToolError> {
    let wait = wait(args);
    loop {
        let mut request = client
            .lock(&args.name)
            .lease(Duration::from_millis(args.lease))
            .wait(wait.unwrap_or(WAIT_ROUND));
        if args.shared {
            request = request.shared();
        }
        if let Some(n) = args.limit {
            request = request.limit(n);
        }
        if let Some(owner) = &args.owner {
            request = request.owner(owner);
        }
        match request.acquire().await? {
            Some(guard) => return Ok(Some(guard)),
            // Waiting without an end: another round.
            None if wait.is_none() => continue,
            None => return Ok(None),
        }
    }
}

/// Starts CMD in a process group of its own (so a lost lock can stop all of it), with the
/// lock in its environment, and bound to die with this process.
fn spawn(args: &LockArgs, guard: &LockGuard, terminal: bool) -> Result<Child, LockToolError> {
    let mut command = std::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("FLOCK_NAME", &args.name)
        .env("FLOCK_TOKEN", guard.token().to_string())
        .env("FLOCK_LEASE_MS", args.lease.to_string())
        .env("FLOCKD_URL", args.url.join(","))
        .process_group(0);
    let parent = std::process::id();
    // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid, raise,
    // setpgid, signal, tcsetpgrp, getpid).
    unsafe {
        command.pre_exec(move || {
            // If flockd lock is killed outright nothing renews the lease: CMD must not run on.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before the prctl: the signal will never come.
            if libc::getppid() as u32 != parent {
                libc::raise(libc::SIGKILL);
            }
            if terminal {
                // Its own group first (as process_group(0) does), then the terminal for it,
                // before exec, so its first read finds it in the foreground.
                libc::setpgid(0, 0);
                let before = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, libc::getpid());
                libc::signal(libc::SIGTTOU, before);
            }
            Ok(())
        });
    }
    command.spawn().map_err(|source| LockToolError::Spawn {
        command: args.command[0].to_string_lossy().into_owned(),
        source,
    })
}

/// The signals flockd lock hears while CMD runs.
struct Signals {
    child: Signal,
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn new() -> io::Result<Signals> {
        Ok(Signals {
            child: signal(SignalKind::child())?,
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }
}

/// CMD is being stopped because the lock is lost.
struct Ending {
    /// When its group gets SIGKILL if CMD is still there (`None`: sent already).
    kill_at: Option<Instant>,
}

/// Waits for CMD, renewing (the guard's watchdog) and forwarding signals; stops it when the
/// lock is lost; releases once it is gone. The exit code: CMD's, or the lost code.
async fn supervise(
    args: &LockArgs,
    guard: LockGuard,
    mut child: Child,
    signals: &mut Signals,
) -> Result<u8, LockToolError> {
    let group = child.id() as libc::pid_t;
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut ending: Option<Ending> = None;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(LockToolError::Wait)? {
            break status;
        }
        if ending.is_none()
            && let Some(why) = guard.is_lost()
        {
            ending = Some(terminate(args, &guard, group, &why));
        }
        // The clock alone ends a lease no renewal has extended; valid_until only grows, so
        // waking at the old deadline and looking again is never late.
        let lease_deadline = guard.valid_until() - guard.safety_margin();
        let kill_at = ending.as_ref().and_then(|e| e.kill_at);
        tokio::select! {
            _ = signals.child.recv() => {}
            _ = sleep(CHILD_POLL) => {}
            why = &mut lost, if ending.is_none() => {
                ending = Some(terminate(args, &guard, group, &why));
            }
            _ = sleep_until(lease_deadline), if ending.is_none() => {}
            _ = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                if let Some(ending) = &mut ending {
                    eprintln!(
                        "flockd lock: the command outlived its SIGTERM; sending SIGKILL to its \
                         process group"
                    );
                    signal_group(group, libc::SIGKILL);
                    ending.kill_at = None;
                }
            }
            _ = signals.interrupt.recv() => signal_group(group, libc::SIGINT),
            _ = signals.terminate.recv() => signal_group(group, libc::SIGTERM),
            _ = signals.hangup.recv() => signal_group(group, libc::SIGHUP),
        }
    };
    if ending.is_some() {
        // What CMD left behind in its group goes too: none of it holds the lock any more.
        signal_group(group, libc::SIGKILL);
        // After a lease that ran out by the clock the holding may still be there.
        let _ = release(guard).await;
        return Ok(args.lost_exit_code);
    }
    if let Err(e) = release(guard).await {
        eprintln!(
            "flockd lock: the command ended, but releasing '{}' failed ({e}); its lease ends it",
            args.name
        );
    }
    Ok(exit_code(status))
}

/// Releases the lock, trying for as long as its lease may still be valid (after that there is
/// nothing left to free, and a server that stopped answering must not keep flockd lock).
async fn release(guard: LockGuard) -> Result<(), String> {
    let until = guard.valid_until();
    match tokio::time::timeout_at(until, guard.release()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no reply while the lease lasted".to_string()),
    }
}

/// Lock lost: SIGTERM to CMD's group now, and a time for SIGKILL: after --kill-after, and no
/// later than the lease's end by this process's clock.
fn terminate(args: &LockArgs, guard: &LockGuard, group: libc::pid_t, why: &Lost) -> Ending {
    eprintln!(
        "flockd lock: lost the lock '{}' (token {}): {why}; sending SIGTERM to the command",
        args.name,
        guard.token()
    );
    signal_group(group, libc::SIGTERM);
    let lease_end = guard.valid_until() - guard.safety_margin() / 2;
    let kill_at = (Instant::now() + Duration::from_millis(args.kill_after)).min(lease_end);
    Ending {
        kill_at: Some(kill_at),
    }
}

fn signal_group(group: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill(2) on a process group this process made; ESRCH (all gone) is fine.
    unsafe {
        libc::kill(-group, signal);
    }
}

/// CMD's status as a shell reports it: its code, or 128 + the signal that killed it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => (128 + signal) as u8,
        (None, None) => OWN_FAILURE,
    }
}
