//! Crash test: SIGKILL the real server in the middle of a load of acquires, fence writes and
//! releases under `appendfsync always`, restart it on the same data directory, and check that no
//! fencing token that was acknowledged to a client is ever issued again or undercut.
//!
//! Rounds: `FLOCKD_CRASH_ROUNDS` (default 5 when `CI=true`, 10 otherwise). Seed:
//! `FLOCKD_CRASH_SEED` (default: from the clock; printed, so a failure can be replayed).

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Server, TempDir, encode_request, reply_len};

const LOCKS: usize = 8;
const CLIENTS: usize = 16;
const LEASE_MS: u64 = 800;

/// splitmix64: a small seeded generator (the test crate has no `rand`).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A client that never panics on a dead server: every call returns the raw reply text or an
/// I/O error (the server was killed).
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr) -> std::io::Result<Client> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    fn call(&mut self, args: &[&str]) -> std::io::Result<String> {
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

/// `:N\r\n` -> Some(N); a null -> None; anything else panics with the reply.
fn int_or_null(reply: &str) -> Option<u64> {
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

fn int(reply: &str) -> u64 {
    int_or_null(reply).unwrap_or_else(|| panic!("expected an integer, got {reply:?}"))
}

fn lock_name(i: usize) -> String {
    format!("crash-lock-{i}")
}

fn fence_key(i: usize) -> String {
    format!("crash-fence-{i}")
}

/// What one client thread saw acknowledged in one round.
#[derive(Default)]
struct Acks {
    /// Per lock, the tokens acquired, in the order they were acknowledged.
    tokens: BTreeMap<usize, Vec<u64>>,
    /// Per fence key, the highest token a FENCE.SET acknowledged with 1.
    fences: BTreeMap<usize, u64>,
    /// FENCE.SET calls acknowledged with 1.
    fence_acks: usize,
}

fn client_loop(addr: SocketAddr, seed: u64, stop: Arc<AtomicBool>) -> Acks {
    let mut acks = Acks::default();
    let mut rng = Rng(seed);
    let Ok(mut c) = Client::connect(addr) else {
        return acks;
    };
    // Bounded: the kill ends it long before; the cap only guards against a hung server.
    for _ in 0..200_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let lock = rng.below(LOCKS as u64) as usize;
        let name = lock_name(lock);
        let wait = (5 + rng.below(50)).to_string();
        let reply = match c.call(&["FLOCK.ACQUIRE", &name, &LEASE_MS.to_string(), "WAIT", &wait]) {
            Ok(r) => r,
            Err(_) => break,
        };
        let Some(token) = int_or_null(&reply) else {
            continue;
        };
        acks.tokens.entry(lock).or_default().push(token);
        let token_s = token.to_string();
        if rng.below(2) == 0 {
            let key = fence_key(lock);
            let value = format!("{token}:{seed}");
            match c.call(&["FENCE.SET", &key, &token_s, &value]) {
                Ok(r) => {
                    if int(&r) == 1 {
                        acks.fence_acks += 1;
                        let e = acks.fences.entry(lock).or_default();
                        *e = (*e).max(token);
                    }
                }
                Err(_) => break,
            }
        }
        // A release may find the lease expired on a loaded machine (-NOTOWNER): fine.
        if c.call(&["FLOCK.RELEASE", &name, &token_s]).is_err() {
            break;
        }
    }
    acks
}

#[test]
fn sigkill_under_load_never_reissues_or_lowers_a_token() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let rounds: usize = std::env::var("FLOCKD_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if ci { 5 } else { 10 });
    let seed: u64 = std::env::var("FLOCKD_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("crash test: {rounds} round(s), FLOCKD_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = TempDir::new("crash");
    let flags = ["--appendfsync", "always"];
    let mut server = Server::start_in(dir.path(), &flags);

    // Every token acknowledged to anyone (clients and the checker), per lock, over all rounds.
    let mut all_tokens: HashMap<usize, HashSet<u64>> = HashMap::new();
    // Per client slot and lock, the last token acknowledged (per-client order across rounds).
    let mut per_client_last: HashMap<(usize, usize), u64> = HashMap::new();
    let mut total_acks = 0usize;
    let mut total_fence_acks = 0usize;
    let started = Instant::now();

    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = server.addr;
        let handles: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let stop = stop.clone();
                let s = rng.next() ^ i as u64;
                std::thread::spawn(move || client_loop(addr, s, stop))
            })
            .collect();
        let kill_after = Duration::from_millis(50 + rng.below(351));
        std::thread::sleep(kill_after);
        server.kill9();
        let results: Vec<Acks> = handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect();
        stop.store(true, Ordering::Relaxed);

        // What was acknowledged before the kill.
        let mut max_acked: BTreeMap<usize, u64> = BTreeMap::new();
        let mut max_fence: BTreeMap<usize, u64> = BTreeMap::new();
        let mut round_acks = 0;
        for (client, acks) in results.iter().enumerate() {
            for (&lock, tokens) in &acks.tokens {
                for &t in tokens {
                    round_acks += 1;
                    assert!(
                        all_tokens.entry(lock).or_default().insert(t),
                        "round {round}: token {t} of {} acknowledged twice (seed {seed})",
                        lock_name(lock)
                    );
                    let last = per_client_last.entry((client, lock)).or_insert(0);
                    assert!(
                        t > *last,
                        "round {round}: client {client} got token {t} of {} after {last} (seed {seed})",
                        lock_name(lock)
                    );
                    *last = t;
                    let m = max_acked.entry(lock).or_insert(0);
                    *m = (*m).max(t);
                }
            }
            total_fence_acks += acks.fence_acks;
            for (&lock, &t) in &acks.fences {
                let m = max_fence.entry(lock).or_insert(0);
                *m = (*m).max(t);
            }
        }
        total_acks += round_acks;

        server = Server::start_in(dir.path(), &flags);
        let mut c = Client::connect(server.addr).expect("connect after restart");
        for lock in 0..LOCKS {
            let name = lock_name(lock);
            let max_ever = all_tokens
                .get(&lock)
                .and_then(|s| s.iter().max().copied())
                .unwrap_or(0);
            let counter = int(&c.call(&["FLOCK.TOKEN", &name]).unwrap());
            assert!(
                counter >= max_ever,
                "round {round}: FLOCK.TOKEN {name} = {counter} after restart, but token {max_ever} was acknowledged \
                 (seed {seed}); log:\n{}",
                server.log()
            );
            // A lease live at the kill was re-armed in full: wait it out.
            let reply = c
                .call(&["FLOCK.ACQUIRE", &name, "10000", "WAIT", "10000"])
                .unwrap();
            let next = int(&reply);
            assert!(
                next > max_ever && next > counter,
                "round {round}: next token of {name} is {next}, not above {max_ever} acknowledged / counter {counter} \
                 (seed {seed})"
            );
            assert!(
                all_tokens.entry(lock).or_default().insert(next),
                "token {next} of {name} issued twice"
            );
            assert_eq!(
                c.call(&["FLOCK.RELEASE", &name, &next.to_string()])
                    .unwrap(),
                ":1\r\n"
            );
            if let Some(&f) = max_fence.get(&lock) {
                let key = fence_key(lock);
                let ft = int(&c.call(&["FENCE.TOKEN", &key]).unwrap());
                assert!(
                    ft >= f,
                    "round {round}: FENCE.TOKEN {key} = {ft} after restart, but FENCE.SET with {f} was acknowledged \
                     (seed {seed})"
                );
                // The stored value is the one written with the stored token.
                let v = c.call(&["FENCE.GET", &key]).unwrap();
                assert!(
                    v.contains(&format!("\r\n{ft}:")),
                    "FENCE.GET {key} = {v:?}, FENCE.TOKEN {ft}"
                );
            }
        }
        println!(
            "round {round}: killed after {kill_after:?}, {round_acks} token(s) acknowledged, max per lock {:?}",
            max_acked.values().collect::<Vec<_>>()
        );
    }
    println!(
        "crash test: {rounds} round(s) in {:?}: {total_acks} acquires and {total_fence_acks} fence writes acknowledged \
         before kills, none reissued or lowered",
        started.elapsed()
    );
    assert!(total_acks > 0, "the load never got a token acknowledged");
    server.signal("TERM");
    assert!(
        server
            .wait_exit(Duration::from_secs(20))
            .is_some_and(|s| s.success())
    );
}
