//! One client connection: read bytes, parse requests, admit and run commands in order, and write
//! the replies of one read back in one write.
//!
//! A state command becomes an op that is proposed at once; its reply waits in `pending` until
//! the op's result comes back from the log (durable and applied). Many proposals of a pipelined
//! read are in flight together, so they share one batch of the log (group commit). A local
//! command after them (a read, PING, ...) first waits for them, so it sees their effect, as a
//! client of a single-threaded Redis would.
//!
//! What else a connection does (a transaction, a blocking wait, monitor mode, pub/sub delivery,
//! what it ends when it closes) is in [`super::session`], one file each.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use flockd_core::Op;
use flockd_proto::{ProtocolError, Reply, Request, RequestParser, encode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use super::accounting;
use super::admission::{self, Admitted};
use super::replies::{PendingReply, ReplySlot, approx_encoded_len, reply_to};
use super::session::Session;
use super::{PREAUTH_LIMITS, PREAUTH_QUERY_BUFFER, Shared};
use crate::commands::context::{ConnState, Ctx, Proposal};
use crate::commands::{CommandError, Execution};
use crate::log::Committing;
use crate::services::clients::ClientHandle;
use crate::services::stats;

/// Flush early after this many replies, so one read of many pipelined commands cannot build an
/// unbounded reply buffer.
pub(super) const FLUSH_AFTER_REPLIES: usize = 1024;
/// Also flush early once the pending replies hold about this many bytes: a client that
/// pipelines commands with big replies (COMMAND, INFO) and never reads must not pin more than
/// this (plus the kernel's socket buffers) in server memory. Counting replies alone let 16 KiB
/// of `COMMAND DOCS` requests pin over 7 MiB of replies per client.
const FLUSH_AFTER_BYTES: usize = 64 * 1024;
pub(super) const READ_CHUNK: usize = 16 * 1024;
/// The most argument bytes one batch of gathered ops holds before it is proposed.
const BATCH_BYTES: usize = 1024 * 1024;

pub(super) struct Connection<S> {
    pub(super) shared: Arc<Shared>,
    pub(super) stream: S,
    pub(super) input: BytesMut,
    pub(super) output: BytesMut,
    pub(super) parser: RequestParser,
    pending: Vec<PendingReply>,
    /// Approximate encoded size of the ready replies in `pending`.
    pending_size: usize,
    /// Proposals in `pending` not resolved yet.
    in_flight: usize,
    /// The ops of the state commands read since the last proposal: one read's pipelined
    /// commands go to the log together, as one entry, with one wait for their results (a
    /// proposal per op cost an allocation, a channel and a log entry each).
    unproposed: Vec<Op>,
    /// The batches proposed and not resolved yet, in order.
    proposals: Vec<Committing>,
    /// About how many bytes of arguments `unproposed` holds: a batch goes out once it holds
    /// [`BATCH_BYTES`], so big values never add up to one oversized log entry.
    unproposed_bytes: usize,
    pub(super) conn: ConnState,
    /// What the connection keeps beyond its commands' view (see [`super::session`]).
    pub(super) session: Session,
}

pub(super) enum Next {
    Continue,
    Close,
}

/// Serves one client on any byte stream (TCP today, TLS next).
pub async fn serve<S>(shared: Arc<Shared>, stream: S, handle: Arc<ClientHandle>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let id = handle.id;
    let mut connection = Connection {
        shared: shared.clone(),
        stream,
        input: BytesMut::with_capacity(READ_CHUNK),
        output: BytesMut::new(),
        parser: RequestParser::new(),
        pending: Vec::new(),
        pending_size: 0,
        in_flight: 0,
        unproposed: Vec::new(),
        proposals: Vec::new(),
        unproposed_bytes: 0,
        conn: ConnState::new(&*shared, handle),
        session: Session::new(&shared),
    };
    if let Err(e) = connection.run().await {
        debug!(client = id, "connection ended: {e}");
    }
    connection.close().await;
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    async fn run(&mut self) -> std::io::Result<()> {
        loop {
            if let Next::Close = self.process_input().await? {
                self.flush().await?;
                let _ = self.stream.shutdown().await;
                return Ok(());
            }
            self.flush().await?;
            if self.input.len() + self.parser.pending_bytes() > self.query_buffer_limit() {
                self.push_ready(Reply::error(
                    "ERR Protocol error: client query buffer limit reached",
                ));
                self.flush().await?;
                return Ok(());
            }
            if self.read_more().await? == 0 {
                return Ok(());
            }
        }
    }

    /// Reads once; 0 means the peer closed or the server is stopping this client. A
    /// subscribed connection meanwhile writes the messages published to it.
    async fn read_more(&mut self) -> std::io::Result<usize> {
        self.input.reserve(READ_CHUNK);
        loop {
            // Borrowed, not cloned: every connection cloning the one `Arc` per read or command
            // would bounce its reference count between cores.
            let (shared, handle) = (&self.shared, &self.conn.handle);
            // While a stopping leader drains, a connection between commands is closed, so its
            // client finds the new leader through its sentinels before its next command.
            let idle = self.input.is_empty() && self.pending.is_empty() && self.session.idle();
            let subscriptions = &mut self.conn.subscriptions;
            let delivery = tokio::select! {
                read = self.stream.read_buf(&mut self.input) => {
                    let n = read?;
                    stats::bump(&shared.stats.net_input_bytes, n as u64);
                    return Ok(n);
                }
                delivery = subscriptions.next_delivery() => delivery,
                _ = shared.shutdown.cancelled() => return Ok(0),
                _ = shared.draining.cancelled(), if idle => return Ok(0),
                _ = handle.kill.cancelled() => return Ok(0),
            };
            if let Some(delivery) = delivery
                && !self.deliver(delivery).await?
            {
                return Ok(0);
            }
        }
    }

    /// Writes the output; false if the client was killed meanwhile (a subscriber past its
    /// output limit is, and may not be reading: the write must not wait for it).
    pub(super) async fn write_output(&mut self) -> std::io::Result<bool> {
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

    /// Runs every complete request in the input buffer.
    async fn process_input(&mut self) -> std::io::Result<Next> {
        loop {
            let limits = if self.conn.authenticated {
                self.shared.limits()
            } else {
                PREAUTH_LIMITS
            };
            let request = match self.parser.parse(&mut self.input, &limits) {
                Ok(Some(request)) => request,
                Ok(None) => return Ok(Next::Continue),
                Err(e) => {
                    self.protocol_error(e);
                    return Ok(Next::Close);
                }
            };
            if let Next::Close = self.handle(request).await? {
                return Ok(Next::Close);
            }
            if self.pending.len() >= FLUSH_AFTER_REPLIES || self.pending_size >= FLUSH_AFTER_BYTES {
                self.flush().await?;
            }
        }
    }

    /// Admits and runs one request.
    async fn handle(&mut self, request: Request) -> std::io::Result<Next> {
        let arrived = Instant::now();
        let config = self.shared.config.load();
        // For the slow log: parsing consumes the arguments.
        let args = stats::SlowArgs::capture(&config, &request.args);
        let request_bytes: usize = request.args.iter().map(Bytes::len).sum();
        let admitted = admission::admit(&self.shared, &config, &mut self.conn, request);
        drop(config);
        let (index, command) = match admitted {
            Admitted::Command { index, command } => (index, command),
            Admitted::Close(reply) => {
                self.push_ready(reply);
                return Ok(Next::Close);
            }
            Admitted::Drop => {
                // Nothing more from this client runs: what it sent after is dropped unread.
                self.input.clear();
                return Ok(Next::Close);
            }
            Admitted::Refused(reply) => {
                // A command that cannot be queued dooms the transaction (EXECABORT).
                self.doom_transaction();
                self.push_ready(reply);
                return Ok(Next::Continue);
            }
        };
        self.conn.handle.touch(index, arrived);
        self.session.worked_on(index);
        if self.queues(index) {
            self.queue(index, command);
            return Ok(Next::Continue);
        }
        // A local command sees the effect of every state command before it; its own time starts
        // after that wait (without one, at its arrival: one clock reading fewer per command).
        let mut started = arrived;
        if admission::is_local(index) && self.in_flight > 0 {
            self.resolve().await;
            started = Instant::now();
        }
        let now = self.shared.log.now();
        let mut ctx = Ctx {
            services: &*self.shared,
            conn: &mut self.conn,
            now,
        };
        match command.execute(&mut ctx) {
            Execution::Local(result) => {
                let slow = args.as_ref().map(|a| (a, &*self.conn.handle));
                accounting::account_call(&self.shared, index, started, slow);
                self.follow(index, result).await
            }
            Execution::State(mut proposal) => {
                self.hold_for_session(&mut proposal.session_names);
                if let Some(blocking) = proposal.blocking {
                    return self
                        .blocking(index, started, proposal, blocking, args)
                        .await;
                }
                let Proposal { op, reply, .. } = proposal;
                // The batch the op joins: the one being gathered (proposed below if full).
                let batch = self.proposals.len();
                self.unproposed.push(op);
                self.unproposed_bytes += request_bytes;
                if self.unproposed_bytes >= BATCH_BYTES {
                    self.propose_gathered();
                }
                self.in_flight += 1;
                self.pending.push(PendingReply {
                    slot: ReplySlot::Proposed {
                        batch,
                        reply,
                        command: index,
                        started,
                        args,
                    },
                    protocol: self.conn.protocol,
                });
                Ok(Next::Continue)
            }
        }
    }

    pub(super) fn push_ready(&mut self, reply: Reply) {
        self.pending_size += approx_encoded_len(&reply);
        self.pending.push(PendingReply {
            slot: ReplySlot::Ready(reply),
            protocol: self.conn.protocol,
        });
    }

    pub(super) fn protocol_error(&mut self, error: ProtocolError) {
        stats::bump(&self.shared.stats.protocol_errors, 1);
        debug!(client = self.conn.handle.id, "protocol error: {error}");
        self.push_ready(Reply::error(error.to_reply_text()));
    }

    pub(super) fn query_buffer_limit(&self) -> usize {
        if self.conn.authenticated {
            self.shared.config.load().client_query_buffer_limit
        } else {
            PREAUTH_QUERY_BUFFER
        }
    }

    /// Proposes the ops gathered since the last proposal, as one batch.
    fn propose_gathered(&mut self) {
        if !self.unproposed.is_empty() {
            let ops = std::mem::take(&mut self.unproposed);
            self.unproposed_bytes = 0;
            self.proposals.push(self.shared.log.propose(ops));
        }
    }

    /// Waits for every proposal in `pending` and turns each result into its reply.
    pub(super) async fn resolve(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        self.propose_gathered();
        self.shared.log.write_now();
        let mut outcomes = Vec::with_capacity(self.proposals.len());
        for pending in self.proposals.drain(..) {
            outcomes.push(pending.await.map(Vec::into_iter));
        }
        for item in &mut self.pending {
            let ReplySlot::Proposed { .. } = &item.slot else {
                continue;
            };
            let ReplySlot::Proposed {
                batch,
                reply,
                command,
                started,
                args,
            } = std::mem::replace(&mut item.slot, ReplySlot::Ready(Reply::Null))
            else {
                unreachable!("matched above");
            };
            // A batch's results come in the order of its ops, which is the order of the slots.
            let outcome = match &mut outcomes[batch] {
                Ok(results) => results
                    .next()
                    .ok_or_else(|| CommandError::UnexpectedResult("fewer results than ops".into())),
                Err(e) => Err(CommandError::from(e.clone())),
            };
            let slow = args.as_ref().map(|a| (a, &*self.conn.handle));
            let reply = reply_to(&self.shared, command, started, outcome, reply, slow);
            self.pending_size += approx_encoded_len(&reply);
            item.slot = ReplySlot::Ready(reply);
        }
        self.in_flight = 0;
    }

    /// Resolves the proposals, then writes every pending reply in one write.
    pub(super) async fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() && self.output.is_empty() {
            return Ok(());
        }
        self.resolve().await;
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
