//! A fenced-lock load for the tests that break the server or its disk: client threads acquire
//! a lock (exclusive, `SHARED`, a `LIMIT 3 SESSION` permit, or two locks at once with
//! `FLOCK.ACQUIREALL`), write to its fence key with the token (half of the writes with `LOCK`)
//! and release it, over raw TCP, and record what was acknowledged. After a restart, [`Ledger::verify`] checks that no acknowledged token is
//! issued again or undercut and that no acknowledged fence write is lost.
//!
//! Error replies (`-MISCONF` while the disk fails) are counted, never taken as acknowledgements.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{encode_request, reply_len};

pub const LOCKS: usize = 8;
pub const LEASE_MS: u64 = 800;

/// splitmix64: a small seeded generator (the test crate has no `rand`).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A seed from `var`, or from the clock (print it, so a failure can be replayed).
pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// A client that never panics on a dead server: every call returns the raw reply text or an
/// I/O error (the server was killed).
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> std::io::Result<Client> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    pub fn call(&mut self, args: &[&str]) -> std::io::Result<String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.stream.write_all(&encode_request(&args))?;
        loop {
            if let Some(len) = reply_len(&self.buf) {
                let reply: Vec<u8> = self.buf.drain(..len).collect();
                return Ok(String::from_utf8_lossy(&reply).into_owned());
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "closed",
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// `*2\r\n:N\r\n:M\r\n` -> Some([N, M]); a null array -> None; anything else panics.
pub fn ints_or_null(reply: &str) -> Option<Vec<u64>> {
    if reply == "*-1\r\n" || reply == "_\r\n" {
        return None;
    }
    let mut lines = reply.split("\r\n");
    let count: usize = lines
        .next()
        .and_then(|l| l.strip_prefix('*'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("expected an array or null, got {reply:?}"));
    Some(
        lines
            .take(count)
            .map(|l| int(&format!("{l}\r\n")))
            .collect(),
    )
}

/// `:N\r\n` -> Some(N); a null -> None; anything else panics with the reply.
pub fn int_or_null(reply: &str) -> Option<u64> {
    if reply == "$-1\r\n" || reply == "_\r\n" {
        return None;
    }
    let n = reply
        .strip_prefix(':')
        .and_then(|r| r.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("expected an integer or null, got {reply:?}"));
    Some(
        n.parse()
            .unwrap_or_else(|_| panic!("bad integer reply {reply:?}")),
    )
}

pub fn int(reply: &str) -> u64 {
    int_or_null(reply).unwrap_or_else(|| panic!("expected an integer, got {reply:?}"))
}

pub fn lock_name(i: usize) -> String {
    format!("crash-lock-{i}")
}

pub fn fence_key(i: usize) -> String {
    format!("crash-fence-{i}")
}

/// What one client thread saw acknowledged.
#[derive(Default)]
pub struct Acks {
    /// Per lock, the tokens acquired, in the order they were acknowledged.
    pub tokens: BTreeMap<usize, Vec<u64>>,
    /// Per fence key, the highest token a FENCE.SET acknowledged with 1.
    pub fences: BTreeMap<usize, u64>,
    /// FENCE.SET calls acknowledged with 1.
    pub fence_acks: usize,
    /// Error replies to acquires and fence writes, by their first word (`MISCONF`...).
    pub errors: BTreeMap<String, usize>,
}

/// An error reply's first word, or None for a reply that is not an error.
fn error_code(reply: &str) -> Option<String> {
    let rest = reply.strip_prefix('-')?;
    Some(rest.split([' ', '\r']).next().unwrap_or("").to_owned())
}

fn client_loop(addr: SocketAddr, seed: u64, stop: Arc<AtomicBool>) -> Acks {
    let mut acks = Acks::default();
    let mut rng = Rng(seed);
    let Ok(mut c) = Client::connect(addr) else {
        return acks;
    };
    let refused = |acks: &mut Acks, code: String| {
        *acks.errors.entry(code).or_default() += 1;
        // Refusals come back at once: do not spin.
        std::thread::sleep(Duration::from_millis(2));
    };
    // Bounded: the caller stops it long before; the cap only guards against a hung server.
    for _ in 0..200_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let lock = rng.below(LOCKS as u64) as usize;
        let wait = (5 + rng.below(50)).to_string();
        let lease = LEASE_MS.to_string();
        // Which locks this round of the loop takes, and how.
        let mut locks = vec![lock];
        let kind = rng.below(6);
        let result = match kind {
            0 => {
                let other = (lock + 1 + rng.below(LOCKS as u64 - 1) as usize) % LOCKS;
                locks.push(other);
                let (a, b) = (lock_name(lock), lock_name(other));
                c.call(&["FLOCK.ACQUIREALL", "2", &a, &b, &lease, "WAIT", &wait])
            }
            1 => c.call(&[
                "FLOCK.ACQUIRE",
                &lock_name(lock),
                &lease,
                "SHARED",
                "WAIT",
                &wait,
            ]),
            2 => c.call(&[
                "FLOCK.ACQUIRE",
                &lock_name(lock),
                &lease,
                "LIMIT",
                "3",
                "SESSION",
                "WAIT",
                &wait,
            ]),
            _ => c.call(&["FLOCK.ACQUIRE", &lock_name(lock), &lease, "WAIT", &wait]),
        };
        let Ok(reply) = result else {
            break;
        };
        if let Some(code) = error_code(&reply) {
            refused(&mut acks, code);
            continue;
        }
        let tokens = if kind == 0 {
            ints_or_null(&reply)
        } else {
            int_or_null(&reply).map(|t| vec![t])
        };
        let Some(tokens) = tokens else {
            continue;
        };
        for (&lock, &token) in locks.iter().zip(&tokens) {
            acks.tokens.entry(lock).or_default().push(token);
        }
        let (lock, token) = (locks[0], tokens[0]);
        let name = lock_name(lock);
        let token_s = token.to_string();
        if rng.below(2) == 0 {
            let key = fence_key(lock);
            let value = format!("{token}:{seed}");
            let mut args = vec!["FENCE.SET", key.as_str(), token_s.as_str(), value.as_str()];
            if rng.below(2) == 0 {
                args.extend(["LOCK", name.as_str()]);
            }
            match c.call(&args) {
                Ok(r) => match error_code(&r) {
                    Some(code) => refused(&mut acks, code),
                    None if int(&r) == 1 => {
                        acks.fence_acks += 1;
                        let e = acks.fences.entry(lock).or_default();
                        *e = (*e).max(token);
                    }
                    None => {}
                },
                Err(_) => break,
            }
        }
        // A release may find the lease expired on a loaded machine (-NOTOWNER), or be refused
        // while the disk fails (the lease then runs out): fine.
        let released = locks.iter().zip(&tokens).all(|(&lock, token)| {
            c.call(&["FLOCK.RELEASE", &lock_name(lock), &token.to_string()])
                .is_ok()
        });
        if !released {
            break;
        }
    }
    acks
}

/// `clients` load threads against `addr`, each with its own seed, until `stop` is set or the
/// server goes away.
pub fn start_clients(
    addr: SocketAddr,
    clients: usize,
    rng: &mut Rng,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<Acks>> {
    (0..clients)
        .map(|i| {
            let stop = stop.clone();
            let seed = rng.next() ^ i as u64;
            std::thread::spawn(move || client_loop(addr, seed, stop))
        })
        .collect()
}

/// Everything acknowledged so far, over every round of a test.
#[derive(Default)]
pub struct Ledger {
    /// Every token acknowledged to anyone (clients and checks), per lock.
    all_tokens: HashMap<usize, HashSet<u64>>,
    /// Per client slot and lock, the last token acknowledged (per-client order across rounds).
    per_client_last: HashMap<(usize, usize), u64>,
    /// Per fence key, the highest token a FENCE.SET acknowledged.
    max_fence: BTreeMap<usize, u64>,
    pub acquires: usize,
    pub fence_writes: usize,
    pub errors: BTreeMap<String, usize>,
}

/// One round's share of a ledger.
pub struct Round {
    pub acquires: usize,
    pub fence_writes: usize,
    pub errors: BTreeMap<String, usize>,
}

impl Ledger {
    /// Joins the round's clients and records what they saw; panics (naming `what`) if a token
    /// was acknowledged twice or a client saw its tokens of a lock go down.
    pub fn record(&mut self, handles: Vec<JoinHandle<Acks>>, what: &str) -> Round {
        let mut round = Round {
            acquires: 0,
            fence_writes: 0,
            errors: BTreeMap::new(),
        };
        for (client, handle) in handles.into_iter().enumerate() {
            let acks = handle.join().expect("client thread");
            for (&lock, tokens) in &acks.tokens {
                for &t in tokens {
                    round.acquires += 1;
                    assert!(
                        self.all_tokens.entry(lock).or_default().insert(t),
                        "{what}: token {t} of {} acknowledged twice",
                        lock_name(lock)
                    );
                    let last = self.per_client_last.entry((client, lock)).or_insert(0);
                    assert!(
                        t > *last,
                        "{what}: client {client} got token {t} of {} after {last}",
                        lock_name(lock)
                    );
                    *last = t;
                }
            }
            round.fence_writes += acks.fence_acks;
            for (&lock, &t) in &acks.fences {
                let m = self.max_fence.entry(lock).or_insert(0);
                *m = (*m).max(t);
            }
            for (code, n) in acks.errors {
                *round.errors.entry(code.clone()).or_default() += n;
                *self.errors.entry(code).or_default() += n;
            }
        }
        self.acquires += round.acquires;
        self.fence_writes += round.fence_writes;
        round
    }

    /// Against a server restarted on the surviving files: every lock's counter is at or above
    /// every token acknowledged, the next grant is above them all, and every fence key holds
    /// at least the highest acknowledged token with the value written with it. `log` is shown
    /// with a failure.
    pub fn verify(&mut self, addr: SocketAddr, what: &str, log: impl Fn() -> String) {
        let mut c = Client::connect(addr).expect("connect after restart");
        for lock in 0..LOCKS {
            let name = lock_name(lock);
            // What the restart kept obeys the admission rule, and no holding of a connection of
            // the killed run is left.
            let holders = c.call(&["FLOCK.HOLDERS", &name]).unwrap();
            let holdings = holders.matches("$5\r\ntoken\r\n").count();
            let exclusive = holders.matches("$9\r\nexclusive\r\n").count();
            let permits = holders.matches("$4\r\nmode\r\n$5\r\nlimit\r\n").count();
            assert!(
                (exclusive == 0 || holdings == 1) && (permits == 0 || holdings <= 3),
                "{what}: {name} kept holdings that break the admission rule: {holders:?}"
            );
            assert!(
                !holders.contains("$7\r\nsession\r\n:1\r\n"),
                "{what}: a SESSION holding of {name} outlived the restart: {holders:?}"
            );
            let max_ever = self
                .all_tokens
                .get(&lock)
                .and_then(|s| s.iter().max().copied())
                .unwrap_or(0);
            let counter = int(&c.call(&["FLOCK.TOKEN", &name]).unwrap());
            assert!(
                counter >= max_ever,
                "{what}: FLOCK.TOKEN {name} = {counter} after restart, but token {max_ever} was acknowledged; log:\n{}",
                log()
            );
            // A lease live at the stop was re-armed in full: wait it out.
            let reply = c
                .call(&["FLOCK.ACQUIRE", &name, "10000", "WAIT", "10000"])
                .unwrap();
            let next = int(&reply);
            assert!(
                next > max_ever && next > counter,
                "{what}: next token of {name} is {next}, not above {max_ever} acknowledged / counter {counter}"
            );
            assert!(
                self.all_tokens.entry(lock).or_default().insert(next),
                "{what}: token {next} of {name} issued twice"
            );
            assert_eq!(
                c.call(&["FLOCK.RELEASE", &name, &next.to_string()])
                    .unwrap(),
                ":1\r\n"
            );
            if let Some(&f) = self.max_fence.get(&lock) {
                let key = fence_key(lock);
                let ft = int(&c.call(&["FENCE.TOKEN", &key]).unwrap());
                assert!(
                    ft >= f,
                    "{what}: FENCE.TOKEN {key} = {ft} after restart, but FENCE.SET with {f} was acknowledged; log:\n{}",
                    log()
                );
                // The stored value is the one written with the stored token.
                let v = c.call(&["FENCE.GET", &key]).unwrap();
                assert!(
                    v.contains(&format!("\r\n{ft}:")),
                    "{what}: FENCE.GET {key} = {v:?}, FENCE.TOKEN {ft}"
                );
            }
        }
    }
}
