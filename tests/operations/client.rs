//! The Rust client crate (`crates/flockd-client`) against the real binary: its example runs and
//! keeps its lock past the lease by renewing (leases of a second or more where a renewal must
//! succeed: a renewal has most of the lease to come back, even on a loaded machine); a holder whose thread stalls past its lease (as
//! in a GC pause) knows it lost the lock before it writes, while the newer holder's write is
//! already in; renewals stop after a release; a dropped guard frees the lock; a force-release
//! reaches `lost()` through the event; SHARED and LIMIT guards.

#[path = "../../crates/flockd-client/examples/renewing_lock.rs"]
mod renewing_lock;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{Raw, TestServer, wait_until};
use flockd_client::{Client, Error, Lost};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A granted exclusive lock on `name` with `lease`, through a new client (kept alive with it).
async fn hold(url: &str, name: &str, lease: Duration) -> (Client, flockd_client::LockGuard) {
    let client = Client::open(url).await.unwrap();
    let lock = client
        .lock(name)
        .lease(lease)
        .acquire()
        .await
        .unwrap()
        .expect("granted");
    (client, lock)
}

fn renew_calls(raw: &mut Raw) -> u64 {
    let stats = raw.call(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_flock.renew:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn the_example_keeps_its_lock_past_the_lease_and_writes_with_its_token() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let rt = runtime();
    assert_eq!(rt.block_on(renewing_lock::run(&url)).unwrap(), Some(1));
    assert_eq!(rt.block_on(renewing_lock::run(&url)).unwrap(), Some(2));
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["FENCE.GET", "order:1042:state"]),
        "$11\r\nstep 3 by 2\r\n"
    );
    // 2.1 s of work on a 1.5 s lease, twice: the watchdog renewed (every 500 ms).
    assert!(renew_calls(&mut raw) >= 6, "{}", renew_calls(&mut raw));
}

#[test]
fn a_stalled_holder_knows_it_lost_the_lock_before_it_writes() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let (stalled_tx, stalled_rx) = mpsc::channel::<u64>();
    let (resume_tx, resume_rx) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        runtime().block_on(async move {
            let (_client, lock) = hold(&url, "stall", Duration::from_millis(500)).await;
            assert!(
                lock.fence_set("stall:data", "old holder, on time")
                    .await
                    .unwrap()
            );
            stalled_tx.send(lock.token()).unwrap();
            // The whole runtime stops here, watchdog included, as in a GC pause.
            resume_rx.recv().unwrap();
            let known = lock.is_lost();
            let refused = lock.fence_set("stall:data", "old holder, late").await;
            let told = tokio::time::timeout(Duration::from_secs(2), lock.lost()).await;
            (known, refused, told)
        })
    });
    let old_token = stalled_rx.recv().unwrap();
    // Meanwhile the lease runs out and a new holder writes.
    let mut raw = server.raw();
    let new_token = raw.int(&["FLOCK.ACQUIRE", "stall", "60000", "WAIT", "5000"]) as u64;
    assert!(new_token > old_token);
    let stored = raw.call(&[
        "FENCE.SET",
        "stall:data",
        &new_token.to_string(),
        "new holder",
    ]);
    assert_eq!(stored, ":1\r\n");
    resume_tx.send(()).unwrap();
    let (known, refused, told) = holder.join().unwrap();
    assert_eq!(known, Some(Lost::LeaseRunningOut));
    assert!(matches!(refused, Err(Error::Lost(_))), "{refused:?}");
    assert!(told.is_ok(), "lost() did not resolve after the stall");
    assert_eq!(
        raw.call(&["FENCE.GET", "stall:data"]),
        "$10\r\nnew holder\r\n"
    );
}

#[test]
fn renewals_stop_after_release_and_a_dropped_guard_frees_the_lock() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let mut raw = server.raw();
    let rt = runtime();
    rt.block_on(async {
        let (_client, lock) = hold(&url, "r", Duration::from_millis(900)).await;
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert!(lock.release().await.unwrap());
    });
    let after_release = renew_calls(&mut raw);
    assert!(after_release >= 2, "{after_release} renewals in 2 s");
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(500)).await });
    assert_eq!(
        renew_calls(&mut raw),
        after_release,
        "renewed after release"
    );

    // Dropped without release, with a minute of lease left: freed in the background.
    rt.block_on(async {
        let (_client, lock) = hold(&url, "dropped", Duration::from_secs(60)).await;
        assert_eq!(lock.token(), 1);
        drop(lock);
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
    let started = Instant::now();
    assert_eq!(
        raw.call(&["FLOCK.ACQUIRE", "dropped", "1000", "WAIT", "5000"]),
        ":2\r\n"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_force_release_reaches_lost_through_the_event() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let mut raw = server.raw();
    runtime().block_on(async {
        let (_client, lock) = hold(&url, "f", Duration::from_secs(60)).await;
        assert_eq!(lock.is_lost(), None);
        assert_eq!(raw.call(&["FLOCK.FORCERELEASE", "f"]), ":1\r\n");
        // The next renewal is 20 s away: only the event can tell this soon.
        let why = tokio::time::timeout(Duration::from_secs(2), lock.lost())
            .await
            .expect("lost() resolved");
        assert_eq!(why, Lost::ForceReleased);
        assert!(matches!(
            lock.fence_set("f:data", "x").await,
            Err(Error::Lost(Lost::ForceReleased))
        ));
    });
}

#[test]
fn shared_guards_coexist_and_a_limit_admits_its_permits() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let mut raw = server.raw();
    runtime().block_on(async {
        let client = Client::open(&url).await.unwrap();
        let lease = Duration::from_secs(30);
        let r1 = client
            .lock("doc")
            .lease(lease)
            .shared()
            .acquire()
            .await
            .unwrap();
        let r2 = client
            .lock("doc")
            .lease(lease)
            .shared()
            .acquire()
            .await
            .unwrap();
        let (r1, r2) = (r1.unwrap(), r2.unwrap());
        assert_eq!((r1.token(), r2.token()), (1, 2));
        assert!(
            client
                .lock("doc")
                .lease(lease)
                .acquire()
                .await
                .unwrap()
                .is_none()
        );
        let p1 = client.lock("api").limit(2).acquire().await.unwrap();
        let p2 = client.lock("api").limit(2).acquire().await.unwrap();
        let p3 = client.lock("api").limit(2).acquire().await.unwrap();
        assert!(p1.is_some() && p2.is_some() && p3.is_none());
        assert!(matches!(
            client.lock("api").limit(0).acquire().await,
            Err(Error::Options(_))
        ));
        // A SESSION guard ends with its own connection even if the release never comes.
        let s = client
            .lock("sess")
            .session()
            .acquire()
            .await
            .unwrap()
            .unwrap();
        std::mem::forget(s);
    });
    // The runtime (and the forgotten guard's connection) is gone: the session holding too.
    wait_until(Duration::from_secs(5), "the session holding ended", || {
        raw.call(&["FLOCK.TTL", "sess"]) == ":-2\r\n"
    });
}

/// A grant after a wait longer than the lease is held with its full lease and renewed as usual
/// (it was declared lost at once when validity was counted from the blocking acquire's send).
#[test]
fn a_lock_granted_after_a_wait_longer_than_its_lease_is_kept() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let lease = Duration::from_millis(1500);
    let rt = runtime();
    rt.block_on(async {
        let (_holder_client, holder) = hold(&url, "queued", lease).await;
        let waiter_client = Client::open(&url).await.unwrap();
        let waiting = tokio::spawn(async move {
            let lock = waiter_client
                .lock("queued")
                .lease(lease)
                .wait(Duration::from_secs(8))
                .acquire()
                .await;
            (waiter_client, lock)
        });
        // The holder keeps it (renewing) for twice the waiter's lease.
        tokio::time::sleep(lease * 2).await;
        assert!(holder.is_lost().is_none());
        holder.release().await.unwrap();
        let (_waiter_client, lock) = waiting.await.unwrap();
        let lock = lock.unwrap().expect("granted after the wait");
        assert!(
            lock.is_lost().is_none(),
            "lost at grant: {:?}",
            lock.is_lost()
        );
        // Two renewal periods (a third of the lease each) and some slack.
        tokio::time::sleep(lease * 2 / 3 + Duration::from_millis(700)).await;
        assert!(lock.is_lost().is_none(), "lost: {:?}", lock.is_lost());
        let mut raw = Raw::connect(server.addr);
        assert_eq!(
            raw.call(&["FLOCK.TOKEN", "queued"]),
            format!(":{}\r\n", lock.token())
        );
        assert_ne!(raw.call(&["FLOCK.TTL", "queued"]), ":-2\r\n");
        assert!(lock.release().await.unwrap());
    });
}
