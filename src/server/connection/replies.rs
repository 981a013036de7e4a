//! A connection's replies in the making: in pipeline order, each ready or waiting for the result
//! of its state command's proposal (made into its reply by `batch.rs`); and roughly how big a
//! reply is on the wire, so a pipelined read cannot pin unbounded memory in replies.

use flockd_proto::{ProtocolVersion, Reply};

/// A reply in the making.
pub(super) enum ReplySlot {
    Ready(Reply),
    /// A state command's op on its way through the log: its reply is the next of the
    /// connection's proposed batches (their ops are in the order of these slots).
    Proposed,
}

pub(super) struct PendingReply {
    pub(super) slot: ReplySlot,
    /// HELLO can switch the protocol mid-batch; each reply goes out in the one it was made in.
    pub(super) protocol: ProtocolVersion,
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
