//! The console's charts: every [`INTERVAL`] the commands run since the last sample (from the
//! per-command duration histograms that LATENCY HISTOGRAM and `/metrics` read), as ops/s and
//! their p99, for the last [`KEEP`] samples. One task, off the command path: it reads counters
//! that commands bump anyway.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::server::shared::Shared;
use crate::services::stats::{HISTOGRAM_BUCKETS, bucket_usec};

pub const INTERVAL: Duration = Duration::from_secs(2);
/// Five minutes of samples.
pub const KEEP: usize = 150;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Unix milliseconds at the end of the interval.
    pub at_ms: u64,
    pub ops_per_s: f64,
    /// The upper bound, in ms, of the histogram level that holds the 99th percentile of the
    /// interval's commands; `None` when none ran.
    pub p99_ms: Option<f64>,
}

#[derive(Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().iter().copied().collect()
    }

    fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock();
        if samples.len() == KEEP {
            samples.pop_front();
        }
        samples.push_back(sample);
    }
}

/// Every command's duration histogram, added up.
fn totals(shared: &Shared) -> [u64; HISTOGRAM_BUCKETS] {
    let mut sum = [0u64; HISTOGRAM_BUCKETS];
    for stat in &shared.stats.commands {
        for (total, count) in sum.iter_mut().zip(stat.histogram.counts()) {
            *total += count;
        }
    }
    sum
}

/// The p99 of `counts` (calls per histogram level), as its level's upper bound in ms.
pub fn p99_ms(counts: &[u64; HISTOGRAM_BUCKETS]) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = total - total / 100;
    let mut seen = 0;
    for (level, count) in counts.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return Some(bucket_usec(level) as f64 / 1000.0);
        }
    }
    None
}

/// Samples until the server shuts down.
pub async fn sample(shared: Arc<Shared>, history: Arc<History>) {
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let mut last = (Instant::now(), totals(&shared));
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shared.shutdown.cancelled() => return,
        }
        let now = (Instant::now(), totals(&shared));
        // CONFIG RESETSTAT zeroes the histograms: a counter below its last value starts over.
        let delta: [u64; HISTOGRAM_BUCKETS] =
            std::array::from_fn(|i| now.1[i].checked_sub(last.1[i]).unwrap_or(now.1[i]));
        let seconds = now.0.duration_since(last.0).as_secs_f64().max(0.001);
        history.push(Sample {
            at_ms: crate::services::acl::unix_ms(),
            ops_per_s: delta.iter().sum::<u64>() as f64 / seconds,
            p99_ms: p99_ms(&delta),
        });
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_is_the_level_that_holds_the_99th_percentile() {
        let mut counts = [0u64; HISTOGRAM_BUCKETS];
        assert_eq!(p99_ms(&counts), None);
        counts[0] = 990;
        counts[5] = 10;
        assert_eq!(p99_ms(&counts), Some(bucket_usec(0) as f64 / 1000.0));
        counts[5] = 11;
        assert_eq!(p99_ms(&counts), Some(bucket_usec(5) as f64 / 1000.0));
    }

    #[test]
    fn the_history_keeps_the_last_samples() {
        let history = History::default();
        for i in 0..KEEP + 5 {
            history.push(Sample {
                at_ms: i as u64,
                ops_per_s: 0.0,
                p99_ms: None,
            });
        }
        let samples = history.samples();
        assert_eq!(samples.len(), KEEP);
        assert_eq!(samples[0].at_ms, 5);
    }
}
