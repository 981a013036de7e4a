//! FENCE.TOKEN key: the highest token the key accepted, 0 if none.

use bytes::Bytes;
use flockd_proto::Reply;

use flockd_core::{Op, OpResult, Read};

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct FenceToken {
    key: Bytes,
}

impl CommandDef for FenceToken {
    const META: Meta = Meta {
        syntax: "FENCE.TOKEN key",
        keys: (1, 1, 1),
        group: "fence",
        ..Meta::new(
            "fence.token",
            2,
            CommandFlags::READ,
            "Returns the highest token a fenced key accepted, 0 if none.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FenceToken {
            key: args.next_lock_name("fence key")?,
        })
    }
}

impl OpCommand for FenceToken {
    fn into_op(self, _client_id: u64) -> Op {
        Op::Read(Read::FenceToken { key: self.key })
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::Token(token) => Ok(Reply::Integer(token as i64)),
            other => Err(unexpected(&other)),
        }
    }
}
