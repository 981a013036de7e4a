//! Crash test: SIGKILL the real server in the middle of a load of acquires, fence writes and
//! releases under `appendfsync always`, restart it on the same data directory, and check that no
//! fencing token that was acknowledged to a client is ever issued again or undercut.
//!
//! Rounds: `FLOCKD_CRASH_ROUNDS` (default 5 when `CI=true`, 10 otherwise). Seed:
//! `FLOCKD_CRASH_SEED` (default: from the clock; printed, so a failure can be replayed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::load::{Ledger, Rng, seed_from_env, start_clients};
use crate::common::{Server, TempDir};

const CLIENTS: usize = 16;

#[test]
fn sigkill_under_load_never_reissues_or_lowers_a_token() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let rounds: usize = std::env::var("FLOCKD_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if ci { 5 } else { 10 });
    let seed = seed_from_env("FLOCKD_CRASH_SEED");
    println!("crash test: {rounds} round(s), FLOCKD_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = TempDir::new("crash");
    let flags = ["--appendfsync", "always"];
    let mut server = Server::start_in(dir.path(), &flags);
    let mut ledger = Ledger::default();
    let started = Instant::now();

    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = start_clients(server.addr, CLIENTS, &mut rng, &stop);
        let kill_after = Duration::from_millis(50 + rng.below(351));
        std::thread::sleep(kill_after);
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        let what = format!("round {round} (seed {seed})");
        let acked = ledger.record(handles, &what);

        server = Server::start_in(dir.path(), &flags);
        ledger.verify(server.addr, &what, || server.log());
        println!(
            "round {round}: killed after {kill_after:?}, {} token(s) and {} fence write(s) acknowledged{}",
            acked.acquires,
            acked.fence_writes,
            if acked.errors.is_empty() {
                String::new()
            } else {
                format!(", errors {:?}", acked.errors)
            }
        );
    }
    println!(
        "crash test: {rounds} round(s) in {:?}: {} acquires and {} fence writes acknowledged \
         before kills, none reissued or lowered",
        started.elapsed(),
        ledger.acquires,
        ledger.fence_writes
    );
    assert!(
        ledger.acquires > 0,
        "the load never got a token acknowledged"
    );
    server.signal("TERM");
    assert!(
        server
            .wait_exit(Duration::from_secs(20))
            .is_some_and(|s| s.success())
    );
}
