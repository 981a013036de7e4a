//! Clusters of real `flockd` processes on loopback ports: kills, failover, membership, Sentinel
//! discovery, Redis Cluster's protocol.
//!
//! One test binary per theme, each module one suite (named as the file it came from), so
//! the harness and the `redis` client are compiled and linked once per theme, not per file.

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod groups;
mod sentinel;
mod slots;
mod upgrade;
