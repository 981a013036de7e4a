//! The server's monotonic clock, turned into the core's [`Millis`] and back.

use std::time::{Duration, Instant};

use flockd_core::Millis;

#[derive(Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            origin: Instant::now(),
        }
    }

    pub fn now(&self) -> Millis {
        Millis(self.origin.elapsed().as_millis() as u64)
    }

    pub fn instant(&self, at: Millis) -> Instant {
        self.origin + Duration::from_millis(at.0)
    }
}
