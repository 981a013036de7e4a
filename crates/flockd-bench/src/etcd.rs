//! etcd's own lock service as the yardstick for the cluster: a 3-node etcd cluster (Debian's
//! `etcd-server`) on loopback, driven through its v3 lock API, `Lock` on a lease then `Unlock`
//! of the key it returned, by the `etcd-client` crate, one gRPC channel (one HTTP/2
//! connection) per simulated connection.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use etcd_client::{Client, LockOptions};
use tokio::time::Instant;

use crate::members::ClusterGuard;
use crate::workloads::{self, Counts, Load, RunResult, Workload};

/// Starts three etcd members forming one cluster, each with Go's scheduler sized to `workers`
/// threads running Go code (`GOMAXPROCS`, as flockd's members get `worker-threads`); returns
/// them and the index of the leader.
pub async fn start_cluster(etcd: &Path, workers: usize) -> Result<(ClusterGuard, usize), String> {
    let (mut guard, ports, peer_ports) = ClusterGuard::on_free_ports(3)?;
    let initial = peer_ports
        .iter()
        .enumerate()
        .map(|(i, cport)| format!("e{}=http://127.0.0.1:{cport}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    for (i, (port, cport)) in ports.iter().zip(&peer_ports).enumerate() {
        let (dir, log) = ClusterGuard::member_dir("etcd", i)?;
        let client_url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{cport}");
        let child = Command::new(etcd)
            .args(["--name", &format!("e{}", i + 1)])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-state", "new"])
            .args([
                "--initial-cluster-token",
                &format!("flockd-bench-{}", std::process::id()),
            ])
            .args(["--logger", "zap", "--log-level", "warn"])
            .env("GOMAXPROCS", workers.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", etcd.display()))?;
        guard.adopt(child, dir);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        for (i, addr) in guard.addrs().iter().enumerate() {
            if is_leader(*addr).await {
                return Ok((guard, i));
            }
        }
        if std::time::Instant::now() > deadline {
            return Err("the etcd cluster elected no leader within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn is_leader(addr: SocketAddr) -> bool {
    let Ok(mut client) = Client::connect([format!("http://{addr}")], None).await else {
        return false;
    };
    match client.status().await {
        Ok(status) => status
            .header()
            .is_some_and(|h| h.member_id() == status.leader() && status.leader() != 0),
        Err(_) => false,
    }
}

/// Workload 2's cycles on etcd: `Lock` a random name of `names` on this connection's lease,
/// `Unlock` it. A lease per connection and round, long enough to outlive the round (etcd has
/// no per-lock lease length; the lease is what ends a hold), revoked afterwards.
pub async fn run(addr: SocketAddr, w: &Workload, duration: Duration, seed: u64) -> RunResult {
    let names = match w.load {
        Load::Cycle { names, .. } => names,
        ref other => panic!("etcd runs only acquire+release cycles, not {other:?}"),
    };
    let ttl_secs = duration.as_secs() as i64 + 60;
    let mut result = RunResult {
        counts: Counts::default(),
        secs: duration.as_secs_f64(),
        hist: workloads::new_hist(),
    };
    let mut clients = Vec::with_capacity(w.conns);
    for _ in 0..w.conns {
        let connected = async {
            let mut client = Client::connect([format!("http://{addr}")], None).await?;
            let lease = client.lease_grant(ttl_secs, None).await?.id();
            Ok::<_, etcd_client::Error>((client, lease))
        };
        match connected.await {
            Ok(c) => clients.push(c),
            Err(e) => result
                .counts
                .error(format!("etcd: connect {addr} failed: {e}")),
        }
    }
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::with_capacity(clients.len());
    for (i, (client, lease)) in clients.into_iter().enumerate() {
        let s = seed
            .wrapping_mul(0x2545_f491_4f6c_dd1d)
            .wrapping_add(i as u64 * 0x9e37_79b9);
        tasks.push(tokio::spawn(cycles(client, lease, names, s, deadline)));
    }
    for task in tasks {
        match task.await {
            Ok((counts, hist)) => {
                result.counts.add(&counts);
                let _ = result.hist.add(&hist);
            }
            Err(e) => result.counts.error(format!("client task failed: {e}")),
        }
    }
    result
}

/// A connection that keeps failing stops here instead of spinning until the deadline.
const MAX_ERRORS: u64 = 100;

async fn cycles(
    mut client: Client,
    lease: i64,
    names: u64,
    seed: u64,
    deadline: Instant,
) -> (Counts, hdrhistogram::Histogram<u64>) {
    let mut counts = Counts::default();
    let mut hist = workloads::new_hist();
    let mut rng = workloads::Rng(seed);
    while !workloads::stop_now(deadline) {
        let name = format!("lock:{}", rng.below(names));
        let start = Instant::now();
        let key = match client
            .lock(name, Some(LockOptions::new().with_lease(lease)))
            .await
        {
            Ok(granted) => granted.key().to_vec(),
            Err(e) => {
                counts.error(format!("etcd lock: {e}"));
                if counts.errors >= MAX_ERRORS {
                    break;
                }
                continue;
            }
        };
        counts.grants += 1;
        if let Err(e) = client.unlock(key).await {
            counts.error(format!("etcd unlock: {e}"));
            if counts.errors >= MAX_ERRORS {
                break;
            }
            continue;
        }
        let now = Instant::now();
        if now <= deadline {
            counts.ops += 1;
            let us = now.saturating_duration_since(start).as_micros() as u64;
            hist.saturating_record(us.max(1));
        }
    }
    let _ = client.lease_revoke(lease).await;
    (counts, hist)
}
