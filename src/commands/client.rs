//! CLIENT ID | SETNAME | GETNAME | SETINFO | INFO | LIST | KILL | NO-EVICT | NO-TOUCH |
//! GETREDIR | TRACKINGINFO | HELP.
//!
//! What client libraries send on connect is answered as Redis 7.2 answers it: a subcommand
//! Redis 7.2 does not have either (redis-py's `CLIENT MAINT_NOTIFICATIONS ON ...`) gets its
//! `unknown subcommand` error, with the name as sent, and counts as no call (admission). Client
//! tracking is off and stays off: GETREDIR and TRACKINGINFO say so, CACHING gets Redis's error
//! for a client not tracking, and TRACKING ON is refused (flockd sends no invalidations).

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta};
use flockd_proto::parse_int;

#[derive(Debug)]
pub enum Client {
    Id,
    SetName(Bytes),
    GetName,
    SetInfo {
        attribute: String,
        value: Bytes,
    },
    Info,
    List {
        ids: Option<Vec<u64>>,
    },
    Kill(KillFilter),
    Ok,
    GetRedir,
    TrackingInfo,
    /// CLIENT CACHING: an error, as for any client that is not tracking.
    Caching,
    /// CLIENT TRACKING: refused.
    Tracking,
    Help,
}

#[derive(Debug, Default)]
pub struct KillFilter {
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    skip_me: bool,
    /// TYPE: as CLIENT LIST counts them, every connection is `normal`; `master`, `replica` and
    /// `pubsub` match none.
    type_matches_none: bool,
    user: Option<String>,
    /// MAXAGE: only connections at least this old (seconds).
    min_age_s: Option<u64>,
    /// The old form `CLIENT KILL addr:port` replies +OK or an error instead of a count.
    legacy: bool,
}

const HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ID -- Return the ID of the current connection.",
    "GETNAME -- Return the name of the current connection.",
    "SETNAME <name> -- Assign the name <name> to the current connection.",
    "SETINFO <LIB-NAME|LIB-VER> <value> -- Set client library name or version.",
    "INFO -- Return information about the current client connection.",
    "LIST [TYPE normal] [ID id ...] -- Return information about client connections.",
    "KILL <ip:port> | KILL [ID <id>] [ADDR <ip:port>] [LADDR <ip:port>] [SKIPME yes|no] -- Kill connections.",
    "GETREDIR -- Return -1: client tracking is not supported, so never on.",
    "TRACKINGINFO -- Report the tracking status (off) of the current connection.",
    "HELP -- Print this help.",
];

impl CommandDef for Client {
    const META: Meta = Meta {
        syntax: "CLIENT ID | SETNAME connection-name | GETNAME | \
            SETINFO <LIB-NAME libname | LIB-VER libver> | INFO | \
            LIST [TYPE <NORMAL | MASTER | REPLICA | PUBSUB>] [ID client-id [client-id ...]] | \
            KILL <ip:port | <ID client-id | ADDR ip:port | LADDR ip:port | SKIPME <YES | NO>> ...> | \
            NO-EVICT <ON | OFF> | NO-TOUCH <ON | OFF> | HELP",
        subcommands: &[
            SubMeta {
                name: "client|id",
                arity: 2,
                summary: "Returns the unique client ID of the connection.",
            },
            SubMeta {
                name: "client|setname",
                arity: 3,
                summary: "Sets the connection name.",
            },
            SubMeta {
                name: "client|getname",
                arity: 2,
                summary: "Returns the name of the connection.",
            },
            SubMeta {
                name: "client|setinfo",
                arity: 4,
                summary: "Sets information specific to the client or connection.",
            },
            SubMeta {
                name: "client|info",
                arity: 2,
                summary: "Returns information about the connection.",
            },
            SubMeta {
                name: "client|list",
                arity: -2,
                summary: "Lists open connections.",
            },
            SubMeta {
                name: "client|kill",
                arity: -3,
                summary: "Terminates open connections.",
            },
            SubMeta {
                name: "client|getredir",
                arity: 2,
                summary: "Returns the redirection client ID for server-assisted client side caching.",
            },
            SubMeta {
                name: "client|trackinginfo",
                arity: 2,
                summary: "Returns information about server-assisted client side caching for the connection.",
            },
            SubMeta {
                name: "client|help",
                arity: 2,
                summary: "Returns helpful text about the different subcommands.",
            },
        ],
        ..Meta::new(
            "client",
            -2,
            CommandFlags::READ,
            "A container for client connection commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        // Matched upper-cased; named in an error as sent (Redis quotes it as is).
        let raw = args.next_opt().unwrap_or_default();
        let sub = String::from_utf8_lossy(&raw).to_ascii_uppercase();
        let arity = |name: &'static str, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(CommandError::WrongArity(name.into()))
            }
        };
        let n = args.remaining();
        Ok(match sub.as_str() {
            "ID" => arity("client|id", n == 0).map(|_| Client::Id)?,
            "GETNAME" => arity("client|getname", n == 0).map(|_| Client::GetName)?,
            "INFO" => arity("client|info", n == 0).map(|_| Client::Info)?,
            "HELP" => arity("client|help", n == 0).map(|_| Client::Help)?,
            "GETREDIR" => arity("client|getredir", n == 0).map(|_| Client::GetRedir)?,
            "TRACKINGINFO" => arity("client|trackinginfo", n == 0).map(|_| Client::TrackingInfo)?,
            "CACHING" => {
                arity("client|caching", n == 1)?;
                args.next_opt();
                Client::Caching
            }
            "TRACKING" => {
                arity("client|tracking", n >= 1)?;
                while args.next_opt().is_some() {}
                Client::Tracking
            }
            "NO-EVICT" | "NO-TOUCH" => {
                arity("client|no-evict", n == 1)?;
                match args.next_keyword().as_deref() {
                    Some("ON") | Some("OFF") => Client::Ok,
                    _ => return Err(CommandError::Syntax),
                }
            }
            "SETNAME" => {
                arity("client|setname", n == 1)?;
                let name = args.next_bytes()?;
                validate_client_name(&name)?;
                Client::SetName(name)
            }
            "SETINFO" => {
                arity("client|setinfo", n == 2)?;
                let attribute = args.next_keyword().unwrap_or_default();
                if attribute != "LIB-NAME" && attribute != "LIB-VER" {
                    return Err(CommandError::UnrecognizedOption(flockd_proto::printable(
                        attribute.as_bytes(),
                        64,
                    )));
                }
                let value = args.next_bytes()?;
                validate_client_name(&value)?;
                Client::SetInfo { attribute, value }
            }
            "LIST" => {
                let mut ids = None;
                while let Some(option) = args.next_keyword() {
                    match option.as_str() {
                        "TYPE" => match args.next_keyword().as_deref() {
                            Some("NORMAL") => {}
                            Some(t) if ["MASTER", "REPLICA", "PUBSUB"].contains(&t) => {
                                ids = Some(vec![])
                            }
                            _ => return Err(CommandError::Syntax),
                        },
                        "ID" => {
                            let mut list = vec![];
                            while let Some(raw) = args.next_opt() {
                                match parse_int(&raw) {
                                    Some(id) if id > 0 => list.push(id as u64),
                                    _ => {
                                        return Err(CommandError::InvalidClientId);
                                    }
                                }
                            }
                            ids = Some(list);
                        }
                        _ => return Err(CommandError::Syntax),
                    }
                }
                Client::List { ids }
            }
            "KILL" => Client::Kill(parse_kill(args)?),
            _ => {
                return Err(CommandError::UnknownSubcommand {
                    command: "CLIENT",
                    sub: flockd_proto::printable(&raw, 128),
                });
            }
        })
    }
}

impl LocalCommand for Client {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let handle = &ctx.conn.handle;
        match self {
            Client::Id => reply(Reply::Integer(handle.id as i64)),
            Client::SetName(name) => {
                handle.names.lock().name = (!name.is_empty()).then_some(name);
                reply(Reply::ok())
            }
            Client::GetName => reply(
                handle
                    .names
                    .lock()
                    .name
                    .clone()
                    .map(Reply::Bulk)
                    .unwrap_or(Reply::Null),
            ),
            Client::SetInfo { attribute, value } => {
                let mut names = handle.names.lock();
                let slot = if attribute == "LIB-NAME" {
                    &mut names.lib_name
                } else {
                    &mut names.lib_ver
                };
                *slot = (!value.is_empty()).then_some(value);
                reply(Reply::ok())
            }
            Client::Info => reply(Reply::Verbatim(Bytes::from(format!(
                "{}\n",
                handle.describe(|i| ctx.server.command_table()[i].name)
            )))),
            Client::List { ids } => {
                let mut text = String::new();
                for client in ctx.server.clients().all() {
                    if ids.as_ref().is_none_or(|ids| ids.contains(&client.id)) {
                        text.push_str(&client.describe(|i| ctx.server.command_table()[i].name));
                        text.push('\n');
                    }
                }
                reply(Reply::Verbatim(Bytes::from(text)))
            }
            Client::Kill(filter) => kill(ctx, filter),
            Client::Ok => reply(Reply::ok()),
            Client::GetRedir => reply(Reply::Integer(-1)),
            Client::TrackingInfo => reply(Reply::Map(vec![
                (Reply::bulk("flags"), Reply::Set(vec![Reply::bulk("off")])),
                (Reply::bulk("redirect"), Reply::Integer(-1)),
                (Reply::bulk("prefixes"), Reply::Array(vec![])),
            ])),
            Client::Caching => Err(CommandError::CachingWithoutTracking),
            Client::Tracking => Err(CommandError::TrackingUnsupported),
            Client::Help => reply(Reply::Array(
                HELP.iter().map(|l| Reply::Simple((*l).into())).collect(),
            )),
        }
    }
}

fn parse_kill(args: &mut Args) -> Result<KillFilter, CommandError> {
    let mut filter = KillFilter {
        skip_me: true,
        ..KillFilter::default()
    };
    if args.remaining() == 1 {
        let addr = args.next_bytes()?;
        filter.addr = Some(String::from_utf8_lossy(&addr).into_owned());
        filter.legacy = true;
        filter.skip_me = false;
        return Ok(filter);
    }
    while let Some(option) = args.next_keyword() {
        let value = args.next_bytes().map_err(|_| CommandError::Syntax)?;
        let text = String::from_utf8_lossy(&value).into_owned();
        match option.as_str() {
            "ID" => match parse_int(&value) {
                Some(id) if id > 0 => filter.id = Some(id as u64),
                _ => {
                    return Err(CommandError::ClientIdNotPositive);
                }
            },
            "ADDR" => filter.addr = Some(text),
            "LADDR" => filter.laddr = Some(text),
            "SKIPME" => match text.to_ascii_lowercase().as_str() {
                "yes" => filter.skip_me = true,
                "no" => filter.skip_me = false,
                _ => return Err(CommandError::Syntax),
            },
            "TYPE" => match text.to_ascii_lowercase().as_str() {
                "normal" => {}
                "master" | "replica" | "slave" | "pubsub" => filter.type_matches_none = true,
                _ => return Err(CommandError::UnknownClientType(text)),
            },
            "USER" => filter.user = Some(text),
            "MAXAGE" => match parse_int(&value) {
                Some(age) if age >= 0 => filter.min_age_s = Some(age as u64),
                _ => return Err(CommandError::NotInteger),
            },
            _ => return Err(CommandError::Syntax),
        }
    }
    Ok(filter)
}

fn kill(ctx: &mut Ctx<'_>, filter: KillFilter) -> CommandResult {
    let me = ctx.conn.handle.id;
    let mut killed = 0;
    for client in ctx.server.clients().all() {
        let matches = filter.id.is_none_or(|id| id == client.id)
            && filter
                .addr
                .as_ref()
                .is_none_or(|a| *a == client.addr.to_string())
            && filter
                .laddr
                .as_ref()
                .is_none_or(|a| *a == client.laddr.to_string())
            && !(filter.skip_me && client.id == me)
            && !filter.type_matches_none
            && filter.user.as_ref().is_none_or(|user| {
                let names = client.names.lock();
                names.user.as_deref().unwrap_or(b"default") == user.as_bytes()
            })
            && filter
                .min_age_s
                .is_none_or(|age| client.created.elapsed().as_secs() >= age);
        if matches {
            client.kill.cancel();
            killed += 1;
        }
    }
    match (filter.legacy, killed) {
        (true, 0) => Err(CommandError::NoSuchClient),
        (true, _) => reply(Reply::ok()),
        (false, n) => reply(Reply::Integer(n)),
    }
}

/// Redis refuses names with spaces, newlines or other special characters (they would break
/// CLIENT LIST's line format).
pub fn validate_client_name(name: &[u8]) -> Result<(), CommandError> {
    if name.iter().all(|b| (b'!'..=b'~').contains(b)) {
        Ok(())
    } else {
        Err(CommandError::BadClientName)
    }
}
