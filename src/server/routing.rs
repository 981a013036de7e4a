//! Redis Cluster's redirection, an admission step: with `cluster-redirect yes`, a command for a
//! name this node does not lead is answered `-MOVED <slot> <host>:<port>` with the leader's
//! client address, before it is parsed or run, as Redis Cluster answers before it runs
//! anything. With `no` (the default) the command goes on, and a follower forwards it.
//!
//! The slot is the first key's (the first shard channel's, for SSUBSCRIBE). A read runs here when the connection said READONLY (Redis's
//! replica reads; flockd's reads are current on any node). With no leader known the command
//! goes on and waits for one, as any proposal does.

use bytes::Bytes;
use flockd_proto::Reply;

use crate::commands::Meta;
use crate::commands::context::ConnState;
use crate::config::Config;
use crate::log::{Log, Route};

/// The `-MOVED` reply for this command, if another node serves it.
pub fn redirect(
    log: &dyn Log,
    config: &Config,
    conn: &ConnState,
    meta: &Meta,
    args: &[Bytes],
) -> Option<Reply> {
    if !config.cluster_redirect || (conn.readonly && !meta.flags.write) {
        return None;
    }
    // A shard channel routes as a key does (SSUBSCRIBE checks its channels share a slot).
    let first = if meta.shard_channels {
        (args.len() > 1).then_some(1)?
    } else {
        meta.key_positions(args).next()?
    };
    let slot = flockd_core::slot_of(&args[first]);
    match log.route(slot) {
        Route::Leader { host, port } => Some(Reply::error(format!("MOVED {slot} {host}:{port}"))),
        Route::Here | Route::Unknown => None,
    }
}

/// Whether the command names keys of more than one slot: on a multi-group node no one entry
/// can change them together, and Redis Cluster answers `-CROSSSLOT` before it runs anything.
pub fn cross_slot(meta: &Meta, args: &[Bytes]) -> bool {
    let mut positions = meta.key_positions(args);
    let Some(first) = positions.next() else {
        return false;
    };
    let slot = flockd_core::slot_of(&args[first]);
    positions.any(|at| flockd_core::slot_of(&args[at]) != slot)
}
