//! Monotonic time in milliseconds, as the core sees it. The server reads a monotonic clock and
//! passes the value in; tests pass whatever they like.

/// Milliseconds on the server's monotonic clock (since an arbitrary origin, never wall time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
