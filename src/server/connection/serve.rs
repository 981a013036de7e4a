//! The connection's loop: read, parse, admit and run each request in order, and write the
//! replies of one read back together.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use flockd_proto::{Reply, Request, RequestParser};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use super::batch::{Answer, Batch};
use super::replies::{PendingReply, ReplySlot};
use super::{BATCH_BYTES, Connection, FLUSH_AFTER_BYTES, FLUSH_AFTER_REPLIES, Next, READ_CHUNK};
use crate::commands::context::{ConnState, Ctx, Proposal};
use crate::commands::{self, Execution};
use crate::server::accounting;
use crate::server::admission::{self, Admitted};
use crate::server::shared::{PREAUTH_LIMITS, Shared, limits};
use crate::services::clients::ClientHandle;
use crate::services::stats;

/// Serves one client on any byte stream (plain TCP, or TLS after the handshake).
pub async fn serve<S>(shared: Arc<Shared>, stream: S, handle: Arc<ClientHandle>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let id = handle.id;
    let mut connection = Connection {
        shared: shared.clone(),
        config: shared.config.cache(),
        stream,
        input: BytesMut::with_capacity(READ_CHUNK),
        output: BytesMut::new(),
        parser: RequestParser::new(),
        pending: Vec::new(),
        pending_size: 0,
        in_flight: 0,
        unproposed: Batch::default(),
        proposals: Vec::new(),
        unproposed_bytes: 0,
        unproposed_group: 0,
        conn: ConnState::new(&*shared, handle),
        transaction: None,
        holdings: BTreeSet::new(),
        tally: stats::Tally::default(),
        joined_while_draining: shared.draining.is_cancelled(),
        worked: false,
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
            let idle = self.input.is_empty() && self.pending.is_empty() && self.idle();
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

    /// Runs every complete request in the input buffer.
    async fn process_input(&mut self) -> std::io::Result<Next> {
        loop {
            let limits = if self.conn.authenticated {
                limits(self.config.load())
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
        let config = self.config.load();
        let request_bytes: usize = request.args.iter().map(Bytes::len).sum();
        let admitted = admission::admit(&self.shared, config, &mut self.conn, &request);
        // The slow log keeps the request's arguments (the command took what it needs).
        let args = stats::SlowArgs::capture(config, request.args);
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
        self.worked_on(index);
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
        // A command that reads or resets commandstats sees every call before it.
        if commands::may_read_statistics(index) {
            self.tally.settle(&self.shared.stats);
        }
        let mut ctx = Ctx {
            server: &*self.shared,
            conn: &mut self.conn,
        };
        match command.execute(&mut ctx) {
            Execution::Local(result) => {
                let slow = args.as_ref().map(|a| (a, &*self.conn.handle));
                let config = self.config.load();
                accounting::account_call(
                    &self.shared,
                    config,
                    &mut self.tally,
                    index,
                    started,
                    slow,
                );
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
                // One entry is one group's: on a multi-group node an op of another group than
                // the batch's sends the batch off first.
                if self.shared.groups.len() > 1 {
                    let group = op.key().map_or(0, |key| self.shared.group_index(key));
                    if group != self.unproposed_group {
                        self.propose_gathered();
                        self.unproposed_group = group;
                    }
                }
                // The op joins the batch being gathered (proposed below once full).
                self.unproposed
                    .push(op, Answer::new(reply, index, started, args));
                self.unproposed_bytes += request_bytes;
                if self.unproposed_bytes >= BATCH_BYTES {
                    self.propose_gathered();
                }
                self.in_flight += 1;
                self.pending.push(PendingReply {
                    slot: ReplySlot::Proposed,
                    protocol: self.conn.protocol(),
                });
                Ok(Next::Continue)
            }
        }
    }
}
