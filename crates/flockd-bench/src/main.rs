//! flockd-bench: flockd against Redis + Lua (the script behind Redisson's RFencedLock), side by
//! side, on loopback, with the same fsync policy and the same lean client.
//!
//! `cargo build --release -p flockd && cargo run --release -p flockd-bench -- --out bench.md`
//!
//! Each workload gets fresh servers, then runs `--rounds` rounds of `--duration-ms`, alternating
//! which server goes first round by round; the report gives the median of rounds.
//! See docs/benchmarks.md.

mod cluster;
#[cfg(feature = "etcd")]
mod etcd;
mod members;
mod metrics_cost;
mod paired;
mod report;
mod resp;
mod servers;
mod subscribers;
mod tls_cost;
mod workloads;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;

use report::{Series, WorkloadResult};
use servers::{Kind, ServerGuard};
use workloads::{ABORT, Load, Workload};

#[derive(Parser, Debug)]
#[command(
    name = "flockd-bench",
    about = "Benchmark flockd against Redis + Lua (Redisson-style fenced lock), side by side"
)]
struct Opts {
    /// Tiny run for CI: 1 round of 0.3 s per workload, few connections, no redis-benchmark.
    #[arg(long, alias = "smoke")]
    quick: bool,
    /// Rounds per workload and server (servers alternate round by round).
    #[arg(long)]
    rounds: Option<usize>,
    /// Length of one round, in ms.
    #[arg(long)]
    duration_ms: Option<u64>,
    /// Length of one round of the client-count sweep, in ms.
    #[arg(long)]
    sweep_duration_ms: Option<u64>,
    /// everysec, always, no, or both (= everysec and always).
    #[arg(long, default_value = "both")]
    fsync: String,
    /// The flockd binary [default: `flockd` next to this binary, else target/release/flockd].
    #[arg(long)]
    flockd: Option<PathBuf>,
    /// The redis-server binary.
    #[arg(long, default_value = "redis-server")]
    redis_server: PathBuf,
    /// The redis-benchmark binary, for the cross-check.
    #[arg(long, default_value = "redis-benchmark")]
    redis_benchmark: PathBuf,
    /// Write the markdown report here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the throughput-vs-connections chart here
    /// [default: docs/benchmarks-throughput.svg; a temp file with --quick].
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Client worker threads (tokio).
    #[arg(long, default_value_t = 2)]
    client_threads: usize,
    /// Skip the client-count sweep (and the chart).
    #[arg(long)]
    no_sweep: bool,
    /// Skip the redis-benchmark cross-check.
    #[arg(long)]
    no_cross_check: bool,
    /// Run only the workloads with these ids (comma-separated: w1,w1p,w2,w2s,w3,w4,w5).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also measure workload 1 with this many subscribers on `__flockevent__:*` against none,
    /// rounds alternating on one flockd (0: skip).
    #[arg(long, default_value_t = 0)]
    subscribers: usize,
    /// Also measure workload 1 on a flockd with `--metrics-port`, scraped every second,
    /// against one without, rounds alternating.
    #[arg(long)]
    metrics_cost: bool,
    /// Also measure workload 2 over TLS against plain text, on one flockd with a TLS port,
    /// rounds alternating.
    #[arg(long)]
    tls_cost: bool,
    /// Also measure workload 2 on a single node (appendfsync always) against a 3-node
    /// cluster, through its leader and through a follower.
    #[arg(long)]
    cluster: bool,
    /// With --cluster: also run workload 2 on flockd's leader against etcd's lock service on
    /// a 3-node etcd cluster started from this binary (Debian's `etcd-server`). Needs the
    /// tool built with `--features etcd`.
    #[arg(long)]
    etcd: Option<PathBuf>,
    /// With --cluster: runtime worker threads of each cluster member (flockd's
    /// `worker-threads`). 0 sizes them as docs/operations.md advises for members that share a
    /// machine: its cores over the three members, at least one. The single node keeps its
    /// default (one per core), which is its best on a machine of its own.
    #[arg(long, default_value_t = 0)]
    member_workers: usize,
    /// The lease of the subscriber comparison's acquires (workload 1's is 5000 ms: a lease
    /// longer than the run keeps the expiry of earlier rounds' grants out of the comparison).
    #[arg(long, default_value_t = W1_LEASE_MS)]
    subscriber_lease_ms: u64,
}

struct Plan {
    rounds: usize,
    duration: Duration,
    sweep_duration: Duration,
    policies: Vec<String>,
    workloads: Vec<Workload>,
    sweep: Vec<usize>,
    smoke: bool,
}

const W1_NAMES: u64 = 1_000_000;
const W1_LEASE_MS: u64 = 5_000;

fn w1(conns: usize, pipeline: usize) -> Workload {
    Workload {
        id: if pipeline > 1 { "w1p" } else { "w1" }.into(),
        title: if pipeline > 1 {
            format!("1. acquire, 1M names, pipeline {pipeline}")
        } else {
            "1. acquire, 1M names".into()
        },
        conns,
        load: Load::Acquire {
            names: W1_NAMES,
            lease_ms: W1_LEASE_MS,
            pipeline,
        },
    }
}

fn w2(conns: usize) -> Workload {
    Workload {
        id: "w2".into(),
        title: "2. acquire+release, 10k names".into(),
        conns,
        load: Load::Cycle {
            names: 10_000,
            lease_ms: 5_000,
            shared: false,
        },
    }
}

fn plan(o: &Opts) -> Result<Plan, String> {
    let smoke = o.quick;
    let policies: Vec<String> = match o.fsync.as_str() {
        "both" => vec!["everysec".into(), "always".into()],
        p @ ("everysec" | "always" | "no") => vec![p.into()],
        other => {
            return Err(format!(
                "--fsync {other}: expected everysec, always, no or both"
            ));
        }
    };
    let (c50, c200) = if smoke { (8, 20) } else { (50, 200) };
    let mut workloads = vec![
        w1(c50, 1),
        w1(c50, 16),
        w2(c50),
        Workload {
            id: "w2s".into(),
            title: "2s. shared acquire+release, 10k names".into(),
            conns: c50,
            load: Load::Cycle {
                names: 10_000,
                lease_ms: 5_000,
                shared: true,
            },
        },
        Workload {
            id: "w3".into(),
            title: format!("3. contention, {c200} conns on 10 names"),
            conns: c200,
            load: Load::Contention {
                names: 10,
                lease_ms: 1_000,
                wait_ms: 1_000,
                backoff_min_ms: 1,
                backoff_max_ms: 5,
            },
        },
        Workload {
            id: "w4".into(),
            title: "4. PING".into(),
            conns: c50,
            load: Load::Ping,
        },
        Workload {
            id: "w5".into(),
            title: format!("5. {c50} readers on one name"),
            conns: c50,
            load: Load::Cycle {
                names: 1,
                lease_ms: 5_000,
                shared: true,
            },
        },
    ];
    if !o.only.is_empty() {
        workloads.retain(|w| o.only.iter().any(|id| id == &w.id));
    }
    let duration = Duration::from_millis(o.duration_ms.unwrap_or(if smoke { 300 } else { 3_000 }));
    Ok(Plan {
        rounds: o.rounds.unwrap_or(if smoke { 1 } else { 5 }).max(1),
        duration,
        sweep_duration: o
            .sweep_duration_ms
            .map(Duration::from_millis)
            .unwrap_or(if smoke {
                duration
            } else {
                duration.min(Duration::from_secs(2))
            }),
        policies,
        workloads,
        sweep: if o.no_sweep {
            vec![]
        } else if smoke {
            vec![1, 4]
        } else {
            vec![1, 4, 16, 50, 100]
        },
        smoke,
    })
}

fn find_in_path(bin: &Path) -> Option<PathBuf> {
    if bin.components().count() > 1 {
        return bin.is_file().then(|| bin.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(bin))
            .find(|p| p.is_file())
    })
}

fn default_flockd() -> PathBuf {
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        let sibling = dir.join("flockd");
        if sibling.is_file() {
            return sibling;
        }
    }
    PathBuf::from("target/release/flockd")
}

fn machine_info(redis: Option<&Path>) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let nproc = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let redis_version = redis
        .map(servers::version_of)
        .unwrap_or_else(|| "not installed".into());
    format!(
        "- cores (nproc): {nproc}\n- CPU: {cpu}\n- memory: {mem}\n- kernel: {kernel}\n- redis-server: {redis_version}\n"
    )
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

async fn start_all(kinds: &[(Kind, PathBuf)], fsync: &str) -> Result<Vec<ServerGuard>, String> {
    let mut guards = Vec::new();
    for (kind, bin) in kinds {
        guards.push(servers::start(*kind, bin, fsync).await?);
    }
    Ok(guards)
}

fn check_abort() -> Result<(), String> {
    if ABORT.load(Ordering::Relaxed) {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

/// Fresh servers, then `rounds` rounds alternating which server goes first.
async fn measure(
    kinds: &[(Kind, PathBuf)],
    fsync: &str,
    w: &Workload,
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> Result<WorkloadResult, String> {
    let guards = start_all(kinds, fsync).await?;
    let mut series: Vec<Series> = guards.iter().map(|g| Series::new(g.target.kind)).collect();
    for round in 0..rounds {
        let n = guards.len();
        for k in 0..n {
            let i = (k + round) % n;
            let target = &guards[i].target;
            *seed += 1;
            let r = workloads::run(target, w, duration, *seed).await;
            check_abort()?;
            eprintln!(
                "  [{fsync}] {:<34} round {}/{} {:<9} {:>10} ops/s  p50 {:>6} µs  p99 {:>7} µs{}",
                w.title,
                round + 1,
                rounds,
                target.kind.label(),
                report::fmt_int(r.throughput()),
                if r.hist.is_empty() {
                    0
                } else {
                    r.hist.value_at_quantile(0.5)
                },
                if r.hist.is_empty() {
                    0
                } else {
                    r.hist.value_at_quantile(0.99)
                },
                match &r.counts.first_error {
                    Some(e) => format!("  ERRORS {}: {e}", r.counts.errors),
                    None => String::new(),
                }
            );
            if r.counts.errors > 0 && target.kind == Kind::Flockd {
                eprintln!("  flockd log tail:\n{}", guards[i].log_tail());
            }
            series[i].add(&r);
        }
    }
    drop(guards);
    Ok(WorkloadResult {
        fsync: fsync.to_string(),
        workload: w.clone(),
        series,
    })
}

/// Runs redis-benchmark against both servers for a workload-1-like load; returns a table.
async fn cross_check(
    kinds: &[(Kind, PathBuf)],
    bench: &Path,
    fsync: &str,
) -> Result<String, String> {
    let guards = start_all(kinds, fsync).await?;
    let mut md = String::new();
    for g in &guards {
        let t = &g.target;
        let port = t.addr.port().to_string();
        let mut args: Vec<String> = [
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-c",
            "50",
            "-n",
            "200000",
            "-r",
            "1000000",
            "--csv",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        match t.kind {
            Kind::Flockd => {
                args.extend(["FLOCK.ACQUIRE", "lock:__rand_int__", "5000"].map(String::from))
            }
            Kind::Redis => args.extend([
                "EVALSHA".to_string(),
                String::from_utf8_lossy(&t.acquire_sha).into_owned(),
                "2".into(),
                "lock:__rand_int__".into(),
                "redisson_lock_token:{lock:__rand_int__}".into(),
                "5000".into(),
                "redis-benchmark:1".into(),
            ]),
        }
        let shown = format!(
            "redis-benchmark {}",
            args.iter()
                .map(|a| if a.contains('{') {
                    format!("'{a}'")
                } else {
                    a.clone()
                })
                .collect::<Vec<_>>()
                .join(" ")
        );
        eprintln!("  [{fsync}] {shown}");
        let out = Command::new(bench)
            .args(&args)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bench.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        // --csv: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
        let row = stdout
            .lines()
            .filter(|l| !l.starts_with("\"test\""))
            .map(|l| {
                l.split("\",\"")
                    .map(|f| f.trim_matches('"').to_string())
                    .collect::<Vec<_>>()
            })
            .find(|f| f.len() >= 8);
        match row {
            Some(f) => {
                let _ = writeln!(
                    md,
                    "| {fsync} | {} | {} | {} | {} | {} |",
                    t.kind.label(),
                    report::fmt_int(f[1].parse().unwrap_or(f64::NAN)),
                    f[4],
                    f[6],
                    f[7]
                );
            }
            None => {
                let _ = writeln!(
                    md,
                    "| {fsync} | {} | failed: {} | | | |",
                    t.kind.label(),
                    String::from_utf8_lossy(&out.stderr)
                        .trim()
                        .replace('\n', " ")
                );
            }
        }
    }
    drop(guards);
    Ok(md)
}

async fn real_main(o: Opts) -> Result<ExitCode, String> {
    let plan = plan(&o)?;
    if o.etcd.is_some() && !cfg!(feature = "etcd") {
        return Err(
            "--etcd needs flockd-bench built with `--features etcd` (which needs protoc)".into(),
        );
    }
    let flockd = o.flockd.clone().unwrap_or_else(default_flockd);
    if !flockd.is_file() {
        return Err(format!(
            "flockd binary not found at {}: build it first with `cargo build --release -p flockd` \
             (or pass --flockd PATH)",
            flockd.display()
        ));
    }
    let redis = find_in_path(&o.redis_server);
    let mut kinds = vec![(Kind::Flockd, flockd.clone())];
    match &redis {
        Some(path) => kinds.push((Kind::Redis, path.clone())),
        None if plan.smoke => eprintln!(
            "NOTICE: redis-server ({}) not found: smoke mode runs flockd alone, without the \
             comparison (install the Debian package redis-server for the full benchmark).",
            o.redis_server.display()
        ),
        None => {
            return Err(format!(
                "redis-server not found ({}): install it (Debian: apt-get install redis-server) \
                 or pass --redis-server PATH",
                o.redis_server.display()
            ));
        }
    }

    let began = Instant::now();
    let load_start = loadavg();
    let mut md = String::new();
    let _ = writeln!(md, "### Machine\n\n{}", machine_info(redis.as_deref()));
    let _ = writeln!(
        md,
        "Settings: {} round(s) of {} ms per workload and server (sweep: {} ms), servers alternating \
         round by round, medians of rounds; {} client thread(s); flockd binary `{}`.\n",
        plan.rounds,
        plan.duration.as_millis(),
        plan.sweep_duration.as_millis(),
        o.client_threads,
        flockd.display()
    );
    eprintln!(
        "flockd-bench: {} policies x {} workloads x {} rounds",
        plan.policies.len(),
        plan.workloads.len(),
        plan.rounds
    );

    let mut seed: u64 = 0x5eed_0000 ^ u64::from(std::process::id());
    let mut outcomes: Vec<WorkloadResult> = Vec::new();
    for fsync in &plan.policies {
        for w in &plan.workloads {
            outcomes.push(measure(&kinds, fsync, w, plan.rounds, plan.duration, &mut seed).await?);
        }
    }

    md.push_str("### Workloads\n\n");
    for w in &plan.workloads {
        let _ = writeln!(md, "- {}: {}", w.title, report::describe(w));
    }
    md.push('\n');
    for fsync in &plan.policies {
        let rows: Vec<&WorkloadResult> = outcomes.iter().filter(|x| &x.fsync == fsync).collect();
        md.push_str(&report::policy_table(fsync, &rows));
        md.push('\n');
    }

    if !plan.sweep.is_empty() {
        let fsync = plan.policies[0].clone();
        let mut points = Vec::new();
        for &conns in &plan.sweep {
            let w = w1(conns, 1);
            let o = measure(
                &kinds,
                &fsync,
                &w,
                plan.rounds,
                plan.sweep_duration,
                &mut seed,
            )
            .await?;
            points.push((conns, o));
        }
        md.push_str(&report::sweep_table(&fsync, &points));
        md.push('\n');
        let svg_path = match (&o.svg, plan.smoke) {
            (Some(p), _) => p.clone(),
            (None, true) => {
                std::env::temp_dir().join(format!("flockd-bench-{}.svg", std::process::id()))
            }
            (None, false) => PathBuf::from("docs/benchmarks-throughput.svg"),
        };
        let title =
            format!("Workload 1: acquire on random names of 1M, unpipelined, appendfsync {fsync}");
        let svg = report::svg_chart(&title, &points);
        std::fs::write(&svg_path, svg)
            .map_err(|e| format!("cannot write {}: {e}", svg_path.display()))?;
        eprintln!("chart written to {}", svg_path.display());
        if plan.smoke && o.svg.is_none() {
            let _ = std::fs::remove_file(&svg_path);
        }
        for (_, o) in points {
            outcomes.push(o);
        }
    }

    if o.subscribers > 0 {
        let conns = if plan.smoke { 8 } else { 50 };
        let _ = writeln!(
            md,
            "#### Subscribers (workload 1, {conns} connections, lease {} ms, without and with {} subscribers on `__flockevent__:*`)\n",
            o.subscriber_lease_ms, o.subscribers
        );
        md.push_str("| fsync | no subscribers ops/s | with subscribers ops/s | ratio of medians | median of paired ratios | events read per round | server CPU µs/op, without / with | bench (clients and subscribers) CPU µs/op, without / with | whole machine (softirq too) CPU µs/op, without / with |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        for fsync in &plan.policies {
            let mut w = w1(conns, 1);
            if let Load::Acquire { lease_ms, .. } = &mut w.load {
                *lease_ms = o.subscriber_lease_ms;
            }
            md.push_str(
                &subscribers::cost(
                    &flockd,
                    fsync,
                    &w,
                    o.subscribers,
                    plan.rounds,
                    plan.duration,
                    &mut seed,
                )
                .await?,
            );
            check_abort()?;
        }
        md.push('\n');
    }

    if o.metrics_cost {
        let conns = if plan.smoke { 8 } else { 50 };
        let _ = writeln!(
            md,
            "#### Metrics port (workload 1, {conns} connections, without and with `--metrics-port` scraped every second)\n"
        );
        md.push_str("| fsync | median of rounds | no metrics port | a second one, no metrics port | metrics port, scraped | metrics: ratio (median of rounds' ratios) | second one: the same |\n|---|---|--:|--:|--:|--:|--:|\n");
        for fsync in &plan.policies {
            let w = w1(conns, 1);
            md.push_str(
                &metrics_cost::cost(&flockd, fsync, &w, plan.rounds, plan.duration, &mut seed)
                    .await?,
            );
            check_abort()?;
        }
        md.push('\n');
    }

    if o.tls_cost {
        let conns = if plan.smoke { 8 } else { 50 };
        let _ = writeln!(
            md,
            "#### TLS (workload 2, {conns} connections, plain text and TLS 1.3 to one flockd)\n"
        );
        md.push_str("| fsync | plain text ops/s | TLS ops/s | ratio of medians | median of paired ratios | server CPU µs/op, plain | the same, TLS |\n|---|--:|--:|--:|--:|--:|--:|\n");
        for fsync in &plan.policies {
            let w = w2(conns);
            md.push_str(
                &tls_cost::cost(&flockd, fsync, &w, plan.rounds, plan.duration, &mut seed).await?,
            );
            check_abort()?;
        }
        md.push('\n');
    }

    if o.cluster {
        let conns = if plan.smoke { 8 } else { 64 };
        let _ = writeln!(md, "#### Replication ({conns} connections)\n");
        let w = [
            w2(conns),
            Workload {
                id: "r".into(),
                title: "Reads".into(),
                conns,
                load: Load::Read { names: 10_000 },
            },
        ];
        md.push_str(
            &cluster::cost(
                &flockd,
                &w,
                plan.rounds,
                plan.duration,
                &mut seed,
                o.etcd.as_deref(),
                o.member_workers,
            )
            .await?,
        );
        md.push('\n');
        check_abort()?;
    }

    if !plan.smoke && !o.no_cross_check && kinds.len() == 2 {
        match find_in_path(&o.redis_benchmark) {
            Some(bench) => {
                md.push_str("#### redis-benchmark cross-check (workload 1: -c 50 -n 200000 -r 1000000, unpipelined)\n\n");
                md.push_str("| fsync | server | requests/s | p50 ms | p99 ms | max ms |\n|---|---|--:|--:|--:|--:|\n");
                for fsync in &plan.policies {
                    md.push_str(&cross_check(&kinds, &bench, fsync).await?);
                    check_abort()?;
                }
                md.push('\n');
            }
            None => eprintln!("redis-benchmark not found: cross-check skipped"),
        }
    }

    let errors: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.series
                .iter()
                .filter(|s| s.counts.errors > 0)
                .map(move |s| {
                    format!(
                        "[{}] {} on {}: {} error(s), first: {}",
                        o.fsync,
                        o.workload.title,
                        s.kind.label(),
                        s.counts.errors,
                        s.counts.first_error.as_deref().unwrap_or("?")
                    )
                })
        })
        .collect();
    if !errors.is_empty() {
        md.push_str("#### Errors\n\n");
        for e in &errors {
            let _ = writeln!(md, "- {e}");
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "Total run time: {:.0} s. Load average (1/5/15 min) at start: {load_start}; at the end: {}.",
        began.elapsed().as_secs_f64(),
        loadavg()
    );

    println!("{md}");
    if let Some(out) = &o.out {
        std::fs::write(out, &md).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        eprintln!("report written to {}", out.display());
    }
    if errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for e in &errors {
            eprintln!("ERROR {e}");
        }
        Ok(ExitCode::FAILURE)
    }
}

fn main() -> ExitCode {
    let o = Opts::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.client_threads.max(1))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flockd-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        tokio::spawn(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("flockd-bench: interrupted, stopping the servers");
                ABORT.store(true, Ordering::Relaxed);
            }
        });
        real_main(o).await
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("flockd-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
