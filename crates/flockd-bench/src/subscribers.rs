//! What subscribers cost the command path: workload 1 on one flockd, rounds alternating
//! between no subscribers and `n` connections on `PSUBSCRIBE __flockevent__:*` that read every
//! event as it comes; the report gives both medians and their ratio.
//!
//! Each round first runs the same side for two leases without measuring it. A grant expires a
//! lease after it was made, so without that a round would carry the expiries (the work, and
//! with subscribers the `expired` events) of the other side's round before it: the side with
//! subscribers, the slower one, would pay for the faster side's grants, and the other way round.
//! One lease is not enough: how many of the settling lease's acquires are granted (and so
//! expire in the measured round) depends on how many names the other side left held.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::paired::median;
use crate::report;
use crate::servers::{self, Kind};
use crate::workloads::{self, Workload};

/// One subscriber: subscribes, says so on `ready`, then reads until `stop`, adding the bytes
/// it receives to `received`.
async fn subscriber(
    addr: SocketAddr,
    ready: tokio::sync::oneshot::Sender<()>,
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    stream.write_all(b"PSUBSCRIBE __flockevent__:*\r\n").await?;
    let mut buf = vec![0u8; 64 * 1024];
    // The confirmation frame ends with the subscription count, `:1\r\n`.
    let mut got = Vec::new();
    while !got.ends_with(b":1\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed before subscribing"));
        }
        got.extend_from_slice(&buf[..n]);
    }
    let _ = ready.send(());
    while !stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buf)).await {
            Ok(Ok(0)) => return Err(std::io::Error::other("disconnected")),
            Ok(Ok(n)) => {
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {}
        }
    }
    Ok(())
}

/// How long a round runs unmeasured first: two leases, so that what expires while it is
/// measured was granted on the same side, against names the same side holds. A lease longer
/// than 10 s is not settled: it never expires in the run.
fn settling(w: &Workload) -> Duration {
    match w.load {
        workloads::Load::Acquire { lease_ms, .. } if lease_ms <= 10_000 => {
            Duration::from_millis(2 * lease_ms + 250)
        }
        _ => Duration::ZERO,
    }
}

/// Runs `w` for `settling` unmeasured (nothing, for zero).
async fn settle(target: &servers::Target, w: &Workload, settling: Duration, seed: &mut u64) {
    if !settling.is_zero() {
        *seed += 1;
        workloads::run(target, w, settling, *seed).await;
    }
}

/// The markdown section: rounds alternate which goes first, medians of rounds.
pub async fn cost(
    flockd: &Path,
    fsync: &str,
    w: &Workload,
    n: usize,
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> Result<String, String> {
    let guard = servers::start(Kind::Flockd, flockd, fsync).await?;
    let target = &guard.target;
    let pids = [guard.pid().unwrap_or_default(), std::process::id()];
    // Per side (without, with): the server's, this process's and the whole machine's CPU µs
    // per op, per round. The machine's also holds softirq work (much of loopback TCP's) if the
    // kernel charged it to neither process.
    let now = || {
        [
            servers::cpu_ms(&[pids[0]]),
            servers::cpu_ms(&[pids[1]]),
            servers::machine_busy_ms(),
        ]
    };
    let mut cpu: [[Vec<f64>; 3]; 2] = Default::default();
    let mut account = |side: usize, before: [u64; 3], ops: u64| {
        for (who, used) in now().into_iter().enumerate() {
            let used = used.saturating_sub(before[who]);
            cpu[side][who].push(used as f64 * 1000.0 / ops.max(1) as f64);
        }
    };
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut received = Vec::new();
    for round in 0..rounds {
        for subscribed in [round % 2 == 1, round % 2 == 0] {
            *seed += 1;
            if !subscribed {
                settle(target, w, settling(w), seed).await;
                let before = now();
                let r = workloads::run(target, w, duration, *seed).await;
                account(0, before, r.counts.ops);
                eprintln!(
                    "  [{fsync}] {} round {}/{rounds} no subscribers  {:>10} ops/s",
                    w.title,
                    round + 1,
                    report::fmt_int(r.throughput())
                );
                without.push(r.throughput());
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let read = Arc::new(AtomicU64::new(0));
            let mut tasks = Vec::with_capacity(n);
            for _ in 0..n {
                let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
                let task = subscriber(target.addr, ready_tx, stop.clone(), read.clone());
                tasks.push((tokio::spawn(task), ready_rx));
            }
            let mut handles = Vec::with_capacity(n);
            for (task, ready) in tasks {
                ready
                    .await
                    .map_err(|_| "a subscriber could not subscribe".to_string())?;
                handles.push(task);
            }
            settle(target, w, settling(w), seed).await;
            let (before, read_before) = (now(), read.load(Ordering::Relaxed));
            let r = workloads::run(target, w, duration, *seed).await;
            account(1, before, r.counts.ops);
            let bytes = read.load(Ordering::Relaxed) - read_before;
            stop.store(true, Ordering::Relaxed);
            for h in handles {
                h.await
                    .map_err(|e| format!("subscriber task: {e}"))?
                    .map_err(|e| format!("subscriber: {e}"))?;
            }
            eprintln!(
                "  [{fsync}] {} round {}/{rounds} {n} subscribers {:>10} ops/s  ({} MB of events read)",
                w.title,
                round + 1,
                report::fmt_int(r.throughput()),
                bytes / 1_000_000
            );
            with.push(r.throughput());
            received.push(bytes as f64);
        }
    }
    drop(guard);
    // Each round's two sides ran next to each other: the median of their ratios is less moved
    // by a machine that drifts over the run than the ratio of the medians.
    let paired = median(with.iter().zip(&without).map(|(b, a)| b / a).collect());
    let (a, b) = (median(without), median(with));
    let [
        [server_a, bench_a, machine_a],
        [server_b, bench_b, machine_b],
    ] = cpu.map(|side| side.map(median));
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| {fsync} | {} | {} | **{:.2}x** | {paired:.2}x | {:.0} MB | {server_a:.1} / {server_b:.1} | {bench_a:.1} / {bench_b:.1} | {machine_a:.1} / {machine_b:.1} |",
        report::fmt_int(a),
        report::fmt_int(b),
        b / a,
        median(received) / 1e6
    );
    Ok(md)
}
