//! FLOCK.TOKEN name: the name's counter, the highest token issued or advanced to (0 if none).

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, LocalCommand, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

#[derive(Debug)]
pub struct FlockToken {
    name: Bytes,
}

impl CommandDef for FlockToken {
    const META: Meta = Meta {
        syntax: "FLOCK.TOKEN name",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.token",
            2,
            CommandFlags::READ,
            "Returns the highest token issued or advanced to for the lock.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockToken {
            name: args.next_lock_name("lock name")?,
        })
    }
}

impl LocalCommand for FlockToken {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        reply(Reply::Integer(ctx.machine().last_token(&self.name) as i64))
    }
}
