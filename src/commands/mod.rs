//! Typed commands: one file per command, each a struct with `parse` (arguments to the typed
//! command), then one of two kinds:
//! - a **state** command ([`OpCommand`]) becomes an [`flockd_core::Op`] and formats the
//!   result of applying it: it never touches the state itself;
//! - a **read** has an op and a reply too, but outside a transaction it runs at once against
//!   the applied state, without the log;
//! - a **local** command ([`LocalCommand`]) runs at once against its connection or the server.
//!
//! The [`command_table!`] below is the single list of commands: it generates the [`Command`]
//! enum, the metadata table that drives lookup, arity errors and `COMMAND` output, and the
//! dispatch. Adding a command is one new file plus one row in it.

mod args;
pub mod context;
mod docs;
pub mod error;
pub mod kinds;
mod meta;

pub use args::{ArgLimits, Args};
pub use error::CommandError;
pub use kinds::{CommandDef, LocalCommand, OpCommand, unexpected};
pub use meta::{CommandFlags, Meta, SubMeta};

mod acl;
mod asking;
mod auth;
mod bgrewriteaof;
mod client;
mod cluster;
mod command;
mod config;
mod dbsize;
mod echo;
mod fence_get;
mod fence_set;
mod fence_token;
mod flock_acquire;
mod flock_acquireall;
pub use flock_acquire::end_session;
mod flock_advance;
mod flock_cluster;
mod flock_forcerelease;
mod flock_holders;
mod flock_hot;
mod flock_release;
mod flock_renew;
mod flock_scan;
mod flock_status;
mod flock_token;
mod flock_ttl;
mod hello;
mod info;
mod latency;
mod monitor;
pub mod multi;
pub mod permissions;
pub mod server;
pub use server::Server;
mod ping;
mod pubsub;
mod quit;
mod readonly;
mod readwrite;
pub mod reset;
mod role;
mod scan;
mod select;
mod sentinel;
mod shutdown;
mod slowlog;
mod ssubscribe;
mod subscribe;
mod sunsubscribe;
mod time;
mod type_cmd;
pub mod unsubscribe;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use flockd_proto::Reply;

use flockd_core::{Millis, Op};
pub use flockd_proto::printable;

use crate::log::ReadWait;
use crate::services::applied::AppliedState;
pub use context::{Blocking, BlockingHook, CommandResult, Ctx, Outcome, Proposal};

/// What the connection does with a parsed command.
pub enum Execution {
    /// Run now.
    Local(CommandResult),
    /// Propose, and answer from the result.
    State(Proposal),
}

macro_rules! dispatch {
    (local, $cmd:expr, $ctx:expr, $ty:ty) => {
        Execution::Local(LocalCommand::run($cmd, $ctx))
    };
    (read, $cmd:expr, $ctx:expr, $ty:ty) => {
        Execution::Local(read::<$ty>($cmd, $ctx))
    };
    (state, $cmd:expr, $ctx:expr, $ty:ty) => {
        Execution::State(proposal::<$ty>($cmd, $ctx.conn.handle.id))
    };
}

/// A state command's proposal, as [`Command::execute`] makes it; any other command stays itself.
macro_rules! propose {
    (state, $variant:ident, $cmd:expr, $client_id:expr, $ty:ty) => {
        Ok(proposal::<$ty>($cmd, $client_id))
    };
    ($kind:ident, $variant:ident, $cmd:expr, $client_id:expr, $ty:ty) => {
        Err(Command::$variant($cmd))
    };
}

/// In a transaction, state commands and reads become ops of the transaction's one entry; local
/// commands stay themselves (they run after it).
macro_rules! transact {
    (local, $variant:ident, $cmd:expr, $client_id:expr, $ty:ty) => {
        Err(Command::$variant($cmd))
    };
    ($kind:ident, $variant:ident, $cmd:expr, $client_id:expr, $ty:ty) => {
        Ok(transaction_proposal::<$ty>($cmd, $client_id))
    };
}

fn proposal<T: OpCommand>(cmd: T, client_id: u64) -> Proposal {
    Proposal {
        blocking: cmd.blocking(),
        session_names: cmd.session_names(),
        reply: T::reply,
        op: cmd.into_op(client_id),
    }
}

/// Inside a transaction nothing blocks: the command gives its non-blocking op.
fn transaction_proposal<T: OpCommand>(cmd: T, client_id: u64) -> Proposal {
    Proposal {
        blocking: None,
        session_names: cmd.session_names(),
        reply: T::reply,
        op: cmd.into_transaction_op(client_id),
    }
}

/// A read, against the state of the group that serves its name: at once on a single node, at
/// the group's read point on a cluster node.
fn read<T: OpCommand>(cmd: T, ctx: &mut Ctx<'_>) -> CommandResult {
    let read = read_of(cmd)?;
    let group = ctx.server.group_of(read.key());
    match group.log.read_point() {
        None => read_now::<T>(read, &group.applied, group.log.now()),
        Some(point) => read_at::<T>(point, read, group.applied.clone()),
    }
}

/// A read runs at once against the applied state, with the same op and reply it has inside a
/// transaction.
fn read_now<T: OpCommand>(
    read: flockd_core::Read,
    applied: &AppliedState,
    now: Millis,
) -> CommandResult {
    let result = applied.read().read(&read, now);
    T::reply(result).map(Outcome::Reply)
}

/// A read on a cluster node: once the node's applied state holds every write committed before
/// the read arrived (the leader's read point), it runs there, judging leases by the leader's
/// clock at that point. So it is linearizable on any node without an entry in the log.
fn read_at<T: OpCommand>(
    point: ReadWait,
    read: flockd_core::Read,
    host: Arc<AppliedState>,
) -> CommandResult {
    Ok(Outcome::Await(Box::pin(async move {
        let replied = match point.await {
            Ok(at) => {
                let machine = host.read();
                // Entries applied here after the read point may carry later stamps.
                let now = at.max(machine.time());
                T::reply(machine.read(&read, now))
            }
            Err(e) => Err(CommandError::from(e)),
        };
        replied.unwrap_or_else(|e| Reply::error(e.to_string()))
    })))
}

fn read_of<T: OpCommand>(cmd: T) -> Result<flockd_core::Read, CommandError> {
    // A read binds nothing to its connection.
    match cmd.into_op(0) {
        Op::Read(read) => Ok(read),
        op => Err(CommandError::UnexpectedResult(format!(
            "{op:?} is not a read"
        ))),
    }
}

macro_rules! kind_is_state {
    (state) => {
        true
    };
    ($other:ident) => {
        false
    };
}

macro_rules! command_table {
    ($($kind:ident $variant:ident => $ty:ty,)*) => {
        /// Every command flockd understands, parsed and typed.
        #[derive(Debug)]
        pub enum Command {
            $($variant($ty),)*
        }

        /// Metadata of every command, in table order; a command's index here is its id.
        pub static TABLE: &[Meta] = &[$(<$ty as CommandDef>::META,)*];

        /// Whether the command at each index of [`TABLE`] is a state command.
        pub static IS_STATE: &[bool] = &[$(kind_is_state!($kind),)*];

        type Parser = fn(&mut Args) -> Result<Command, CommandError>;
        static PARSERS: &[Parser] = &[$(|args| <$ty as CommandDef>::parse(args).map(Command::$variant),)*];

        impl Command {
            /// Runs a local command or a read, or turns a state command into its proposal.
            pub fn execute(self, ctx: &mut Ctx<'_>) -> Execution {
                match self {
                    $(Command::$variant(cmd) => dispatch!($kind, cmd, ctx, $ty),)*
                }
            }

            /// What a state command of connection `client_id` proposes, outside a transaction
            /// (what [`Command::execute`] hands back for it); any other command stays itself.
            pub fn into_proposal(self, client_id: u64) -> Result<Proposal, Command> {
                match self {
                    $(Command::$variant(cmd) => propose!($kind, $variant, cmd, client_id, $ty),)*
                }
            }

            /// The op this command is inside a transaction of connection `client_id`, or the
            /// command itself if it has none (it then runs on its own, after the transaction's
            /// entry).
            pub fn into_transaction(self, client_id: u64) -> Result<Proposal, Command> {
                match self {
                    $(Command::$variant(cmd) => transact!($kind, $variant, cmd, client_id, $ty),)*
                }
            }
        }
    };
}

command_table! {
    local Ping => ping::Ping,
    local Echo => echo::Echo,
    local Hello => hello::Hello,
    local Auth => auth::Auth,
    local Acl => acl::Acl,
    local Client => client::Client,
    local Select => select::Select,
    local Quit => quit::Quit,
    local Reset => reset::Reset,
    local Introspection => command::Introspection,
    local Info => info::Info,
    local Role => role::Role,
    local Cluster => cluster::Cluster,
    local Readonly => readonly::Readonly,
    local Readwrite => readwrite::Readwrite,
    local Asking => asking::Asking,
    local RuntimeConfig => config::RuntimeConfig,
    local Time => time::Time,
    local BgRewriteAof => bgrewriteaof::BgRewriteAof,
    local Shutdown => shutdown::Shutdown,
    local Monitor => monitor::Monitor,
    local Multi => multi::Multi,
    local Exec => multi::Exec,
    local Discard => multi::Discard,
    local Watch => multi::Watch,
    local Unwatch => multi::Unwatch,
    local Slowlog => slowlog::Slowlog,
    local Latency => latency::Latency,
    local DbSize => dbsize::DbSize,
    local Scan => scan::Scan,
    local Type => type_cmd::Type,
    local Subscribe => subscribe::Subscribe,
    local PSubscribe => subscribe::PSubscribe,
    local Unsubscribe => unsubscribe::Unsubscribe,
    local PUnsubscribe => unsubscribe::PUnsubscribe,
    local SSubscribe => ssubscribe::SSubscribe,
    local SUnsubscribe => sunsubscribe::SUnsubscribe,
    local Pubsub => pubsub::Pubsub,
    local Sentinel => sentinel::Sentinel,
    state FlockAcquire => flock_acquire::FlockAcquire,
    state FlockAcquireAll => flock_acquireall::FlockAcquireAll,
    state FlockRenew => flock_renew::FlockRenew,
    state FlockRelease => flock_release::FlockRelease,
    read FlockStatus => flock_status::FlockStatus,
    read FlockHolders => flock_holders::FlockHolders,
    read FlockToken => flock_token::FlockToken,
    read FlockTtl => flock_ttl::FlockTtl,
    local FlockCluster => flock_cluster::FlockCluster,
    state FlockForceRelease => flock_forcerelease::FlockForceRelease,
    local FlockHot => flock_hot::FlockHot,
    local FlockScan => flock_scan::FlockScan,
    state FlockAdvance => flock_advance::FlockAdvance,
    state FenceSet => fence_set::FenceSet,
    read FenceGet => fence_get::FenceGet,
    read FenceToken => fence_token::FenceToken,
}

/// Finds a command by name, case-insensitively: its table index.
pub fn lookup(name: &[u8]) -> Option<usize> {
    // foldhash, not SipHash: every request looks its command up here, and the names are ours.
    type Index = HashMap<&'static [u8], usize, foldhash::fast::FixedState>;
    static INDEX: OnceLock<Index> = OnceLock::new();
    let index = INDEX.get_or_init(|| {
        TABLE
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.as_bytes(), i))
            .collect()
    });
    // Names are short; anything longer than the longest command cannot match.
    let mut lower = [0u8; 32];
    let lower = lower.get_mut(..name.len())?;
    for (dst, src) in lower.iter_mut().zip(name) {
        *dst = src.to_ascii_lowercase();
    }
    index.get(&lower[..]).copied()
}

/// Checks arity and parses the arguments of the command at `index` in [`TABLE`].
pub fn parse(index: usize, argv: &[Bytes], limits: ArgLimits) -> Result<Command, CommandError> {
    let meta = &TABLE[index];
    if !meta.arity_ok(argv.len()) {
        return Err(CommandError::WrongArity(meta.name.into()));
    }
    // As in Redis, a subcommand's own arity is checked before it parses: `CLIENT KILL` with no
    // filter is an error, never a filter that matches every client.
    if let Some(sub) = meta.subcommand(argv)
        && !meta::arity_ok(sub.arity, argv.len())
    {
        return Err(CommandError::WrongArity(sub.name.into()));
    }
    let mut args = Args::new(meta.name, argv, limits);
    if !meta.subcommands.is_empty() {
        args = args.with_subcommand();
    }
    let command = PARSERS[index](&mut args)?;
    args.finish()?;
    Ok(command)
}

/// The `-ERR unknown command` reply, in Redis's words.
pub fn unknown_command(argv: &[Bytes]) -> Reply {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        printable(&argv[0], 128)
    );
    for arg in argv.iter().skip(1).take(16) {
        text.push_str(&format!("'{}' ", printable(arg, 128)));
    }
    Reply::error(text)
}

/// Whether the command at `index` in [`TABLE`] may read or reset the server's statistics
/// (INFO, LATENCY, CONFIG RESETSTAT): a command that is not fast, or an admin command. A fast
/// command (PING, the locks' commands) reads none.
pub fn may_read_statistics(index: usize) -> bool {
    let flags = TABLE[index].flags;
    !flags.fast || flags.admin
}

/// The name of the command at `index` in [`TABLE`] (what CLIENT LIST shows as `cmd=`).
pub fn command_name(index: usize) -> &'static str {
    TABLE[index].name
}
