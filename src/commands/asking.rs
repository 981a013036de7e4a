//! ASKING: Redis Cluster's flag for the one command after an `-ASK` redirection. flockd's slots
//! never move between groups, so it never answers `-ASK`; ASKING is accepted (`OK`) so that
//! cluster clients that send it work.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Asking;

impl CommandDef for Asking {
    const META: Meta = Meta {
        syntax: "ASKING",
        group: "cluster",
        ..Meta::new(
            "asking",
            1,
            CommandFlags {
                fast: true,
                ..CommandFlags::READ
            },
            "Accepted for Redis Cluster clients: flockd never moves a slot, so it never answers -ASK.",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Asking)
    }
}

impl LocalCommand for Asking {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        super::cluster::enabled(ctx)?;

        reply(Reply::ok())
    }
}
