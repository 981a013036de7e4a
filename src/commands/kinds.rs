//! The kinds of command every command file implements: [`CommandDef`] (its metadata and
//! parse) and then [`OpCommand`] (an op and the reply to its result: the state commands,
//! and the reads, whose op runs on the applied state or inside a transaction's entry) or
//! [`LocalCommand`] (runs at once against the connection or the server).

use bytes::Bytes;
use flockd_core::{Op, OpResult};
use flockd_proto::Reply;

use super::args::Args;
use super::context::{Blocking, CommandResult, Ctx};
use super::error::CommandError;
use super::meta::Meta;

/// What every command file provides.
pub trait CommandDef: Sized {
    const META: Meta;
    /// Turns the arguments after the command name into the typed command. Arity has already
    /// been checked against `META.arity`.
    fn parse(args: &mut Args) -> Result<Self, CommandError>;
}

/// A command with an op: it says which op, and how to answer from its result. The state
/// commands propose theirs to the log; a read's op runs at once on the applied state
/// (`Op::Read`), or as one op of a transaction's entry.
pub trait OpCommand: CommandDef {
    /// The op, for the connection `client_id` (what SESSION binds a holding to).
    fn into_op(self, client_id: u64) -> Op;
    /// The op inside a transaction, where nothing blocks (as BLPOP inside MULTI does not).
    fn into_transaction_op(self, client_id: u64) -> Op {
        self.into_op(client_id)
    }
    /// The reply to the result of applying the op. Errors become error replies.
    fn reply(result: OpResult) -> Result<Reply, CommandError>;
    /// Whether and how the command blocks when its op queues (only FLOCK.ACQUIRE and
    /// FLOCK.ACQUIREALL with WAIT do).
    fn blocking(&self) -> Option<Blocking> {
        None
    }
    /// The names the op holds for its connection's session (SESSION): they end when the
    /// connection closes (`end_session`).
    fn session_names(&self) -> Vec<Bytes> {
        Vec::new()
    }
}

/// A command that runs at once: connection commands and reads of the applied state.
pub trait LocalCommand: CommandDef {
    /// Runs the command. Errors become `-ERR ...` replies; the connection stays open.
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult;
}

/// The result a state command's reply expected did not come: a bug, answered as an error
/// rather than a panic.
pub fn unexpected(result: &OpResult) -> CommandError {
    CommandError::UnexpectedResult(format!("{result:?}"))
}
