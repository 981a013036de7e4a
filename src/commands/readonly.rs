//! READONLY: Redis Cluster's replica reads. On a cluster node with `cluster-redirect yes`, a read
//! for a name another node leads then runs here instead of being answered `-MOVED` (flockd's
//! reads are current on any node, so this costs a round trip to the leader, not freshness).
//! Writes are still redirected. READWRITE and RESET end it.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Readonly;

impl CommandDef for Readonly {
    const META: Meta = Meta {
        syntax: "READONLY",
        group: "cluster",
        ..Meta::new(
            "readonly",
            1,
            CommandFlags {
                fast: true,
                ..CommandFlags::READ
            },
            "Lets reads for names another node leads run on this connection's node (Redis Cluster's replica reads).",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Readonly)
    }
}

impl LocalCommand for Readonly {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        super::cluster::enabled(ctx)?;
        ctx.conn.readonly = true;
        reply(Reply::ok())
    }
}
