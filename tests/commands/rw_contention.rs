//! Readers and writers contending: 100 clients on 5 names, each client a mix of SHARED and
//! exclusive acquires with WAIT, for `FLOCKD_RW_SECS` seconds (default 10, as the issue asks;
//! `FLOCKD_RW_SECS=3` for a quick run). Checked afterwards from the clients' own history alone:
//! - no writer's holding overlapped any other holding of its name;
//! - a holding asked for after another's release was answered has a higher token (tokens
//!   increase per name).
//!
//! A client records the moment it read its grant and the moment before it sent its release:
//! that interval lies inside the server's holding, so an overlap seen here is a real one. For
//! the token order it records when it sent the acquire and when the release was answered: a
//! release answered before an acquire was sent was applied before that grant.

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::TestServer;

const CLIENTS: usize = 100;
const NAMES: usize = 5;

#[derive(Clone, Copy, Debug)]
struct Held {
    token: u64,
    writer: bool,
    asked: Instant,
    from: Instant,
    to: Instant,
    done: Instant,
}

fn seconds() -> u64 {
    std::env::var("FLOCKD_RW_SECS").map_or(10, |secs| {
        secs.parse().expect("FLOCKD_RW_SECS is a number of seconds")
    })
}

#[test]
fn no_writer_overlaps_anyone_and_tokens_increase_per_name() {
    let server = TestServer::start(&["--appendfsync", "no"]);
    let run_for = Duration::from_secs(seconds());
    let history: Arc<Mutex<HashMap<usize, Vec<Held>>>> = Arc::default();
    let start = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let history = history.clone();
            let start = start.clone();
            let mut conn = server.conn();
            thread::spawn(move || {
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (client as u64 + 1);
                let mut next = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                let mut mine: Vec<(usize, Held)> = Vec::new();
                start.wait();
                let until = Instant::now() + run_for;
                // Bounded in count as well as in time.
                for _ in 0..100_000 {
                    if Instant::now() >= until {
                        break;
                    }
                    let name = (next() % NAMES as u64) as usize;
                    let writer = next() % 4 == 0;
                    let mut cmd = redis::cmd("FLOCK.ACQUIRE");
                    cmd.arg(format!("rw:{name}")).arg(10_000);
                    if !writer {
                        cmd.arg("SHARED");
                    }
                    cmd.arg("WAIT").arg(5_000);
                    let asked = Instant::now();
                    let token: Option<u64> = cmd.query(&mut conn).expect("FLOCK.ACQUIRE");
                    let Some(token) = token else { continue };
                    let from = Instant::now();
                    if next() % 8 == 0 {
                        thread::sleep(Duration::from_micros(next() % 2_000));
                    }
                    let to = Instant::now();
                    let released: i64 = redis::cmd("FLOCK.RELEASE")
                        .arg(format!("rw:{name}"))
                        .arg(token)
                        .query(&mut conn)
                        .expect("FLOCK.RELEASE");
                    let done = Instant::now();
                    assert_eq!(released, 1, "the holding of token {token} ended");
                    mine.push((
                        name,
                        Held {
                            token,
                            writer,
                            asked,
                            from,
                            to,
                            done,
                        },
                    ));
                }
                let mut history = history.lock().unwrap();
                for (name, held) in mine {
                    history.entry(name).or_default().push(held);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    let history = history.lock().unwrap();
    let mut totals = (0, 0);
    for (name, held) in history.iter() {
        let mut by_start = held.clone();
        by_start.sort_by_key(|h| h.from);
        let mut max_end: Option<Instant> = None;
        for (i, h) in by_start.iter().enumerate() {
            if h.writer {
                totals.0 += 1;
                if let Some(end) = max_end {
                    assert!(
                        end <= h.from,
                        "rw:{name}: writer {h:?} began before an earlier holding ended"
                    );
                }
                if let Some(next) = by_start.get(i + 1) {
                    assert!(
                        next.from >= h.to,
                        "rw:{name}: {next:?} began inside writer {h:?}"
                    );
                }
            } else {
                totals.1 += 1;
            }
            max_end = Some(max_end.map_or(h.to, |e| e.max(h.to)));
        }
        // A holding asked for after another's release was answered has a higher token.
        let mut by_end = held.clone();
        by_end.sort_by_key(|h| h.done);
        let mut prefix_max = Vec::with_capacity(by_end.len());
        for h in &by_end {
            let before = prefix_max.last().copied().unwrap_or(0);
            prefix_max.push(before.max(h.token));
        }
        for h in held {
            let ended_before = by_end.partition_point(|e| e.done < h.asked);
            if ended_before > 0 {
                assert!(
                    prefix_max[ended_before - 1] < h.token,
                    "rw:{name}: token {} after an earlier holding with token {}",
                    h.token,
                    prefix_max[ended_before - 1]
                );
            }
        }
    }
    let (writers, readers) = totals;
    eprintln!("rw contention: {writers} writer and {readers} reader holdings checked");
    assert!(writers > 0 && readers > 0, "both kinds ran");
    server.assert_alive();
}
