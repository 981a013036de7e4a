//! COMMAND [COUNT | INFO name... | DOCS name... | LIST | GETKEYS | GETKEYSANDFLAGS | HELP]:
//! introspection generated from the command table, in Redis 7's reply shapes so client libraries
//! and redis-cli can use it. `DOCS` argument lists come from each command's syntax string
//! (`docs.rs`): that is what redis-cli builds its hints from.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::docs;
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta, find};

#[derive(Debug)]
pub enum Introspection {
    All,
    Count,
    Info(Vec<Bytes>),
    Docs(Vec<Bytes>),
    List,
    /// `GETKEYS` (false) or `GETKEYSANDFLAGS` (true) of a full command line.
    GetKeys {
        flags: bool,
        argv: Vec<Bytes>,
    },
    Help,
}

impl CommandDef for Introspection {
    const META: Meta = Meta {
        syntax: "COMMAND [COUNT | INFO [command-name ...] | DOCS [command-name ...] | \
            LIST [FILTERBY <MODULE module-name | ACLCAT category | PATTERN pattern>] | \
            GETKEYS command [arg ...] | GETKEYSANDFLAGS command [arg ...] | HELP]",
        group: "server",
        complexity: "O(N) where N is the number of commands",
        subcommands: &[
            SubMeta {
                name: "command|count",
                arity: 2,
                summary: "Returns a count of commands.",
            },
            SubMeta {
                name: "command|info",
                arity: -2,
                summary: "Returns information about one, multiple or all commands.",
            },
            SubMeta {
                name: "command|docs",
                arity: -2,
                summary: "Returns documentary information about one, multiple or all commands.",
            },
            SubMeta {
                name: "command|list",
                arity: -2,
                summary: "Returns a list of command names.",
            },
            SubMeta {
                name: "command|getkeys",
                arity: -3,
                summary: "Extracts the key names from an arbitrary command.",
            },
            SubMeta {
                name: "command|getkeysandflags",
                arity: -3,
                summary: "Extracts the key names and access flags for an arbitrary command.",
            },
            SubMeta {
                name: "command|help",
                arity: 2,
                summary: "Returns helpful text about the different subcommands.",
            },
        ],
        ..Meta::new(
            "command",
            -1,
            CommandFlags {
                fast: false,
                ..CommandFlags::READ
            },
            "Returns detailed information about all commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let Some(sub) = args.next_keyword() else {
            return Ok(Introspection::All);
        };
        let rest = |args: &mut Args| std::iter::from_fn(|| args.next_opt()).collect::<Vec<_>>();
        Ok(match sub.as_str() {
            "COUNT" if args.remaining() == 0 => Introspection::Count,
            "COUNT" => return Err(CommandError::WrongArity("command|count".into())),
            "INFO" => Introspection::Info(rest(args)),
            "DOCS" => Introspection::Docs(rest(args)),
            "LIST" => {
                // FILTERBY MODULE/ACLCAT/PATTERN are accepted and list everything.
                rest(args);
                Introspection::List
            }
            "GETKEYS" | "GETKEYSANDFLAGS" => {
                let flags = sub == "GETKEYSANDFLAGS";
                if args.remaining() == 0 {
                    return Err(CommandError::WrongArity(
                        if flags {
                            "command|getkeysandflags"
                        } else {
                            "command|getkeys"
                        }
                        .into(),
                    ));
                }
                Introspection::GetKeys {
                    flags,
                    argv: rest(args),
                }
            }
            "HELP" => Introspection::Help,
            other => {
                return Err(CommandError::UnknownSubcommand {
                    command: "COMMAND",
                    sub: flockd_proto::printable(other.as_bytes(), 64),
                });
            }
        })
    }
}

impl LocalCommand for Introspection {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let table = ctx.server.command_table();
        let lookup = |name: &[u8]| find(table, name);
        reply(match self {
            Introspection::All => Reply::Array(table.iter().map(info).collect()),
            Introspection::Count => Reply::Integer(table.len() as i64),
            Introspection::Info(names) if names.is_empty() => Reply::Array(table.iter().map(info).collect()),
            Introspection::Info(names) => Reply::Array(
                names.iter().map(|n| lookup(n).map(|i| info(&table[i])).unwrap_or(Reply::NullArray)).collect(),
            ),
            Introspection::Docs(names) => {
                let metas: Vec<&Meta> = if names.is_empty() {
                    table.iter().collect()
                } else {
                    names.iter().filter_map(|n| lookup(n)).map(|i| &table[i]).collect()
                };
                Reply::Map(metas.into_iter().map(|m| (Reply::bulk(m.name), docs(m))).collect())
            }
            Introspection::List => Reply::Array(table.iter().map(|m| Reply::bulk(m.name)).collect()),
            Introspection::GetKeys { flags, argv } => get_keys(table, &argv, flags),
            Introspection::Help => Reply::Array(
                [
                    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "(no subcommand) -- Return details about all commands.",
                    "COUNT -- Return the total number of commands.",
                    "INFO [<command-name> ...] -- Return details about the named commands, or all.",
                    "DOCS [<command-name> ...] -- Return documentation details about the named commands, or all.",
                    "LIST -- Return a list of all command names.",
                    "GETKEYS <full-command> -- Return the keys from a full command.",
                    "GETKEYSANDFLAGS <full-command> -- Return the keys and the access flags from a full command.",
                    "HELP -- Print this help.",
                ]
                .iter()
                .map(|l| Reply::Simple((*l).into()))
                .collect(),
            ),
        })
    }
}

fn info(meta: &Meta) -> Reply {
    let (first, last, step) = meta.keys;
    let categories: Vec<Reply> = acl_categories(meta)
        .iter()
        .map(|c| Reply::Simple((*c).into()))
        .collect();
    let key_specs = if first > 0 {
        vec![Reply::Map(vec![
            (
                Reply::bulk("flags"),
                Reply::Set(vec![Reply::Simple(
                    if meta.flags.write { "RW" } else { "RO" }.into(),
                )]),
            ),
            (
                Reply::bulk("begin_search"),
                Reply::Map(vec![
                    (Reply::bulk("type"), Reply::bulk("index")),
                    (
                        Reply::bulk("spec"),
                        Reply::Map(vec![(Reply::bulk("index"), Reply::Integer(first.into()))]),
                    ),
                ]),
            ),
            (
                Reply::bulk("find_keys"),
                Reply::Map(vec![
                    (Reply::bulk("type"), Reply::bulk("range")),
                    (
                        Reply::bulk("spec"),
                        Reply::Map(vec![
                            (Reply::bulk("lastkey"), Reply::Integer(0)),
                            (Reply::bulk("keystep"), Reply::Integer(1)),
                            (Reply::bulk("limit"), Reply::Integer(0)),
                        ]),
                    ),
                ]),
            ),
        ])]
    } else {
        vec![]
    };
    let subcommands = meta.subcommands.iter().map(sub_info).collect();
    Reply::Array(vec![
        Reply::bulk(meta.name),
        Reply::Integer(meta.arity.into()),
        Reply::Set(
            meta.flags
                .names()
                .into_iter()
                // Keys found in the arguments, as Redis flags such commands.
                .chain(meta.more_keys.map(|_| "movablekeys"))
                .map(|f| Reply::Simple(f.into()))
                .collect(),
        ),
        Reply::Integer(first.into()),
        Reply::Integer(last.into()),
        Reply::Integer(step.into()),
        Reply::Set(categories),
        Reply::Array(vec![]),
        Reply::Array(key_specs),
        Reply::Array(subcommands),
    ])
}

fn sub_info(sub: &SubMeta) -> Reply {
    Reply::Array(vec![
        Reply::bulk(sub.name),
        Reply::Integer(sub.arity.into()),
        Reply::Set(vec![]),
        Reply::Integer(0),
        Reply::Integer(0),
        Reply::Integer(0),
        Reply::Set(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
    ])
}

fn acl_categories(meta: &Meta) -> Vec<&'static str> {
    let mut categories = vec![if meta.flags.write { "@write" } else { "@read" }];
    if meta.flags.fast {
        categories.push("@fast");
    }
    if meta.flags.admin {
        categories.extend(["@admin", "@dangerous"]);
    }
    if meta.flags.blocking {
        categories.push("@blocking");
    }
    if meta.group == "connection" {
        categories.push("@connection");
    }
    categories
}

/// Redis 7's `COMMAND DOCS` entry: summary, since, group, complexity, then `arguments` (none for
/// a container command, whose subcommands have them) and `subcommands`.
fn docs(meta: &Meta) -> Reply {
    let mut fields = vec![
        (Reply::bulk("summary"), Reply::bulk(meta.summary)),
        (Reply::bulk("since"), Reply::bulk(meta.since)),
        (Reply::bulk("group"), Reply::bulk(meta.group)),
        (Reply::bulk("complexity"), Reply::bulk(meta.complexity)),
    ];
    if meta.subcommands.is_empty() {
        let args = docs::command_args(meta);
        if !args.is_empty() {
            fields.push((Reply::bulk("arguments"), docs::args_reply(&args)));
        }
    } else {
        let subs = meta
            .subcommands
            .iter()
            .map(|s| {
                let mut doc = vec![
                    (Reply::bulk("summary"), Reply::bulk(s.summary)),
                    (Reply::bulk("since"), Reply::bulk(meta.since)),
                    (Reply::bulk("group"), Reply::bulk(meta.group)),
                    (Reply::bulk("complexity"), Reply::bulk(meta.complexity)),
                ];
                let args = docs::subcommand_args(meta, s.name);
                if !args.is_empty() {
                    doc.push((Reply::bulk("arguments"), docs::args_reply(&args)));
                }
                (Reply::bulk(s.name), Reply::Map(doc))
            })
            .collect();
        fields.push((Reply::bulk("subcommands"), Reply::Map(subs)));
    }
    Reply::Map(fields)
}

/// `COMMAND GETKEYS` / `GETKEYSANDFLAGS`: the keys of a full command line by its `Meta.keys`
/// and `Meta.more_keys`, with Redis's error texts.
fn get_keys(table: &[Meta], argv: &[Bytes], with_flags: bool) -> Reply {
    let Some(meta) = argv
        .first()
        .and_then(|name| find(table, name))
        .map(|i| &table[i])
    else {
        return Reply::error("ERR Invalid command specified");
    };
    if meta.keys.0 <= 0 && meta.more_keys.is_none() {
        return Reply::error("ERR The command has no key arguments");
    }
    if !meta.arity_ok(argv.len()) {
        return Reply::error("ERR Invalid number of arguments specified for command");
    }
    let flags = if meta.flags.write { "RW" } else { "RO" };
    let keys = meta
        .key_positions(argv)
        .map(|i| {
            let key = Reply::Bulk(argv[i].clone());
            if with_flags {
                Reply::Array(vec![key, Reply::Set(vec![Reply::Simple(flags.into())])])
            } else {
                key
            }
        })
        .collect();
    Reply::Array(keys)
}
