//! A transaction (MULTI ... EXEC): the connection queues the commands between MULTI and EXEC
//! (each answered `+QUEUED`, or with its error, which dooms the transaction), and EXEC runs
//! them as one log entry. The queue is the connection's: commands see only whether one is open
//! (`ConnState::in_transaction`), and tell the connection to open, run or drop it through their
//! outcomes.

use std::time::Instant;

use flockd_proto::Reply;
use tokio::io::{AsyncRead, AsyncWrite};

use super::Transaction;
use super::batch::{Answer, Batch};
use super::{Connection, Next};
use crate::commands::context::{Ctx, Outcome, Proposal};
use crate::commands::{Command, CommandError, Execution, TABLE, multi};
use crate::services::stats;

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// MULTI: the commands that follow are queued.
    pub(super) fn begin_transaction(&mut self) {
        self.transaction = Some(Transaction::default());
        self.conn.in_transaction = true;
    }

    /// DISCARD, RESET: the queued commands are dropped.
    pub(super) fn discard_transaction(&mut self) {
        self.transaction = None;
        self.conn.in_transaction = false;
    }

    /// A command could not be queued (refused at admission): EXEC will abort.
    pub(super) fn doom_transaction(&mut self) {
        if let Some(transaction) = &mut self.transaction {
            transaction.failed = true;
        }
    }

    /// Whether the command at `index` is queued rather than run, inside MULTI.
    #[inline]
    pub(super) fn queues(&self, index: usize) -> bool {
        self.transaction.is_some() && !multi::runs_inside_multi(TABLE[index].name)
    }

    /// Queues a command inside MULTI, or refuses one that cannot be part of a transaction.
    pub(super) fn queue(&mut self, index: usize, command: Command) {
        let Some(transaction) = &mut self.transaction else {
            return;
        };
        if multi::refused_inside_multi(TABLE[index].name) {
            transaction.failed = true;
            self.push_ready(Reply::error(CommandError::NotInMulti.to_string()));
            return;
        }
        transaction.queued.push((index, command));
        self.push_ready(Reply::Simple("QUEUED".into()));
    }

    /// EXEC (the command at `index`): runs the queued commands, or aborts a doomed transaction.
    pub(super) async fn exec(&mut self, index: usize) -> std::io::Result<Next> {
        let transaction = self.transaction.take();
        self.conn.in_transaction = false;
        let transaction = match transaction {
            Some(transaction) if !transaction.failed => transaction,
            doomed => {
                let e = match doomed {
                    Some(_) => CommandError::ExecAbort,
                    None => CommandError::ExecWithoutMulti,
                };
                let stat = &self.shared.stats.commands[index];
                self.push_ready(Reply::error(stats::failed(stat, &e)));
                return Ok(Next::Continue);
            }
        };
        let (reply, next) = self.run_transaction(transaction).await;
        self.push_ready(reply);
        Ok(next)
    }

    /// Every state command and read of the transaction becomes an op of one log entry, applied
    /// atomically; the other commands (PING, CLIENT, INFO, ...) run after it, in their places.
    /// The reply is the array of every command's reply, errors included, as in Redis. If the
    /// entry cannot be committed, nothing of it was applied and EXEC answers the error.
    async fn run_transaction(&mut self, transaction: Transaction) -> (Reply, Next) {
        /// A queued command's place in EXEC's reply: the next of the batch's replies, or a
        /// local command run after the batch.
        enum Step {
            Op,
            Local { command: Command, index: usize },
        }
        let started = Instant::now();
        let mut batch = Batch::default();
        let mut steps = Vec::with_capacity(transaction.queued.len());
        for (index, command) in transaction.queued {
            match command.into_transaction(self.conn.handle.id) {
                Ok(Proposal {
                    op,
                    reply,
                    mut session_names,
                    ..
                }) => {
                    self.hold_for_session(&mut session_names);
                    batch.push(op, Answer::new(reply, index, started, None));
                    steps.push(Step::Op);
                }
                Err(command) => steps.push(Step::Local { command, index }),
            }
        }
        let mut ops_replies = if batch.is_empty() {
            Vec::new().into_iter()
        } else {
            let (answers, results) = batch.commit(&*self.shared.log).await;
            if let Err(e) = results {
                // Nothing of the transaction was applied: EXEC answers the error once.
                return (
                    Reply::error(CommandError::from(e).to_string()),
                    Next::Continue,
                );
            }
            let mut replies = Vec::with_capacity(answers.len());
            self.push_batch_replies(answers, results, &mut replies);
            replies.into_iter()
        };
        let mut replies = Vec::with_capacity(steps.len());
        let mut next = Next::Continue;
        for step in steps {
            match step {
                Step::Op => replies.push(ops_replies.next().unwrap_or_else(|| {
                    Reply::error(
                        CommandError::UnexpectedResult("fewer replies than ops".into()).to_string(),
                    )
                })),
                Step::Local { command, index } => {
                    let stat = &self.shared.stats.commands[index];
                    stats::account(&self.shared.stats, index, 0);
                    let mut ctx = Ctx {
                        server: &*self.shared,
                        conn: &mut self.conn,
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
                            Outcome::BeginTransaction
                            | Outcome::Exec
                            | Outcome::Discard(_)
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
}
