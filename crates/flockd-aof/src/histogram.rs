//! Fixed-bound histograms of what each fsync did: how long it took and how many records it made
//! durable (group commit at work). Updated once per fsync under the writer's counters lock,
//! never per record, and read by INFO and the metrics port.

/// Upper bounds of fsync durations, in seconds: 50 µs (a fast NVMe) to 2.5 s (a disk in
/// trouble).
pub const FSYNC_SECONDS_BOUNDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5,
];

/// Upper bounds of records per fsync: powers of two up to 4096.
pub const RECORDS_PER_FSYNC_BOUNDS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// Counts per bucket (not cumulative): `counts[i]` holds values up to `bounds[i]`, the last
/// count (one more than there are bounds) everything above.
#[derive(Clone, Debug, PartialEq)]
pub struct FixedHistogram {
    pub bounds: &'static [f64],
    pub counts: Vec<u64>,
    pub sum: f64,
}

impl FixedHistogram {
    pub fn new(bounds: &'static [f64]) -> FixedHistogram {
        FixedHistogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&bound| value <= bound)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += value;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_count_in_the_first_bound_that_holds_them() {
        let mut h = FixedHistogram::new(RECORDS_PER_FSYNC_BOUNDS);
        for v in [1.0, 3.0, 4.0, 5000.0] {
            h.observe(v);
        }
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[2], 2);
        assert_eq!(h.counts[RECORDS_PER_FSYNC_BOUNDS.len()], 1);
        assert_eq!((h.count(), h.sum), (4, 5008.0));
    }
}
