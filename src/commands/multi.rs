//! MULTI, EXEC, DISCARD, WATCH, UNWATCH: transactions as Redis has them. Between MULTI and
//! EXEC the connection queues commands (each answered `+QUEUED`, or with its error, which
//! dooms the transaction); EXEC runs them as one unit: every state command and read of the
//! transaction is one op of a single log entry, applied atomically, and the reply is the array
//! of their replies. A blocking `WAIT` inside does not block, as BLPOP inside MULTI does not.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, Outcome};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

/// Whether the command at `name` runs at once even inside MULTI rather than being queued.
pub fn runs_inside_multi(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    )
}

/// Whether the command named `name` cannot be part of a transaction (it is refused, and the
/// transaction with it).
pub fn refused_inside_multi(name: &str) -> bool {
    matches!(
        name,
        "monitor"
            | "shutdown"
            | "subscribe"
            | "psubscribe"
            | "ssubscribe"
            | "unsubscribe"
            | "punsubscribe"
            | "sunsubscribe"
    )
}

#[derive(Debug)]
pub struct Multi;

impl CommandDef for Multi {
    const META: Meta = Meta {
        syntax: "MULTI",
        group: "transactions",
        ..Meta::new("multi", 1, CommandFlags::READ, "Starts a transaction.")
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Multi)
    }
}

impl LocalCommand for Multi {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        if ctx.conn.in_transaction {
            return Err(CommandError::NestedMulti);
        }
        Ok(Outcome::BeginTransaction)
    }
}

#[derive(Debug)]
pub struct Exec;

impl CommandDef for Exec {
    const META: Meta = Meta {
        syntax: "EXEC",
        group: "transactions",
        ..Meta::new(
            "exec",
            1,
            CommandFlags {
                fast: false,
                ..CommandFlags::READ
            },
            "Executes all commands in a transaction.",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Exec)
    }
}

impl LocalCommand for Exec {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        if !ctx.conn.in_transaction {
            return Err(CommandError::ExecWithoutMulti);
        }
        // The connection holds the queue: it aborts a transaction a command failed to join.
        Ok(Outcome::Exec)
    }
}

#[derive(Debug)]
pub struct Discard;

impl CommandDef for Discard {
    const META: Meta = Meta {
        syntax: "DISCARD",
        group: "transactions",
        ..Meta::new("discard", 1, CommandFlags::READ, "Discards a transaction.")
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Discard)
    }
}

impl LocalCommand for Discard {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        if !ctx.conn.in_transaction {
            return Err(CommandError::DiscardWithoutMulti);
        }
        Ok(Outcome::Discard(Reply::ok()))
    }
}

/// WATCH is refused: flockd has no optimistic locking on lock names; the safe ways to make a
/// change conditional are a held lock's token with `FENCE.SET`, or a transaction's one entry.
#[derive(Debug)]
pub struct Watch;

impl CommandDef for Watch {
    const META: Meta = Meta {
        syntax: "WATCH key [key ...]",
        keys: (1, -1, 1),
        group: "transactions",
        ..Meta::new(
            "watch",
            -2,
            CommandFlags::READ,
            "Not supported: flockd refuses WATCH with an error that says what to use instead.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        while args.next_opt().is_some() {}
        Ok(Watch)
    }
}

impl LocalCommand for Watch {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        if ctx.conn.in_transaction {
            return Err(CommandError::WatchInsideMulti);
        }
        Err(CommandError::WatchUnsupported)
    }
}

#[derive(Debug)]
pub struct Unwatch;

impl CommandDef for Unwatch {
    const META: Meta = Meta {
        syntax: "UNWATCH",
        group: "transactions",
        ..Meta::new(
            "unwatch",
            1,
            CommandFlags::READ,
            "Forgets watched keys (flockd watches none).",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Unwatch)
    }
}

impl LocalCommand for Unwatch {
    fn run(self, _ctx: &mut Ctx<'_>) -> CommandResult {
        Ok(Outcome::Reply(Reply::ok()))
    }
}
