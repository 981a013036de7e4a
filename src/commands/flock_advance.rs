//! FLOCK.ADVANCE name token: admin: make every later token of the lock greater than `token`
//! (after restoring an old backup). Replies the new counter; never lowers anything.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};
use flockd_core::{Op, OpResult};

#[derive(Debug)]
pub struct FlockAdvance {
    name: Bytes,
    token: u64,
}

impl CommandDef for FlockAdvance {
    const META: Meta = Meta {
        syntax: "FLOCK.ADVANCE name token",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.advance",
            3,
            CommandFlags {
                admin: true,
                ..CommandFlags::WRITE
            },
            "Makes every later token of the lock greater than the given one (admin).",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockAdvance {
            name: args.next_lock_name("lock name")?,
            token: args.next_token()?,
        })
    }
}

impl OpCommand for FlockAdvance {
    fn into_op(self, _client_id: u64) -> Op {
        Op::Advance {
            name: self.name,
            token: self.token,
        }
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::Advance(counter) => Ok(Reply::Integer(counter as i64)),
            other => Err(unexpected(&other)),
        }
    }
}
