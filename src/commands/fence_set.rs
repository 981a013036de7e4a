//! FENCE.SET key token value: store `value` if `token` is at least the highest the key accepted
//! (1), else change nothing (0). The guard people write in Lua for Redis, built in.

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

#[derive(Debug)]
pub struct FenceSet {
    key: Bytes,
    token: u64,
    value: Bytes,
}

impl CommandDef for FenceSet {
    const META: Meta = Meta {
        syntax: "FENCE.SET key token value",
        keys: (1, 1, 1),
        group: "fence",
        ..Meta::new(
            "fence.set",
            4,
            CommandFlags::WRITE,
            "Stores the value if the token is not lower than any the key accepted.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FenceSet {
            key: args.next_lock_name("fence key")?,
            token: args.next_token()?,
            value: args.next_owned_bytes()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let stored = ctx
            .shared
            .state
            .fences
            .set(self.key, self.token, self.value, ctx.journal());
        reply(Reply::Integer(stored.into()))
    }
}
