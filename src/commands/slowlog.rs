//! SLOWLOG GET [count] | LEN | RESET | HELP: the commands that took at least
//! `slowlog-log-slower-than` µs, newest first, in Redis's reply shape: id, Unix time, µs, the
//! arguments (secrets redacted, at most 32, each at most 128 bytes), client address, client
//! name. What is logged and how is in `services::stats`.

use bytes::Bytes;
use flockd_proto::{Reply, parse_int};

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta};
use flockd_proto::printable;

#[derive(Debug)]
pub enum Slowlog {
    /// `None`: every entry (`-1`).
    Get(Option<usize>),
    Len,
    Reset,
    Help,
}

const HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
];

impl CommandDef for Slowlog {
    const META: Meta = Meta {
        syntax: "SLOWLOG GET [count] | LEN | RESET | HELP",
        group: "server",
        subcommands: &[
            SubMeta {
                name: "slowlog|get",
                arity: -2,
                summary: "Returns the slow log's entries.",
            },
            SubMeta {
                name: "slowlog|len",
                arity: 2,
                summary: "Returns the number of entries in the slow log.",
            },
            SubMeta {
                name: "slowlog|reset",
                arity: 2,
                summary: "Clears all entries from the slow log.",
            },
            SubMeta {
                name: "slowlog|help",
                arity: 2,
                summary: "Returns helpful text about the different subcommands.",
            },
        ],
        ..Meta::new(
            "slowlog",
            -2,
            CommandFlags {
                admin: true,
                fast: false,
                ..CommandFlags::READ
            },
            "A container for slow log commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let raw = args.next_bytes()?;
        let n = args.remaining();
        let none = |name: &'static str, cmd: Slowlog| {
            if n == 0 {
                Ok(cmd)
            } else {
                Err(CommandError::WrongArity(name.into()))
            }
        };
        match raw.to_ascii_uppercase().as_slice() {
            b"GET" => match n {
                0 => Ok(Slowlog::Get(Some(10))),
                1 => parse_count(&args.next_bytes()?).map(Slowlog::Get),
                _ => Err(CommandError::SubcommandSyntax {
                    command: "SLOWLOG",
                    sub: printable(&raw, 128),
                }),
            },
            b"LEN" => none("slowlog|len", Slowlog::Len),
            b"RESET" => none("slowlog|reset", Slowlog::Reset),
            b"HELP" => none("slowlog|help", Slowlog::Help),
            _ => Err(CommandError::UnknownSubcommand {
                command: "SLOWLOG",
                sub: printable(&raw, 128),
            }),
        }
    }
}

/// A count of -1 or more (Redis answers the same error for a non-integer); -1 is every entry.
fn parse_count(raw: &Bytes) -> Result<Option<usize>, CommandError> {
    match parse_int(raw) {
        Some(-1) => Ok(None),
        Some(n) if n >= 0 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        _ => Err(CommandError::SlowlogCount),
    }
}

impl LocalCommand for Slowlog {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let slowlog = &ctx.server.stats().slowlog;
        let max_len = ctx.server.config().load().slowlog_max_len;
        match self {
            Slowlog::Get(count) => {
                let entries = slowlog.get(count, max_len);
                reply(Reply::Array(
                    entries
                        .into_iter()
                        .map(|e| {
                            Reply::Array(vec![
                                Reply::Integer(e.id as i64),
                                Reply::Integer(e.unix_time as i64),
                                Reply::Integer(e.usec as i64),
                                Reply::Array(e.args.into_iter().map(Reply::Bulk).collect()),
                                Reply::bulk(e.client_addr.to_string()),
                                Reply::Bulk(e.client_name),
                            ])
                        })
                        .collect(),
                ))
            }
            Slowlog::Len => reply(Reply::Integer(slowlog.len(max_len) as i64)),
            Slowlog::Reset => {
                slowlog.reset();
                reply(Reply::ok())
            }
            Slowlog::Help => reply(Reply::Array(
                HELP.iter().map(|l| Reply::Simple((*l).into())).collect(),
            )),
        }
    }
}
