//! What replication costs: workload 2 (acquire+release cycles) on a single flockd with
//! `appendfsync always`, on a 3-node cluster through its leader, and through a follower, in
//! rounds that rotate which goes first. Every process is stopped by pid when its guard drops.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[cfg(feature = "etcd")]
use crate::etcd;
use crate::report;
use crate::resp::{Arg, Conn, Reply};
use crate::servers::{self, Kind, Target};
use crate::workloads::{self, Load, RunResult, Workload};

/// The processes of one cluster (flockd or etcd), stopped by pid and their directories removed
/// when it drops.
pub struct ClusterGuard {
    children: Vec<Child>,
    dirs: Vec<PathBuf>,
    addrs: Vec<SocketAddr>,
}

impl ClusterGuard {
    /// A guard for members that will serve clients on `addrs`, in that order.
    pub fn new(addrs: Vec<SocketAddr>) -> ClusterGuard {
        ClusterGuard {
            children: Vec::new(),
            dirs: Vec::new(),
            addrs,
        }
    }

    /// Takes over a started member and its data directory.
    pub fn adopt(&mut self, child: Child, dir: PathBuf) {
        self.children.push(child);
        self.dirs.push(dir);
    }

    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        for child in &mut self.children {
            if let Ok(pid) = i32::try_from(child.id()) {
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        for child in &mut self.children {
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in &self.dirs {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

async fn info_field(addr: SocketAddr, field: &str) -> Option<String> {
    let mut conn = Conn::connect(addr).await.ok()?;
    let reply = conn
        .call(&[Arg::B(b"INFO"), Arg::B(b"replication")])
        .await
        .ok()?;
    let Reply::Bulk(text) = reply else {
        return None;
    };
    String::from_utf8_lossy(&text).lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_owned())
    })
}

async fn start_cluster(binary: &Path) -> Result<(ClusterGuard, usize), String> {
    let n = 3;
    let mut ports = Vec::new();
    for _ in 0..2 * n {
        ports.push(servers::free_port().map_err(|e| format!("no free port: {e}"))?);
    }
    let peers = (0..n)
        .map(|i| format!("{}=127.0.0.1:{}@{}", i + 1, ports[i], ports[n + i]))
        .collect::<Vec<_>>()
        .join(",");
    let mut guard = ClusterGuard::new(
        (0..n)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], ports[i])))
            .collect(),
    );
    for (i, port) in ports.iter().take(n).enumerate() {
        let dir =
            std::env::temp_dir().join(format!("flockd-bench-{}-cluster-{i}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
        let child = Command::new(binary)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .arg("--dir")
            .arg(&dir)
            .args(["--node-id", &(i + 1).to_string(), "--cluster-peers", &peers])
            .env("FLOCKD_LOG_LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        guard.adopt(child, dir);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for (i, addr) in guard.addrs.iter().enumerate() {
            if info_field(*addr, "raft_state").await.as_deref() == Some("leader") {
                return Ok((guard, i));
            }
        }
        if Instant::now() > deadline {
            return Err("the benchmark cluster elected no leader within 20 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn flockd_target(addr: SocketAddr) -> Target {
    Target {
        kind: Kind::Flockd,
        addr,
        acquire_sha: Vec::new(),
        release_sha: Vec::new(),
        read_acquire_sha: Vec::new(),
        read_release_sha: Vec::new(),
    }
}

/// One side of a comparison: a flockd node over RESP, or an etcd member over gRPC.
#[derive(Clone)]
enum Side {
    Flockd(Target),
    #[cfg(feature = "etcd")]
    Etcd(SocketAddr),
}

impl Side {
    async fn run(&self, w: &Workload, duration: Duration, seed: u64) -> RunResult {
        match self {
            Side::Flockd(target) => workloads::run(target, w, duration, seed).await,
            #[cfg(feature = "etcd")]
            Side::Etcd(addr) => etcd::run(*addr, w, duration, seed).await,
        }
    }
}

/// The markdown section: per workload, medians over rounds and the two ratios the cluster
/// goals name, all on the same three servers; then, with `etcd`, the cycles on flockd's
/// leader against etcd's lock service on a 3-node etcd cluster, through its leader.
pub async fn cost(
    flockd: &Path,
    workloads: &[Workload],
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
    etcd: Option<&Path>,
) -> Result<String, String> {
    let single = servers::start(Kind::Flockd, flockd, "always").await?;
    let (cluster, leader) = start_cluster(flockd).await?;
    let follower = (leader + 1) % cluster.addrs.len();
    let leader_side = Side::Flockd(flockd_target(cluster.addrs[leader]));
    let targets = [
        (
            "single node, appendfsync always",
            Side::Flockd(single.target.clone()),
        ),
        ("3-node cluster, through the leader", leader_side.clone()),
        (
            "3-node cluster, through a follower",
            Side::Flockd(flockd_target(cluster.addrs[follower])),
        ),
    ];
    let mut md = String::new();
    for w in workloads {
        let (medians, errors) = compare(&targets, w, rounds, duration, seed).await;
        let ratios = [
            String::from("1.00x"),
            format!("{:.2}x of the single node", medians[1] / medians[0]),
            format!("{:.2}x of the leader", medians[2] / medians[1]),
        ];
        md.push_str(&table(&targets, w, &medians, &ratios, &errors));
    }
    let per_sync = info_field(cluster.addrs[leader], "raft_log_entries_per_sync")
        .await
        .unwrap_or_else(|| "?".into());
    let follower_per_sync = info_field(cluster.addrs[follower], "raft_log_entries_per_sync")
        .await
        .unwrap_or_else(|| "?".into());
    drop(single);
    let _ = writeln!(
        md,
        "Raft log entries per sync over the whole run (INFO replication): leader {per_sync}, \
         follower {follower_per_sync}.\n"
    );
    if let Some(etcd_bin) = etcd {
        md.push_str(&against_etcd(etcd_bin, leader_side, workloads, rounds, duration, seed).await?);
    }
    drop(cluster);
    Ok(md)
}

/// Workload 2's cycles on flockd's leader against etcd's lock service on a 3-node etcd
/// cluster started from `etcd_bin`, through its leader.
#[cfg(feature = "etcd")]
async fn against_etcd(
    etcd_bin: &Path,
    leader_side: Side,
    workloads: &[Workload],
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> Result<String, String> {
    let mut md = String::new();
    let (members, etcd_leader) = etcd::start_cluster(etcd_bin).await?;
    let sides = [
        ("flockd 3-node cluster, through the leader", leader_side),
        (
            "etcd 3-node cluster (v3 Lock/Unlock on a lease), through the leader",
            Side::Etcd(members.addrs()[etcd_leader]),
        ),
    ];
    for w in workloads
        .iter()
        .filter(|w| matches!(w.load, Load::Cycle { .. }))
    {
        let (medians, errors) = compare(&sides, w, rounds, duration, seed).await;
        let ratios = [
            format!("{:.2}x of etcd", medians[0] / medians[1]),
            String::from("1.00x"),
        ];
        md.push_str(&table(&sides, w, &medians, &ratios, &errors));
    }
    drop(members);
    Ok(md)
}

#[cfg(not(feature = "etcd"))]
async fn against_etcd(
    _etcd_bin: &Path,
    _leader_side: Side,
    _workloads: &[Workload],
    _rounds: usize,
    _duration: Duration,
    _seed: &mut u64,
) -> Result<String, String> {
    unreachable!("real_main refuses --etcd without the etcd feature")
}

/// Runs `w` on every side, `rounds` times, rotating which goes first; the median throughput
/// and the error count per side.
async fn compare(
    sides: &[(&str, Side)],
    w: &Workload,
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> (Vec<f64>, Vec<u64>) {
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    let mut errors = vec![0u64; sides.len()];
    for round in 0..rounds {
        for k in 0..sides.len() {
            let which = (round + k) % sides.len();
            let (label, side) = &sides[which];
            *seed += 1;
            let r = side.run(w, duration, *seed).await;
            eprintln!(
                "  [cluster] {} round {}/{rounds} {label:<38} {:>10} /s",
                w.title,
                round + 1,
                report::fmt_int(r.throughput())
            );
            if let Some(e) = &r.counts.first_error {
                eprintln!("  [cluster]   first error: {e}");
            }
            results[which].push(r.throughput());
            errors[which] += r.counts.errors;
        }
    }
    let medians = results
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    (medians, errors)
}

fn table(
    sides: &[(&str, Side)],
    w: &Workload,
    medians: &[f64],
    ratios: &[String],
    errors: &[u64],
) -> String {
    let mut md = format!(
        "{}: {}\n\n| target | median per s | ratio | errors |\n|---|--:|--:|--:|\n",
        w.title,
        report::describe(w)
    );
    for (i, (label, _)) in sides.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {label} | {} | {} | {} |",
            report::fmt_int(medians[i]),
            ratios[i],
            errors[i]
        );
    }
    md.push('\n');
    md
}
