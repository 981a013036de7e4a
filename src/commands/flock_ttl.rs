//! FLOCK.TTL name: milliseconds left on the lease, -2 when the lock is not held (like PTTL).

use bytes::Bytes;
use flockd_proto::Reply;

use flockd_core::{Op, OpResult, Read};

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct FlockTtl {
    name: Bytes,
}

impl CommandDef for FlockTtl {
    const META: Meta = Meta {
        syntax: "FLOCK.TTL name",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.ttl",
            2,
            CommandFlags::READ,
            "Returns the milliseconds left on the lease, -2 when free.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockTtl {
            name: args.next_lock_name("lock name")?,
        })
    }
}

impl OpCommand for FlockTtl {
    fn into_op(self, _client_id: u64) -> Op {
        Op::Read(Read::Ttl { name: self.name })
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::Ttl(ttl) => Ok(Reply::Integer(ttl)),
            other => Err(unexpected(&other)),
        }
    }
}
