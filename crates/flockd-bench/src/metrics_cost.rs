//! What the metrics port costs the command path: workload 1 on three fresh flockd, two plain
//! and one with `--metrics-port` scraped once a second (more often than Prometheus's default),
//! rounds rotating which goes first. The report gives the medians, the ratios to the first
//! plain one, and the second plain one's ratio: what two servers without any difference show,
//! the noise a difference must stand out from.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::paired;
use crate::report;
use crate::servers::{self, Kind};
use crate::workloads::Workload;

const SCRAPE_EVERY: Duration = Duration::from_secs(1);

/// One GET of `/metrics`; the body's length.
async fn scrape(addr: SocketAddr) -> std::io::Result<u64> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::other("no answer within 5 s"))??;
    if !response.starts_with(b"HTTP/1.1 200") {
        return Err(std::io::Error::other("the metrics port did not answer 200"));
    }
    Ok(response.len() as u64)
}

/// Scrapes every second until `stop`, counting good scrapes in `scrapes`.
async fn scraper(addr: SocketAddr, stop: Arc<AtomicBool>, scrapes: Arc<AtomicU64>) -> String {
    let mut every = tokio::time::interval(SCRAPE_EVERY);
    while !stop.load(Ordering::Relaxed) {
        every.tick().await;
        match scrape(addr).await {
            Ok(_) => {
                scrapes.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => return format!("a scrape of {addr} failed: {e}"),
        }
    }
    String::new()
}

/// The markdown rows for `fsync`.
pub async fn cost(
    flockd: &Path,
    fsync: &str,
    w: &Workload,
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> Result<String, String> {
    let metrics_port = servers::free_port().map_err(|e| format!("cannot pick a port: {e}"))?;
    let plain = servers::start(Kind::Flockd, flockd, fsync).await?;
    let control = servers::start(Kind::Flockd, flockd, fsync).await?;
    let metered = servers::start_with(
        Kind::Flockd,
        flockd,
        fsync,
        &["--metrics-port".into(), metrics_port.to_string()],
    )
    .await?;
    let metrics_addr: SocketAddr = ([127, 0, 0, 1], metrics_port).into();
    scrape(metrics_addr)
        .await
        .map_err(|e| format!("the metered flockd's metrics port: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let scrapes = Arc::new(AtomicU64::new(0));
    let scraping = tokio::spawn(scraper(metrics_addr, stop.clone(), scrapes.clone()));
    let result = paired::compare(
        fsync,
        w,
        &[
            (&plain.target, "no metrics port", plain.running_pid()?),
            (
                &control.target,
                "no metrics port (2)",
                control.running_pid()?,
            ),
            (&metered.target, "metrics, scraped", metered.running_pid()?),
        ],
        rounds,
        duration,
        seed,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let failed = scraping.await.map_err(|e| format!("scraper task: {e}"))?;
    if !failed.is_empty() {
        return Err(failed);
    }
    let result = result.map_err(|e| {
        format!(
            "{e}\nflockd without metrics:\n{}\nthe second one:\n{}\nflockd with metrics:\n{}",
            plain.log_tail(),
            control.log_tail(),
            metered.log_tail()
        )
    })?;
    drop((plain, control, metered));
    let [plain, control, metered] = &result[..] else {
        unreachable!("three sides were compared");
    };
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| {fsync} | ops/s | {} | {} | {} | **{:.3}x** ({:.3}x) | {:.3}x ({:.3}x) |",
        report::fmt_int(plain.per_s),
        report::fmt_int(control.per_s),
        report::fmt_int(metered.per_s),
        metered.per_s / plain.per_s,
        metered.ratio_of_rounds,
        control.per_s / plain.per_s,
        control.ratio_of_rounds,
    );
    let _ = writeln!(
        md,
        "| {fsync} | server CPU µs per op | {:.2} | {:.2} | {:.2} | **{:.3}x** | {:.3}x |",
        plain.cpu_us_per_op,
        control.cpu_us_per_op,
        metered.cpu_us_per_op,
        metered.cpu_us_per_op / plain.cpu_us_per_op,
        control.cpu_us_per_op / plain.cpu_us_per_op,
    );
    let _ = writeln!(
        md,
        "| {fsync} | scrapes of the metered one | | | {} | | |",
        scrapes.load(Ordering::Relaxed)
    );
    Ok(md)
}
