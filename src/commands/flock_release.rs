//! FLOCK.RELEASE name token: remove one hold of the holding `token` belongs to; 1 when the lock
//! is free now, 0 when a reentrant hold remains. A stale token can never free a newer holder.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};
use flockd_core::{Op, OpResult};

#[derive(Debug)]
pub struct FlockRelease {
    name: Bytes,
    token: u64,
}

impl CommandDef for FlockRelease {
    const META: Meta = Meta {
        syntax: "FLOCK.RELEASE name token",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.release",
            3,
            CommandFlags::WRITE,
            "Releases one hold of the lock; 1 if it is free now.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockRelease {
            name: args.next_lock_name("lock name")?,
            token: args.next_token()?,
        })
    }
}

impl OpCommand for FlockRelease {
    fn into_op(self, _client_id: u64) -> Op {
        Op::Release {
            name: self.name,
            token: self.token,
        }
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::Release(free) => Ok(Reply::Integer(free?.into())),
            other => Err(unexpected(&other)),
        }
    }
}
