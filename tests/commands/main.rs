//! Commands and their replies against the real binary: locks and primitives, fences, transactions, pub/sub, SCAN, introspection, ACL, CONFIG SET, clients and hostile input.
//!
//! One test binary per theme, each module one suite (named as the file it came from), so
//! the harness and the `redis` client are compiled and linked once per theme, not per file.

#[path = "../common/mod.rs"]
mod common;

mod acl;
mod acl_categories;
mod acquire_all;
mod bad_input;
mod clients;
mod config_set;
mod connection_commands;
mod flock_hot;
mod flock_scan;
mod locks;
mod locks_contention;
mod primitives;
mod pubsub;
mod rw_contention;
mod scan;
mod server_introspection;
mod transactions;
