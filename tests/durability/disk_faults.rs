//! Disk faults for real: flockd's data directory is a FUSE pass-through (tests/faultfs) that
//! fails fsync and writes on command and can lose power. Each scenario runs 16 clients doing
//! acquire / FENCE.SET / release under `appendfsync always`, switches a fault on, checks that
//! reads keep being answered and INFO says the writes fail, switches it off, waits for the
//! recovery, then kills the server and checks on the surviving file, after a restart and again
//! after a power loss, that every acknowledged token and fence write is there and that no token
//! was issued twice. The file system's own record shows what flockd did with a file after a
//! failure: nothing (no write, no fsync trusted), and that it recovered by renaming a new,
//! synced file over the AOF and syncing the directory.
//!
//! Needs `/dev/fuse` and the right to mount; without them each test says so and passes, unless
//! `FLOCKD_REQUIRE_FUSE=1` (set by `.ci/run` when /dev/fuse opens) makes that a failure.
//! `FLOCKD_FAULT_SEED` replays a run's load.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::load::{Client, Ledger, Rng, seed_from_env, start_clients};
use crate::common::{Server, TempDir};
use flockd_faultfs::{Event, Fault, FaultFs, Times};

const CLIENTS: usize = 16;
const FLAGS: [&str; 2] = ["--appendfsync", "always"];
const AOF: &str = "flockd.aof";

/// One scenario at a time: each runs 16 clients and a server on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// A mounted fault file system over a fresh backing directory; unmounted first when dropped.
struct Mounted {
    fs: FaultFs,
    _mountpoint: TempDir,
    backing: TempDir,
}

/// Mounts one, or says why this machine cannot (a failure when FUSE is required).
fn mount(name: &str) -> Option<Mounted> {
    let required = std::env::var("FLOCKD_REQUIRE_FUSE").as_deref() == Ok("1");
    let backing = TempDir::new(&format!("faultfs-{name}-backing"));
    let mountpoint = TempDir::new(&format!("faultfs-{name}-mnt"));
    match FaultFs::usable().and_then(|()| {
        FaultFs::mount(backing.path(), mountpoint.path()).map_err(|e| format!("mount: {e}"))
    }) {
        Ok(fs) => Some(Mounted {
            fs,
            _mountpoint: mountpoint,
            backing,
        }),
        Err(why) if required => panic!("FLOCKD_REQUIRE_FUSE=1, but FUSE cannot be used: {why}"),
        Err(why) => {
            println!(
                "NOTICE: skipping the disk-fault scenario {name}: FUSE cannot be used here: {why}"
            );
            None
        }
    }
}

fn info_persistence(c: &mut Client) -> String {
    c.call(&["INFO", "persistence"]).expect("INFO")
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

struct Scenario {
    name: &'static str,
    faults: &'static [Fault],
    /// How long the faults stay on before the test clears them.
    hold: Duration,
    /// Whether the fault must make flockd refuse writes (`-MISCONF`); a short write must not.
    refuses: bool,
    /// Kill the server while it is still failed and lose power, instead of clearing the fault.
    power_loss_while_failed: bool,
}

/// What the file system saw: after a failed write or fsync of a file, flockd neither wrote to
/// it again nor fsynced it (a later fsync would "succeed" without the lost pages), and after
/// the first failure it renamed a new file over the AOF and then synced the directory.
fn check_what_flockd_did(events: &[Event], failed: bool, recovered: bool, what: &str) {
    let mut failed_at: HashMap<u64, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::Write {
                id, result: Err(_), ..
            }
            | Event::Fsync { id, ok: false, .. } => {
                failed_at.entry(*id).or_insert(i);
            }
            Event::Write { id, .. } | Event::Fsync { id, .. } if failed_at.contains_key(id) => {
                panic!(
                    "{what}: event {i} {e:?} touches file {id} after its failure at event {}",
                    failed_at[id]
                )
            }
            _ => {}
        }
    }
    let Some(&first) = failed_at.values().min() else {
        assert!(!failed, "{what}: the fault never hit a write or an fsync");
        return;
    };
    assert!(
        failed,
        "{what}: a write or fsync failed: {:?}",
        events[first]
    );
    if !recovered {
        return;
    }
    let rename = events[first..]
        .iter()
        .position(|e| matches!(e, Event::Rename { to, .. } if to == Path::new(AOF)))
        .unwrap_or_else(|| panic!("{what}: no new file was renamed over {AOF} after the failure"));
    let rename = first + rename;
    // The renamed file had been synced before its rename.
    let Event::Rename { from, .. } = &events[rename] else {
        unreachable!()
    };
    let synced_before = events[first..rename].iter().rev().find_map(|e| match e {
        Event::Fsync { path, ok, .. } if path == from => Some(*ok),
        _ => None,
    });
    assert_eq!(
        synced_before,
        Some(true),
        "{what}: {} was not synced before its rename",
        from.display()
    );
    assert!(
        events[rename..]
            .iter()
            .any(|e| matches!(e, Event::DirSync { path } if path.as_os_str().is_empty())),
        "{what}: the directory was not synced after the rename"
    );
}

fn run(sc: Scenario) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(m) = mount(sc.name) else { return };
    let dir = m.fs.mountpoint().to_owned();
    let seed = seed_from_env("FLOCKD_FAULT_SEED");
    let what = format!("{} (FLOCKD_FAULT_SEED={seed})", sc.name);
    println!("{what}");
    let mut rng = Rng(seed);
    let mut ledger = Ledger::default();
    let mut server = Server::start_in(&dir, &FLAGS);
    let stop = Arc::new(AtomicBool::new(false));
    let clients = start_clients(server.addr, CLIENTS, &mut rng, &stop);
    std::thread::sleep(Duration::from_millis(300));

    for &f in sc.faults {
        m.fs.inject(f);
    }
    // While the fault is on, reads are answered and INFO says whether writes fail.
    let mut reader = Client::connect(server.addr).expect("reader");
    let (mut reads, mut saw_err) = (0, false);
    let until = Instant::now() + sc.hold;
    while Instant::now() < until {
        assert_eq!(reader.call(&["PING"]).unwrap(), "+PONG\r\n");
        let status = reader.call(&["FLOCK.STATUS", "crash-lock-0"]).unwrap();
        assert!(
            status.starts_with('*'),
            "{what}: FLOCK.STATUS gave {status:?}"
        );
        let fence = reader.call(&["FENCE.GET", "crash-fence-0"]).unwrap();
        assert!(!fence.starts_with('-'), "{what}: FENCE.GET gave {fence:?}");
        let info = info_persistence(&mut reader);
        if field(&info, "aof_last_write_status") == Some("err") {
            saw_err = true;
            let error = field(&info, "aof_last_error").unwrap_or("");
            assert!(!error.is_empty(), "{what}: failed without aof_last_error");
        }
        reads += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        saw_err,
        sc.refuses,
        "{what}: aof_last_write_status was{} err while the fault was on",
        if saw_err { "" } else { " never" }
    );

    if sc.power_loss_while_failed {
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        let round = ledger.record(clients, &what);
        check_what_flockd_did(&m.fs.events(), true, false, &what);
        m.fs.clear();
        m.fs.power_loss().expect("power loss");
        server = Server::start_in(&dir, &FLAGS);
        ledger.verify(
            server.addr,
            &format!("{what}, after the power loss"),
            || server.log(),
        );
        println!(
            "{what}: {} acquires and {} fence writes acknowledged, errors {:?}, {reads} rounds of reads \
             answered while failed; all there after the power loss",
            round.acquires, round.fence_writes, round.errors
        );
        return;
    }

    m.fs.clear();
    let recovery_started = Instant::now();
    let mut probe = Client::connect(server.addr).expect("probe");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info = info_persistence(&mut probe);
        if field(&info, "aof_last_write_status") == Some("ok") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not writable 20 s after the fault was cleared:\n{info}\nlog:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let recovery = recovery_started.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    let round = ledger.record(clients, &what);
    assert!(round.acquires > 0, "{what}: nothing was acknowledged");
    let refused = round.errors.get("MISCONF").copied().unwrap_or(0);
    if sc.refuses {
        assert!(refused > 0, "{what}: no write was refused with MISCONF");
        let log = server.log();
        assert!(
            log.contains("AOF: ") && log.contains("recovered, the file is writable again"),
            "{what}: the log does not tell the failure and the recovery:\n{log}"
        );
    } else {
        assert!(
            round.errors.is_empty(),
            "{what}: errors {:?}\nlog:\n{}",
            round.errors,
            server.log()
        );
    }
    check_what_flockd_did(&m.fs.events(), sc.refuses, sc.refuses, &what);
    if !sc.refuses {
        let short =
            m.fs.events()
                .iter()
                .filter(|e| matches!(e, Event::Write { len, result: Ok(n), .. } if n < len))
                .count();
        assert!(short > 0, "{what}: no write was short");
    }

    // On the surviving file, as the crash left it...
    server = Server::start_in(&dir, &FLAGS);
    ledger.verify(server.addr, &format!("{what}, after the restart"), || {
        server.log()
    });
    // ... and as a power loss right now would leave it.
    server.kill9();
    m.fs.power_loss().expect("power loss");
    server = Server::start_in(&dir, &FLAGS);
    ledger.verify(
        server.addr,
        &format!("{what}, after the power loss"),
        || server.log(),
    );
    println!(
        "{what}: {} acquires and {} fence writes acknowledged, {refused} refused with MISCONF, \
         {reads} rounds of reads answered under the fault, writable {recovery:?} after it was cleared; \
         all there after a restart and after a power loss ({} bytes of AOF left)",
        round.acquires,
        round.fence_writes,
        std::fs::metadata(m.backing.path().join(AOF)).map_or(0, |md| md.len())
    );
    server.signal("TERM");
    assert!(
        server
            .wait_exit(Duration::from_secs(20))
            .is_some_and(|s| s.success()),
        "{what}: no clean exit; log:\n{}",
        server.log()
    );
}

#[test]
fn fsync_eio_once() {
    run(Scenario {
        name: "fsync-eio-once",
        faults: &[Fault::FsyncEio(Times::Once)],
        hold: Duration::from_millis(1500),
        refuses: true,
        power_loss_while_failed: false,
    });
}

#[test]
fn fsync_eio_always() {
    // The rewrite that would recover fails too (its fsync fails): flockd stays failed, serving
    // reads, for as long as the fault lasts.
    run(Scenario {
        name: "fsync-eio-always",
        faults: &[Fault::FsyncEio(Times::Always)],
        hold: Duration::from_millis(2500),
        refuses: true,
        power_loss_while_failed: false,
    });
}

#[test]
fn write_eio() {
    run(Scenario {
        name: "write-eio",
        faults: &[Fault::WriteError {
            errno: libc::EIO,
            times: Times::Always,
        }],
        hold: Duration::from_millis(1500),
        refuses: true,
        power_loss_while_failed: false,
    });
}

#[test]
fn enospc_in_the_middle_of_a_record() {
    // 7 bytes: inside the first record's 8-byte frame header, so the record is cut in two.
    run(Scenario {
        name: "enospc-mid-record",
        faults: &[Fault::NoSpaceAfter(7)],
        hold: Duration::from_millis(1500),
        refuses: true,
        power_loss_while_failed: false,
    });
}

#[test]
fn short_writes() {
    run(Scenario {
        name: "short-write",
        faults: &[Fault::ShortWrite(Times::Always)],
        hold: Duration::from_millis(800),
        refuses: false,
        power_loss_while_failed: false,
    });
}

#[test]
fn power_loss_after_a_failed_fsync() {
    run(Scenario {
        name: "power-loss-after-failed-fsync",
        faults: &[Fault::FsyncEio(Times::Always)],
        hold: Duration::from_millis(1200),
        refuses: true,
        power_loss_while_failed: true,
    });
}

/// A lease that falls due while the disk refuses writes cannot expire then (its `Op::Expire` is
/// refused like any write), and must not be forgotten either: once the disk recovers it
/// expires. The expiry task hands such leases back to the deadline index, which hands each due
/// lease out only once.
#[test]
fn a_lease_due_while_writes_fail_expires_after_the_recovery() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(m) = mount("lease-due-while-failed") else {
        return;
    };
    let server = Server::start_in(m.fs.mountpoint(), &FLAGS);
    let mut c = Client::connect(server.addr).expect("client");
    let locks = |c: &mut Client| c.call(&["INFO", "locks"]).expect("INFO locks");
    let granted = c
        .call(&["FLOCK.ACQUIRE", "due-while-failed", "400"])
        .unwrap();
    assert!(granted.starts_with(':'), "not granted: {granted:?}");
    m.fs.inject(Fault::FsyncEio(Times::Always));
    // The lease falls due, and its expiry is refused (the write fails, then MISCONF).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log().contains("cannot expire leases") {
        assert!(
            Instant::now() < deadline,
            "no refused expiry within 10 s:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(field(&locks(&mut c), "expirations"), Some("0"));
    assert_eq!(field(&locks(&mut c), "locks_held"), Some("1"));
    m.fs.clear();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info = locks(&mut c);
        if field(&info, "locks_held") == Some("0") {
            assert_eq!(field(&info, "expirations"), Some("1"), "{info}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the lease did not expire 20 s after the fault was cleared:\n{info}\nlog:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
