//! Why a lock can no longer be trusted: what a guard's lost signal carries.

use std::fmt;

/// Why a lock can no longer be trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The server refused a renewal (`-NOTOWNER`): the holding is gone.
    RenewRefused(String),
    /// A renewal failed: no node answered before the lease was about to run out, or an error
    /// reply other than `-NOTOWNER` (`-NOPERM`, say). The holding may be gone.
    RenewFailed(String),
    /// The lease, counted from when the last successful renewal was sent, is about to run out
    /// (a renewal did not come back in time, or this process was paused).
    LeaseRunningOut,
    /// The server published that the holding expired.
    Expired,
    /// The server published that the holding was force-released.
    ForceReleased,
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lost::RenewRefused(e) => write!(f, "renewal refused: {e}"),
            Lost::RenewFailed(e) => write!(f, "renewal failed: {e}"),
            Lost::LeaseRunningOut => f.write_str("the lease is about to run out"),
            Lost::Expired => f.write_str("the lease expired"),
            Lost::ForceReleased => f.write_str("force-released"),
        }
    }
}
