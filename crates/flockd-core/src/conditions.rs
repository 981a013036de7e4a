//! The conditions of a holding: how many holdings it lets coexist (its mode), whether it ends with
//! the connection that took it (its session), and how long the name stays closed after the
//! holding is lost (its lock-delay). A plain FLOCK.ACQUIRE has the default conditions: exclusive,
//! no session, no delay.

use serde::{Deserialize, Serialize};

/// How many holdings of a name may coexist with this one.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Mode {
    /// Alone (`LIMIT 1`): a plain lock, or a write lock.
    #[default]
    Exclusive,
    /// With any number of holdings: a read lock.
    Shared,
    /// With at most n holdings in all, itself included (a semaphore of n permits), n >= 1.
    Limit(u16),
}

impl Mode {
    /// The most holdings a name may have while one of this mode is among them.
    pub fn admits(self) -> u32 {
        match self {
            Mode::Exclusive => 1,
            Mode::Limit(n) => u32::from(n),
            Mode::Shared => u32::MAX,
        }
    }

    /// What FLOCK.HOLDERS calls it.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
            Mode::Limit(_) => "limit",
        }
    }

    /// The `limit` FLOCK.HOLDERS reports: 1, n, or -1 for shared.
    pub fn reported_limit(self) -> i64 {
        match self {
            Mode::Exclusive => 1,
            Mode::Limit(n) => i64::from(n),
            Mode::Shared => -1,
        }
    }
}

/// Everything about a holding beyond its lease and owner.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Conditions {
    pub mode: Mode,
    /// The id of the connection whose closing ends the holding (`SESSION`).
    pub session: Option<u64>,
    /// After the holding ends by expiry or force-release, the name grants nothing for this long.
    pub lock_delay_ms: u64,
}

impl Conditions {
    /// Whether these are a plain acquire's conditions (the AOF writes those in the shorter form).
    pub fn is_plain(&self) -> bool {
        *self == Conditions::default()
    }
}
