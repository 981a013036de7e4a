//! The command table's face toward users and permissions: the ACL categories of every command
//! and subcommand, the names ACL rules may use, and the admission step's check of a request
//! against the connection's user, which logs each refusal in ACL LOG.

use std::sync::OnceLock;

use bytes::Bytes;
use flockd_acl::{Acl, CommandInfo, Denial, User};

use super::context::ConnState;
use super::error::CommandError;
use super::meta::Meta;
use crate::services::acl::AclState;

/// Logs a refusal of `object` to the connection's user in ACL LOG.
pub fn deny(state: &AclState, conn: &ConnState, table: &[Meta], reason: Denial, object: &str) {
    record(state, conn, table, &conn.user.name, reason, object);
}

/// An ACL LOG entry for `username` (the one tried, for a failed AUTH) on this connection.
pub fn record(
    state: &AclState,
    conn: &ConnState,
    table: &[Meta],
    username: &str,
    reason: Denial,
    object: &str,
) {
    let context = if conn.in_transaction {
        "multi"
    } else {
        "toplevel"
    };
    let client = conn.handle.describe(|i| table[i].name);
    state.record(username, reason, object, context, client);
}

/// Whether `name` is a command, `command|subcommand` or `@category` the rules may name.
pub fn known(table: &[Meta], name: &str) -> bool {
    if let Some(category) = name.strip_prefix('@') {
        return CATEGORIES.contains(&category);
    }
    match name.split_once('|') {
        Some((command, sub)) => table.iter().any(|m| {
            m.name == command
                && m.subcommands
                    .iter()
                    .any(|s| s.name.split('|').nth(1) == Some(sub))
        }),
        None => table.iter().any(|m| m.name == name),
    }
}

/// The categories of the contract, plus Redis's `transaction`.
pub const CATEGORIES: &[&str] = &[
    "flock",
    "fence",
    "read",
    "write",
    "admin",
    "pubsub",
    "connection",
    "dangerous",
    "fast",
    "slow",
    "blocking",
    "transaction",
];

/// Subcommands that are not admin although their command is (ACL WHOAMI and ACL CAT, FLOCK.CLUSTER
/// NODES and HELP), and subcommands that are although theirs is not (CLIENT KILL).
fn sub_is_admin(command: &str, sub: &str, command_is_admin: bool) -> bool {
    match (command, sub) {
        ("acl", "whoami" | "cat") => false,
        ("flock.cluster", "nodes" | "help") => false,
        ("client", "kill") => true,
        _ => command_is_admin,
    }
}

fn categories_of(meta: &Meta, sub: Option<&str>) -> Vec<&'static str> {
    let admin = match sub {
        Some(sub) => sub_is_admin(meta.name, sub, meta.flags.admin),
        None => meta.flags.admin,
    };
    // The contract: what breaks or rewrites state is @admin and @dangerous and in no other
    // category but @slow, so a service user written `+@flock` or `+@write` never gets it.
    if admin {
        return vec!["admin", "dangerous", "slow"];
    }
    let mut out = Vec::new();
    match meta.group {
        "flock" => out.push("flock"),
        "fence" => out.push("fence"),
        "transactions" => out.push("transaction"),
        "pubsub" => out.push("pubsub"),
        _ => {}
    }
    if matches!(
        meta.name,
        "ping"
            | "echo"
            | "hello"
            | "auth"
            | "client"
            | "select"
            | "quit"
            | "reset"
            | "readonly"
            | "readwrite"
            | "asking"
    ) {
        out.push("connection");
    }
    if meta.flags.write {
        out.push("write");
    } else if meta.keys.0 > 0 || meta.group == "generic" {
        // Redis's generic keyspace commands read keys, SCAN without naming one.
        out.push("read");
    }
    out.push(if meta.flags.fast { "fast" } else { "slow" });
    if meta.flags.blocking {
        out.push("blocking");
    }
    out
}

type Categories = Vec<&'static str>;

struct Catalog {
    /// Per table index: the command's categories, and its subcommands' (`sub` without the
    /// command's name).
    commands: Vec<(Categories, Vec<(String, Categories)>)>,
}

/// The categories of every command of `table`, worked out once (there is one table:
/// `commands::TABLE`).
fn catalog(table: &[Meta]) -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| Catalog {
        commands: table
            .iter()
            .map(|meta| {
                let subs = meta
                    .subcommands
                    .iter()
                    .filter_map(|s| s.name.split('|').nth(1))
                    .map(|sub| (sub.to_string(), categories_of(meta, Some(sub))))
                    .collect();
                (categories_of(meta, None), subs)
            })
            .collect(),
    })
}

/// The commands in `category` (ACL CAT category), subcommands as `command|sub`.
pub fn commands_in(table: &[Meta], category: &str) -> Vec<String> {
    let catalog = catalog(table);
    let mut out = Vec::new();
    for (meta, (cats, subs)) in table.iter().zip(&catalog.commands) {
        if subs.is_empty() {
            if cats.contains(&category) {
                out.push(meta.name.to_string());
            }
            continue;
        }
        for (sub, sub_cats) in subs {
            if sub_cats.contains(&category) {
                out.push(format!("{}|{sub}", meta.name));
            }
        }
    }
    out
}

/// The admission step's check: `args` is the whole request (command name first). Commands
/// allowed before AUTH are not subject to ACL rules (as in Redis).
pub fn check(
    state: &AclState,
    conn: &mut ConnState,
    table: &[Meta],
    index: usize,
    args: &[Bytes],
) -> Result<(), CommandError> {
    let meta = &table[index];
    if meta.flags.no_auth {
        return Ok(());
    }
    let generation = state.generation();
    if conn.acl_generation != generation {
        match state.user(&conn.user.name) {
            Some(user) => conn.set_user(user),
            // The user was deleted: its connections end, as in Redis.
            None => return Err(CommandError::UserDeleted),
        }
        conn.acl_generation = generation;
    }
    if conn.user.may_run_everything() {
        return Ok(());
    }
    let (cats, subs) = &catalog(table).commands[index];
    let sub = (!subs.is_empty())
        .then(|| {
            args.get(1)
                .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        })
        .flatten()
        .and_then(|sub| subs.iter().find(|(s, _)| *s == sub));
    let (name, categories) = match sub {
        Some((sub, sub_cats)) => (format!("{}|{sub}", meta.name), sub_cats.as_slice()),
        None => (meta.name.to_string(), cats.as_slice()),
    };
    if !conn.user.can_run(CommandInfo {
        name: &name,
        categories,
    }) {
        deny(state, conn, table, Denial::Command, &name);
        return Err(CommandError::NoPermCommand {
            user: conn.user.name.clone(),
            command: name,
        });
    }
    for i in meta.key_positions(args) {
        let key = &args[i];
        if !conn.user.can_access_key(key) {
            deny(
                state,
                conn,
                table,
                Denial::Key,
                &String::from_utf8_lossy(key),
            );
            return Err(CommandError::NoPermKey);
        }
    }
    Ok(())
}

/// Whether `user` may run `command` (by its name in the command table, no subcommand), as the
/// admission step would decide: the console asks it for the command each endpoint stands for.
pub fn may_run(table: &[Meta], user: &User, command: &str) -> bool {
    let Some(index) = table.iter().position(|m| m.name == command) else {
        return false;
    };
    let (categories, _) = &catalog(table).commands[index];
    user.can_run(CommandInfo {
        name: command,
        categories,
    })
}

/// The users at start: `aclfile` if set (a bad file stops the start), else only `default` with
/// `requirepass`.
pub fn load_users(
    table: &[Meta],
    config: &crate::config::Config,
) -> Result<Acl, flockd_acl::AclError> {
    let requirepass = config.requirepass.as_deref();
    match &config.aclfile {
        None => Ok(Acl::new(requirepass)),
        Some(path) => read_file(table, path, requirepass),
    }
}

/// Reads an aclfile (ACL LOAD and the start).
pub fn read_file(
    table: &[Meta],
    path: &std::path::Path,
    requirepass: Option<&str>,
) -> Result<Acl, flockd_acl::AclError> {
    let text = std::fs::read_to_string(path).map_err(|e| flockd_acl::AclError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    Acl::parse_file(&text, path, requirepass, &|name| known(table, name))
}
