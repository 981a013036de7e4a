//! Many clients contending on a few locks with WAIT, each guarding its writes with FENCE.SET;
//! and the paused-holder story, where a holder whose lease ran out is fenced out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{TestServer, wait_until};

const CLIENTS: usize = 200;
const LOCKS: usize = 10;
const ROUNDS: usize = 5;

fn acquire(conn: &mut redis::Connection, name: &str, lease_ms: u64, wait_ms: u64) -> Option<u64> {
    redis::cmd("FLOCK.ACQUIRE")
        .arg(name)
        .arg(lease_ms)
        .arg("WAIT")
        .arg(wait_ms)
        .query(conn)
        .expect("FLOCK.ACQUIRE")
}

fn fence_set(conn: &mut redis::Connection, key: &str, token: u64, value: &str) -> i64 {
    redis::cmd("FENCE.SET")
        .arg(key)
        .arg(token)
        .arg(value)
        .query(conn)
        .expect("FENCE.SET")
}

#[derive(Default)]
struct PerLock {
    /// Tokens whose FENCE.SET was accepted, in the order they were accepted.
    accepted: Vec<u64>,
}

#[test]
fn two_hundred_clients_on_ten_locks_never_overlap_and_fenced_writes_only_move_forward() {
    let server = TestServer::start(&[]);
    let addr = server.url();
    let started = Instant::now();
    let state: Arc<Vec<Mutex<PerLock>>> = Arc::new((0..LOCKS).map(|_| Mutex::default()).collect());
    let inside: Arc<Vec<AtomicBool>> =
        Arc::new((0..LOCKS).map(|_| AtomicBool::new(false)).collect());
    // Connect everyone first, then start together.
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (addr, state, inside, barrier) =
                (addr.clone(), state.clone(), inside.clone(), barrier.clone());
            thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let mut conn = redis::Client::open(addr)
                        .unwrap()
                        .get_connection()
                        .expect("connect");
                    conn.set_read_timeout(Some(Duration::from_secs(90)))
                        .unwrap();
                    barrier.wait();
                    for round in 0..ROUNDS {
                        let lock = (client + round * 3) % LOCKS;
                        let name = format!("lock:{lock}");
                        let res = format!("res:{lock}");
                        let token =
                            acquire(&mut conn, &name, 30_000, 60_000).unwrap_or_else(|| {
                                panic!("client {client} round {round}: no grant within WAIT")
                            });
                        assert!(
                            !inside[lock].swap(true, Ordering::SeqCst),
                            "two clients inside the critical section of {name}"
                        );
                        {
                            // Under the lock: the test's record and the server's register must agree.
                            let mut per = state[lock].lock().unwrap();
                            if let Some(&last) = per.accepted.last() {
                                assert!(
                                    token > last,
                                    "{name}: token {token} not above accepted {last}"
                                );
                                // A write with an older token is refused...
                                if last > 1 {
                                    assert_eq!(fence_set(&mut conn, &res, last - 1, "stale"), 0);
                                }
                            }
                            let value = format!("client {client} round {round} token {token}");
                            assert_eq!(
                                fence_set(&mut conn, &res, token, &value),
                                1,
                                "{name}: holder's write refused"
                            );
                            if let Some(&last) = per.accepted.last() {
                                // ...and so is one with the previous holder's token, now.
                                assert_eq!(fence_set(&mut conn, &res, last, "late write"), 0);
                            }
                            let got: Option<String> =
                                redis::cmd("FENCE.GET").arg(&res).query(&mut conn).unwrap();
                            assert_eq!(got.as_deref(), Some(value.as_str()));
                            per.accepted.push(token);
                        }
                        inside[lock].store(false, Ordering::SeqCst);
                        let free: i64 = redis::cmd("FLOCK.RELEASE")
                            .arg(&name)
                            .arg(token)
                            .query(&mut conn)
                            .expect("release");
                        assert!(
                            free == 1,
                            "{name}: release of a non-reentrant hold must free it"
                        );
                    }
                })
                .expect("spawn")
        })
        .collect();
    let mut failures = 0;
    for h in handles {
        if h.join().is_err() {
            failures += 1;
        }
    }
    assert_eq!(
        failures,
        0,
        "client threads failed; server log:\n{}",
        server.log()
    );

    let mut conn = server.conn();
    let mut total = 0;
    for (lock, per) in state.iter().enumerate() {
        let per = per.lock().unwrap();
        assert!(
            per.accepted.windows(2).all(|w| w[0] < w[1]),
            "lock:{lock} accepted {:?}",
            per.accepted
        );
        let fence_token: u64 = redis::cmd("FENCE.TOKEN")
            .arg(format!("res:{lock}"))
            .query(&mut conn)
            .unwrap();
        assert_eq!(Some(&fence_token), per.accepted.last());
        // Every grant of this lock was a critical section: no token was spent elsewhere.
        let counter: u64 = redis::cmd("FLOCK.TOKEN")
            .arg(format!("lock:{lock}"))
            .query(&mut conn)
            .unwrap();
        assert_eq!(counter, per.accepted.len() as u64);
        let ttl: i64 = redis::cmd("FLOCK.TTL")
            .arg(format!("lock:{lock}"))
            .query(&mut conn)
            .unwrap();
        assert_eq!(ttl, -2);
        total += per.accepted.len();
    }
    assert_eq!(total, CLIENTS * ROUNDS);
    let info: String = redis::cmd("INFO").arg("locks").query(&mut conn).unwrap();
    let fields: HashMap<&str, &str> = info.lines().filter_map(|l| l.split_once(':')).collect();
    assert_eq!(fields["grants"], (CLIENTS * ROUNDS).to_string());
    assert_eq!(fields["releases"], (CLIENTS * ROUNDS).to_string());
    assert_eq!(
        fields["fence_writes_accepted"],
        (CLIENTS * ROUNDS).to_string()
    );
    assert_eq!(fields["lock_waiters"], "0");
    assert_eq!(fields["locks_held"], "0");
    eprintln!(
        "{} critical sections by {CLIENTS} clients on {LOCKS} locks in {:?}",
        CLIENTS * ROUNDS,
        started.elapsed()
    );
    server.assert_alive();
}

#[test]
fn a_paused_holder_is_fenced_out_after_its_lease_ran_out() {
    let server = TestServer::start(&[]);
    let mut a = server.conn();
    let mut b = server.conn();
    let token_a: u64 = redis::cmd("FLOCK.ACQUIRE")
        .arg("job")
        .arg(300)
        .query(&mut a)
        .unwrap();
    assert_eq!(
        fence_set(&mut a, "res:job", token_a, "A before the pause"),
        1
    );
    // A "pauses" (GC, swap, VM migration) past its lease. B was waiting and gets the lock.
    let token_b =
        acquire(&mut b, "job", 30_000, 30_000).expect("B is granted when A's lease expires");
    assert!(token_b > token_a);
    assert_eq!(fence_set(&mut b, "res:job", token_b, "B's write"), 1);
    // A wakes up and carries on as if it still held the lock: every step is refused.
    assert_eq!(
        fence_set(&mut a, "res:job", token_a, "A after the pause"),
        0
    );
    let release: redis::RedisResult<i64> = redis::cmd("FLOCK.RELEASE")
        .arg("job")
        .arg(token_a)
        .query(&mut a);
    let err = release.expect_err("A's release must fail");
    assert_eq!(err.code(), Some("NOTOWNER"), "{err:?}");
    assert!(err.to_string().contains("job"), "{err}");
    let renew: redis::RedisResult<i64> = redis::cmd("FLOCK.RENEW")
        .arg("job")
        .arg(token_a)
        .arg(30_000)
        .query(&mut a);
    assert_eq!(
        renew.expect_err("A's renew must fail").code(),
        Some("NOTOWNER")
    );
    let value: Option<String> = redis::cmd("FENCE.GET")
        .arg("res:job")
        .query(&mut a)
        .unwrap();
    assert_eq!(value.as_deref(), Some("B's write"));
    let fence_token: u64 = redis::cmd("FENCE.TOKEN")
        .arg("res:job")
        .query(&mut a)
        .unwrap();
    assert_eq!(fence_token, token_b);
    // B still holds the lock, untouched by A's attempts.
    let mut raw = server.raw();
    wait_until(Duration::from_secs(5), "status readable", || {
        raw.call(&["FLOCK.TTL", "job"]) != ":-2\r\n"
    });
    let released: i64 = redis::cmd("FLOCK.RELEASE")
        .arg("job")
        .arg(token_b)
        .query(&mut b)
        .unwrap();
    assert_eq!(released, 1);
}
