//! The server's monotonic clock as log time: [`Millis`] that continue from the last time in the
//! log, so a restart (or, later, a new leader) never stamps an op earlier than one already
//! applied.

use std::time::{Duration, Instant};

use flockd_core::Millis;

#[derive(Clone, Copy)]
pub struct Clock {
    origin: Instant,
    /// Log time at `origin`.
    base: u64,
}

impl Clock {
    /// A clock whose first reading is just after `last`, the latest time in the log.
    pub fn continuing_from(last: Millis) -> Clock {
        Clock {
            origin: Instant::now(),
            base: last.0.saturating_add(1),
        }
    }

    pub fn now(&self) -> Millis {
        Millis(self.base + self.origin.elapsed().as_millis() as u64)
    }

    /// The monotonic instant a log time falls on.
    pub fn instant(&self, at: Millis) -> Instant {
        self.origin + Duration::from_millis(at.0.saturating_sub(self.base))
    }
}
