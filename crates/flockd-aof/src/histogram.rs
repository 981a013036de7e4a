//! The bounds of the histograms of what each fsync did: how long it took and how many records it
//! made durable (group commit at work). Observed once per fsync, never per record
//! (`flockd_histogram`), and read by INFO and the metrics port.

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
