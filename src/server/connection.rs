//! One client connection: read bytes, parse requests, run commands in order, and write the
//! replies of one read back in one write once the changes they report are durable.
//!
//! Replies wait in `pending` until the flush: every reply of a batch waits for the AOF to hold
//! every change appended so far (group commit: one fsync serves the whole batch and every other
//! client's). If the AOF write fails, the replies of state-changing commands in that batch turn
//! into -MISCONF errors instead of reporting changes that are not on disk.

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use flockd_core::CancelOutcome;
use flockd_proto::{ProtocolError, ProtocolVersion, Reply, Request, RequestParser, encode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tracing::debug;

use super::clients::ClientHandle;
use super::context::{ConnState, Ctx, Outcome, Waiting};
use super::{PREAUTH_LIMITS, PREAUTH_QUERY_BUFFER, Shared, stats};
use crate::commands::{self, CommandError};

/// Flush early after this many replies, so one read of many pipelined commands cannot build an
/// unbounded reply buffer.
const FLUSH_AFTER_REPLIES: usize = 1024;
/// Also flush early once the pending replies hold about this many bytes: a client that
/// pipelines commands with big replies (COMMAND, INFO) and never reads must not pin more than
/// this (plus the kernel's socket buffers) in server memory. Counting replies alone let 16 KiB
/// of `COMMAND DOCS` requests pin over 7 MiB of replies per client.
const FLUSH_AFTER_BYTES: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;

struct Pending {
    reply: Reply,
    /// The command changed state: on an AOF failure its reply becomes -MISCONF.
    durable: bool,
    /// HELLO can switch the protocol mid-batch; each reply goes out in the one it was made in.
    protocol: ProtocolVersion,
}

struct Connection {
    shared: Arc<Shared>,
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    input: BytesMut,
    output: BytesMut,
    parser: RequestParser,
    pending: Vec<Pending>,
    /// Approximate encoded size of `pending`.
    pending_size: usize,
    conn: ConnState,
    last_was_write: bool,
}

enum Next {
    Continue,
    Close,
}

pub async fn serve(shared: Arc<Shared>, stream: TcpStream, handle: Arc<ClientHandle>) {
    let id = handle.id;
    let (reader, writer) = stream.into_split();
    let authenticated = shared.config.requirepass.is_none();
    let mut connection = Connection {
        shared: shared.clone(),
        reader,
        writer,
        input: BytesMut::with_capacity(READ_CHUNK),
        output: BytesMut::new(),
        parser: RequestParser::new(),
        pending: Vec::new(),
        pending_size: 0,
        conn: ConnState {
            handle,
            protocol: ProtocolVersion::Resp2,
            authenticated,
        },
        last_was_write: false,
    };
    if let Err(e) = connection.run().await {
        debug!(client = id, "connection ended: {e}");
    }
    shared.clients.unregister(id);
}

impl Connection {
    async fn run(&mut self) -> std::io::Result<()> {
        loop {
            if let Next::Close = self.process_input().await? {
                self.flush().await?;
                let _ = self.writer.shutdown().await;
                return Ok(());
            }
            self.flush().await?;
            if self.input.len() + self.parser.pending_bytes() > self.query_buffer_limit() {
                self.pending_error("ERR Protocol error: client query buffer limit reached");
                self.flush().await?;
                return Ok(());
            }
            if self.read_more().await? == 0 {
                return Ok(());
            }
        }
    }

    /// Reads once; 0 means the peer closed or the server is stopping this client.
    async fn read_more(&mut self) -> std::io::Result<usize> {
        self.input.reserve(READ_CHUNK);
        // Borrowed, not cloned: every connection cloning the one `Arc` per read or command
        // would bounce its reference count between cores.
        let (shared, handle) = (&self.shared, &self.conn.handle);
        tokio::select! {
            read = self.reader.read_buf(&mut self.input) => {
                let n = read?;
                stats::bump(&shared.stats.net_input_bytes, n as u64);
                Ok(n)
            }
            _ = shared.shutdown.cancelled() => Ok(0),
            _ = handle.kill.cancelled() => Ok(0),
        }
    }

    /// Runs every complete request in the input buffer.
    async fn process_input(&mut self) -> std::io::Result<Next> {
        loop {
            let limits = if self.conn.authenticated {
                self.shared.limits
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
            match self.execute(request) {
                Outcome::Reply(reply) => self.push(reply),
                Outcome::ReplyAndClose(reply) => {
                    self.push(reply);
                    return Ok(Next::Close);
                }
                // The replies of commands before it in the batch still go out.
                Outcome::Close => return Ok(Next::Close),
                Outcome::Wait(waiting) => {
                    self.flush().await?;
                    match self.park(waiting).await? {
                        Some(reply) => self.push(reply),
                        None => return Ok(Next::Close),
                    }
                }
            }
            if self.pending.len() >= FLUSH_AFTER_REPLIES || self.pending_size >= FLUSH_AFTER_BYTES {
                self.flush().await?;
            }
        }
    }

    fn push(&mut self, reply: Reply) {
        let durable = self.last_was_write;
        self.pending_size += approx_encoded_len(&reply);
        self.pending.push(Pending {
            reply,
            durable,
            protocol: self.conn.protocol,
        });
    }

    fn pending_error(&mut self, text: &'static str) {
        self.pending.push(Pending {
            reply: Reply::error(text),
            durable: false,
            protocol: self.conn.protocol,
        });
    }

    fn protocol_error(&mut self, error: ProtocolError) {
        stats::bump(&self.shared.stats.protocol_errors, 1);
        debug!(client = self.conn.handle.id, "protocol error: {error}");
        self.pending.push(Pending {
            reply: Reply::error(error.to_reply_text()),
            durable: false,
            protocol: self.conn.protocol,
        });
    }

    fn query_buffer_limit(&self) -> usize {
        if self.conn.authenticated {
            self.shared.config.client_query_buffer_limit
        } else {
            PREAUTH_QUERY_BUFFER
        }
    }

    /// Looks up, checks and runs one request.
    fn execute(&mut self, request: Request) -> Outcome {
        self.last_was_write = false;
        let shared = &*self.shared;
        stats::bump(&shared.stats.commands_processed, 1);
        let Some(index) = commands::lookup(&request.args[0]) else {
            stats::bump(&shared.stats.unknown_commands, 1);
            if !self.conn.authenticated {
                return Outcome::Reply(Reply::error(CommandError::NoAuth.to_string()));
            }
            return Outcome::Reply(commands::unknown_command(&request.args));
        };
        let meta = &commands::TABLE[index];
        let stat = &shared.stats.commands[index];
        self.conn.handle.touch(index);
        if !self.conn.authenticated && !meta.flags.no_auth {
            stats::bump(&stat.rejected, 1);
            return Outcome::Reply(Reply::error(CommandError::NoAuth.to_string()));
        }
        let command = match commands::parse(index, request.args, shared.arg_limits) {
            Ok(command) => command,
            Err(e) => {
                stats::bump(&stat.rejected, 1);
                return Outcome::Reply(Reply::error(e.to_string()));
            }
        };
        if meta.flags.write
            && let Err(e) = shared.aof.check_writable()
        {
            stats::bump(&stat.rejected, 1);
            return Outcome::Reply(Reply::error(
                CommandError::Misconf(e.to_string()).to_string(),
            ));
        }
        self.last_was_write = meta.flags.write;
        let started = Instant::now();
        let now = shared.clock.now();
        let mut ctx = Ctx {
            shared,
            conn: &mut self.conn,
            now,
        };
        let outcome = command.apply(&mut ctx);
        stats::bump(&stat.calls, 1);
        stats::bump(&stat.usec, started.elapsed().as_micros() as u64);
        match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                stats::bump(&stat.failed, 1);
                Outcome::Reply(Reply::error(e.to_string()))
            }
        }
    }

    /// Parks a blocked FLOCK.ACQUIRE until it is granted, times out, or the client goes away.
    /// Meanwhile input is still read (and buffered, as Redis does for a blocked client) so a
    /// closed connection is noticed at once and its waiter removed. `None`: close the connection.
    async fn park(&mut self, waiting: Waiting) -> std::io::Result<Option<Reply>> {
        let Waiting {
            name,
            ticket,
            mut grant,
            deadline,
        } = waiting;
        let shared = self.shared.clone();
        let handle = self.conn.handle.clone();
        shared.clients.set_blocked(&handle, true);
        let result = loop {
            if self.input.len() + self.parser.pending_bytes() > self.query_buffer_limit() {
                break None;
            }
            self.input.reserve(READ_CHUNK);
            tokio::select! {
                // A grant that is already there wins over a deadline reached at the same time.
                biased;
                granted = &mut grant => break Some(match granted {
                    Ok(token) => Reply::Integer(token as i64),
                    Err(_) => Reply::Null,
                }),
                _ = tokio::time::sleep_until(deadline.into()) => {
                    break Some(match shared.state.locks.cancel_wait(&name, ticket) {
                        CancelOutcome::Removed => Reply::Null,
                        CancelOutcome::AlreadyGranted(token) => Reply::Integer(token as i64),
                    });
                }
                read = self.reader.read_buf(&mut self.input) => match read {
                    Ok(n) if n > 0 => stats::bump(&shared.stats.net_input_bytes, n as u64),
                    _ => break None,
                },
                _ = shared.shutdown.cancelled() => break None,
                _ = handle.kill.cancelled() => break None,
            }
        };
        shared.clients.set_blocked(&handle, false);
        if result.is_none() {
            self.abandon_wait(&name, ticket);
        }
        Ok(result)
    }

    /// The client is gone: take it out of the queue, and if the lock reached it in the meantime,
    /// give the lock back so the next waiter gets it.
    fn abandon_wait(&mut self, name: &bytes::Bytes, ticket: flockd_core::WaitTicket) {
        let shared = &self.shared;
        if let CancelOutcome::AlreadyGranted(token) = shared.state.locks.cancel_wait(name, ticket) {
            let now = shared.clock.now();
            let _ = shared.state.locks.release(name, token, now, &*shared.aof);
        }
    }

    /// Waits until the AOF holds everything the pending replies may report, then writes them
    /// all in one write.
    async fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() && self.output.is_empty() {
            return Ok(());
        }
        let aof = &self.shared.aof;
        let durability = aof.wait_durable(aof.appended_seq()).await;
        for Pending {
            reply,
            durable,
            protocol,
        } in self.pending.drain(..)
        {
            match &durability {
                Err(e) if durable => {
                    let text = CommandError::Misconf(e.to_string()).to_string();
                    encode(&Reply::error(text), protocol, &mut self.output);
                }
                _ => encode(&reply, protocol, &mut self.output),
            }
        }
        self.pending_size = 0;
        stats::bump(
            &self.shared.stats.net_output_bytes,
            self.output.len() as u64,
        );
        self.writer.write_all(&self.output).await?;
        self.output.clear();
        Ok(())
    }
}

/// Roughly the wire size of a reply (headers counted generously), walked without recursion.
fn approx_encoded_len(reply: &Reply) -> usize {
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
