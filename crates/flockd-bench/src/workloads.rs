//! The workloads. The same code drives both servers; only the request encoding differs
//! (`FLOCK.ACQUIRE`/`FLOCK.RELEASE` vs `EVALSHA` of the Redisson-style scripts).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::resp::{Arg, ClientError, Conn, Reply};
use crate::servers::{Kind, Target};

/// Set by Ctrl-C: every loop ends as if its deadline had passed.
pub static ABORT: AtomicBool = AtomicBool::new(false);

#[derive(Clone, Debug)]
pub enum Load {
    /// Acquire random names out of `names`, `pipeline` requests per batch; never release.
    Acquire {
        names: u64,
        lease_ms: u64,
        pipeline: usize,
    },
    /// Acquire a random name out of `names`, release it with the token: one cycle. `shared`:
    /// as readers (flockd `SHARED`; Redis: Redisson's read-lock scripts, which give no token).
    Cycle {
        names: u64,
        lease_ms: u64,
        shared: bool,
    },
    /// Many connections on few names. flockd: `WAIT`; Redis: retry with a random backoff.
    Contention {
        names: u64,
        lease_ms: u64,
        wait_ms: u64,
        backoff_min_ms: u64,
        backoff_max_ms: u64,
    },
    Ping,
    /// `FLOCK.TOKEN` of a random name out of `names` (flockd only): a linearizable read, which
    /// a cluster node serves at the leader's read point.
    Read {
        names: u64,
    },
}

#[derive(Clone, Debug)]
pub struct Workload {
    pub id: String,
    pub title: String,
    pub conns: usize,
    pub load: Load,
}

/// The counters kept per connection, per run and per series (all rounds of one workload on
/// one server).
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Completed units (replies; cycles for `Cycle`/`Contention`) inside the window.
    pub ops: u64,
    /// `Acquire`: grants (an integer token). `Cycle`/`Contention`: attempts that got the lock.
    pub grants: u64,
    /// `Acquire`: null replies. `Cycle`: acquires that found the name held.
    /// `Contention`: waits that ran out (null after WAIT / retry loop past the wait time).
    pub nulls: u64,
    /// `Contention`: acquire requests sent (Redis retries included).
    pub attempts: u64,
    /// Releases that did not release (NOTOWNER / nil / 0): a lease ran out before the release.
    pub lost: u64,
    /// Error replies and connection failures, with the first text seen.
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Counts {
    /// Counts one error; keeps its text if it is the first.
    pub fn error(&mut self, text: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(text);
        }
    }

    /// Adds `other`'s counters; keeps this side's first error if it has one.
    pub fn add(&mut self, other: &Counts) {
        self.ops += other.ops;
        self.grants += other.grants;
        self.nulls += other.nulls;
        self.attempts += other.attempts;
        self.lost += other.lost;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }
}

/// One measured run (one server, one round).
pub struct RunResult {
    pub counts: Counts,
    pub secs: f64,
    pub hist: Histogram<u64>,
}

impl RunResult {
    pub fn throughput(&self) -> f64 {
        if self.secs > 0.0 {
            self.counts.ops as f64 / self.secs
        } else {
            0.0
        }
    }
}

struct Tally {
    counts: Counts,
    hist: Histogram<u64>,
}

pub(crate) fn new_hist() -> Histogram<u64> {
    // 1 µs .. 100 s, 3 significant figures.
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid histogram bounds")
}

impl Tally {
    fn new() -> Tally {
        Tally {
            counts: Counts::default(),
            hist: new_hist(),
        }
    }

    fn error(&mut self, text: String) {
        self.counts.error(text);
    }

    /// Counts one completed unit if it completed inside the window.
    fn done(&mut self, started: Instant, now: Instant, deadline: Instant) {
        if now <= deadline {
            self.counts.ops += 1;
            let us = now.saturating_duration_since(started).as_micros() as u64;
            self.hist.saturating_record(us.max(1));
        }
    }
}

/// splitmix64: a tiny, fast PRNG per connection (no shared state between tasks).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Per-connection request builder: the lock name `lock:<n>`, the Redisson-style token key
/// `redisson_lock_token:{lock:<n>}` and the holder id `<uuid>:<thread id>`.
struct Client {
    conn: Conn,
    target: Target,
    holder: Vec<u8>,
    name: Vec<u8>,
    token_key: Vec<u8>,
    /// Redis read lock: this holder's timeout-key prefix, the lock's key prefix, and this
    /// holder's write-lock id.
    read_timeout_key: Vec<u8>,
    read_prefix: Vec<u8>,
    write_id: Vec<u8>,
}

impl Client {
    fn set_name(&mut self, n: u64) {
        self.name.clear();
        self.name.extend_from_slice(b"lock:");
        self.name.extend_from_slice(n.to_string().as_bytes());
        if self.target.kind == Kind::Redis {
            self.token_key.clear();
            self.token_key.extend_from_slice(b"redisson_lock_token:{");
            self.token_key.extend_from_slice(&self.name);
            self.token_key.push(b'}');
            self.read_prefix.clear();
            self.read_prefix.push(b'{');
            self.read_prefix.extend_from_slice(&self.name);
            self.read_prefix.push(b'}');
            self.read_timeout_key.clear();
            self.read_timeout_key.extend_from_slice(&self.read_prefix);
            self.read_timeout_key.push(b':');
            self.read_timeout_key.extend_from_slice(&self.holder);
            self.read_timeout_key.extend_from_slice(b":rwlock_timeout");
        }
    }

    /// A reader's acquire: flockd `SHARED`, or Redisson's read-lock script.
    fn push_acquire_shared(&mut self, lease_ms: u64) {
        match self.target.kind {
            Kind::Flockd => self.conn.push(&[
                Arg::B(b"FLOCK.ACQUIRE"),
                Arg::B(&self.name),
                Arg::I(lease_ms),
                Arg::B(b"SHARED"),
            ]),
            Kind::Redis => self.conn.push(&[
                Arg::B(b"EVALSHA"),
                Arg::B(&self.target.read_acquire_sha),
                Arg::I(2),
                Arg::B(&self.name),
                Arg::B(&self.read_timeout_key),
                Arg::I(lease_ms),
                Arg::B(&self.holder),
                Arg::B(&self.write_id),
            ]),
        }
    }

    /// Whether an acquire's reply is a grant, and its token (0 for Redis's read lock, which
    /// has none); `Err` for a reply that is neither a grant nor "held".
    fn granted(&self, shared: bool, reply: Reply) -> Result<Option<u64>, String> {
        match (self.target.kind, shared, reply) {
            (Kind::Redis, true, Reply::Nil) => Ok(Some(0)),
            (Kind::Redis, true, Reply::Int(_)) => Ok(None),
            (_, _, Reply::Int(token)) => Ok(Some(token as u64)),
            (_, _, Reply::Nil) => Ok(None),
            (_, _, other) => Err(format!("acquire replied {other}")),
        }
    }

    /// A reader's release; Ok(true) released, Ok(false) lost (lease ran out).
    async fn release_shared(
        &mut self,
        token: u64,
        lease_ms: u64,
    ) -> Result<Result<bool, String>, ClientError> {
        if self.target.kind == Kind::Flockd {
            return self.release(token, lease_ms).await;
        }
        self.conn.push(&[
            Arg::B(b"EVALSHA"),
            Arg::B(&self.target.read_release_sha),
            Arg::I(3),
            Arg::B(&self.name),
            Arg::B(&self.read_timeout_key),
            Arg::B(&self.read_prefix),
            Arg::B(&self.holder),
        ]);
        self.conn.flush().await?;
        Ok(match self.conn.read().await? {
            Reply::Int(0 | 1) => Ok(true),
            Reply::Nil => Ok(false),
            other => Err(format!("read release replied {other}")),
        })
    }

    fn push_acquire(&mut self, lease_ms: u64, wait_ms: Option<u64>) {
        match self.target.kind {
            Kind::Flockd => match wait_ms {
                Some(w) => self.conn.push(&[
                    Arg::B(b"FLOCK.ACQUIRE"),
                    Arg::B(&self.name),
                    Arg::I(lease_ms),
                    Arg::B(b"WAIT"),
                    Arg::I(w),
                ]),
                None => self.conn.push(&[
                    Arg::B(b"FLOCK.ACQUIRE"),
                    Arg::B(&self.name),
                    Arg::I(lease_ms),
                ]),
            },
            Kind::Redis => self.conn.push(&[
                Arg::B(b"EVALSHA"),
                Arg::B(&self.target.acquire_sha),
                Arg::I(2),
                Arg::B(&self.name),
                Arg::B(&self.token_key),
                Arg::I(lease_ms),
                Arg::B(&self.holder),
            ]),
        }
    }

    fn push_release(&mut self, token: u64, lease_ms: u64) {
        match self.target.kind {
            Kind::Flockd => {
                self.conn
                    .push(&[Arg::B(b"FLOCK.RELEASE"), Arg::B(&self.name), Arg::I(token)])
            }
            Kind::Redis => self.conn.push(&[
                Arg::B(b"EVALSHA"),
                Arg::B(&self.target.release_sha),
                Arg::I(1),
                Arg::B(&self.name),
                Arg::I(lease_ms),
                Arg::B(&self.holder),
            ]),
        }
    }

    /// Release and classify: Ok(true) released, Ok(false) lost (lease ran out), Err(text) error.
    async fn release(
        &mut self,
        token: u64,
        lease_ms: u64,
    ) -> Result<Result<bool, String>, ClientError> {
        self.push_release(token, lease_ms);
        self.conn.flush().await?;
        Ok(match self.conn.read().await? {
            Reply::Int(1) => Ok(true),
            Reply::Int(0) | Reply::Nil => Ok(false),
            Reply::Error(e) if e.starts_with("NOTOWNER") => Ok(false),
            other => Err(format!("release replied {other}")),
        })
    }
}

pub(crate) fn stop_now(deadline: Instant) -> bool {
    ABORT.load(Ordering::Relaxed) || Instant::now() >= deadline
}

async fn drive(mut c: Client, load: Load, seed: u64, deadline: Instant) -> Tally {
    let mut t = Tally::new();
    let mut rng = Rng(seed);
    if let Err(e) = drive_inner(&mut c, &load, &mut rng, deadline, &mut t).await {
        t.error(format!("{}: {e}", c.target.kind.label()));
    }
    t
}

async fn drive_inner(
    c: &mut Client,
    load: &Load,
    rng: &mut Rng,
    deadline: Instant,
    t: &mut Tally,
) -> Result<(), ClientError> {
    match *load {
        Load::Ping => {
            while !stop_now(deadline) {
                let start = Instant::now();
                match c.conn.call(&[Arg::B(b"PING")]).await? {
                    Reply::Status(_) => t.done(start, Instant::now(), deadline),
                    other => t.error(format!("PING replied {other}")),
                }
            }
        }
        Load::Read { names } => {
            while !stop_now(deadline) {
                c.set_name(rng.below(names));
                let start = Instant::now();
                match c
                    .conn
                    .call(&[Arg::B(b"FLOCK.TOKEN"), Arg::B(&c.name)])
                    .await?
                {
                    Reply::Int(_) => t.done(start, Instant::now(), deadline),
                    other => t.error(format!("FLOCK.TOKEN replied {other}")),
                }
            }
        }
        Load::Acquire {
            names,
            lease_ms,
            pipeline,
        } => {
            while !stop_now(deadline) {
                for _ in 0..pipeline {
                    let n = rng.below(names);
                    c.set_name(n);
                    c.push_acquire(lease_ms, None);
                }
                let start = Instant::now();
                c.conn.flush().await?;
                for _ in 0..pipeline {
                    let reply = c.conn.read().await?;
                    let now = Instant::now();
                    match reply {
                        Reply::Int(_) => {
                            t.counts.grants += 1;
                            t.done(start, now, deadline);
                        }
                        Reply::Nil => {
                            t.counts.nulls += 1;
                            t.done(start, now, deadline);
                        }
                        other => t.error(format!("acquire replied {other}")),
                    }
                }
            }
        }
        Load::Cycle {
            names,
            lease_ms,
            shared,
        } => {
            while !stop_now(deadline) {
                let n = rng.below(names);
                c.set_name(n);
                let start = Instant::now();
                if shared {
                    c.push_acquire_shared(lease_ms);
                } else {
                    c.push_acquire(lease_ms, None);
                }
                c.conn.flush().await?;
                let reply = c.conn.read().await?;
                match c.granted(shared, reply) {
                    Ok(Some(token)) => {
                        t.counts.grants += 1;
                        let released = if shared {
                            c.release_shared(token, lease_ms).await?
                        } else {
                            c.release(token, lease_ms).await?
                        };
                        match released {
                            Ok(true) => t.done(start, Instant::now(), deadline),
                            Ok(false) => t.counts.lost += 1,
                            Err(e) => t.error(e),
                        }
                    }
                    Ok(None) => t.counts.nulls += 1,
                    Err(e) => t.error(e),
                }
            }
        }
        Load::Contention {
            names,
            lease_ms,
            wait_ms,
            backoff_min_ms,
            backoff_max_ms,
        } => {
            while !stop_now(deadline) {
                let n = rng.below(names);
                c.set_name(n);
                let start = Instant::now();
                let give_up = start + Duration::from_millis(wait_ms);
                // Ok(Some(token)): got it; Ok(None): the wait ran out.
                let got: Option<u64> = match c.target.kind {
                    Kind::Flockd => {
                        t.counts.attempts += 1;
                        c.push_acquire(lease_ms, Some(wait_ms));
                        c.conn.flush().await?;
                        match c.conn.read().await? {
                            Reply::Int(token) => Some(token as u64),
                            Reply::Nil => None,
                            other => {
                                t.error(format!("acquire WAIT replied {other}"));
                                None
                            }
                        }
                    }
                    Kind::Redis => loop {
                        t.counts.attempts += 1;
                        c.push_acquire(lease_ms, None);
                        c.conn.flush().await?;
                        match c.conn.read().await? {
                            Reply::Int(token) => break Some(token as u64),
                            Reply::Nil => {}
                            other => {
                                t.error(format!("acquire replied {other}"));
                                break None;
                            }
                        }
                        if Instant::now() >= give_up || stop_now(deadline) {
                            break None;
                        }
                        let span = backoff_max_ms.saturating_sub(backoff_min_ms) + 1;
                        let pause = backoff_min_ms + rng.below(span);
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                    },
                };
                match got {
                    Some(token) => {
                        t.counts.grants += 1;
                        match c.release(token, lease_ms).await? {
                            Ok(true) => t.done(start, Instant::now(), deadline),
                            Ok(false) => t.counts.lost += 1,
                            Err(e) => t.error(e),
                        }
                    }
                    None => t.counts.nulls += 1,
                }
            }
        }
    }
    Ok(())
}

/// One run: `w.conns` connections to `target`, each its own task, for `duration`.
/// Connections are opened before the clock starts.
pub async fn run(target: &Target, w: &Workload, duration: Duration, seed: u64) -> RunResult {
    let uuid = format!(
        "{:08x}-{:04x}-bench-{:012x}",
        std::process::id(),
        seed & 0xffff,
        seed
    );
    let mut clients = Vec::with_capacity(w.conns);
    let mut result = RunResult {
        counts: Counts::default(),
        secs: duration.as_secs_f64(),
        hist: new_hist(),
    };
    for i in 0..w.conns {
        match Conn::connect_maybe_tls(target.addr, target.tls.as_ref()).await {
            Ok(conn) => {
                let holder = format!("{uuid}:{}", i + 1);
                clients.push(Client {
                    conn,
                    target: target.clone(),
                    write_id: format!("{holder}:write").into_bytes(),
                    holder: holder.into_bytes(),
                    name: Vec::with_capacity(32),
                    token_key: Vec::with_capacity(64),
                    read_timeout_key: Vec::with_capacity(96),
                    read_prefix: Vec::with_capacity(40),
                })
            }
            Err(e) => result.counts.error(format!(
                "{}: connect {} failed: {e}",
                target.kind.label(),
                target.addr
            )),
        }
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::with_capacity(clients.len());
    for (i, client) in clients.into_iter().enumerate() {
        let load = w.load.clone();
        let s = seed
            .wrapping_mul(0x2545_f491_4f6c_dd1d)
            .wrapping_add(i as u64 * 0x9e37_79b9);
        tasks.push(tokio::spawn(drive(client, load, s, deadline)));
    }
    for task in tasks {
        match task.await {
            Ok(t) => {
                result.counts.add(&t.counts);
                let _ = result.hist.add(&t.hist);
            }
            Err(e) => result.counts.error(format!("client task failed: {e}")),
        }
    }
    if ABORT.load(Ordering::Relaxed) {
        result.secs = start.elapsed().as_secs_f64().min(duration.as_secs_f64());
    }
    result
}
