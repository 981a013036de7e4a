//! INFO [section ...]: server, clients, memory, persistence, stats, replication, locks,
//! commandstats, cluster and keyspace, in Redis's `# Section` / `field:value` format and section order, so monitoring
//! that reads Redis's INFO (redis-cli --stat, prometheus-redis-exporter) can read flockd's.

use std::fmt::Write;

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};
use super::server::Server;
use crate::services::applied::Totals;
use crate::services::stats::{self, human_bytes, read};

const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "locks",
    "cluster",
    "keyspace",
];
const ALL_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "locks",
    "commandstats",
    "cluster",
    "keyspace",
];

/// Estimated bytes of the lock table per item (see [`table_bytes`]).
const BYTES_PER_NAME: u64 = 100;
const BYTES_PER_HELD_LOCK: u64 = 200;
const BYTES_PER_WAITER: u64 = 64;
const BYTES_PER_FENCE_KEY: u64 = 80;

/// An estimate of the lock table's own memory from its counts: a name's 56-byte slot in its
/// stripe's hash table, 53-80% full (about 100 bytes, 83-84 measured once the allocator has
/// returned a growth's freed arrays: the figure `max-idle-names` is documented with), a held lock's holding and its lease deadline in the expiry index, a waiter, a fence
/// key's slot. Names over 22 bytes, owner ids and fence values add their own length on top, and
/// are not counted.
fn table_bytes(names: u64, held: u64, waiters: u64, fence_keys: u64) -> u64 {
    names * BYTES_PER_NAME
        + held * BYTES_PER_HELD_LOCK
        + waiters * BYTES_PER_WAITER
        + fence_keys * BYTES_PER_FENCE_KEY
}

#[derive(Debug)]
pub struct Info {
    sections: Vec<String>,
}

impl CommandDef for Info {
    const META: Meta = Meta {
        syntax: "INFO [section [section ...]]",
        group: "server",
        ..Meta::new(
            "info",
            -1,
            CommandFlags {
                fast: false,
                ..CommandFlags::READ
            },
            "Returns information and statistics about the server.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let mut sections = vec![];
        while let Some(raw) = args.next_opt() {
            sections.push(String::from_utf8_lossy(&raw).to_ascii_lowercase());
        }
        Ok(Info { sections })
    }
}

impl LocalCommand for Info {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let mut wanted: Vec<&str> =
            if self.sections.is_empty() || self.sections.iter().any(|s| s == "default") {
                DEFAULT_SECTIONS.to_vec()
            } else if self
                .sections
                .iter()
                .any(|s| s == "all" || s == "everything")
            {
                ALL_SECTIONS.to_vec()
            } else {
                ALL_SECTIONS
                    .iter()
                    .copied()
                    .filter(|s| self.sections.iter().any(|w| w == s))
                    .collect()
            };
        // Only when named: it walks every lock name under the state's read lock, which no
        // routine INFO poll should do.
        if self.sections.iter().any(|s| s == "digest") {
            wanted.push("digest");
        }
        let mut text = String::new();
        for section in wanted {
            if !text.is_empty() {
                text.push_str("\r\n");
            }
            render(ctx.server, section, &mut text);
        }
        reply(Reply::Verbatim(Bytes::from(text)))
    }
}

fn render(server: &dyn Server, section: &str, out: &mut String) {
    // A name starting with '#' is a section header line.
    let mut field = |name: &str, value: &dyn std::fmt::Display| {
        let _ = if name.starts_with('#') {
            write!(out, "{name}\r\n")
        } else {
            write!(out, "{name}:{value}\r\n")
        };
    };
    match section {
        "server" => {
            field("# Server", &"");
            field("redis_version", &super::hello::REDIS_COMPAT_VERSION);
            field("flockd_version", &env!("CARGO_PKG_VERSION"));
            field("redis_mode", &"standalone");
            field("os", &std::env::consts::OS);
            field("arch_bits", &(usize::BITS));
            field("process_id", &std::process::id());
            field("tcp_port", &server.local_addr().port());
            field("uptime_in_seconds", &server.started().elapsed().as_secs());
            field(
                "uptime_in_days",
                &(server.started().elapsed().as_secs() / 86_400),
            );
            field(
                "executable",
                &std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            );
            // As in Redis: the absolute path CONFIG REWRITE writes, empty without a file.
            let config_file = server.config().load().config_file.as_ref().map(|p| {
                std::fs::canonicalize(p)
                    .unwrap_or_else(|_| p.clone())
                    .display()
                    .to_string()
            });
            field("config_file", &config_file.unwrap_or_default());
        }
        "clients" => {
            field("# Clients", &"");
            field("connected_clients", &server.clients().connected());
            field("maxclients", &server.config().load().maxclients);
            field("blocked_clients", &server.clients().blocked());
        }
        "memory" => {
            let m = stats::memory(server.stats());
            let Totals {
                locks: l,
                fences: f,
                ..
            } = node_totals(server);
            let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
            field("# Memory", &"");
            field("used_memory", &m.used);
            field("used_memory_human", &human_bytes(m.used));
            field("used_memory_rss", &m.rss);
            field("used_memory_rss_human", &human_bytes(m.rss));
            field("used_memory_peak", &m.peak);
            field("used_memory_peak_human", &human_bytes(m.peak));
            field(
                "used_memory_peak_perc",
                &format!("{:.2}%", 100.0 * ratio(m.used, m.peak)),
            );
            field("total_system_memory", &m.total_system);
            field("total_system_memory_human", &human_bytes(m.total_system));
            field("maxmemory", &0);
            field("maxmemory_human", &"0B");
            field("maxmemory_policy", &"noeviction");
            field(
                "mem_fragmentation_ratio",
                &format!("{:.2}", ratio(m.rss, m.used)),
            );
            field("mem_allocator", &"libc");
            let table = table_bytes(l.names, l.locks_held, l.waiters, f.keys);
            field("flock_table_bytes", &table);
            field("flock_table_bytes_human", &human_bytes(table));
        }
        "stats" => {
            let s = server.stats();
            field("# Stats", &"");
            field("total_connections_received", &read(&s.connections_received));
            field("total_commands_processed", &read(&s.commands_processed));
            field("total_net_input_bytes", &read(&s.net_input_bytes));
            field("total_net_output_bytes", &read(&s.net_output_bytes));
            field("rejected_connections", &read(&s.rejected_connections));
            // Every error reply: failed and rejected calls, and the errors that are no call
            // (unknown commands and subcommands, protocol errors), as Redis counts them.
            field(
                "total_error_replies",
                &(s.commands
                    .iter()
                    .map(|c| read(&c.failed) + read(&c.rejected))
                    .sum::<u64>()
                    + read(&s.unknown_commands)
                    + read(&s.unknown_subcommands)
                    + read(&s.protocol_errors)),
            );
            field("unknown_commands", &read(&s.unknown_commands));
            field("http_requests_refused", &read(&s.http_requests_refused));
            field("protocol_errors", &read(&s.protocol_errors));
        }
        "persistence" => {
            field("# Persistence", &"");
            server
                .log()
                .persistence_info(&mut |name, value| field(name, value));
        }
        "digest" => {
            field("# Digest", &"");
            // Equal on every node that applied the same log: the fault harness compares it
            // across nodes after healing.
            // A multi-group node's digest folds every group's, in order (one group: its own).
            let digest = server
                .groups()
                .iter()
                .map(|g| g.applied.read().digest())
                .reduce(|all, next| all.rotate_left(7) ^ next)
                .unwrap_or(0);
            field("raft_state_digest", &digest);
        }
        "replication" => {
            field("# Replication", &"");
            let log = server.log();
            let v = log.view();
            let leads = v.role.leads();
            field("role", &if leads { "master" } else { "slave" });
            if !leads && let Some(leader) = v.leader() {
                field("master_host", &leader.host);
                field("master_port", &leader.port);
                field("master_link_status", &"up");
            } else if !leads {
                field("master_link_status", &"down");
            }
            if leads {
                field(
                    "connected_slaves",
                    &v.members.iter().filter(|m| !m.is_me).count(),
                );
            }
            log.replication_info(&mut |name, value| field(name, value));
        }
        "cluster" => {
            field("# Cluster", &"");
            let enabled = server.log().view().node_id.is_some();
            field("cluster_enabled", &u8::from(enabled));
        }
        "locks" => {
            let Totals {
                locks: l,
                fences: f,
                token_floor: floor,
            } = node_totals(server);
            field("# Locks", &"");
            field("lock_names", &l.names);
            field("locks_held", &l.locks_held);
            field("lock_waiters", &l.waiters);
            field("tokens_issued", &l.tokens_issued);
            field("grants", &l.grants);
            field("releases", &l.releases);
            field("expirations", &l.expirations);
            field("force_releases", &l.force_releases);
            field("notowner_rejections", &l.notowner_rejections);
            field("max_idle_names", &server.config().load().max_idle_names);
            field("names_forgotten", &read(&server.stats().names_forgotten));
            field("token_floor", &floor);
            field("fence_keys", &f.keys);
            field("fence_writes_accepted", &f.accepted);
            field("fence_writes_refused", &f.refused);
        }
        "commandstats" => {
            field("# Commandstats", &"");
            for (meta, stat) in server.command_table().iter().zip(&server.stats().commands) {
                let calls = read(&stat.calls);
                let (rejected, failed) = (read(&stat.rejected), read(&stat.failed));
                if calls + rejected == 0 {
                    continue;
                }
                let usec = read(&stat.usec);
                let per_call = if calls > 0 {
                    usec as f64 / calls as f64
                } else {
                    0.0
                };
                field(
                    &format!("cmdstat_{}", meta.name),
                    &format!(
                        "calls={calls},usec={usec},usec_per_call={per_call:.2},rejected_calls={rejected},failed_calls={failed}"
                    ),
                );
            }
        }
        "keyspace" => {
            field("# Keyspace", &"");
            // Lock names are the keys (DBSIZE); held ones have a lease, Redis's `expires`.
            let l = node_totals(server).locks;
            if l.names > 0 {
                field(
                    "db0",
                    &format!("keys={},expires={},avg_ttl=0", l.names, l.locks_held),
                );
            }
        }
        _ => {}
    }
}

/// The lock table's figures over every group this node holds.
fn node_totals(server: &dyn Server) -> Totals {
    Totals::of(server.groups().iter().map(|g| &*g.applied))
}
