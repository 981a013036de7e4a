//! flockd-aof: the append-only file (AOF) that makes flockd's lock table durable.
//!
//! * [`record`] (from flockd-log, shared with the Raft log's snapshots): the file format. An
//!   8-byte header `FLOCKAO2`, then records framed as
//!   `[u32 LE payload length][u32 LE crc32][payload]`, the checksum covering the length field
//!   and the payload; a payload is one log entry (a proposal's [`flockd_core::Op`]s with their
//!   position and time) or an item of a snapshot. Files of the first format (`FLOCKAO1`, one
//!   applied change per record) are still read.
//! * [`load`] (flockd-log too) replays a file into a [`flockd_core::StateMachine`] at start-up, cutting off a
//!   damaged tail (what a power loss leaves of a write that was never acknowledged) and refusing
//!   a damaged middle.
//! * [`Aof`] is the local log: [`Aof::propose`] only queues an entry; whoever writes takes
//!   everything queued, writes it in one `write`, syncs once per batch under `appendfsync
//!   always` (group commit), and only then has the state machine (a [`flockd_log::Apply`]) apply it and answers each
//!   proposer. It also rewrites (compacts) the file in the background from a snapshot, and
//!   recovers from write errors by such a rewrite.
//! * [`check`] and [`fix`] (flockd-log) back `flockd check-aof [--fix] FILE`.
//!
//! The crate knows ops as records only: its tests drive it with a plain state machine.

mod error;
pub mod histogram;
mod writer;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

pub use error::{AofError, ParseFsyncPolicyError};
// The file format and reading a file back live in flockd-log, which the Raft log's snapshots
// share; they are the AOF's file API too.
pub use flockd_log::{CheckReport, FileError, ReplayReport, Version, check, fix, load, record};
pub use flockd_log::{ProposalResult, ProposeError};
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
    fn options_defaults() {
        let o = AofOptions::new("/x/appendonly.aof");
        assert_eq!(o.fsync, FsyncPolicy::Always);
        assert_eq!(o.rewrite_min_size, 64 * 1024 * 1024);
        assert_eq!(o.rewrite_percentage, 100);
    }
}
