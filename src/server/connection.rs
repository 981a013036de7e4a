//! One client connection: read bytes, parse requests, admit and run commands in order, and write
//! the replies of one read back in one write.
//!
//! A state command becomes an op that is proposed at once; its reply waits in `pending` until
//! the op's result comes back from the log (durable and applied). Many proposals of a pipelined
//! read are in flight together, so they share one batch of the log (group commit). A local
//! command after them (a read, PING, ...) first waits for them, so it sees their effect, as a
//! client of a single-threaded Redis would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flockd_core::{
    AcquireAllResult, AcquireResult, CancelAllResult, CancelResult, Op, OpResult, WaitId,
};
use flockd_proto::{ProtocolError, ProtocolVersion, Reply, Request, RequestParser, encode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use super::accounting;
use super::admission::{self, Admitted};
use super::clients::ClientHandle;
use super::context::{ConnState, Ctx, Outcome, Proposal};
use super::propose::{Pending, ProposeError, commit};
use super::pubsub::Delivery;
use super::waiters::Grant;
use super::{PREAUTH_LIMITS, PREAUTH_QUERY_BUFFER, Shared, stats};
use crate::commands::{CommandError, Execution, LocalCommand, TABLE, multi, tokens_reply};

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
/// How long a subscriber's messages may wait to be written together.
const MESSAGE_COALESCING: Duration = Duration::from_millis(1);

/// A reply in the making.
enum ReplySlot {
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

struct PendingReply {
    slot: ReplySlot,
    /// HELLO can switch the protocol mid-batch; each reply goes out in the one it was made in.
    protocol: ProtocolVersion,
}

struct Connection<S> {
    shared: Arc<Shared>,
    stream: S,
    input: BytesMut,
    output: BytesMut,
    parser: RequestParser,
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
    proposals: Vec<Pending>,
    /// About how many bytes of arguments `unproposed` holds: a batch goes out once it holds
    /// [`BATCH_BYTES`], so big values never add up to one oversized log entry.
    unproposed_bytes: usize,
    conn: ConnState,
    /// Accepted while a stopping leader drains (`Shared::draining`): such a connection is closed
    /// only once idle after real work, so a client that came back to this port is served first.
    joined_while_draining: bool,
    /// Has run a command other than connection setup (HELLO, AUTH, CLIENT, ...).
    worked: bool,
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

enum Next {
    Continue,
    Close,
}

/// Serves one client on any byte stream (TCP today, TLS next).
pub async fn serve<S>(shared: Arc<Shared>, stream: S, handle: Arc<ClientHandle>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let id = handle.id;
    // As in Redis: a connection starts as `default`, logged in if that user needs no password.
    let user = shared
        .acl
        .user("default")
        .expect("the default user always exists");
    let authenticated = user.enabled && user.nopass;
    let acl_generation = shared.acl.generation();
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
        conn: ConnState {
            handle,
            protocol: ProtocolVersion::Resp2,
            authenticated,
            user,
            acl_generation,
            transaction: None,
            subscriptions: Default::default(),
            session_names: Default::default(),
        },
        joined_while_draining: shared.draining.is_cancelled(),
        worked: false,
    };
    if let Err(e) = connection.run().await {
        debug!(client = id, "connection ended: {e}");
    }
    let names = std::mem::take(&mut connection.conn.session_names);
    if !names.is_empty() {
        let op = Op::EndSession {
            session: id,
            names: names.into_iter().collect(),
        };
        if let Err(e) = commit(&*shared.log, vec![op]).await {
            // The holdings then end with their leases.
            tracing::warn!(
                client = id,
                "could not end the connection's SESSION holdings: {e}"
            );
        }
    }
    crate::commands::unsubscribe::leave_all(&shared.host.pubsub, &mut connection.conn);
    shared.clients.unregister(id);
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
            let idle = self.input.is_empty()
                && self.pending.is_empty()
                && self.conn.transaction.is_none()
                && (!self.joined_while_draining || self.worked);
            let inbox = &mut self.conn.subscriptions.inbox;
            let message = tokio::select! {
                read = self.stream.read_buf(&mut self.input) => {
                    let n = read?;
                    stats::bump(&shared.stats.net_input_bytes, n as u64);
                    return Ok(n);
                }
                message = next_message(inbox) => message,
                _ = shared.shutdown.cancelled() => return Ok(0),
                _ = shared.draining.cancelled(), if idle => return Ok(0),
                _ = handle.kill.cancelled() => return Ok(0),
            };
            if let Some(messages) = message {
                self.encode_messages(messages);
                // Let more batches come before writing: one write per subscriber per
                // millisecond at most, instead of one per applied batch (each write is a
                // syscall here and a wake-up and a read in the subscriber).
                let handle = &self.conn.handle;
                tokio::select! {
                    _ = tokio::time::sleep(MESSAGE_COALESCING) => {}
                    _ = handle.kill.cancelled() => return Ok(0),
                }
                self.encode_queued_messages();
                if !self.write_output().await? {
                    return Ok(0);
                }
            }
        }
    }

    /// Adds what one batch published to the output: each message's frame (encoded once by the
    /// publisher), a push in RESP3. One that arrives after its channel was left is dropped, as
    /// Redis never sends it.
    fn encode_messages(&mut self, delivery: Delivery) {
        let subs = &self.conn.subscriptions;
        if let Some(mailbox) = &subs.mailbox {
            mailbox.delivered(delivery.size);
        }
        for message in delivery.messages() {
            let subscribed = match &message.pattern {
                Some(pattern) => subs.patterns.contains(pattern),
                None => subs.channels.contains(&message.channel),
            };
            if !subscribed {
                continue;
            }
            if self.conn.protocol == ProtocolVersion::Resp3 {
                self.output.extend_from_slice(b">");
                self.output.extend_from_slice(&message.frame[1..]);
            } else {
                self.output.extend_from_slice(&message.frame);
            }
        }
    }

    /// Adds the messages already queued (at most a batch's worth of deliveries, so a busy
    /// channel cannot keep a connection from its commands).
    fn encode_queued_messages(&mut self) {
        for _ in 0..FLUSH_AFTER_REPLIES {
            let Some(inbox) = &mut self.conn.subscriptions.inbox else {
                return;
            };
            match inbox.try_recv() {
                Ok(messages) => self.encode_messages(messages),
                Err(_) => return,
            }
        }
    }

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
        // For the slow log: parsing consumes the arguments.
        let args = stats::SlowArgs::capture(&self.shared.config.load(), &request.args);
        let request_bytes: usize = request.args.iter().map(Bytes::len).sum();
        let (index, command) = match admission::admit(&self.shared, &mut self.conn, request) {
            Admitted::Command { index, command } => (index, command),
            Admitted::Close(reply) => {
                self.push_ready(reply);
                return Ok(Next::Close);
            }
            Admitted::Refused(reply) => {
                // A command that cannot be queued dooms the transaction (EXECABORT).
                if let Some(transaction) = &mut self.conn.transaction {
                    transaction.failed = true;
                }
                self.push_ready(reply);
                return Ok(Next::Continue);
            }
        };
        self.conn.handle.touch(index);
        if !self.worked && !is_setup(TABLE[index].name) {
            self.worked = true;
        }
        if let Some(transaction) = &mut self.conn.transaction
            && !multi::runs_inside_multi(TABLE[index].name)
        {
            if multi::refused_inside_multi(TABLE[index].name) {
                transaction.failed = true;
                self.push_ready(Reply::error(CommandError::NotInMulti.to_string()));
                return Ok(Next::Continue);
            }
            transaction.queued.push((index, command));
            self.push_ready(Reply::Simple("QUEUED".into()));
            return Ok(Next::Continue);
        }
        // A local command sees the effect of every state command before it.
        if admission::is_local(index) && self.in_flight > 0 {
            self.resolve().await;
        }
        let stat = &self.shared.stats.commands[index];
        let started = Instant::now();
        let now = self.shared.log.now();
        let mut ctx = Ctx {
            services: &*self.shared,
            conn: &mut self.conn,
            now,
        };
        let next = match command.execute(&mut ctx) {
            Execution::Local(result) => {
                let slow = args.as_ref().map(|a| (a, &*self.conn.handle));
                accounting::account_call(&self.shared, index, started, slow);
                match result {
                    Ok(Outcome::Reply(reply)) => self.push_ready(reply),
                    Ok(Outcome::ReplyAndClose(reply)) => {
                        self.push_ready(reply);
                        return Ok(Next::Close);
                    }
                    // The replies of commands before it in the batch still go out.
                    Ok(Outcome::Close) => return Ok(Next::Close),
                    Ok(Outcome::Exec(transaction)) => {
                        let (reply, next) = self.exec(transaction).await;
                        self.push_ready(reply);
                        return Ok(next);
                    }
                    Ok(Outcome::Replies(replies)) => {
                        for reply in replies {
                            self.push_ready(reply);
                        }
                    }
                    Ok(Outcome::Await(finishing)) => {
                        self.resolve().await;
                        let reply = finishing.await;
                        self.push_ready(reply);
                    }
                    Ok(Outcome::Monitor(reply)) => {
                        // Subscribed before the +OK goes out: every command a client sends
                        // after it sees the +OK is in the feed (it raced before, under load).
                        let lines = self.shared.monitors.subscribe();
                        self.push_ready(reply);
                        self.flush().await?;
                        return self.monitor(lines).await;
                    }
                    Err(e) => {
                        self.push_ready(Reply::error(stats::failed(stat, &e)));
                    }
                }
                Next::Continue
            }
            Execution::State(mut proposal) => {
                self.conn.bind_session(&mut proposal.op);
                if proposal.wait_ms > 0 {
                    return self.blocking(index, started, proposal, args).await;
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
                Next::Continue
            }
        };
        Ok(next)
    }

    fn push_ready(&mut self, reply: Reply) {
        self.pending_size += approx_encoded_len(&reply);
        self.pending.push(PendingReply {
            slot: ReplySlot::Ready(reply),
            protocol: self.conn.protocol,
        });
    }

    fn protocol_error(&mut self, error: ProtocolError) {
        stats::bump(&self.shared.stats.protocol_errors, 1);
        debug!(client = self.conn.handle.id, "protocol error: {error}");
        self.push_ready(Reply::error(error.to_reply_text()));
    }

    fn query_buffer_limit(&self) -> usize {
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
    async fn resolve(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        self.propose_gathered();
        self.shared.log.push();
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

    /// Monitor mode: every command the server receives is written to this client, until it
    /// sends QUIT or RESET (the only commands it may still run), closes, or falls too far behind.
    async fn monitor(
        &mut self,
        mut lines: tokio::sync::broadcast::Receiver<Bytes>,
    ) -> std::io::Result<Next> {
        let shared = self.shared.clone();
        let handle = self.conn.handle.clone();
        loop {
            loop {
                match self.parser.parse(&mut self.input, &shared.limits()) {
                    Ok(Some(request)) => {
                        let name = request.args[0].to_ascii_lowercase();
                        if name == b"quit" {
                            self.push_ready(Reply::ok());
                            return Ok(Next::Close);
                        }
                        if name == b"reset" {
                            let mut ctx = Ctx {
                                services: &*self.shared,
                                conn: &mut self.conn,
                                now: shared.log.now(),
                            };
                            if let Ok(Outcome::Reply(reply)) =
                                LocalCommand::run(crate::commands::reset::Reset, &mut ctx)
                            {
                                self.push_ready(reply);
                            }
                            self.flush().await?;
                            return Ok(Next::Continue);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        self.protocol_error(e);
                        return Ok(Next::Close);
                    }
                }
            }
            if self.input.len() > PREAUTH_QUERY_BUFFER {
                return Ok(Next::Close);
            }
            self.input.reserve(READ_CHUNK);
            tokio::select! {
                line = lines.recv() => match line {
                    Ok(line) => {
                        stats::bump(&shared.stats.net_output_bytes, line.len() as u64);
                        self.stream.write_all(&line).await?;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        debug!(client = handle.id, missed, "monitor fell behind; disconnected");
                        return Ok(Next::Close);
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(Next::Close),
                },
                read = self.stream.read_buf(&mut self.input) => match read {
                    Ok(n) if n > 0 => stats::bump(&shared.stats.net_input_bytes, n as u64),
                    _ => return Ok(Next::Close),
                },
                _ = shared.shutdown.cancelled() => return Ok(Next::Close),
                _ = handle.kill.cancelled() => return Ok(Next::Close),
            }
        }
    }

    /// EXEC: every state command and read of the transaction becomes an op of one log entry,
    /// applied atomically; the other commands (PING, CLIENT, INFO, ...) run after it, in their
    /// places. The reply is the array of every command's reply, errors included, as in Redis.
    /// If the entry cannot be committed, nothing of it was applied and EXEC answers the error.
    async fn exec(&mut self, transaction: multi::Transaction) -> (Reply, Next) {
        enum Step {
            Op {
                result: usize,
                reply: fn(OpResult) -> Result<Reply, CommandError>,
                command: usize,
            },
            Local {
                command: crate::commands::Command,
                index: usize,
            },
        }
        let started = Instant::now();
        let mut ops = Vec::new();
        let mut steps = Vec::with_capacity(transaction.queued.len());
        for (index, command) in transaction.queued {
            match command.into_transaction() {
                Ok(Proposal { mut op, reply, .. }) => {
                    // A WAIT inside a transaction does not block: a held lock answers null.
                    if let Op::Acquire { wait, .. } | Op::AcquireAll { wait, .. } = &mut op {
                        *wait = false;
                    }
                    self.conn.bind_session(&mut op);
                    steps.push(Step::Op {
                        result: ops.len(),
                        reply,
                        command: index,
                    });
                    ops.push(op);
                }
                Err(command) => steps.push(Step::Local { command, index }),
            }
        }
        let mut results: Vec<Option<OpResult>> = if ops.is_empty() {
            Vec::new()
        } else {
            match commit(&*self.shared.log, ops).await {
                Ok(results) => results.into_iter().map(Some).collect(),
                Err(e) => {
                    return (
                        Reply::error(CommandError::from(e).to_string()),
                        Next::Continue,
                    );
                }
            }
        };
        let mut replies = Vec::with_capacity(steps.len());
        let mut next = Next::Continue;
        for step in steps {
            match step {
                Step::Op {
                    result,
                    reply,
                    command,
                } => {
                    let outcome = results
                        .get_mut(result)
                        .and_then(Option::take)
                        .ok_or(CommandError::from(ProposeError::ShuttingDown));
                    replies.push(reply_to(
                        &self.shared,
                        command,
                        started,
                        outcome,
                        reply,
                        None,
                    ));
                }
                Step::Local { command, index } => {
                    let stat = &self.shared.stats.commands[index];
                    stats::account(&self.shared.stats, index, 0);
                    let mut ctx = Ctx {
                        services: &*self.shared,
                        conn: &mut self.conn,
                        now: self.shared.log.now(),
                    };
                    let reply = match command.execute(&mut ctx) {
                        Execution::Local(Ok(Outcome::Reply(reply))) => reply,
                        Execution::Local(Ok(Outcome::ReplyAndClose(reply))) => {
                            next = Next::Close;
                            reply
                        }
                        Execution::Local(Ok(Outcome::Close)) => {
                            next = Next::Close;
                            Reply::ok()
                        }
                        Execution::Local(Ok(
                            Outcome::Exec(_)
                            | Outcome::Monitor(_)
                            | Outcome::Replies(_)
                            | Outcome::Await(_),
                        ))
                        | Execution::State(_) => Reply::error(CommandError::NotInMulti.to_string()),
                        Execution::Local(Err(e)) => Reply::error(stats::failed(stat, &e)),
                    };
                    replies.push(reply);
                }
            }
        }
        (Reply::Array(replies), next)
    }

    /// FLOCK.ACQUIRE ... WAIT: proposes the acquire and, if it queued, parks the connection
    /// until the grant comes, the wait times out, or the client goes away (like BLPOP). Replies
    /// before it go out first, and nothing after it runs until it is answered.
    async fn blocking(
        &mut self,
        command: usize,
        started: Instant,
        proposal: Proposal,
        args: Option<stats::SlowArgs>,
    ) -> std::io::Result<Next> {
        self.resolve().await;
        self.flush().await?;
        let Proposal { op, reply, wait_ms } = proposal;
        let name = op.key().cloned().unwrap_or_default();
        let waited_for = WaitedFor::of(&op);
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        loop {
            let outcome = commit(&*self.shared.log, vec![op.clone()]).await;
            let queued = match &outcome {
                Ok(results) => match results.first() {
                    Some(OpResult::Acquire(AcquireResult::Queued(wait)))
                    | Some(OpResult::AcquireAll(AcquireAllResult::Queued(wait))) => Some(*wait),
                    _ => None,
                },
                Err(_) => None,
            };
            let Some(wait) = queued else {
                let slow = args.as_ref().map(|a| (a, &*self.conn.handle));
                let answer = reply_to(
                    &self.shared,
                    command,
                    started,
                    only_result(outcome),
                    reply,
                    slow,
                );
                self.push_ready(answer);
                return Ok(Next::Continue);
            };
            match self.park(&waited_for, wait, deadline).await? {
                Parked::Answered(answer) => {
                    let waited = match answer {
                        Reply::Integer(_) | Reply::Array(_) => &self.shared.stats.wait_granted,
                        _ => &self.shared.stats.wait_timed_out,
                    };
                    waited.observe(started.elapsed());
                    self.shared.host.hot.record(
                        &name,
                        super::hot::Contention::Waited(started.elapsed()),
                        Instant::now(),
                    );
                    // The wait was the client's asking: no latency event, no slow log entry.
                    let usec = started.elapsed().as_micros() as u64;
                    stats::account(&self.shared.stats, command, usec);
                    self.push_ready(answer);
                    return Ok(Next::Continue);
                }
                Parked::Closed => return Ok(Next::Close),
                // The wait was dropped (the log re-armed every lease): queue again with the
                // time left.
                Parked::Dropped if Instant::now() < deadline => continue,
                Parked::Dropped => {
                    self.shared.stats.wait_timed_out.observe(started.elapsed());
                    self.push_ready(waited_for.nothing());
                    return Ok(Next::Continue);
                }
            }
        }
    }

    /// Parks until wait `wait` for `waited_for` is granted or must end. Meanwhile input is still read
    /// (and buffered, as Redis does for a blocked client) so a closed connection is noticed at
    /// once and its wait cancelled.
    async fn park(
        &mut self,
        waited_for: &WaitedFor,
        wait: WaitId,
        deadline: Instant,
    ) -> std::io::Result<Parked> {
        let shared = self.shared.clone();
        let handle = self.conn.handle.clone();
        let Some(mut grant) = shared.host.waits.claim(wait) else {
            return Ok(Parked::Dropped);
        };
        shared.clients.set_blocked(&handle, true);
        let parked = loop {
            if self.input.len() + self.parser.pending_bytes() > self.query_buffer_limit() {
                break None;
            }
            self.input.reserve(READ_CHUNK);
            tokio::select! {
                // A grant that is already there wins over a deadline reached at the same time.
                biased;
                granted = &mut grant => break Some(match granted {
                    Ok(Grant::One(token)) => Parked::Answered(Reply::Integer(token as i64)),
                    Ok(Grant::All(tokens)) => Parked::Answered(tokens_reply(&tokens)),
                    Err(_) => Parked::Dropped,
                }),
                _ = tokio::time::sleep_until(deadline.into()) => {
                    break Some(Parked::Answered(self.cancel(waited_for, wait, false).await));
                }
                read = self.stream.read_buf(&mut self.input) => match read {
                    Ok(n) if n > 0 => stats::bump(&shared.stats.net_input_bytes, n as u64),
                    _ => break None,
                },
                _ = shared.shutdown.cancelled() => break None,
                _ = handle.kill.cancelled() => break None,
            }
        };
        shared.clients.set_blocked(&handle, false);
        Ok(match parked {
            Some(parked) => parked,
            None => {
                // The client is gone: leave the queue, and give back a grant that raced us.
                self.cancel(waited_for, wait, true).await;
                Parked::Closed
            }
        })
    }

    /// Cancels a wait; the reply for a client still there: null, or the token of a grant that
    /// won the race.
    async fn cancel(
        &self,
        waited_for: &WaitedFor,
        wait: WaitId,
        release_if_granted: bool,
    ) -> Reply {
        let op = match waited_for {
            WaitedFor::One(name) => Op::CancelWait {
                name: name.clone(),
                wait,
                release_if_granted,
            },
            WaitedFor::All(names) => Op::CancelWaitAll {
                names: names.clone(),
                wait,
                release_if_granted,
            },
        };
        match commit(&*self.shared.log, vec![op]).await {
            Ok(results) => match results.first() {
                Some(OpResult::CancelWait(CancelResult::AlreadyGranted(token))) => {
                    Reply::Integer(*token as i64)
                }
                Some(OpResult::CancelWaitAll(CancelAllResult::AlreadyGranted(tokens))) => {
                    tokens_reply(tokens)
                }
                _ => waited_for.nothing(),
            },
            Err(e) => Reply::error(CommandError::from(e).to_string()),
        }
    }

    /// Resolves the proposals, then writes every pending reply in one write.
    async fn flush(&mut self) -> std::io::Result<()> {
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

/// What a blocked acquire waits for: the names its cancel must name.
enum WaitedFor {
    One(Bytes),
    All(Vec<Bytes>),
}

impl WaitedFor {
    fn of(op: &Op) -> WaitedFor {
        match op {
            Op::AcquireAll { names, .. } => WaitedFor::All(names.clone()),
            other => WaitedFor::One(other.key().cloned().unwrap_or_default()),
        }
    }

    /// The reply of a wait that got nothing: null, or a null array for several names.
    fn nothing(&self) -> Reply {
        match self {
            WaitedFor::One(_) => Reply::Null,
            WaitedFor::All(_) => Reply::NullArray,
        }
    }
}

/// The next message for a subscribed connection; never, for one that is not.
async fn next_message(
    inbox: &mut Option<tokio::sync::mpsc::UnboundedReceiver<Delivery>>,
) -> Option<Delivery> {
    match inbox {
        Some(inbox) => inbox.recv().await,
        None => std::future::pending().await,
    }
}

/// The reply of a state command from the outcome of its proposal. Its time in commandstats runs
/// from admission to the result: the log's latency is part of what the command costs (and of
/// what the slow log and the latency monitor see, given the command's arguments in `slow`).
fn reply_to(
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

/// The one result of a proposal of one op.
fn only_result(outcome: Result<Vec<OpResult>, ProposeError>) -> Result<OpResult, CommandError> {
    match outcome {
        Ok(mut results) if results.len() == 1 => Ok(results.remove(0)),
        Ok(results) => Err(CommandError::UnexpectedResult(format!("{results:?}"))),
        Err(e) => Err(CommandError::from(e)),
    }
}

enum Parked {
    Answered(Reply),
    /// The connection closed (or the server is stopping it).
    Closed,
    /// The wait left the queue without a grant, by no doing of this connection.
    Dropped,
}

/// Roughly the wire size of a reply (headers counted generously), walked without recursion.
fn approx_encoded_len(reply: &Reply) -> usize {
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
