//! FLOCK.FORCERELEASE name: admin: remove the holding whoever holds it; the next waiter gets the
//! lock. 1 if a holding was removed, 0 if the lock was free.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};
use flockd_core::{Op, OpResult};

#[derive(Debug)]
pub struct FlockForceRelease {
    name: Bytes,
}

impl CommandDef for FlockForceRelease {
    const META: Meta = Meta {
        syntax: "FLOCK.FORCERELEASE name",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.forcerelease",
            2,
            CommandFlags {
                admin: true,
                ..CommandFlags::WRITE
            },
            "Removes the holding of a lock whoever holds it (admin).",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockForceRelease {
            name: args.next_lock_name("lock name")?,
        })
    }
}

impl OpCommand for FlockForceRelease {
    fn into_op(self, _client_id: u64) -> Op {
        Op::ForceRelease { name: self.name }
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::ForceRelease(removed) => Ok(Reply::Integer(removed as i64)),
            other => Err(unexpected(&other)),
        }
    }
}
