//! FLOCK.RELEASE name token: remove one hold of the holding `token` belongs to; 1 when the lock
//! is free now, 0 when a reentrant hold remains. A stale token can never free a newer holder.

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

#[derive(Debug)]
pub struct FlockRelease {
    name: Bytes,
    token: u64,
}

impl CommandDef for FlockRelease {
    const META: Meta = Meta {
        syntax: "FLOCK.RELEASE name token",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.release",
            3,
            CommandFlags::WRITE,
            "Releases one hold of the lock; 1 if it is free now.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockRelease {
            name: args.next_lock_name("lock name")?,
            token: args.next_token()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let free =
            ctx.shared
                .state
                .locks
                .release(&self.name, self.token, ctx.now, ctx.journal())?;
        reply(Reply::Integer(free.into()))
    }
}
