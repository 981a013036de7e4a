//! FENCE.GET key: the value stored by the last accepted FENCE.SET, or null.

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, LocalCommand, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

#[derive(Debug)]
pub struct FenceGet {
    key: Bytes,
}

impl CommandDef for FenceGet {
    const META: Meta = Meta {
        syntax: "FENCE.GET key",
        keys: (1, 1, 1),
        group: "fence",
        ..Meta::new(
            "fence.get",
            2,
            CommandFlags::READ,
            "Returns the value of a fenced key, or null.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FenceGet {
            key: args.next_lock_name("fence key")?,
        })
    }
}

impl LocalCommand for FenceGet {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        reply(
            ctx.machine()
                .fence_value(&self.key)
                .map_or(Reply::Null, Reply::Bulk),
        )
    }
}
