//! flockd-histogram: the one fixed-bound histogram the daemon keeps (AOF fsyncs and records per
//! fsync, Raft proposals and log fsyncs, lock waits and holds). Lock-free: a count per bucket and
//! a sum, relaxed atomics bumped once per observation, so any thread observes without a lock and
//! a scrape reads a copy ([`Counts`]) without stopping anyone.
//!
//! Redis's own latency histogram (LATENCY HISTOGRAM's power-of-two levels) is another shape and
//! lives with the command statistics; the metrics port's exposition form is
//! `flockd_metrics::HistogramData`, made from [`Counts`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// What the sum is kept in: microseconds for durations (read back in seconds), or whole values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Micros,
    Whole,
}

/// Counts per bucket over fixed increasing upper `bounds` (the last bucket holds everything
/// above them) and the sum of what was observed.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    unit: Unit,
}

/// A histogram's counts at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Counts {
    pub bounds: &'static [f64],
    /// Per bucket, not cumulative: one more than there are bounds, the last for everything
    /// above them.
    pub counts: Vec<u64>,
    /// In seconds for a histogram of durations.
    pub sum: f64,
}

impl Counts {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

impl Histogram {
    fn with(bounds: &'static [f64], unit: Unit) -> Histogram {
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            unit,
        }
    }

    /// Durations, with `bounds` in seconds.
    pub fn of_seconds(bounds: &'static [f64]) -> Histogram {
        Histogram::with(bounds, Unit::Micros)
    }

    /// Whole values (records per fsync, say).
    pub fn of_values(bounds: &'static [f64]) -> Histogram {
        Histogram::with(bounds, Unit::Whole)
    }

    fn bucket(&self, value: f64) -> &AtomicU64 {
        let i = self
            .bounds
            .iter()
            .position(|&bound| value <= bound)
            .unwrap_or(self.bounds.len());
        &self.buckets[i]
    }

    /// Counts a duration (a histogram of seconds).
    pub fn observe_duration(&self, took: Duration) {
        debug_assert_eq!(self.unit, Unit::Micros);
        self.bucket(took.as_secs_f64()).fetch_add(1, Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.sum.fetch_add(micros, Relaxed);
    }

    /// Counts a whole value (a histogram of values).
    pub fn observe_value(&self, value: u64) {
        debug_assert_eq!(self.unit, Unit::Whole);
        self.bucket(value as f64).fetch_add(1, Relaxed);
        self.sum.fetch_add(value, Relaxed);
    }

    pub fn read(&self) -> Counts {
        let sum = self.sum.load(Relaxed) as f64;
        Counts {
            bounds: self.bounds,
            counts: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            sum: match self.unit {
                Unit::Micros => sum / 1e6,
                Unit::Whole => sum,
            },
        }
    }

    /// Back to zero (CONFIG RESETSTAT).
    pub fn reset(&self) {
        for bucket in &self.buckets {
            bucket.store(0, Relaxed);
        }
        self.sum.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_count_in_the_first_bound_that_holds_them() {
        let h = Histogram::of_values(&[1.0, 2.0, 4.0]);
        for v in [1, 3, 4, 5000] {
            h.observe_value(v);
        }
        let c = h.read();
        assert_eq!(c.counts, [1, 0, 2, 1]);
        assert_eq!((c.count(), c.sum), (4, 5008.0));
    }

    #[test]
    fn durations_sum_in_seconds() {
        let h = Histogram::of_seconds(&[0.001, 0.01]);
        h.observe_duration(Duration::from_micros(300));
        h.observe_duration(Duration::from_millis(2));
        h.observe_duration(Duration::from_secs(9));
        let c = h.read();
        assert_eq!(c.counts, [1, 1, 1]);
        assert!((c.sum - 9.0023).abs() < 1e-9, "{}", c.sum);
        h.reset();
        assert_eq!(h.read().count(), 0);
    }
}
