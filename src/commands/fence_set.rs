//! FENCE.SET key token value: store `value` if `token` is at least the highest the key accepted
//! (1), else change nothing (0). The guard people write in Lua for Redis, built in.

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, Meta, StateCommand, unexpected};
use flockd_core::{Op, OpResult};

#[derive(Debug)]
pub struct FenceSet {
    key: Bytes,
    token: u64,
    value: Bytes,
}

impl CommandDef for FenceSet {
    const META: Meta = Meta {
        syntax: "FENCE.SET key token value",
        keys: (1, 1, 1),
        group: "fence",
        ..Meta::new(
            "fence.set",
            4,
            CommandFlags::WRITE,
            "Stores the value if the token is not lower than any the key accepted.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FenceSet {
            key: args.next_lock_name("fence key")?,
            token: args.next_token()?,
            value: args.next_owned_bytes()?,
        })
    }
}

impl StateCommand for FenceSet {
    fn into_op(self) -> Op {
        Op::FenceSet {
            key: self.key,
            token: self.token,
            value: self.value,
        }
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::FenceSet(stored) => Ok(Reply::Integer(stored.into())),
            other => Err(unexpected(&other)),
        }
    }
}
