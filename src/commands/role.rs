//! ROLE: Redis's replication role, in its shape and types. A single node is a master without
//! replicas; a cluster's leader is the master and its followers the replicas, each with the
//! log index it is known to have; a follower names the leader it follows. On the sentinel port
//! the node is a Sentinel, and says so with the master name it watches.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Role;

impl CommandDef for Role {
    const META: Meta = Meta {
        syntax: "ROLE",
        group: "server",
        ..Meta::new(
            "role",
            1,
            CommandFlags {
                fast: true,
                ..CommandFlags::READ
            },
            "Returns the replication role.",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Role)
    }
}

impl LocalCommand for Role {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        if ctx.conn.on_sentinel_port(ctx.server) {
            let name = ctx.server.config().load().sentinel_master_name.clone();
            return reply(Reply::Array(vec![
                Reply::bulk("sentinel"),
                Reply::Array(vec![Reply::bulk(name)]),
            ]));
        }
        let view = ctx.server.log().view();
        if view.role.leads() {
            let replicas = view
                .members
                .iter()
                .filter(|m| !m.is_me)
                .map(|m| {
                    Reply::Array(vec![
                        Reply::bulk(m.host.clone()),
                        Reply::bulk(m.port.to_string()),
                        Reply::bulk(m.index.unwrap_or(0).to_string()),
                    ])
                })
                .collect();
            return reply(Reply::Array(vec![
                Reply::bulk("master"),
                Reply::Integer(view.applied_index as i64),
                Reply::Array(replicas),
            ]));
        }
        let leader = view.leader();
        reply(Reply::Array(vec![
            Reply::bulk("slave"),
            Reply::bulk(leader.map(|m| m.host.clone()).unwrap_or_default()),
            Reply::Integer(leader.map_or(0, |m| i64::from(m.port))),
            Reply::bulk(if leader.is_some() {
                "connected"
            } else {
                "connecting"
            }),
            Reply::Integer(view.applied_index as i64),
        ]))
    }
}
