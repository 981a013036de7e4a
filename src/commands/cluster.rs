//! CLUSTER: Redis Cluster's discovery commands, in Redis 7's reply shapes and types, so a stock
//! cluster client (redis-py's `RedisCluster`, ioredis's `Cluster`, node-redis's
//! `createCluster`, the redis crate's cluster client) learns which node serves which slots and
//! sends each name there itself. A shard is a Raft group; its master is the node leading it,
//! the other members its replicas. Node ids are the members' numbers in 40 hex digits
//! ([`node_name`]).
//!
//! A single node has no cluster and answers, as Redis without `cluster-enabled`, that cluster
//! support is disabled. Nothing changes the cluster through CLUSTER: membership is
//! FLOCK.CLUSTER's, and slots are fixed by `cluster-groups`.

use bytes::Bytes;
use flockd_proto::{Reply, printable};

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta};
use crate::log::{LogMember, LogRole, LogView, Shard, node_name};

#[derive(Debug)]
pub enum Cluster {
    Info,
    Nodes,
    Slots,
    Shards,
    KeySlot(Bytes),
    MyId,
    Help,
}

const HELP: &[&str] = &[
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MYID",
    "    Return the node id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port@cport> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
    "HELP",
    "    Prints this help.",
];

const fn sub(name: &'static str, arity: i32, summary: &'static str) -> SubMeta {
    SubMeta {
        name,
        arity,
        summary,
    }
}

impl CommandDef for Cluster {
    const META: Meta = Meta {
        syntax: "CLUSTER INFO | NODES | SLOTS | SHARDS | KEYSLOT key | MYID | HELP",
        group: "cluster",
        subcommands: &[
            sub(
                "cluster|info",
                2,
                "Returns information about the state of a node.",
            ),
            sub(
                "cluster|nodes",
                2,
                "Returns the cluster configuration for a node.",
            ),
            sub(
                "cluster|slots",
                2,
                "Returns the mapping of cluster slots to nodes.",
            ),
            sub(
                "cluster|shards",
                2,
                "Returns the mapping of cluster slots to shards.",
            ),
            sub("cluster|keyslot", 3, "Returns the hash slot for a key."),
            sub("cluster|myid", 2, "Returns the ID of a node."),
            sub(
                "cluster|help",
                2,
                "Returns helpful text about the different subcommands.",
            ),
        ],
        ..Meta::new(
            "cluster",
            -2,
            CommandFlags {
                fast: true,
                ..CommandFlags::READ
            },
            "A container for Redis Cluster's discovery commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let raw = args.next_bytes()?;
        let sub = raw.to_ascii_uppercase();
        let (cmd, arity_name, extra) = match sub.as_slice() {
            b"INFO" => (Cluster::Info, "cluster|info", 0),
            b"NODES" => (Cluster::Nodes, "cluster|nodes", 0),
            b"SLOTS" => (Cluster::Slots, "cluster|slots", 0),
            b"SHARDS" => (Cluster::Shards, "cluster|shards", 0),
            b"MYID" => (Cluster::MyId, "cluster|myid", 0),
            b"HELP" => (Cluster::Help, "cluster|help", 0),
            b"KEYSLOT" => (Cluster::KeySlot(Bytes::new()), "cluster|keyslot", 1),
            _ => {
                return Err(CommandError::UnknownSubcommand {
                    command: "CLUSTER",
                    sub: printable(&raw, 128),
                });
            }
        };
        if args.remaining() != extra {
            return Err(CommandError::WrongArity(arity_name.into()));
        }
        Ok(match cmd {
            Cluster::KeySlot(_) => Cluster::KeySlot(args.next_bytes()?),
            cmd => cmd,
        })
    }
}

/// The shards, or Redis's error for a node without cluster support (a single node).
pub(super) fn enabled(ctx: &Ctx<'_>) -> Result<Vec<Shard>, CommandError> {
    ctx.server
        .log()
        .shards()
        .ok_or_else(|| CommandError::Cluster("This instance has cluster support disabled".into()))
}

impl LocalCommand for Cluster {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let shards = enabled(ctx)?;
        reply(match self {
            Cluster::Info => Reply::Verbatim(Bytes::from(info(&shards))),
            Cluster::Nodes => Reply::Verbatim(Bytes::from(nodes(&shards))),
            Cluster::Slots => slots(&shards),
            Cluster::Shards => Reply::Array(shards.iter().map(shard).collect()),
            Cluster::KeySlot(name) => Reply::Integer(i64::from(flockd_core::slot_of(&name))),
            Cluster::MyId => Reply::bulk(node_name(shards[0].view.node_id.unwrap_or_default())),
            Cluster::Help => Reply::Array(HELP.iter().map(|l| Reply::simple(*l)).collect()),
        })
    }
}

/// The member serving a shard's writes: its leader, or, while none is known, this node (which
/// then waits for one, as any command does), so that a client always has a node per slot.
fn master(view: &LogView) -> Option<&LogMember> {
    view.leader().or_else(|| view.me())
}

/// The members that replicate a shard besides its master: neither removed nor known down.
fn replicas<'a>(view: &'a LogView, master: &'a LogMember) -> impl Iterator<Item = &'a LogMember> {
    view.members
        .iter()
        .filter(move |m| m.id != master.id && m.role != "removed")
}

fn has_leader(shard: &Shard) -> bool {
    shard.view.leader().is_some() && shard.view.role != LogRole::Removed
}

/// CLUSTER INFO's lines. The message counters Redis adds are left out: flockd's nodes talk
/// Raft, not Redis's cluster bus.
fn info(shards: &[Shard]) -> String {
    let slots_ok: usize = shards
        .iter()
        .filter(|s| has_leader(s))
        .map(|s| s.slots.len())
        .sum();
    let view = &shards[0].view;
    let state = if slots_ok == usize::from(flockd_core::SLOT_COUNT) {
        "ok"
    } else {
        "fail"
    };
    let epoch = shards.iter().map(|s| s.view.term).max().unwrap_or(0);
    [
        ("cluster_enabled", "1".to_string()),
        ("cluster_state", state.to_string()),
        (
            "cluster_slots_assigned",
            flockd_core::SLOT_COUNT.to_string(),
        ),
        ("cluster_slots_ok", slots_ok.to_string()),
        ("cluster_slots_pfail", "0".to_string()),
        (
            "cluster_slots_fail",
            (usize::from(flockd_core::SLOT_COUNT) - slots_ok).to_string(),
        ),
        ("cluster_known_nodes", view.members.len().to_string()),
        ("cluster_size", shards.len().to_string()),
        ("cluster_current_epoch", epoch.to_string()),
        ("cluster_my_epoch", view.term.to_string()),
    ]
    .iter()
    .map(|(name, value)| format!("{name}:{value}\r\n"))
    .collect()
}

/// CLUSTER NODES: a line per member, Redis's columns. Pings and pongs are not kept (0); the
/// epoch is the Raft term; a master's line ends with its slot ranges.
fn nodes(shards: &[Shard]) -> String {
    let view = &shards[0].view;
    let mut out = String::new();
    for member in &view.members {
        let id = member.id.unwrap_or_default();
        let led: Vec<&Shard> = shards
            .iter()
            .filter(|s| master(&s.view).is_some_and(|m| m.id == member.id))
            .collect();
        let mut flags = vec![];
        if member.is_me {
            flags.push("myself");
        }
        flags.push(if led.is_empty() { "slave" } else { "master" });
        if !member.up {
            flags.push("fail");
        }
        let of = match (led.is_empty(), master(view)) {
            (true, Some(m)) => node_name(m.id.unwrap_or_default()),
            _ => "-".to_string(),
        };
        let link = if member.up {
            "connected"
        } else {
            "disconnected"
        };
        out.push_str(&format!(
            "{} {} {} {of} 0 0 {} {link}",
            node_name(id),
            member.addr,
            flags.join(","),
            view.term,
        ));
        for s in led {
            out.push_str(&format!(" {}-{}", s.slots.start(), s.slots.end()));
        }
        out.push('\n');
    }
    out
}

/// A node as CLUSTER SLOTS lists it: host, port, id and (empty) networking metadata.
fn slot_node(member: &LogMember) -> Reply {
    Reply::Array(vec![
        Reply::bulk(member.host.clone()),
        Reply::Integer(i64::from(member.port)),
        Reply::bulk(node_name(member.id.unwrap_or_default())),
        Reply::Map(vec![]),
    ])
}

/// CLUSTER SLOTS: per range, its first and last slot, its master, then its replicas that are
/// up (Redis leaves failed replicas out).
fn slots(shards: &[Shard]) -> Reply {
    Reply::Array(
        shards
            .iter()
            .filter_map(|s| {
                let master = master(&s.view)?;
                let mut entry = vec![
                    Reply::Integer(i64::from(*s.slots.start())),
                    Reply::Integer(i64::from(*s.slots.end())),
                    slot_node(master),
                ];
                entry.extend(replicas(&s.view, master).filter(|m| m.up).map(slot_node));
                Some(Reply::Array(entry))
            })
            .collect(),
    )
}

/// One shard of CLUSTER SHARDS: its slot ranges and its nodes, master first.
fn shard(s: &Shard) -> Reply {
    let Some(master) = master(&s.view) else {
        return Reply::Map(vec![]);
    };
    let node = |m: &LogMember, role: &'static str| {
        let health = if m.up { "online" } else { "failed" };
        let fields = vec![
            (
                Reply::bulk("id"),
                Reply::bulk(node_name(m.id.unwrap_or_default())),
            ),
            (Reply::bulk("port"), Reply::Integer(i64::from(m.port))),
            (Reply::bulk("ip"), Reply::bulk(m.host.clone())),
            (Reply::bulk("endpoint"), Reply::bulk(m.host.clone())),
            (Reply::bulk("role"), Reply::bulk(role)),
            (
                Reply::bulk("replication-offset"),
                Reply::Integer(m.index.unwrap_or(0) as i64),
            ),
            (Reply::bulk("health"), Reply::bulk(health)),
        ];
        Reply::Map(fields)
    };
    let nodes = std::iter::once(node(master, "master"))
        .chain(replicas(&s.view, master).map(|m| node(m, "replica")))
        .collect();
    Reply::Map(vec![
        (
            Reply::bulk("slots"),
            Reply::Array(vec![
                Reply::Integer(i64::from(*s.slots.start())),
                Reply::Integer(i64::from(*s.slots.end())),
            ]),
        ),
        (Reply::bulk("nodes"), Reply::Array(nodes)),
    ])
}
