//! FENCE.GET key: the value stored by the last accepted FENCE.SET, or null.

use bytes::Bytes;
use flockd_proto::Reply;

use flockd_core::{Op, OpResult, Read};

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct FenceGet {
    key: Bytes,
}

impl CommandDef for FenceGet {
    const META: Meta = Meta {
        syntax: "FENCE.GET key",
        keys: (1, 1, 1),
        group: "fence",
        ..Meta::new(
            "fence.get",
            2,
            CommandFlags::READ,
            "Returns the value of a fenced key, or null.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FenceGet {
            key: args.next_lock_name("fence key")?,
        })
    }
}

impl OpCommand for FenceGet {
    fn into_op(self, _client_id: u64) -> Op {
        Op::Read(Read::FenceGet { key: self.key })
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::FenceValue(value) => Ok(value.map_or(Reply::Null, Reply::Bulk)),
            other => Err(unexpected(&other)),
        }
    }
}
