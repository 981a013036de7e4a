//! What replication costs: workload 2 (acquire+release cycles) on a single flockd with
//! `appendfsync always`, on a 3-node cluster through its leader, and through a follower, in
//! rounds that rotate which goes first. Every process is stopped by pid when its guard drops.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[cfg(feature = "etcd")]
use crate::etcd;
use crate::members::ClusterGuard;
use crate::paired::median;
use crate::report;
use crate::resp::{Arg, Conn, Reply};
use crate::servers::{self, Kind, Target, cpu_ms};
use crate::workloads::{self, RunResult, Workload};

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

/// Runtime workers per member: `asked`, or (0) the machine's cores over the three members,
/// at least one, so that the members together run no more workers than there are cores.
fn workers_per_member(asked: usize) -> usize {
    if asked > 0 {
        return asked;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 3).max(1)
}

async fn start_cluster(binary: &Path, workers: usize) -> Result<(ClusterGuard, usize), String> {
    let (mut guard, ports, peer_ports) = ClusterGuard::on_free_ports(3)?;
    let peers = ports
        .iter()
        .zip(&peer_ports)
        .enumerate()
        .map(|(i, (port, cport))| format!("{}=127.0.0.1:{port}@{cport}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    for (i, port) in ports.iter().enumerate() {
        let (dir, log) = ClusterGuard::member_dir("cluster", i)?;
        let child = Command::new(binary)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .arg("--dir")
            .arg(&dir)
            .args(["--node-id", &(i + 1).to_string(), "--cluster-peers", &peers])
            .args(["--worker-threads", &workers.to_string()])
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
        for (i, addr) in guard.addrs().iter().enumerate() {
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

/// Where a side's clients connect: a flockd node over RESP, or an etcd member over gRPC.
#[derive(Clone)]
enum Endpoint {
    Flockd(Target),
    #[cfg(feature = "etcd")]
    Etcd(SocketAddr),
}

/// One side of a comparison: where its clients connect, and every server process that does
/// its work (all of a cluster's members), whose CPU time the comparison counts.
#[derive(Clone)]
struct Side {
    endpoint: Endpoint,
    servers: Vec<u32>,
}

impl Side {
    fn flockd(target: Target, servers: Vec<u32>) -> Side {
        Side {
            endpoint: Endpoint::Flockd(target),
            servers,
        }
    }

    /// The run, and the servers' CPU milliseconds during it.
    async fn run(&self, w: &Workload, duration: Duration, seed: u64) -> (RunResult, u64) {
        let before = cpu_ms(&self.servers);
        let result = match &self.endpoint {
            Endpoint::Flockd(target) => workloads::run(target, w, duration, seed).await,
            #[cfg(feature = "etcd")]
            Endpoint::Etcd(addr) => etcd::run(*addr, w, duration, seed).await,
        };
        (result, cpu_ms(&self.servers).saturating_sub(before))
    }
}

/// What [`compare`] found of one side: the medians over rounds.
struct Measured {
    per_s: f64,
    /// Server CPU (all of the side's processes) per operation, in microseconds.
    cpu_us_per_op: f64,
    /// Server CPU cores busy on average during the runs.
    cores: f64,
    errors: u64,
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
    member_workers: usize,
) -> Result<String, String> {
    let single = servers::start(Kind::Flockd, flockd, "always").await?;
    let workers = workers_per_member(member_workers);
    let (cluster, leader) = start_cluster(flockd, workers).await?;
    let follower = (leader + 1) % cluster.addrs().len();
    let leader_side = Side::flockd(Target::flockd(cluster.addrs()[leader]), cluster.pids());
    let targets = [
        (
            "single node, appendfsync always",
            Side::flockd(single.target.clone(), single.pid().into_iter().collect()),
        ),
        ("3-node cluster, through the leader", leader_side.clone()),
        (
            "3-node cluster, through a follower",
            Side::flockd(Target::flockd(cluster.addrs()[follower]), cluster.pids()),
        ),
    ];
    let mut md = format!(
        "Each cluster member runs {workers} runtime worker thread(s) (`--member-workers`); the \
         single node runs one per core.\n\n"
    );
    for w in workloads {
        let measured = compare(&targets, w, rounds, duration, seed).await;
        let ratios = [
            String::from("1.00x"),
            format!(
                "{:.2}x of the single node",
                measured[1].per_s / measured[0].per_s
            ),
            format!(
                "{:.2}x of the leader",
                measured[2].per_s / measured[1].per_s
            ),
        ];
        md.push_str(&table(&targets, w, &measured, &ratios));
    }
    let per_sync = info_field(cluster.addrs()[leader], "raft_log_entries_per_sync")
        .await
        .unwrap_or_else(|| "?".into());
    let follower_per_sync = info_field(cluster.addrs()[follower], "raft_log_entries_per_sync")
        .await
        .unwrap_or_else(|| "?".into());
    drop(single);
    let _ = writeln!(
        md,
        "Raft log entries per sync over the whole run (INFO replication): leader {per_sync}, \
         follower {follower_per_sync}.\n"
    );
    if let Some(etcd_bin) = etcd {
        md.push_str(
            &against_etcd(
                etcd_bin,
                workers,
                leader_side,
                workloads,
                rounds,
                duration,
                seed,
            )
            .await?,
        );
    }
    drop(cluster);
    Ok(md)
}

/// Workload 2's cycles on flockd's leader against etcd's lock service on a 3-node etcd
/// cluster started from `etcd_bin`, through its leader; etcd's members get as many threads
/// for Go code as flockd's get runtime workers.
#[cfg(feature = "etcd")]
async fn against_etcd(
    etcd_bin: &Path,
    workers: usize,
    leader_side: Side,
    workloads: &[Workload],
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> Result<String, String> {
    let mut md = format!("Each etcd member runs with `GOMAXPROCS={workers}`.\n\n");
    let (members, etcd_leader) = etcd::start_cluster(etcd_bin, workers).await?;
    let sides = [
        ("flockd 3-node cluster, through the leader", leader_side),
        (
            "etcd 3-node cluster (v3 Lock/Unlock on a lease), through the leader",
            Side {
                endpoint: Endpoint::Etcd(members.addrs()[etcd_leader]),
                servers: members.pids(),
            },
        ),
    ];
    for w in workloads
        .iter()
        .filter(|w| matches!(w.load, workloads::Load::Cycle { .. }))
    {
        let measured = compare(&sides, w, rounds, duration, seed).await;
        let ratios = [
            format!("{:.2}x of etcd", measured[0].per_s / measured[1].per_s),
            String::from("1.00x"),
        ];
        md.push_str(&table(&sides, w, &measured, &ratios));
    }
    drop(members);
    Ok(md)
}

#[cfg(not(feature = "etcd"))]
async fn against_etcd(
    _etcd_bin: &Path,
    _workers: usize,
    _leader_side: Side,
    _workloads: &[Workload],
    _rounds: usize,
    _duration: Duration,
    _seed: &mut u64,
) -> Result<String, String> {
    unreachable!("real_main refuses --etcd without the etcd feature")
}

/// Runs `w` on every side, `rounds` times, rotating which goes first; per side the medians of
/// throughput and server CPU, and the error count.
async fn compare(
    sides: &[(&str, Side)],
    w: &Workload,
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> Vec<Measured> {
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    let mut cpu_per_op: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    let mut cores: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    let mut errors = vec![0u64; sides.len()];
    for round in 0..rounds {
        for k in 0..sides.len() {
            let which = (round + k) % sides.len();
            let (label, side) = &sides[which];
            *seed += 1;
            let (r, cpu_ms) = side.run(w, duration, *seed).await;
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
            cpu_per_op[which].push(cpu_ms as f64 * 1000.0 / r.counts.ops.max(1) as f64);
            cores[which].push(cpu_ms as f64 / 1000.0 / r.secs.max(f64::EPSILON));
            errors[which] += r.counts.errors;
        }
    }
    (0..sides.len())
        .map(|i| Measured {
            per_s: median(std::mem::take(&mut results[i])),
            cpu_us_per_op: median(std::mem::take(&mut cpu_per_op[i])),
            cores: median(std::mem::take(&mut cores[i])),
            errors: errors[i],
        })
        .collect()
}

fn table(sides: &[(&str, Side)], w: &Workload, measured: &[Measured], ratios: &[String]) -> String {
    let mut md = format!(
        "{}: {}\n\n| target | median per s | ratio | server CPU µs per op | server cores busy | errors |\n|---|--:|--:|--:|--:|--:|\n",
        w.title,
        report::describe(w)
    );
    for (i, (label, _)) in sides.iter().enumerate() {
        let m = &measured[i];
        let _ = writeln!(
            md,
            "| {label} | {} | {} | {:.1} | {:.2} | {} |",
            report::fmt_int(m.per_s),
            ratios[i],
            m.cpu_us_per_op,
            m.cores,
            m.errors
        );
    }
    md.push('\n');
    md
}
