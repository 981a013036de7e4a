//! FLOCK.STATUS name: everything about one lock, as a map (RESP3) or a flat field/value array
//! (RESP2), in the contract's field order: the most recently granted live holding's fields,
//! then `holdings`, `limit` and `delay`.

use bytes::Bytes;
use flockd_proto::Reply;

use flockd_core::{Op, OpResult, Read};

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};

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
            "Describes a lock: its latest holding, waiters, counter, holdings, limit and lock-delay.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockStatus {
            name: args.next_lock_name("lock name")?,
        })
    }
}

impl OpCommand for FlockStatus {
    fn into_op(self, _client_id: u64) -> Op {
        Op::Read(Read::Status { name: self.name })
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        let OpResult::Status(name, s) = result else {
            return Err(unexpected(&result));
        };
        let field = |name: &'static str, value: Reply| (Reply::bulk(name), value);
        Ok(Reply::Map(vec![
            field("name", Reply::Bulk(name)),
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
            field("holdings", Reply::Integer(s.holdings as i64)),
            field("limit", Reply::Integer(s.limit)),
            field("delay", Reply::Integer(s.delay_ms as i64)),
        ]))
    }
}
