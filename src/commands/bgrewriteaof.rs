//! BGREWRITEAOF: compact the append-only file in the background.

use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

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

    fn apply(self, ctx: &mut Ctx<'_>) -> CommandResult {
        match ctx.shared.aof.rewrite() {
            Ok(()) => reply(Reply::Simple(
                "Background append only file rewriting started".into(),
            )),
            Err(flockd_aof::AofError::RewriteInProgress) => Err(CommandError::Other(
                "ERR Background append only file rewriting already in progress".into(),
            )),
            Err(e) => Err(CommandError::Other(format!("ERR {e}").into())),
        }
    }
}
