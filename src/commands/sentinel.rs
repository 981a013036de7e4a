//! SENTINEL: Redis Sentinel's discovery commands, answered by every node, so a client made for
//! Sentinel (redis-py's `Sentinel`, ioredis's `sentinels`, redis-rs's `sentinel`) lists the
//! nodes as its sentinels and follows the leader by itself. The one master is the cluster's
//! leader under `sentinel-master-name`; its replicas are the other members and so are the
//! "other sentinels". A single node is its own master with nothing else.
//!
//! Only discovery is here: nothing configures or fails over through SENTINEL (Raft does that),
//! and the leader changes are announced by `crate::server::sentinel` (`+switch-master`).

use flockd_proto::Reply;

use crate::log::LogMember;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta};
use flockd_proto::printable;

#[derive(Debug)]
pub enum Sentinel {
    GetMasterAddrByName(Vec<u8>),
    Masters,
    Master(Vec<u8>),
    Replicas(Vec<u8>),
    Sentinels(Vec<u8>),
    MyId,
    Help,
}

const HELP: &[&str] = &[
    "SENTINEL <subcommand> [<arg> ...]. Subcommands are:",
    "GET-MASTER-ADDR-BY-NAME <master-name>",
    "    The leader's host and client port.",
    "MASTERS",
    "    The one master (the leader), as Sentinel describes one.",
    "MASTER <master-name>",
    "    The same, for the name.",
    "REPLICAS <master-name>",
    "    The other members (SLAVES is the same).",
    "SENTINELS <master-name>",
    "    The other members, as sentinels.",
    "MYID",
    "    This node's sentinel id.",
    "HELP",
    "    Prints this help.",
];

impl CommandDef for Sentinel {
    const META: Meta = Meta {
        syntax: "SENTINEL GET-MASTER-ADDR-BY-NAME name | MASTERS | MASTER name | REPLICAS name | SLAVES name | SENTINELS name | MYID | HELP",
        group: "sentinel",
        subcommands: &[
            SubMeta {
                name: "sentinel|get-master-addr-by-name",
                arity: 3,
                summary: "Returns the leader's address.",
            },
            SubMeta {
                name: "sentinel|masters",
                arity: 2,
                summary: "Returns the master (the leader).",
            },
            SubMeta {
                name: "sentinel|master",
                arity: 3,
                summary: "Returns the master of that name.",
            },
            SubMeta {
                name: "sentinel|replicas",
                arity: 3,
                summary: "Returns the followers.",
            },
            SubMeta {
                name: "sentinel|slaves",
                arity: 3,
                summary: "Returns the followers.",
            },
            SubMeta {
                name: "sentinel|sentinels",
                arity: 3,
                summary: "Returns the other members, as sentinels.",
            },
            SubMeta {
                name: "sentinel|myid",
                arity: 2,
                summary: "Returns this node's sentinel id.",
            },
            SubMeta {
                name: "sentinel|help",
                arity: 2,
                summary: "Returns helpful text about the different subcommands.",
            },
        ],
        ..Meta::new(
            "sentinel",
            -2,
            CommandFlags {
                fast: true,
                ..CommandFlags::READ
            },
            "A container for Sentinel's discovery commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let raw = args.next_bytes()?;
        let sub = raw.to_ascii_uppercase();
        let mut with_name = |name: &'static str| -> Result<Vec<u8>, CommandError> {
            if args.remaining() != 1 {
                return Err(CommandError::WrongArity(name.into()));
            }
            Ok(args.next_bytes()?.to_vec())
        };
        let cmd = match sub.as_slice() {
            b"GET-MASTER-ADDR-BY-NAME" => {
                Sentinel::GetMasterAddrByName(with_name("sentinel|get-master-addr-by-name")?)
            }
            b"MASTER" => Sentinel::Master(with_name("sentinel|master")?),
            b"REPLICAS" => Sentinel::Replicas(with_name("sentinel|replicas")?),
            b"SLAVES" => Sentinel::Replicas(with_name("sentinel|slaves")?),
            b"SENTINELS" => Sentinel::Sentinels(with_name("sentinel|sentinels")?),
            b"MASTERS" | b"MYID" | b"HELP" => {
                if args.remaining() != 0 {
                    let name = match sub.as_slice() {
                        b"MASTERS" => "sentinel|masters",
                        b"MYID" => "sentinel|myid",
                        _ => "sentinel|help",
                    };
                    return Err(CommandError::WrongArity(name.into()));
                }
                match sub.as_slice() {
                    b"MASTERS" => Sentinel::Masters,
                    b"MYID" => Sentinel::MyId,
                    _ => Sentinel::Help,
                }
            }
            _ => {
                return Err(CommandError::UnknownSubcommand {
                    command: "SENTINEL",
                    sub: printable(&raw, 128),
                });
            }
        };
        Ok(cmd)
    }
}

/// A member as Sentinel names things: its client address and its sentinel id.
#[derive(Clone)]
struct Node {
    id: u64,
    host: String,
    port: u16,
}

impl Node {
    /// A 40-hex-digit id, as Sentinel's, fixed per node id.
    fn run_id(&self) -> String {
        crate::log::node_name(self.id)
    }
}

/// What the command describes: the leader (if one is known), the others, and how the cluster
/// is tuned.
struct Picture {
    me: Node,
    leader: Option<Node>,
    others: Vec<Node>,
    members: usize,
    term: u64,
    applied_index: u64,
    election_timeout_ms: u64,
    wait_leader_ms: u64,
}

fn picture(ctx: &Ctx<'_>) -> Picture {
    let config = ctx.server.config().load();
    let view = ctx.server.log().view();
    let local = ctx.server.local_addr();
    let node = |m: &LogMember| Node {
        // A single node has no id: it is node 1 of a cluster of one.
        id: m.id.unwrap_or(1),
        host: m.host.clone(),
        port: m.port,
    };
    let me = view.me().map(node).unwrap_or(Node {
        id: view.node_id.unwrap_or(1),
        host: local.ip().to_string(),
        port: local.port(),
    });
    let leader = view.leader();
    let cluster_config = config.cluster.as_ref();
    Picture {
        others: view
            .members
            .iter()
            .filter(|m| leader.is_none_or(|l| l.id != m.id))
            .map(node)
            .collect(),
        leader: leader.map(node),
        me,
        members: view.members.len(),
        term: view.term,
        applied_index: view.applied_index,
        election_timeout_ms: cluster_config.map_or(0, |c| c.election_timeout_ms),
        wait_leader_ms: cluster_config.map_or(0, |c| c.wait_leader_ms),
    }
}

/// The fields every kind of Sentinel state has after its address and flags: the link to it
/// (always up: a member answers through Raft, not through pings), and the down-after time.
fn link_fields(p: &Picture) -> Vec<(&'static str, String)> {
    vec![
        ("link-pending-commands", "0".into()),
        ("link-refcount", "1".into()),
        ("last-ping-sent", "0".into()),
        ("last-ok-ping-reply", "0".into()),
        ("last-ping-reply", "0".into()),
        ("down-after-milliseconds", p.election_timeout_ms.to_string()),
    ]
}

/// `head`, the link fields, then `tail`, as one Sentinel state.
fn state(
    head: Vec<(&'static str, String)>,
    p: &Picture,
    tail: Vec<(&'static str, String)>,
) -> Reply {
    fields(head.into_iter().chain(link_fields(p)).chain(tail).collect())
}

fn fields(pairs: Vec<(&'static str, String)>) -> Reply {
    Reply::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Reply::bulk(k), Reply::bulk(v)))
            .collect(),
    )
}

/// SENTINEL MASTER's fields. With no leader known the master is down (`s_down,o_down`), so a
/// client asks another node.
fn master_state(name: &str, p: &Picture) -> Reply {
    let (host, port, id, flags) = match &p.leader {
        Some(l) => (l.host.clone(), l.port, l.run_id(), "master"),
        None => (String::new(), 0, String::new(), "master,s_down,o_down"),
    };
    state(
        vec![
            ("name", name.to_owned()),
            ("ip", host),
            ("port", port.to_string()),
            ("runid", id),
            ("flags", flags.to_owned()),
        ],
        p,
        vec![
            ("info-refresh", "0".into()),
            ("role-reported", "master".into()),
            ("role-reported-time", "0".into()),
            ("config-epoch", p.term.to_string()),
            ("num-slaves", p.others.len().to_string()),
            (
                "num-other-sentinels",
                p.members.saturating_sub(1).to_string(),
            ),
            ("quorum", (p.members / 2 + 1).to_string()),
            ("failover-timeout", p.wait_leader_ms.to_string()),
            ("parallel-syncs", "1".into()),
        ],
    )
}

fn replica_state(n: &Node, p: &Picture) -> Reply {
    let (master_host, master_port, link) = match &p.leader {
        Some(l) => (l.host.clone(), l.port.to_string(), "ok"),
        None => (String::new(), "0".to_owned(), "err"),
    };
    state(
        vec![
            ("name", format!("{}:{}", n.host, n.port)),
            ("ip", n.host.clone()),
            ("port", n.port.to_string()),
            ("runid", n.run_id()),
            ("flags", "slave".into()),
        ],
        p,
        vec![
            ("info-refresh", "0".into()),
            ("role-reported", "slave".into()),
            ("role-reported-time", "0".into()),
            ("master-link-down-time", "0".into()),
            ("master-link-status", link.into()),
            ("master-host", master_host),
            ("master-port", master_port),
            ("slave-priority", "100".into()),
            (
                "slave-repl-offset",
                if n.id == p.me.id {
                    p.applied_index.to_string()
                } else {
                    "0".into()
                },
            ),
        ],
    )
}

fn sentinel_state(n: &Node, p: &Picture) -> Reply {
    state(
        vec![
            ("name", n.run_id()),
            ("ip", n.host.clone()),
            ("port", n.port.to_string()),
            ("runid", n.run_id()),
            ("flags", "sentinel".into()),
        ],
        p,
        vec![
            ("last-hello-message", "0".into()),
            ("voted-leader", "?".into()),
            ("voted-leader-epoch", "0".into()),
        ],
    )
}

fn no_such_master() -> CommandResult {
    reply(Reply::error("ERR No such master with that name"))
}

impl LocalCommand for Sentinel {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let name = ctx.server.config().load().sentinel_master_name.clone();
        let known = |asked: &[u8]| asked == name.as_bytes();
        match self {
            Sentinel::Help => reply(Reply::Array(
                HELP.iter().map(|l| Reply::Simple((*l).into())).collect(),
            )),
            Sentinel::MyId => reply(Reply::bulk(picture(ctx).me.run_id())),
            Sentinel::GetMasterAddrByName(asked) => {
                // Redis answers a name it does not know with a null; so does a node that knows
                // no leader now, and the client asks its next sentinel.
                let leader = known(&asked).then(|| picture(ctx).leader).flatten();
                reply(match leader {
                    Some(l) => {
                        Reply::Array(vec![Reply::bulk(l.host), Reply::bulk(l.port.to_string())])
                    }
                    None => Reply::NullArray,
                })
            }
            Sentinel::Masters => reply(Reply::Array(vec![master_state(&name, &picture(ctx))])),
            Sentinel::Master(asked) if known(&asked) => reply(master_state(&name, &picture(ctx))),
            Sentinel::Replicas(asked) if known(&asked) => {
                let p = picture(ctx);
                reply(Reply::Array(
                    p.others.iter().map(|n| replica_state(n, &p)).collect(),
                ))
            }
            Sentinel::Sentinels(asked) if known(&asked) => {
                let p = picture(ctx);
                let others = p.others.iter().chain(p.leader.iter());
                reply(Reply::Array(
                    others
                        .filter(|n| n.id != p.me.id)
                        .map(|n| sentinel_state(n, &p))
                        .collect(),
                ))
            }
            Sentinel::Master(_) | Sentinel::Replicas(_) | Sentinel::Sentinels(_) => {
                no_such_master()
            }
        }
    }
}
