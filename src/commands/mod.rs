//! Typed commands: one file per command, each a struct with `parse` (arguments to the typed
//! command) and `apply` (the command against the server state, giving a reply).
//!
//! The [`command_table!`] below is the single list of commands: it generates the [`Command`]
//! enum, the metadata table that drives lookup, arity errors and `COMMAND` output, and the
//! dispatch `match`. Adding a command is one new file plus one row in it.

mod args;
mod error;
mod meta;

pub use args::{ArgLimits, Args};
pub use error::CommandError;
pub use meta::{CommandFlags, Meta, SubMeta};

mod auth;
mod bgrewriteaof;
mod client;
mod command;
mod config_get;
mod echo;
mod fence_get;
mod fence_set;
mod fence_token;
mod flock_acquire;
mod flock_advance;
mod flock_forcerelease;
mod flock_release;
mod flock_renew;
mod flock_status;
mod flock_token;
mod flock_ttl;
mod hello;
mod info;
mod ping;
mod quit;
mod reset;
mod select;
mod shutdown;
mod time;

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;
use flockd_proto::Reply;

use crate::server::context::{Ctx, Outcome};

/// What every command file provides.
pub trait CommandDef: Sized {
    const META: Meta;
    /// Turns the arguments after the command name into the typed command. Arity has already
    /// been checked against `META.arity`.
    fn parse(args: &mut Args) -> Result<Self, CommandError>;
    /// Runs the command. Errors become `-ERR ...` replies; the connection stays open.
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<Outcome, CommandError>;
}

macro_rules! command_table {
    ($($variant:ident => $ty:ty,)*) => {
        /// Every command flockd understands, parsed and typed.
        #[derive(Debug)]
        pub enum Command {
            $($variant($ty),)*
        }

        /// Metadata of every command, in table order; a command's index here is its id.
        pub static TABLE: &[Meta] = &[$(<$ty as CommandDef>::META,)*];

        type Parser = fn(&mut Args) -> Result<Command, CommandError>;
        static PARSERS: &[Parser] = &[$(|args| <$ty as CommandDef>::parse(args).map(Command::$variant),)*];

        impl Command {
            pub fn apply(self, ctx: &mut Ctx<'_>) -> Result<Outcome, CommandError> {
                match self {
                    $(Command::$variant(cmd) => cmd.apply(ctx),)*
                }
            }
        }
    };
}

command_table! {
    Ping => ping::Ping,
    Echo => echo::Echo,
    Hello => hello::Hello,
    Auth => auth::Auth,
    Client => client::Client,
    Select => select::Select,
    Quit => quit::Quit,
    Reset => reset::Reset,
    Introspection => command::CommandCmd,
    Info => info::Info,
    ConfigGet => config_get::ConfigCmd,
    Time => time::Time,
    BgRewriteAof => bgrewriteaof::BgRewriteAof,
    Shutdown => shutdown::Shutdown,
    FlockAcquire => flock_acquire::FlockAcquire,
    FlockRenew => flock_renew::FlockRenew,
    FlockRelease => flock_release::FlockRelease,
    FlockStatus => flock_status::FlockStatus,
    FlockToken => flock_token::FlockToken,
    FlockTtl => flock_ttl::FlockTtl,
    FlockForceRelease => flock_forcerelease::FlockForceRelease,
    FlockAdvance => flock_advance::FlockAdvance,
    FenceSet => fence_set::FenceSet,
    FenceGet => fence_get::FenceGet,
    FenceToken => fence_token::FenceToken,
}

/// Finds a command by name, case-insensitively: its table index.
pub fn lookup(name: &[u8]) -> Option<usize> {
    static INDEX: OnceLock<HashMap<&'static [u8], usize>> = OnceLock::new();
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
pub fn parse(index: usize, argv: Vec<Bytes>, limits: ArgLimits) -> Result<Command, CommandError> {
    let meta = &TABLE[index];
    if !meta.arity_ok(argv.len()) {
        return Err(CommandError::WrongArity(meta.name.into()));
    }
    let mut args = Args::new(meta.name, argv, limits);
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

/// A lossy, single-line, bounded rendering of client bytes for error texts.
pub fn printable(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]);
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
