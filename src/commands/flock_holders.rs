//! FLOCK.HOLDERS name: one entry per live holding of the lock, in grant order, each a map
//! (RESP3) or a flat field/value array (RESP2): token, owner, ttl, holds, mode, limit, session.

use bytes::Bytes;
use flockd_proto::Reply;

use flockd_core::{Op, OpResult, Read};

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct FlockHolders {
    name: Bytes,
}

impl CommandDef for FlockHolders {
    const META: Meta = Meta {
        syntax: "FLOCK.HOLDERS name",
        keys: (1, 1, 1),
        group: "flock",
        complexity: "O(N) where N is the number of holdings",
        ..Meta::new(
            "flock.holders",
            2,
            CommandFlags::READ,
            "Lists the live holdings of a lock: token, owner, TTL, holds, mode, limit, session.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockHolders {
            name: args.next_lock_name("lock name")?,
        })
    }
}

impl OpCommand for FlockHolders {
    fn into_op(self, _client_id: u64) -> Op {
        Op::Read(Read::Holders { name: self.name })
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        let OpResult::Holders(holders) = result else {
            return Err(unexpected(&result));
        };
        let field = |name: &'static str, value: Reply| (Reply::bulk(name), value);
        Ok(Reply::Array(
            holders
                .into_iter()
                .map(|h| {
                    Reply::Map(vec![
                        field("token", Reply::Integer(h.token as i64)),
                        field("owner", h.owner.map_or(Reply::Null, Reply::Bulk)),
                        field("ttl", Reply::Integer(h.ttl_ms)),
                        field("holds", Reply::Integer(h.holds.into())),
                        field("mode", Reply::bulk(h.mode.label())),
                        field("limit", Reply::Integer(h.mode.reported_limit())),
                        field("session", Reply::Integer(h.session.into())),
                    ])
                })
                .collect(),
        ))
    }
}
