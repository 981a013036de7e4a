//! The lock table's counters for INFO: monotonic event counts and two gauges, all relaxed
//! atomics (INFO needs no cross-counter consistency).

use std::sync::atomic::AtomicU64;

#[derive(Default)]
pub(super) struct Counters {
    /// Gauge: locks held right now (including leases past their deadline not yet expired).
    pub locks_held: AtomicU64,
    /// Gauge: waiters queued right now (including ones whose connection closed but that were
    /// not yet cancelled or skipped).
    pub waiters: AtomicU64,
    pub tokens_issued: AtomicU64,
    pub grants: AtomicU64,
    pub releases: AtomicU64,
    pub expirations: AtomicU64,
    pub force_releases: AtomicU64,
    pub notowner_rejections: AtomicU64,
}
