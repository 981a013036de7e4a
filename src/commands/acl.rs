//! ACL SETUSER | GETUSER | DELUSER | USERS | LIST | WHOAMI | CAT | LOG | LOAD | SAVE | HELP:
//! users and permissions in Redis 7's words (see `flockd_acl` for the rules and
//! `services::acl` for how the server applies them). Passwords never appear in a reply: ACL LIST
//! and GETUSER show SHA-256 digests.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta};
use super::permissions::{self, CATEGORIES};
use crate::services::acl::unix_ms;
use flockd_proto::printable;

#[derive(Debug)]
pub enum Acl {
    SetUser(String, Vec<String>),
    GetUser(String),
    DelUser(Vec<String>),
    Users,
    List,
    WhoAmI,
    Cat(Option<String>),
    Log(Option<usize>),
    LogReset,
    Load,
    Save,
    Help,
}

const fn sub(name: &'static str, arity: i32, summary: &'static str) -> SubMeta {
    SubMeta {
        name,
        arity,
        summary,
    }
}

impl CommandDef for Acl {
    const META: Meta = Meta {
        syntax: "ACL CAT [category] | DELUSER username [username ...] | GETUSER username | LIST | \
                 LOAD | LOG [count | RESET] | SAVE | SETUSER username [rule [rule ...]] | USERS | \
                 WHOAMI | HELP",
        group: "server",
        subcommands: &[
            sub(
                "acl|cat",
                -2,
                "Lists the ACL categories, or the commands inside a category.",
            ),
            sub(
                "acl|deluser",
                -3,
                "Deletes ACL users, and terminates their connections.",
            ),
            sub("acl|getuser", 3, "Lists the ACL rules of a user."),
            sub(
                "acl|list",
                2,
                "Dumps the effective rules in ACL file format.",
            ),
            sub(
                "acl|load",
                2,
                "Reloads the rules from the configured ACL file.",
            ),
            sub(
                "acl|log",
                -2,
                "Lists recent security events generated due to ACL rules.",
            ),
            sub(
                "acl|save",
                2,
                "Saves the effective ACL rules in the configured ACL file.",
            ),
            sub(
                "acl|setuser",
                -3,
                "Creates and modifies an ACL user and its rules.",
            ),
            sub("acl|users", 2, "Lists all ACL users."),
            sub(
                "acl|whoami",
                2,
                "Returns the authenticated username of the current connection.",
            ),
            sub(
                "acl|help",
                2,
                "Returns helpful text about the different subcommands.",
            ),
        ],
        ..Meta::new(
            "acl",
            -2,
            CommandFlags {
                admin: true,
                fast: false,
                ..CommandFlags::READ
            },
            "A container for Access List Control commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let raw = args.next_bytes()?;
        let sub = String::from_utf8_lossy(&raw).to_ascii_lowercase();
        let n = args.remaining();
        let text = |b: Bytes| String::from_utf8_lossy(&b).into_owned();
        let arity = |name: &str| CommandError::WrongArity(format!("acl|{name}").into());
        let rest: Vec<String> = std::iter::from_fn(|| args.next_opt()).map(text).collect();
        let none = |cmd: Acl| if n == 0 { Ok(cmd) } else { Err(arity(&sub)) };
        match sub.as_str() {
            "setuser" if n >= 1 => Ok(Acl::SetUser(rest[0].clone(), rest[1..].to_vec())),
            "getuser" if n == 1 => Ok(Acl::GetUser(rest[0].clone())),
            "deluser" if n >= 1 => Ok(Acl::DelUser(rest)),
            "cat" if n <= 1 => Ok(Acl::Cat(rest.first().map(|c| c.to_ascii_lowercase()))),
            "log" if n == 0 => Ok(Acl::Log(Some(10))),
            "log" if n == 1 && rest[0].eq_ignore_ascii_case("reset") => Ok(Acl::LogReset),
            "log" if n == 1 => match rest[0].parse::<i64>() {
                Ok(c) if c >= 0 => Ok(Acl::Log(Some(c as usize))),
                _ => Err(CommandError::NotInteger),
            },
            "setuser" | "getuser" | "deluser" | "cat" | "log" => Err(arity(&sub)),
            "users" => none(Acl::Users),
            "list" => none(Acl::List),
            "whoami" => none(Acl::WhoAmI),
            "load" => none(Acl::Load),
            "save" => none(Acl::Save),
            "help" => none(Acl::Help),
            _ => Err(CommandError::UnknownSubcommand {
                command: "ACL",
                sub: printable(&raw, 128),
            }),
        }
    }
}

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "GETUSER <username>",
    "    Get the user's details.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Print this help.",
];

impl LocalCommand for Acl {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let state = ctx.server.acl();
        let table = ctx.server.command_table();
        match self {
            Acl::SetUser(name, rules) => {
                let known = |name: &str| permissions::known(table, name);
                state.change(|a| a.set_user(&name, &rules, &known))?;
                reply(Reply::ok())
            }
            Acl::GetUser(name) => {
                let Some(user) = state.user(&name) else {
                    return reply(Reply::Null);
                };
                let field = |name: &'static str, value: Reply| (Reply::bulk(name), value);
                reply(Reply::Map(vec![
                    field(
                        "flags",
                        Reply::Array(user.flags().into_iter().map(Reply::bulk).collect()),
                    ),
                    field(
                        "passwords",
                        Reply::Array(
                            user.password_hashes()
                                .into_iter()
                                .map(Reply::bulk)
                                .collect(),
                        ),
                    ),
                    field("commands", Reply::bulk(user.command_rules())),
                    field("keys", Reply::bulk(user.key_rules())),
                    field("channels", Reply::bulk(user.channel_rules())),
                    field("selectors", Reply::Array(Vec::new())),
                ]))
            }
            Acl::DelUser(names) => {
                let deleted = state.change(|a| a.delete(&names))?;
                reply(Reply::Integer(deleted as i64))
            }
            Acl::Users => reply(Reply::Array(
                state.read().names().into_iter().map(Reply::bulk).collect(),
            )),
            Acl::List => reply(Reply::Array(
                state
                    .read()
                    .describe()
                    .into_iter()
                    .map(Reply::bulk)
                    .collect(),
            )),
            Acl::WhoAmI => reply(Reply::bulk(ctx.conn.user.name.clone())),
            Acl::Cat(None) => reply(Reply::Array(
                CATEGORIES.iter().map(|c| Reply::bulk(*c)).collect(),
            )),
            Acl::Cat(Some(category)) => {
                if !CATEGORIES.contains(&category.as_str()) {
                    return Err(CommandError::UnknownCategory(category));
                }
                reply(Reply::Array(
                    permissions::commands_in(table, &category)
                        .into_iter()
                        .map(Reply::bulk)
                        .collect(),
                ))
            }
            Acl::Log(count) => {
                let now_ms = unix_ms();
                let entries = state.denials.lock().newest(count);
                let field = |name: &'static str, value: Reply| (Reply::bulk(name), value);
                reply(Reply::Array(
                    entries
                        .into_iter()
                        .map(|e| {
                            Reply::Map(vec![
                                field("count", Reply::Integer(e.count as i64)),
                                field("reason", Reply::bulk(e.reason.as_str())),
                                field("context", Reply::bulk(e.context)),
                                field("object", Reply::bulk(e.object)),
                                field("username", Reply::bulk(e.username)),
                                field(
                                    "age-seconds",
                                    Reply::Double(
                                        now_ms.saturating_sub(e.created_ms) as f64 / 1000.0,
                                    ),
                                ),
                                field("client-info", Reply::bulk(e.client_info)),
                                field("entry-id", Reply::Integer(e.entry_id as i64)),
                                field("timestamp-created", Reply::Integer(e.created_ms as i64)),
                                field(
                                    "timestamp-last-updated",
                                    Reply::Integer(e.updated_ms as i64),
                                ),
                            ])
                        })
                        .collect(),
                ))
            }
            Acl::LogReset => {
                state.denials.lock().reset();
                reply(Reply::ok())
            }
            Acl::Load => {
                let config = ctx.server.config().load();
                let path = config.aclfile.clone().ok_or(CommandError::NoAclFile)?;
                let users = tokio::task::block_in_place(|| {
                    permissions::read_file(table, &path, config.requirepass.as_deref())
                })
                .map_err(CommandError::AclLoad)?;
                state.change(|a| *a = users);
                tracing::info!(file = %path.display(), "ACL LOAD");
                reply(Reply::ok())
            }
            Acl::Save => {
                let path = ctx
                    .server
                    .config()
                    .load()
                    .aclfile
                    .clone()
                    .ok_or(CommandError::NoAclFile)?;
                let text = state.read().describe().join("\n") + "\n";
                tokio::task::block_in_place(|| {
                    crate::config::rewrite::replace_file(&path, text.as_bytes())
                })
                .map_err(|e| {
                    CommandError::AclFileIo(format!(
                        "There was an error trying to save the ACLs: {}: {e}",
                        path.display()
                    ))
                })?;
                tracing::info!(file = %path.display(), "ACL SAVE");
                reply(Reply::ok())
            }
            Acl::Help => reply(Reply::Array(
                HELP.iter().map(|l| Reply::Simple((*l).into())).collect(),
            )),
        }
    }
}
