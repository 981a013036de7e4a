//! Log time in milliseconds, as the core sees it.
//!
//! The proposer of an op stamps the time it takes effect at, from its own monotonic clock
//! rebased so that log time never goes back: a restarted server continues from the last time in
//! its file, a new Raft leader from the last time in the log. So a `Millis` means the same on
//! every machine that applies the log, and leases compare against it alone.

use serde::{Deserialize, Serialize};

/// Milliseconds of log time (never wall time).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Millis(pub u64);

impl Millis {
    pub fn plus(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }

    /// Milliseconds from `self` until `later`, 0 if `later` is not after `self`.
    pub fn until(self, later: Millis) -> u64 {
        later.0.saturating_sub(self.0)
    }
}
