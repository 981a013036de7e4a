//! One route from ops to replies, for a pipelined read's state commands, a transaction (EXEC)
//! and a blocking wait (WAIT) alike. A [`Batch`] is ops proposed as one log entry and, for each,
//! the [`Answer`] that makes its reply from its result. [`Batch::commit`] gives the results with
//! the one mapping of a proposal's outcome (a proposal that failed fails each of its ops alike,
//! with the log's error), and [`replies`] turns them into replies the one way, counting each
//! call. The pipeline puts each reply in its request's slot; EXEC wraps its batch's replies, with
//! its local commands', in one array (or answers the error once: nothing of it was applied);
//! WAIT's batch has one op, whose slot parks while the wait is queued.

use std::time::Instant;

use flockd_core::{Op, OpResult};
use flockd_proto::Reply;

use crate::commands::CommandError;
use crate::config::Config;
use crate::log::{Committing, Log, ProposalResult, ProposeError};
use crate::server::accounting;
use crate::server::shared::Shared;
use crate::services::clients::ClientHandle;
use crate::services::stats::{self, SlowArgs, Tally};

/// How one op's reply is made from its result, and what its call is counted as.
pub(super) struct Answer {
    reply: fn(OpResult) -> Result<Reply, CommandError>,
    /// The command's index in the command table.
    command: usize,
    started: Instant,
    /// The arguments for the slow log (`None`: not logged, as inside EXEC).
    args: Option<SlowArgs>,
}

impl Answer {
    pub(super) fn new(
        reply: fn(OpResult) -> Result<Reply, CommandError>,
        command: usize,
        started: Instant,
        args: Option<SlowArgs>,
    ) -> Answer {
        Answer {
            reply,
            command,
            started,
            args,
        }
    }

    /// The reply to the op's outcome. Its time in commandstats runs from admission to the
    /// result: the log's latency is part of what the command costs (and of what the slow log
    /// and the latency monitor see).
    fn reply(
        self,
        shared: &Shared,
        config: &Config,
        client: &ClientHandle,
        tally: &mut Tally,
        outcome: Result<OpResult, CommandError>,
    ) -> Reply {
        let slow = self.args.as_ref().map(|args| (args, client));
        accounting::account_call(shared, config, tally, self.command, self.started, slow);
        let stat = &shared.stats.commands[self.command];
        outcome
            .and_then(self.reply)
            .unwrap_or_else(|e| Reply::error(stats::failed(stat, &e)))
    }
}

/// Ops to propose as one log entry, and their answers, in order.
#[derive(Default)]
pub(super) struct Batch {
    ops: Vec<Op>,
    answers: Vec<Answer>,
}

impl Batch {
    pub(super) fn one(op: Op, answer: Answer) -> Batch {
        Batch {
            ops: vec![op],
            answers: vec![answer],
        }
    }

    pub(super) fn push(&mut self, op: Op, answer: Answer) {
        self.ops.push(op);
        self.answers.push(answer);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Proposes the ops; the answers wait beside the proposal.
    pub(super) fn propose(self, log: &dyn Log) -> Proposed {
        Proposed {
            committing: log.propose(self.ops),
            answers: self.answers,
        }
    }

    /// Proposes the ops, writes them now and waits for their results.
    pub(super) async fn commit(self, log: &dyn Log) -> (Vec<Answer>, Results) {
        let proposed = self.propose(log);
        log.write_now();
        proposed.results().await
    }
}

/// A batch's results, one per op; `Err` when this node has none (the log refused the
/// proposal, or cannot tell its outcome).
pub(super) type Results = ProposalResult;

/// A proposed batch on its way through the log.
pub(super) struct Proposed {
    committing: Committing,
    answers: Vec<Answer>,
}

impl Proposed {
    /// The batch's answers and its results, once the log committed it.
    pub(super) async fn results(self) -> (Vec<Answer>, Results) {
        (self.answers, self.committing.await)
    }
}

/// The replies to a batch's results, in the order of its ops (each call counted as it is
/// answered): a failed proposal answers each op with its error.
pub(super) fn replies<'a>(
    shared: &'a Shared,
    config: &'a Config,
    client: &'a ClientHandle,
    tally: &'a mut Tally,
    answers: Vec<Answer>,
    results: Results,
) -> impl Iterator<Item = Reply> + 'a {
    let (mut results, failed): (_, Option<ProposeError>) = match results {
        Ok(results) => (results.into_iter(), None),
        Err(e) => (Vec::new().into_iter(), Some(e)),
    };
    answers.into_iter().map(move |answer| {
        let outcome = match &failed {
            Some(e) => Err(CommandError::from(e.clone())),
            None => results
                .next()
                .ok_or_else(|| CommandError::UnexpectedResult("fewer results than ops".into())),
        };
        answer.reply(shared, config, client, tally, outcome)
    })
}
