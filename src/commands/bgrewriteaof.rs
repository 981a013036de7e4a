//! BGREWRITEAOF: compact the append-only file in the background.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct BgRewriteAof;

impl CommandDef for BgRewriteAof {
    const META: Meta = Meta {
        syntax: "BGREWRITEAOF",
        group: "server",
        complexity: "O(N) in the background, N the number of lock names and fence keys",
        ..Meta::new(
            "bgrewriteaof",
            1,
            CommandFlags {
                admin: true,
                fast: false,
                ..CommandFlags::READ
            },
            "Rewrites the append-only file in the background.",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(BgRewriteAof)
    }
}

impl LocalCommand for BgRewriteAof {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        match ctx.server.log().rewrite() {
            Ok(()) => reply(Reply::Simple(
                "Background append only file rewriting started".into(),
            )),
            Err(why) => Err(CommandError::Rewrite(why)),
        }
    }
}
