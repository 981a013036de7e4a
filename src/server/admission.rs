//! Admission: the one step every request passes before it runs, whatever its kind. Lookup,
//! authentication, ACL permissions (command and keys), Redis Cluster's redirection
//! ([`super::routing`]), arity and argument parsing, and for state changes whether the log can
//! take them (MISCONF); on a cluster node taken out of its cluster, whether it serves at all.

use flockd_proto::{Reply, Request};

use super::routing;
use super::shared::Shared;
use crate::commands::context::ConnState;
use crate::commands::{self, Command, CommandError, IS_STATE, TABLE};
use crate::config::Config;
use crate::services::stats;

pub enum Admitted {
    /// Run it: the command's table index and the typed command.
    Command { index: usize, command: Command },
    /// Refused with this reply (the connection stays open).
    Refused(Reply),
    /// Refused with this reply, and the connection is closed (its user was deleted).
    Close(Reply),
    /// The connection is closed at once, with no reply and nothing after it run: the request
    /// is the start of an HTTP request (`POST`, `Host:`).
    Drop,
}

/// What a Sentinel answers (the sentinel port): discovery, pub/sub, and the connection's own.
const SENTINEL_PORT_COMMANDS: &[&str] = &[
    "sentinel",
    "role",
    "info",
    "ping",
    "echo",
    "hello",
    "auth",
    "client",
    "command",
    "subscribe",
    "psubscribe",
    "unsubscribe",
    "punsubscribe",
    "quit",
    "reset",
];

/// What a cluster node taken out of its cluster still answers: what it is (INFO, FLOCK.CLUSTER
/// NODES, the logs) and the connection's own commands. Everything else, PING included (so a
/// health check fails), gets the error that says it was removed.
const REMOVED_NODE_COMMANDS: &[&str] = &[
    "info",
    "flock.cluster",
    "hello",
    "auth",
    "client",
    "command",
    "config",
    "acl",
    "slowlog",
    "latency",
    "quit",
    "reset",
    "shutdown",
];

pub fn admit(
    shared: &Shared,
    config: &Config,
    conn: &mut ConnState,
    request: &Request,
) -> Admitted {
    if looks_like_http(&request.args[0]) {
        refuse_http(shared, conn);
        return Admitted::Drop;
    }
    stats::bump(&shared.stats.commands_processed, 1);
    let Some(index) = commands::lookup(&request.args[0]) else {
        stats::bump(&shared.stats.unknown_commands, 1);
        if !conn.authenticated {
            return refuse(CommandError::NoAuth);
        }
        return Admitted::Refused(commands::unknown_command(&request.args));
    };
    let meta = &TABLE[index];
    if meta.name != "monitor" {
        shared.monitors.feed(conn.handle.addr, &request.args);
    }
    let stat = &shared.stats.commands[index];
    if conn.on_sentinel_port(shared) && !SENTINEL_PORT_COMMANDS.contains(&meta.name) {
        return Admitted::Refused(Reply::error(format!(
            "ERR unknown command '{}' on a sentinel port: ask SENTINEL get-master-addr-by-name for the master",
            meta.name
        )));
    }
    // RESP2's subscribed mode: the connection carries messages, and only these commands.
    if conn.subscriptions.active()
        && conn.protocol() == flockd_proto::ProtocolVersion::Resp2
        && !matches!(
            meta.name,
            "subscribe"
                | "psubscribe"
                | "ssubscribe"
                | "unsubscribe"
                | "punsubscribe"
                | "sunsubscribe"
                | "ping"
                | "quit"
                | "reset"
        )
    {
        return Admitted::Refused(Reply::error(format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            meta.name
        )));
    }
    if !conn.authenticated && !meta.flags.no_auth {
        stats::rejected(stat, &CommandError::NoAuth);
        return refuse(CommandError::NoAuth);
    }
    if conn.authenticated
        && let Err(e) =
            crate::commands::permissions::check(&shared.acl, conn, TABLE, index, &request.args)
    {
        stats::rejected(stat, &e);
        if e == CommandError::UserDeleted {
            return Admitted::Close(Reply::error(e.to_string()));
        }
        return refuse(e);
    }
    if let Err(e) = shared.log.check_serving()
        && !REMOVED_NODE_COMMANDS.contains(&meta.name)
    {
        let e = CommandError::from(e);
        stats::rejected(stat, &e);
        return refuse(e);
    }
    if shared.groups.len() > 1 && routing::cross_slot(meta, &request.args) {
        let e = CommandError::CrossSlot;
        stats::rejected(stat, &e);
        return refuse(e);
    }
    if let Some(moved) = routing::redirect(&*shared.log, config, conn, meta, &request.args) {
        return Admitted::Refused(moved);
    }
    let command = match commands::parse(index, &request.args, commands::ArgLimits::of(config)) {
        Ok(command) => command,
        // As in Redis, a subcommand the command lacks is no call of it, not even a rejected one.
        Err(e @ CommandError::UnknownSubcommand { .. }) => {
            stats::bump(&shared.stats.unknown_subcommands, 1);
            return refuse(e);
        }
        Err(e) => {
            stats::rejected(stat, &e);
            return refuse(e);
        }
    };
    if meta.flags.write
        && let Err(e) = shared.log.check_writable()
    {
        let e = CommandError::from(e);
        stats::rejected(stat, &e);
        return refuse(e);
    }
    Admitted::Command { index, command }
}

/// Whether the command at `index` runs at once (a connection command or a read) rather than
/// through the log.
pub fn is_local(index: usize) -> bool {
    !IS_STATE[index]
}

/// Whether a request's first word starts an HTTP request: a browser's `POST` (a form or
/// `fetch` from any web page can send one to a loopback port) or a header line `Host:`. Redis
/// closes the connection on the same two words (`securityWarningCommand`); `GET` needs no
/// check, since flockd has no such command and the `Host:` line that follows it closes.
fn looks_like_http(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}

/// Counts and logs an HTTP request on a RESP port. Logged at most once a minute, as Redis does,
/// so a page that keeps trying cannot flood the log.
fn refuse_http(shared: &Shared, conn: &ConnState) {
    static LAST_LOGGED: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    stats::bump(&shared.stats.http_requests_refused, 1);
    let mut last = LAST_LOGGED.lock().unwrap_or_else(|e| e.into_inner());
    if last.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(60)) {
        *last = Some(std::time::Instant::now());
        tracing::warn!(
            client = %conn.handle.addr,
            "possible security attack: a client sent an HTTP request (POST or Host:) to the RESP port, \
             as a web page in a browser can; its connection was closed and nothing it sent ran \
             (INFO stats: http_requests_refused)"
        );
    }
}

fn refuse(error: CommandError) -> Admitted {
    Admitted::Refused(Reply::error(error.to_string()))
}
