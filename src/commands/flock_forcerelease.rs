//! FLOCK.FORCERELEASE name: admin: remove the holding whoever holds it; the next waiter gets the
//! lock. 1 if a holding was removed, 0 if the lock was free.

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

#[derive(Debug)]
pub struct FlockForceRelease {
    name: Bytes,
}

impl CommandDef for FlockForceRelease {
    const META: Meta = Meta {
        syntax: "FLOCK.FORCERELEASE name",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.forcerelease",
            2,
            CommandFlags {
                admin: true,
                ..CommandFlags::WRITE
            },
            "Removes the holding of a lock whoever holds it (admin).",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockForceRelease {
            name: args.next_lock_name("lock name")?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let removed = ctx
            .shared
            .state
            .locks
            .force_release(&self.name, ctx.now, ctx.journal());
        reply(Reply::Integer(removed.into()))
    }
}
