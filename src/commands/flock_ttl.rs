//! FLOCK.TTL name: milliseconds left on the lease, -2 when the lock is not held (like PTTL).

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, LocalCommand, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

#[derive(Debug)]
pub struct FlockTtl {
    name: Bytes,
}

impl CommandDef for FlockTtl {
    const META: Meta = Meta {
        syntax: "FLOCK.TTL name",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.ttl",
            2,
            CommandFlags::READ,
            "Returns the milliseconds left on the lease, -2 when free.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockTtl {
            name: args.next_lock_name("lock name")?,
        })
    }
}

impl LocalCommand for FlockTtl {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        reply(Reply::Integer(ctx.machine().ttl(&self.name, ctx.now)))
    }
}
