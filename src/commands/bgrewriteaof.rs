//! BGREWRITEAOF: compact the append-only file in the background.

use flockd_proto::Reply;

use super::context::{CommandResult, Ctx, reply};
use super::{Args, CommandDef, CommandError, CommandFlags, LocalCommand, Meta};

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
        let Some(aof) = ctx.services.aof() else {
            return Err(CommandError::Rewrite(
                "a cluster node has no AOF: its Raft log is compacted by snapshots".into(),
            ));
        };
        match aof.rewrite() {
            Ok(()) => reply(Reply::Simple(
                "Background append only file rewriting started".into(),
            )),
            Err(e) => Err(CommandError::Rewrite(e.to_string())),
        }
    }
}
