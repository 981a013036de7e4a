//! flockd-core: the lock table as a deterministic state machine.
//!
//! Operations come in ([`Op`]), each stamped by its proposer with the log position it has and
//! the time it takes effect at; [`StateMachine::apply`] turns them into a result ([`OpResult`])
//! and events ([`Event`]). Apply reads no clock, owns no channel and uses no process-wide
//! counter, so the same operations in the same order give the same state on any machine: an
//! append-only file replayed at start, or a Raft log applied on every node.
//!
//! Pure on purpose: no sockets, no files, no runtime. What happens around it (who is blocked on
//! which wait, when a lease deadline is reached, where the log lives) is the server's business;
//! the core only keeps the index of lease deadlines that the server's expiry task reads.

pub mod conditions;
pub mod error;
pub mod event;
pub mod fence;
pub mod item;
pub mod keyspace;
pub mod machine;
pub mod op;
pub mod slot;
pub mod snapshot;
pub mod table;
pub mod time;
pub mod v1;

pub use conditions::{Conditions, Mode};
pub use error::LockError;
pub use event::Event;
pub use fence::FenceStats;
pub use item::SnapshotItem;
pub use keyspace::KeyType;
pub use machine::{Applied, StateMachine};
pub use op::{
    AcquireAllResult, AcquireResult, CancelAllResult, CancelResult, HoldingRef, Op, OpResult, Read,
    Wait, WaitId,
};
pub use slot::{SLOT_COUNT, group_of_slot, slot_of, slots_of_group};
pub use snapshot::Snapshot;
pub use stripes::PLACE_BITS;
pub use table::{HolderStatus, LockStats, LockStatus, ScanFilter};
pub use time::Millis;
pub use v1::V1Change;

/// The largest token or counter value: tokens must fit a signed 64-bit integer (a SQL BIGINT).
pub const MAX_TOKEN: u64 = i64::MAX as u64;

mod far;
mod name;
mod places;
mod stripes;
