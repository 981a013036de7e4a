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

/// A proposer's clock in log time: the process's monotonic clock, set so that its readings
/// follow the latest time already in the log. A restart starts it just after the last time in
/// the file; a new Raft leader sets it just after the last time applied.
/// The state machine never reads it: ops carry the time they were stamped with.
pub struct Clock {
    origin: std::time::Instant,
    /// Log time at `origin`, in ms. Signed: a leader whose process has run longer than the
    /// log's time (failovers pause log time, real time goes on) continues from a log time
    /// below its own elapsed time.
    base: std::sync::atomic::AtomicI64,
}

fn to_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

impl Clock {
    /// A clock whose first reading is just after `last`, the latest time in the log.
    pub fn continuing_from(last: Millis) -> Clock {
        Clock {
            origin: std::time::Instant::now(),
            base: std::sync::atomic::AtomicI64::new(to_i64(last.0).saturating_add(1)),
        }
    }

    fn elapsed_ms(&self) -> i64 {
        i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    pub fn now(&self) -> Millis {
        let base = self.base.load(std::sync::atomic::Ordering::Acquire);
        Millis(base.saturating_add(self.elapsed_ms()).max(0) as u64)
    }

    /// Sets the clock so that its next reading is just after `last`, forward or back: for a new
    /// Raft leader whose own clock never stamped anything in the log (its readings ran on
    /// from its own start, which may be far ahead of the log's time). Call it before the clock
    /// stamps anything.
    pub fn continue_from(&self, last: Millis) {
        let base = to_i64(last.0)
            .saturating_add(1)
            .saturating_sub(self.elapsed_ms());
        self.base.store(base, std::sync::atomic::Ordering::Release);
    }

    /// The monotonic instant a log time falls on.
    pub fn instant(&self, at: Millis) -> std::time::Instant {
        let base = self.base.load(std::sync::atomic::Ordering::Acquire);
        let since_origin = to_i64(at.0).saturating_sub(base).max(0) as u64;
        self.origin + std::time::Duration::from_millis(since_origin)
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn a_clock_continues_from_the_time_given_forward_or_back() {
        let clock = Clock::continuing_from(Millis(10));
        let first = clock.now();
        assert!(first > Millis(10));
        clock.continue_from(Millis(1_000_000));
        let moved = clock.now();
        assert!(moved > Millis(1_000_000));
        assert!(clock.now() >= moved, "readings never go back by themselves");
        clock.continue_from(Millis(20));
        let back = clock.now();
        assert!(back > Millis(20) && back < moved, "{back:?}");
        // A process that ran longer than the log's time: the clock still continues from it.
        std::thread::sleep(std::time::Duration::from_millis(30));
        clock.continue_from(Millis(0));
        let early = clock.now();
        assert!(
            early < Millis(20),
            "continues from the log, not from the process: {early:?}"
        );
        assert!(clock.instant(early) <= std::time::Instant::now());
        assert!(clock.instant(Millis(early.0 + 60_000)) > std::time::Instant::now());
    }
}
