//! FLOCK.TOKEN name: the name's counter, the highest token issued or advanced to (0 if none).

use bytes::Bytes;
use flockd_proto::Reply;

use flockd_core::{Op, OpResult, Read};

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};

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

impl OpCommand for FlockToken {
    fn into_op(self, _client_id: u64) -> Op {
        Op::Read(Read::Token { name: self.name })
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::Token(token) => Ok(Reply::Integer(token as i64)),
            other => Err(unexpected(&other)),
        }
    }
}
