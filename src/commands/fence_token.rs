//! FENCE.TOKEN key: the highest token the key accepted, 0 if none.

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, LocalCommand, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

#[derive(Debug)]
pub struct FenceToken {
    key: Bytes,
}

impl CommandDef for FenceToken {
    const META: Meta = Meta {
        syntax: "FENCE.TOKEN key",
        keys: (1, 1, 1),
        group: "fence",
        ..Meta::new(
            "fence.token",
            2,
            CommandFlags::READ,
            "Returns the highest token a fenced key accepted, 0 if none.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FenceToken {
            key: args.next_lock_name("fence key")?,
        })
    }
}

impl LocalCommand for FenceToken {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        reply(Reply::Integer(ctx.machine().fence_token(&self.key) as i64))
    }
}
