//! flockd-log: where the two logs meet. The AOF (a single node) and the Raft log (a cluster)
//! carry the same [`Entry`], drive the state machine through the same seam ([`Apply`]), and
//! keep snapshots in the same file format, so this crate holds those and nothing of either log.
//!
//! * [`entry`]: the committed entry and the [`Apply`] seam.
//! * [`proposal`]: what a proposal comes back with ([`ProposalResult`], [`ProposeError`]).
//! * [`record`]: the file format. An 8-byte header `FLOCKAO2`, then records framed as
//!   `[u32 LE payload length][u32 LE crc32][payload]`, the checksum covering the length field
//!   and the payload; a payload is one log entry or an item of a snapshot. Files of the first
//!   format (`FLOCKAO1`) are still read.
//! * [`load`], [`check`] and [`fix`]: reading a file of records back (replay at start-up,
//!   `flockd check-aof [--fix]`), cutting off a damaged tail and refusing a damaged middle.
//! * [`snapshot_file`]: the whole state written as such a file (an AOF rewrite's base, a Raft
//!   snapshot).
//! * [`written_ahead`]: zeros kept written ahead of a log's records, so that a sync does not
//!   also write the file's size.

pub mod entry;
mod error;
pub mod fsutil;
pub mod proposal;
pub mod record;
mod replay;
pub mod snapshot_file;
pub mod written_ahead;

pub use entry::{Apply, Entry};
pub use error::FileError;
pub use proposal::{ProposalResult, ProposeError};
pub use record::Version;
pub use replay::{CheckReport, ReplayReport, check, fix, load};
pub use snapshot_file::{SnapshotFile, save_snapshot, write_snapshot_of};
