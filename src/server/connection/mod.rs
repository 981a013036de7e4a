//! One client connection, and everything it keeps: the bytes read and to write, the replies in
//! the making (`pending`, in request order), the state commands' ops on their way to the log,
//! the commands' view of it ([`ConnState`]), a transaction, SESSION holdings.
//!
//! The rooms, from the top: `serve.rs` is the loop (read, parse, admit, run, write);
//! `outcome.rs` does what a local command's outcome asks; the jobs a connection has besides
//! moving requests and replies are one file each (`transaction.rs`: MULTI ... EXEC,
//! `blocking.rs`: a WAIT, `monitor.rs`, `subscriber.rs`: pub/sub delivery, `closing.rs`: what
//! a closing connection ends). This file is the connection itself and its output: what those
//! all build on, importing none of them.
//!
//! A state command becomes an op that is proposed at once; its reply waits in `pending` until
//! the op's result comes back from the log (durable and applied). Many proposals of a pipelined
//! read are in flight together, so they share one batch of the log (group commit). A local
//! command after them (a read, PING, ...) first waits for them, so it sees their effect, as a
//! client of a single-threaded Redis would.

mod batch;
mod blocking;
mod closing;
mod monitor;
mod outcome;
mod replies;
pub(super) mod serve;
mod subscriber;
mod transaction;

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use flockd_proto::{ProtocolError, Reply, RequestParser, encode};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use super::shared::{PREAUTH_QUERY_BUFFER, Shared};
use crate::commands::context::ConnState;
use crate::commands::{Command, CommandError, TABLE};
use crate::services::live_config::ConfigCache;
use crate::services::stats;
use batch::{Batch, Proposed};
use replies::{PendingReply, ReplySlot, approx_encoded_len};

/// Flush early after this many replies, so one read of many pipelined commands cannot build an
/// unbounded reply buffer.
const FLUSH_AFTER_REPLIES: usize = 1024;
/// Also flush early once the pending replies hold about this many bytes: a client that
/// pipelines commands with big replies (COMMAND, INFO) and never reads must not pin more than
/// this (plus the kernel's socket buffers) in server memory. Counting replies alone let 16 KiB
/// of `COMMAND DOCS` requests pin over 7 MiB of replies per client.
const FLUSH_AFTER_BYTES: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// The most argument bytes one batch of gathered ops holds before it is proposed.
const BATCH_BYTES: usize = 1024 * 1024;

pub(super) struct Connection<S> {
    shared: Arc<Shared>,
    /// The configuration, as this connection reads it (every request, so through a cache).
    config: ConfigCache,
    stream: S,
    input: BytesMut,
    output: BytesMut,
    parser: RequestParser,
    pending: Vec<PendingReply>,
    /// Approximate encoded size of the ready replies in `pending`.
    pending_size: usize,
    /// Proposals in `pending` not resolved yet.
    in_flight: usize,
    /// The state commands read since the last proposal: one read's pipelined commands go to
    /// the log together, as one entry, with one wait for their results (a proposal per op cost
    /// an allocation, a channel and a log entry each).
    unproposed: Batch,
    /// The batches proposed and not resolved yet, in order.
    proposals: Vec<Proposed>,
    /// About how many bytes of arguments `unproposed` holds: a batch goes out once it holds
    /// [`BATCH_BYTES`], so big values never add up to one oversized log entry.
    unproposed_bytes: usize,
    /// The group of the ops in `unproposed` (always 0 but on a multi-group cluster node).
    unproposed_group: usize,
    conn: ConnState,
    /// Between MULTI and EXEC: the queued commands (see `transaction.rs`).
    transaction: Option<Transaction>,
    /// The names this connection acquired with SESSION: their session holdings end when it
    /// closes (see `closing.rs`).
    holdings: BTreeSet<Bytes>,
    /// Calls answered since the last write, added to commandstats when it writes.
    tally: stats::Tally,
    /// Accepted while a stopping leader drains (`Shared::draining`): such a connection is closed
    /// only once idle after real work, so a client that came back to this port is served first.
    joined_while_draining: bool,
    /// Has run a command other than connection setup (HELLO, AUTH, CLIENT, ...).
    worked: bool,
}

/// What the loop does after a request.
enum Next {
    Continue,
    Close,
}

/// The commands queued between MULTI and EXEC (see `transaction.rs`).
#[derive(Default)]
struct Transaction {
    /// (table index, command), in order.
    queued: Vec<(usize, Command)>,
    /// A command failed to queue: EXEC aborts.
    failed: bool,
}

/// What client libraries send while they set a connection up, before the work it is for.
fn is_setup(name: &str) -> bool {
    matches!(
        name,
        "hello"
            | "auth"
            | "client"
            | "select"
            | "ping"
            | "echo"
            | "command"
            | "readonly"
            | "readwrite"
    )
}

impl<S> Connection<S> {
    /// The command at `index` is about to run.
    #[inline]
    fn worked_on(&mut self, index: usize) {
        if !self.worked && !is_setup(TABLE[index].name) {
            self.worked = true;
        }
    }

    /// Whether a drain may close the connection now, as far as its session goes (the
    /// connection also has no input or replies pending).
    fn idle(&self) -> bool {
        self.transaction.is_none() && (!self.joined_while_draining || self.worked)
    }

    /// Appends the replies to a committed batch to `into`, in the order of its ops, each
    /// call counted as it is answered.
    fn push_batch_replies(
        &mut self,
        answers: Vec<batch::Answer>,
        results: batch::Results,
        into: &mut Vec<Reply>,
    ) {
        into.extend(batch::replies(
            &self.shared,
            self.config.load(),
            &self.conn.handle,
            &mut self.tally,
            answers,
            results,
        ));
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Writes the output; false if the client was killed meanwhile (a subscriber past its
    /// output limit is, and may not be reading: the write must not wait for it).
    async fn write_output(&mut self) -> std::io::Result<bool> {
        stats::bump(
            &self.shared.stats.net_output_bytes,
            self.output.len() as u64,
        );
        let handle = &self.conn.handle;
        tokio::select! {
            written = self.stream.write_all(&self.output) => written?,
            _ = handle.kill.cancelled() => return Ok(false),
        }
        self.output.clear();
        Ok(true)
    }

    fn push_ready(&mut self, reply: Reply) {
        self.pending_size += approx_encoded_len(&reply);
        self.pending.push(PendingReply {
            slot: ReplySlot::Ready(reply),
            protocol: self.conn.protocol(),
        });
    }

    fn protocol_error(&mut self, error: ProtocolError) {
        stats::bump(&self.shared.stats.protocol_errors, 1);
        debug!(client = self.conn.handle.id, "protocol error: {error}");
        self.push_ready(Reply::error(error.to_reply_text()));
    }

    fn query_buffer_limit(&mut self) -> usize {
        if self.conn.authenticated {
            self.config.load().client_query_buffer_limit
        } else {
            PREAUTH_QUERY_BUFFER
        }
    }

    /// Proposes the ops gathered since the last proposal, as one batch.
    fn propose_gathered(&mut self) {
        if !self.unproposed.is_empty() {
            let batch = std::mem::take(&mut self.unproposed);
            self.unproposed_bytes = 0;
            self.proposals.push(batch.propose(&*self.shared.log));
        }
    }

    /// Waits for every proposal in `pending` and puts each reply in its request's slot.
    async fn resolve(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        self.propose_gathered();
        self.shared.log.write_now();
        let mut replies = Vec::with_capacity(self.in_flight);
        // Taken out while the replies are made, and put back to keep its allocation.
        let mut proposals = std::mem::take(&mut self.proposals);
        for proposed in proposals.drain(..) {
            let (answers, results) = proposed.results().await;
            self.push_batch_replies(answers, results, &mut replies);
        }
        self.proposals = proposals;
        // The batches' ops are in the order of their slots.
        let mut replies = replies.into_iter();
        for item in &mut self.pending {
            if let ReplySlot::Proposed = item.slot {
                let reply = replies.next().unwrap_or_else(|| {
                    Reply::error(
                        CommandError::UnexpectedResult("fewer replies than slots".into())
                            .to_string(),
                    )
                });
                self.pending_size += approx_encoded_len(&reply);
                item.slot = ReplySlot::Ready(reply);
            }
        }
        self.in_flight = 0;
    }

    /// Resolves the proposals, then writes every pending reply in one write.
    async fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() && self.output.is_empty() {
            return Ok(());
        }
        self.resolve().await;
        // Counted before anyone can see a reply (and ask INFO on another connection).
        self.tally.settle(&self.shared.stats);
        // Messages published by these commands' own changes go first, as Redis sends a
        // message before the reply of the command that published it.
        self.encode_queued_messages();
        for PendingReply { slot, protocol } in self.pending.drain(..) {
            if let ReplySlot::Ready(reply) = slot {
                encode(&reply, protocol, &mut self.output);
            }
        }
        self.pending_size = 0;
        if !self.write_output().await? {
            return Err(std::io::Error::other("client killed"));
        }
        Ok(())
    }
}
