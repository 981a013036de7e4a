//! The append-only file under crashes, kills, disk faults and old formats.
//!
//! One test binary per theme, each module one suite (named as the file it came from), so
//! the harness and the `redis` client are compiled and linked once per theme, not per file.

#[path = "../common/mod.rs"]
mod common;

mod aof_compat;
mod crash;
mod disk_faults;
mod durability;
