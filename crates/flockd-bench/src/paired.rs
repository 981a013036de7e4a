//! Ways of serving the same workload, measured in rotating rounds (which goes first moves on
//! each round, so none always runs on a warmer or a busier machine): the median of each side
//! and the median of each round's ratio to the first side, for the comparisons of one feature
//! on against off.

use std::time::Duration;

use crate::report;
use crate::servers::{self, Target};
use crate::workloads::{self, Workload};

/// One side's medians over rounds: ops/s, its ratio to the first side per round, and its
/// server's CPU time per operation (which a busy machine's scheduling moves less than ops/s).
pub struct Side {
    pub per_s: f64,
    pub ratio_of_rounds: f64,
    pub cpu_us_per_op: f64,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `w` on every side (its target, its name for the log, its server's pid), `rounds`
/// times each; an error of the workload ends the comparison.
pub async fn compare(
    fsync: &str,
    w: &Workload,
    sides: &[(&Target, &str, u32)],
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> Result<Vec<Side>, String> {
    let n = sides.len();
    let mut per_s = vec![Vec::new(); n];
    let mut ratios = vec![Vec::new(); n];
    let mut cpu = vec![Vec::new(); n];
    for round in 0..rounds {
        let mut this_round = vec![0.0; n];
        for k in 0..n {
            let side = (k + round) % n;
            let (target, label, pid) = sides[side];
            *seed += 1;
            let before = servers::cpu_ms(&[pid]);
            let r = workloads::run(target, w, duration, *seed).await;
            let cpu_ms = servers::cpu_ms(&[pid]).saturating_sub(before);
            cpu[side].push(cpu_ms as f64 * 1000.0 / r.counts.ops.max(1) as f64);
            if let Some(e) = &r.counts.first_error {
                return Err(format!("{} ({label}) failed: {e}", w.title));
            }
            eprintln!(
                "  [{fsync}] {} round {}/{rounds} {label:<22} {:>10} ops/s {:>6.1} µs CPU/op",
                w.title,
                round + 1,
                report::fmt_int(r.throughput()),
                cpu[side].last().copied().unwrap_or_default()
            );
            this_round[side] = r.throughput();
        }
        for side in 0..n {
            per_s[side].push(this_round[side]);
            ratios[side].push(this_round[side] / this_round[0]);
        }
    }
    Ok(per_s
        .into_iter()
        .zip(ratios)
        .zip(cpu)
        .map(|((per_s, ratios), cpu)| Side {
            per_s: median(per_s),
            ratio_of_rounds: median(ratios),
            cpu_us_per_op: median(cpu),
        })
        .collect())
}
