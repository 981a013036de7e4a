//! FLOCK.CLUSTER NODES | ADD id host:port[@cport] | REMOVE id | LEADER id | HELP: the members
//! of a cluster and changes to them. NODES answers on any node; the changes go through the
//! leader's Raft (on another node they answer which node leads).

use flockd_proto::{Reply, parse_int};

use super::args::Args;
use super::context::{CommandResult, Ctx, Outcome, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta};
use flockd_proto::printable;

#[derive(Debug)]
pub enum FlockCluster {
    Nodes,
    Add { id: u64, addr: String },
    Remove { id: u64 },
    Leader { id: u64 },
    Help,
}

const HELP: &[&str] = &[
    "FLOCK.CLUSTER <subcommand> [<arg> ...]. Subcommands are:",
    "NODES",
    "    One line per member: <id> <host:port@cport> <leader|follower|learner|removed> <applied-index> <up|down>,",
    "    and with cluster-groups above 1, groups=<group>:<role>:<index>,... for each group.",
    "ADD <id> <host:port[@cport]>",
    "    Adds a started node: it catches up as a learner, then votes.",
    "REMOVE <id>",
    "    Removes a member.",
    "LEADER <id>",
    "    Hands leadership to a voting member.",
    "HELP",
    "    Prints this help.",
];

impl CommandDef for FlockCluster {
    const META: Meta = Meta {
        syntax: "FLOCK.CLUSTER NODES | ADD id address | REMOVE id | LEADER id | HELP",
        group: "flock",
        subcommands: &[
            SubMeta {
                name: "flock.cluster|nodes",
                arity: 2,
                summary: "Lists the cluster's members.",
            },
            SubMeta {
                name: "flock.cluster|add",
                arity: 4,
                summary: "Adds a node to the cluster.",
            },
            SubMeta {
                name: "flock.cluster|remove",
                arity: 3,
                summary: "Removes a node from the cluster.",
            },
            SubMeta {
                name: "flock.cluster|leader",
                arity: 3,
                summary: "Hands leadership to another node.",
            },
            SubMeta {
                name: "flock.cluster|help",
                arity: 2,
                summary: "Returns helpful text about the different subcommands.",
            },
        ],
        ..Meta::new(
            "flock.cluster",
            -2,
            CommandFlags {
                admin: true,
                fast: false,
                ..CommandFlags::READ
            },
            "A container for cluster membership commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let raw = args.next_bytes()?;
        let sub = raw.to_ascii_uppercase();
        let arity = |name: &'static str, n: usize| {
            if args.remaining() == n {
                Ok(())
            } else {
                Err(CommandError::WrongArity(name.into()))
            }
        };
        let cmd = match sub.as_slice() {
            b"NODES" => {
                arity("flock.cluster|nodes", 0)?;
                FlockCluster::Nodes
            }
            b"HELP" => {
                arity("flock.cluster|help", 0)?;
                FlockCluster::Help
            }
            b"ADD" => {
                arity("flock.cluster|add", 2)?;
                let id = node_id(&args.next_bytes()?)?;
                let addr = String::from_utf8_lossy(&args.next_bytes()?).into_owned();
                crate::log::check_member_addr(id, &addr).map_err(CommandError::Cluster)?;
                FlockCluster::Add { id, addr }
            }
            b"REMOVE" => {
                arity("flock.cluster|remove", 1)?;
                FlockCluster::Remove {
                    id: node_id(&args.next_bytes()?)?,
                }
            }
            b"LEADER" => {
                arity("flock.cluster|leader", 1)?;
                FlockCluster::Leader {
                    id: node_id(&args.next_bytes()?)?,
                }
            }
            _ => {
                return Err(CommandError::UnknownSubcommand {
                    command: "FLOCK.CLUSTER",
                    sub: printable(&raw, 128),
                });
            }
        };
        Ok(cmd)
    }
}

fn node_id(raw: &[u8]) -> Result<u64, CommandError> {
    parse_int(raw)
        .filter(|id| *id >= 1)
        .map(|id| id as u64)
        .ok_or_else(|| CommandError::Cluster("the node id must be an integer in 1..=2^63-1".into()))
}

impl LocalCommand for FlockCluster {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        if let FlockCluster::Help = self {
            return reply(Reply::Array(
                HELP.iter().map(|l| Reply::Simple((*l).into())).collect(),
            ));
        }
        let log = ctx.server.log();
        let Some(membership) = log.membership() else {
            return Err(CommandError::Cluster(
                "this flockd is a single node: start it with node-id and cluster-peers".into(),
            ));
        };
        let done = |result: Result<(), String>| match result {
            Ok(()) => Reply::ok(),
            Err(why) => Reply::error(format!("ERR {why}")),
        };
        match self {
            FlockCluster::Help => unreachable!("answered above"),
            FlockCluster::Nodes => {
                let view = log.view();
                // A multi-group node adds, per member, its role and index in each group.
                let groups = log.shards().filter(|shards| shards.len() > 1);
                let mut text = String::new();
                for m in &view.members {
                    text.push_str(&format!(
                        "{} {} {} {} {}",
                        m.id.unwrap_or(0),
                        m.addr,
                        m.role,
                        m.index.unwrap_or(0),
                        if m.up { "up" } else { "down" }
                    ));
                    if let Some(shards) = &groups {
                        let each: Vec<String> = shards
                            .iter()
                            .zip(1..)
                            .filter_map(|(shard, number)| {
                                let member = shard.view.members.iter().find(|g| g.id == m.id)?;
                                Some(format!(
                                    "{number}:{}:{}",
                                    member.role,
                                    member.index.unwrap_or(0)
                                ))
                            })
                            .collect();
                        text.push_str(&format!(" groups={}", each.join(",")));
                    }
                    text.push('\n');
                }
                reply(Reply::bulk(text))
            }
            FlockCluster::Add { id, addr } => Ok(Outcome::Await(Box::pin(async move {
                done(membership.add(id, addr).await)
            }))),
            FlockCluster::Remove { id } => Ok(Outcome::Await(Box::pin(async move {
                done(membership.remove(id).await)
            }))),
            FlockCluster::Leader { id } => Ok(Outcome::Await(Box::pin(async move {
                done(membership.transfer_leader(id).await)
            }))),
        }
    }
}
