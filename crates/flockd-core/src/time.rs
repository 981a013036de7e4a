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

/// A proposer's clock in log time: the process's monotonic clock, moved forward (never back)
/// so that its readings follow the latest time already in the log. A restart starts it just
/// after the last time in the file; a new Raft leader moves it past the last time applied.
/// The state machine never reads it: ops carry the time they were stamped with.
pub struct Clock {
    origin: std::time::Instant,
    /// Log time at `origin`; only grows.
    base: std::sync::atomic::AtomicU64,
}

impl Clock {
    /// A clock whose first reading is just after `last`, the latest time in the log.
    pub fn continuing_from(last: Millis) -> Clock {
        Clock {
            origin: std::time::Instant::now(),
            base: std::sync::atomic::AtomicU64::new(last.0.saturating_add(1)),
        }
    }

    pub fn now(&self) -> Millis {
        let base = self.base.load(std::sync::atomic::Ordering::Acquire);
        Millis(base.saturating_add(self.origin.elapsed().as_millis() as u64))
    }

    /// Moves the clock forward, if needed, so that its next reading is after `last`.
    pub fn not_before(&self, last: Millis) {
        let elapsed = self.origin.elapsed().as_millis() as u64;
        let base = last.0.saturating_add(1).saturating_sub(elapsed);
        self.base
            .fetch_max(base, std::sync::atomic::Ordering::AcqRel);
    }

    /// The monotonic instant a log time falls on.
    pub fn instant(&self, at: Millis) -> std::time::Instant {
        let base = self.base.load(std::sync::atomic::Ordering::Acquire);
        self.origin + std::time::Duration::from_millis(at.0.saturating_sub(base))
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn a_clock_moved_forward_reads_after_the_time_given_and_never_goes_back() {
        let clock = Clock::continuing_from(Millis(10));
        let first = clock.now();
        assert!(first > Millis(10));
        clock.not_before(Millis(1_000_000));
        let moved = clock.now();
        assert!(moved > Millis(1_000_000));
        clock.not_before(Millis(5));
        assert!(clock.now() >= moved);
        assert!(clock.instant(moved) <= std::time::Instant::now());
    }
}
