//! A blocking wait (FLOCK.ACQUIRE ... WAIT, FLOCK.ACQUIREALL ... WAIT), like BLPOP: propose the
//! op; if it queued, park the connection until the grant comes, the wait times out or the
//! client goes away, and then leave the queue. What queued, how to cancel and what to answer
//! come from the command's [`BlockingHook`]; this file names no op or result of its own.

use std::time::{Duration, Instant};

use flockd_core::{Op, WaitId};
use flockd_proto::Reply;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::batch::{Answer, Batch};
use super::{Connection, Next, READ_CHUNK};
use crate::commands::context::Proposal;
use crate::commands::{Blocking, BlockingHook, CommandError};
use crate::log::commit;
use crate::services::hot::Contention;
use crate::services::stats;
use crate::services::waiters::Grant;

enum Parked {
    Answered(Reply),
    /// The connection closed (or the server is stopping it).
    Closed,
    /// The wait left the queue without a grant, by no doing of this connection.
    Dropped,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Proposes a blocking command's op and, if it queued, parks the connection until it is
    /// answered. Replies before it go out first, and nothing after it runs until it is answered.
    pub(super) async fn blocking(
        &mut self,
        command: usize,
        started: Instant,
        proposal: Proposal,
        Blocking { wait_ms, hook }: Blocking,
        args: Option<stats::SlowArgs>,
    ) -> std::io::Result<Next> {
        self.resolve().await;
        self.flush().await?;
        let Proposal { mut op, reply, .. } = proposal;
        let name = op.key().cloned().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        // The one slot of a one-op batch: answered when the op does not queue, parked while
        // it does.
        let mut answers = vec![Answer::new(reply, command, started, args)];
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                let left = deadline.saturating_duration_since(Instant::now());
                op.shorten_wait(left.as_millis() as u64);
            }
            let Some(answer) = answers.pop() else {
                return Ok(Next::Continue);
            };
            let (back, results) = Batch::one(op.clone(), answer)
                .commit(&*self.shared.log)
                .await;
            answers = back;
            let queued = match &results {
                Ok(results) => results.first().and_then(hook.queued),
                Err(_) => None,
            };
            let Some(wait) = queued else {
                let mut replies = Vec::with_capacity(1);
                self.push_batch_replies(answers, results, &mut replies);
                if let Some(reply) = replies.into_iter().next() {
                    self.push_ready(reply);
                }
                return Ok(Next::Continue);
            };
            match self.park(&op, hook, wait, deadline).await? {
                Parked::Answered(answer) => {
                    let waited = match answer {
                        Reply::Integer(_) | Reply::Array(_) => &self.shared.stats.wait_granted,
                        _ => &self.shared.stats.wait_timed_out,
                    };
                    waited.observe_duration(started.elapsed());
                    let contention = Contention::Waited(started.elapsed());
                    self.shared.group_of(&name).applied.hot.record(
                        &name,
                        contention,
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
                    self.shared
                        .stats
                        .wait_timed_out
                        .observe_duration(started.elapsed());
                    self.push_ready((hook.nothing)());
                    return Ok(Next::Continue);
                }
            }
        }
    }

    /// Parks until wait `wait` of `op` is granted or must end. Meanwhile input is still read
    /// (and buffered, as Redis does for a blocked client) so a closed connection is noticed at
    /// once and its wait cancelled.
    async fn park(
        &mut self,
        op: &Op,
        hook: &BlockingHook,
        wait: WaitId,
        deadline: Instant,
    ) -> std::io::Result<Parked> {
        let shared = self.shared.clone();
        let handle = self.conn.handle.clone();
        // A wait id is its group's: the waits are those of the group of the op's names.
        let group = shared.group_of(op.key().map_or(&b""[..], |k| &k[..]));
        let Some(mut grant) = group.applied.waits.claim(wait) else {
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
                    Ok(Grant::One(token)) => Parked::Answered((hook.granted)(&[token])),
                    Ok(Grant::All(tokens)) => Parked::Answered((hook.granted)(&tokens)),
                    Err(_) => Parked::Dropped,
                }),
                _ = tokio::time::sleep_until(deadline.into()) => {
                    break Some(Parked::Answered(self.cancel(op, hook, wait, false).await));
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
                self.cancel(op, hook, wait, true).await;
                Parked::Closed
            }
        })
    }

    /// Cancels a wait; the reply for a client still there: nothing, or the grant that won the
    /// race.
    async fn cancel(
        &self,
        op: &Op,
        hook: &BlockingHook,
        wait: WaitId,
        release_if_granted: bool,
    ) -> Reply {
        let cancel = (hook.cancel)(op, wait, release_if_granted);
        match commit(&*self.shared.log, vec![cancel]).await {
            Ok(results) => results
                .into_iter()
                .next()
                .map_or_else(hook.nothing, hook.cancelled),
            Err(e) => Reply::error(CommandError::from(e).to_string()),
        }
    }
}
