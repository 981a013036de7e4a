//! A connection's replies in the making: in pipeline order, each ready or waiting for the result
//! of its state command's proposal; how that result becomes the reply (and the command's
//! stats); and roughly how big a reply is on the wire, so a pipelined read cannot pin unbounded
//! memory in replies.

use std::time::Instant;

use flockd_core::OpResult;
use flockd_proto::{ProtocolVersion, Reply};

use super::accounting;
use super::shared::Shared;
use crate::commands::CommandError;
use crate::services::clients::ClientHandle;
use crate::services::stats;

/// A reply in the making.
pub(super) enum ReplySlot {
    Ready(Reply),
    /// A state command's op on its way through the log, in batch `batch` (an index into the
    /// connection's `proposals`); its result is that batch's next one.
    Proposed {
        batch: usize,
        reply: fn(OpResult) -> Result<Reply, CommandError>,
        command: usize,
        started: Instant,
        args: Option<stats::SlowArgs>,
    },
}

pub(super) struct PendingReply {
    pub(super) slot: ReplySlot,
    /// HELLO can switch the protocol mid-batch; each reply goes out in the one it was made in.
    pub(super) protocol: ProtocolVersion,
}

/// The reply of a state command from the outcome of its proposal. Its time in commandstats runs
/// from admission to the result: the log's latency is part of what the command costs (and of
/// what the slow log and the latency monitor see, given the command's arguments in `slow`).
pub(super) fn reply_to(
    shared: &Shared,
    command: usize,
    started: Instant,
    outcome: Result<OpResult, CommandError>,
    reply: fn(OpResult) -> Result<Reply, CommandError>,
    slow: Option<(&stats::SlowArgs, &ClientHandle)>,
) -> Reply {
    let stat = &shared.stats.commands[command];
    accounting::account_call(shared, command, started, slow);
    outcome
        .and_then(reply)
        .unwrap_or_else(|e| Reply::error(stats::failed(stat, &e)))
}

/// Roughly the wire size of a reply (headers counted generously), walked without recursion.
pub(super) fn approx_encoded_len(reply: &Reply) -> usize {
    match reply {
        Reply::Array(_) | Reply::Set(_) | Reply::Push(_) | Reply::Map(_) => {}
        // Most replies: no walk, and no stack to allocate for one.
        Reply::Simple(text) | Reply::Error(text) => return 16 + text.len(),
        Reply::Bulk(data) | Reply::Verbatim(data) => return 16 + data.len(),
        _ => return 16,
    }
    let mut total = 0usize;
    let mut stack = vec![reply];
    while let Some(reply) = stack.pop() {
        total = total.saturating_add(16);
        match reply {
            Reply::Simple(text) | Reply::Error(text) => total = total.saturating_add(text.len()),
            Reply::Bulk(data) | Reply::Verbatim(data) => total = total.saturating_add(data.len()),
            Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => stack.extend(items),
            Reply::Map(pairs) => {
                for (key, value) in pairs {
                    stack.push(key);
                    stack.push(value);
                }
            }
            _ => {}
        }
    }
    total
}
