//! flockd-aof: the append-only file (AOF) that makes flockd's lock table durable.
//!
//! * [`record`]: the file format. An 8-byte header `FLOCKAO1`, then records framed as
//!   `[u32 LE payload length][u32 LE crc32][payload]`, the checksum covering the length field
//!   and the payload, the payload one [`Change`] (a tag byte, then its fields).
//! * [`load`] replays a file at start-up, cutting off a damaged tail (what a power loss leaves of
//!   a write that was never acknowledged) and refusing a damaged middle.
//! * [`Aof`] is the writer: [`flockd_core::Journal::append`] only queues a record; one writer
//!   thread takes everything queued, writes it in one `write`, syncs once per batch under
//!   `appendfsync always` (group commit) and publishes the durable sequence number that
//!   [`Aof::wait_durable`] awaits. It also rewrites (compacts) the file in the background from a
//!   [`SnapshotSource`], and recovers from write errors by such a rewrite.
//! * [`check`] and [`fix`] back `flockd check-aof [--fix] FILE`.
//!
//! Nothing here knows about locks beyond the [`Change`] record: the crate is tested with real
//! files and a fake snapshot source, without a lock table.

mod error;
mod fsutil;
pub mod record;
mod replay;
mod writer;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

pub use error::{AofError, ParseFsyncPolicyError};
pub use flockd_core::Change;
pub use replay::{CheckReport, ReplayReport, check, fix, load};
pub use writer::{Aof, AofStats};

/// When the writer calls fsync, as Redis's `appendfsync`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FsyncPolicy {
    /// Sync every batch before its records count as durable: a reply is never sent for a change
    /// a power loss could lose. Batching (group commit) keeps this at one sync per batch.
    #[default]
    Always,
    /// Records count as durable once written (they survive a process crash); a sync runs at
    /// most once a second, so a power loss can lose about the last second.
    EverySec,
    /// Records count as durable once written; the kernel decides when they reach the disk.
    No,
}

impl FsyncPolicy {
    /// The configuration spelling: `always`, `everysec` or `no`.
    pub fn as_str(self) -> &'static str {
        match self {
            FsyncPolicy::Always => "always",
            FsyncPolicy::EverySec => "everysec",
            FsyncPolicy::No => "no",
        }
    }
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FsyncPolicy {
    type Err = ParseFsyncPolicyError;

    /// Case-insensitive, as Redis reads its configuration.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("always") {
            Ok(FsyncPolicy::Always)
        } else if s.eq_ignore_ascii_case("everysec") {
            Ok(FsyncPolicy::EverySec)
        } else if s.eq_ignore_ascii_case("no") {
            Ok(FsyncPolicy::No)
        } else {
            Err(ParseFsyncPolicyError(s.to_owned()))
        }
    }
}

/// Default `rewrite_min_size`: as Redis's `auto-aof-rewrite-min-size`.
pub const DEFAULT_REWRITE_MIN_SIZE: u64 = 64 * 1024 * 1024;
/// Default `rewrite_percentage`: as Redis's `auto-aof-rewrite-percentage`.
pub const DEFAULT_REWRITE_PERCENTAGE: u64 = 100;

/// How to open the append-only file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AofOptions {
    /// The file itself. Its directory must exist; the rewrite's temporary file is created next
    /// to it (`<path>.rewrite.tmp`) so that the final rename stays within one filesystem.
    pub path: PathBuf,
    pub fsync: FsyncPolicy,
    /// No automatic rewrite while the file is smaller than this.
    pub rewrite_min_size: u64,
    /// Rewrite automatically once the file has grown by this many percent over its size after
    /// the last rewrite (or at open). 0 disables automatic rewrites.
    pub rewrite_percentage: u64,
}

impl AofOptions {
    /// Options with the defaults: `appendfsync always`, rewrite at 64 MiB and 100% growth.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        AofOptions {
            path: path.into(),
            fsync: FsyncPolicy::Always,
            rewrite_min_size: DEFAULT_REWRITE_MIN_SIZE,
            rewrite_percentage: DEFAULT_REWRITE_PERCENTAGE,
        }
    }
}

/// Produces records that rebuild the whole in-memory state: what a rewrite writes.
///
/// Called on a background thread while appends go on; the records it emits need not be a
/// consistent cut, because the writer also appends every record queued after the rewrite
/// started, and records are absolute (see [`Change`]), so replaying them on top converges.
pub trait SnapshotSource: Send + Sync + 'static {
    fn snapshot(&self, emit: &mut dyn FnMut(Change));
}

impl SnapshotSource for flockd_core::State {
    fn snapshot(&self, emit: &mut dyn FnMut(Change)) {
        flockd_core::State::snapshot(self, emit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_policy_parses_and_prints() {
        for p in [FsyncPolicy::Always, FsyncPolicy::EverySec, FsyncPolicy::No] {
            assert_eq!(p.to_string().parse::<FsyncPolicy>().ok(), Some(p));
        }
        assert_eq!(
            "EVERYSEC".parse::<FsyncPolicy>().ok(),
            Some(FsyncPolicy::EverySec)
        );
        let err = "sometimes"
            .parse::<FsyncPolicy>()
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("invalid appendfsync value 'sometimes': expected always, everysec or no")
        );
    }

    #[test]
    fn the_core_state_is_a_snapshot_source() {
        // Compile-time check only: the server hands its `Arc<State>` to `Aof::open`.
        fn coerce(s: std::sync::Arc<flockd_core::State>) -> std::sync::Arc<dyn SnapshotSource> {
            s
        }
        let _ = coerce;
    }

    #[test]
    fn options_defaults() {
        let o = AofOptions::new("/x/appendonly.aof");
        assert_eq!(o.fsync, FsyncPolicy::Always);
        assert_eq!(o.rewrite_min_size, 64 * 1024 * 1024);
        assert_eq!(o.rewrite_percentage, 100);
    }
}
