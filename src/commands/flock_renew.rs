//! FLOCK.RENEW name token lease-ms: reset the lease of the holding that `token` belongs to.
//! Any other token gets -NOTOWNER: a holder never loses its lease silently.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};
use flockd_core::{Op, OpResult};

#[derive(Debug)]
pub struct FlockRenew {
    name: Bytes,
    token: u64,
    lease_ms: u64,
}

impl CommandDef for FlockRenew {
    const META: Meta = Meta {
        syntax: "FLOCK.RENEW name token lease-ms",
        keys: (1, 1, 1),
        group: "flock",
        ..Meta::new(
            "flock.renew",
            4,
            CommandFlags::WRITE,
            "Resets the lease of the holding the token belongs to.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(FlockRenew {
            name: args.next_lock_name("lock name")?,
            token: args.next_token()?,
            lease_ms: args.next_lease()?,
        })
    }
}

impl OpCommand for FlockRenew {
    fn into_op(self, _client_id: u64) -> Op {
        Op::Renew {
            name: self.name,
            token: self.token,
            lease_ms: self.lease_ms,
        }
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::Renew(renewed) => renewed.map(|()| Reply::Integer(1)).map_err(Into::into),
            other => Err(unexpected(&other)),
        }
    }
}
