//! What replication costs: workload 2 (acquire+release cycles) on a single flockd with
//! `appendfsync always`, on a 3-node cluster through its leader, and through a follower, in
//! rounds that rotate which goes first. Every process is stopped by pid when its guard drops.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::report;
use crate::resp::{Arg, Conn, Reply};
use crate::servers::{self, Kind, Target};
use crate::workloads::{self, Workload};

/// Three flockd processes forming one cluster.
struct ClusterGuard {
    children: Vec<Child>,
    dirs: Vec<PathBuf>,
    addrs: Vec<SocketAddr>,
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
    let mut guard = ClusterGuard {
        children: Vec::new(),
        dirs: Vec::new(),
        addrs: (0..n)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], ports[i])))
            .collect(),
    };
    for i in 0..n {
        let dir =
            std::env::temp_dir().join(format!("flockd-bench-{}-cluster-{i}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
        let child = Command::new(binary)
            .args(["--bind", "127.0.0.1", "--port", &ports[i].to_string()])
            .arg("--dir")
            .arg(&dir)
            .args(["--node-id", &(i + 1).to_string(), "--cluster-peers", &peers])
            .env("FLOCKD_LOG_LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        guard.children.push(child);
        guard.dirs.push(dir);
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

/// The markdown section: per workload, medians over rounds and the two ratios the cluster
/// goals name, all on the same three servers.
pub async fn cost(
    flockd: &Path,
    workloads: &[Workload],
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> Result<String, String> {
    let single = servers::start(Kind::Flockd, flockd, "always").await?;
    let (cluster, leader) = start_cluster(flockd).await?;
    let follower = (leader + 1) % cluster.addrs.len();
    let targets = [
        ("single node, appendfsync always", single.target.clone()),
        (
            "3-node cluster, through the leader",
            flockd_target(cluster.addrs[leader]),
        ),
        (
            "3-node cluster, through a follower",
            flockd_target(cluster.addrs[follower]),
        ),
    ];
    let mut md = String::new();
    for w in workloads {
        md.push_str(&compare(&targets, w, rounds, duration, seed).await);
    }
    let per_sync = info_field(cluster.addrs[leader], "raft_log_entries_per_sync")
        .await
        .unwrap_or_else(|| "?".into());
    let follower_per_sync = info_field(cluster.addrs[follower], "raft_log_entries_per_sync")
        .await
        .unwrap_or_else(|| "?".into());
    drop(cluster);
    drop(single);
    let _ = writeln!(
        md,
        "Raft log entries per sync over the whole run (INFO replication): leader {per_sync}, \
         follower {follower_per_sync}."
    );
    Ok(md)
}

async fn compare(
    targets: &[(&str, Target)],
    w: &Workload,
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> String {
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    let mut errors = vec![0u64; targets.len()];
    for round in 0..rounds {
        for k in 0..targets.len() {
            let which = (round + k) % targets.len();
            let (label, target) = &targets[which];
            *seed += 1;
            let r = workloads::run(target, w, duration, *seed).await;
            eprintln!(
                "  [cluster] {} round {}/{rounds} {label:<38} {:>10} /s",
                w.title,
                round + 1,
                report::fmt_int(r.throughput())
            );
            results[which].push(r.throughput());
            errors[which] += r.counts.errors;
        }
    }
    let medians: Vec<f64> = results
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    let mut md = format!(
        "{}: {}\n\n| target | median per s | ratio | errors |\n|---|--:|--:|--:|\n",
        w.title,
        report::describe(w)
    );
    let ratios = [
        String::from("1.00x"),
        format!("{:.2}x of the single node", medians[1] / medians[0]),
        format!("{:.2}x of the leader", medians[2] / medians[1]),
    ];
    for (i, (label, _)) in targets.iter().enumerate() {
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
