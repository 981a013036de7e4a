//! FLOCK.STATUS name: everything about one lock, as a map (RESP3) or a flat field/value array
//! (RESP2), in the contract's field order.

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, LocalCommand, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

#[derive(Debug)]
pub struct FlockStatus {
    name: Bytes,
}

impl CommandDef for FlockStatus {
    const META: Meta = Meta {
        syntax: "FLOCK.STATUS name",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.status",
            2,
            CommandFlags::READ,
            "Describes a lock: holder, token, TTL, holds, waiters, counter.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockStatus {
            name: args.next_lock_name("lock name")?,
        })
    }
}

impl LocalCommand for FlockStatus {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let s = ctx.machine().status(&self.name, ctx.now);
        let field = |name: &'static str, value: Reply| (Reply::bulk(name), value);
        reply(Reply::Map(vec![
            field("name", Reply::Bulk(self.name)),
            field("locked", Reply::Integer(s.locked.into())),
            field(
                "token",
                s.token.map_or(Reply::Null, |t| Reply::Integer(t as i64)),
            ),
            field("owner", s.owner.map_or(Reply::Null, Reply::Bulk)),
            field("ttl", Reply::Integer(s.ttl_ms)),
            field("holds", Reply::Integer(s.holds.into())),
            field("waiters", Reply::Integer(s.waiters as i64)),
            field("last-token", Reply::Integer(s.last_token as i64)),
        ]))
    }
}
