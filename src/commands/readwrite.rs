//! READWRITE: ends READONLY, so reads for names another node leads are redirected again.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Readwrite;

impl CommandDef for Readwrite {
    const META: Meta = Meta {
        syntax: "READWRITE",
        group: "cluster",
        ..Meta::new(
            "readwrite",
            1,
            CommandFlags {
                fast: true,
                ..CommandFlags::READ
            },
            "Ends READONLY: reads for names another node leads are redirected again.",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Readwrite)
    }
}

impl LocalCommand for Readwrite {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        super::cluster::enabled(ctx)?;
        ctx.conn.readonly = false;
        reply(Reply::ok())
    }
}
